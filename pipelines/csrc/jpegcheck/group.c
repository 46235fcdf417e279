/* The scalar side of the wide passes (group.h): lanes into a vector's numbers and back, and
 * the steps a vector step leaves to one lane at a time. */
#include <stdint.h>
#include <string.h>

#include "group.h"

static const uint8_t zeros[8 + LANE_PADDING]; /* an empty lane's data */

/* The blocks of the lane's MCU that use its second pair of tables (a bit each; the first
 * block's pair is the first), or -1 where its blocks use more than two pairs */
static int
second_tables(const EntropyLane *lane)
{
    int second = -1, sets = 0;
    for (int b = 1; b < lane->blocks; b++) {
        if (lane->dc[b] == lane->dc[0] && lane->ac[b] == lane->ac[0])
            continue;
        if (second < 0)
            second = b;
        if (lane->dc[b] != lane->dc[second] || lane->ac[b] != lane->ac[second])
            return -1;
        sets |= 1 << b;
    }
    return sets;
}

int
lane_wide_ok(const EntropyLane *lane, const uint8_t *base)
{
    if (lane->total_bits + 8 * LANE_PADDING >= NEAR || lane->mcus >= (uint64_t)NEAR ||
        lane->interval >= NEAR || second_tables(lane) < 0)
        return 0;
    for (int b = 0; b < lane->blocks; b++) {
        int64_t dc = (const uint8_t *)lane->dc[b] - base;
        int64_t ac = (const uint8_t *)lane->ac[b] - base;
        if (dc < 0 || dc >= NEAR || ac < 0 || ac >= NEAR)
            return 0;
    }
    return 1;
}

/* Lane i's numbers into its EntropyLane: k == 0 (the DC of block next) is the scalar pass's
 * block before, ended */
static void
write_back(const GroupNumbers *n, int i, EntropyLane *lane)
{
    lane_seek(lane, (uint64_t)n->pos[i]);
    lane->k = n->k[i] ? n->k[i] : 64;
    /* -1 before an MCU's first block, as lane_start */
    lane->block = n->k[i] ? n->block[i] : n->block[i] - 1;
    lane->mcus = (uint64_t)n->mcus[i];
    lane->to_go = (unsigned)n->to_go[i];
}

/* Lane i's numbers from its EntropyLane (never at a block's DC: 1 <= k <= 63) */
static void
reload(GroupNumbers *n, GroupFixed *f, int i)
{
    const EntropyLane *lane = f->lane[i];
    n->pos[i] = (int32_t)lane_position(lane);
    n->k[i] = lane->k;
    n->block[i] = lane->block;
    n->mcus[i] = (int32_t)lane->mcus;
    n->to_go[i] = (int32_t)lane->to_go;
    f->ends[i] = (int32_t)lane->bits;
}

/* Lane i's next AC symbol by its table (a code longer than the look-up's bits, most often,
 * or symbols running past the block's end), where the lane stays within its MCU: returns
 * 1; else 0, nothing changed (a bad code, or the MCU's end: lane_settle). As slow_ac. */
static inline int
ac_symbol(const EntropyLane *lane, GroupNumbers *n, int i)
{
    uint64_t pos = (uint64_t)n->pos[i], bits;
    memcpy(&bits, lane->data + pos / 8, sizeof bits);
    bits = __builtin_bswap64(bits) << (pos % 8); /* 57 bits: a code and its value take 31 */
    int length, symbol = huff_lookup(lane->ac_table[n->block[i]], bits, &length);
    if (symbol < 0)
        return 0;
    int k = lane_ac_next(symbol, n->k[i]);
    if (k >= 64) { /* the block's end: the next block's DC, within the MCU */
        if (n->block[i] + 1 >= lane->blocks)
            return 0;
        n->block[i]++;
        k = 0;
    }
    n->pos[i] += length + (symbol & 15);
    n->k[i] = k;
    return 1;
}

/* Lane i of group_settle: returns whether it is done */
static int
settle_lane(GroupFixed *f, GroupNumbers *numbers, int i, int slow)
{
    EntropyLane *lane = f->lane[i];
    slow = slow && numbers->k[i] != 0;
    if (slow && ac_symbol(lane, numbers, i))
        return 0; /* most often: a code longer than the look-up's */
    write_back(numbers, i, lane);
    if (lane_settle(lane, slow))
        return 1;
    reload(numbers, f, i);
    return 0;
}

unsigned
group_settle(GroupFixed *f, GroupNumbers *numbers, unsigned special, unsigned slow)
{
    unsigned done = 0;
    for (unsigned m = special; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        if (settle_lane(f, numbers, i, (slow >> i) & 1))
            done |= 1u << i;
    }
    return done;
}

int
group_start(EntropyLane *const *lanes, int n)
{
    for (int i = 0; i < n; i++)
        if (lanes[i]->k >= 64 && lane_settle(lanes[i], 0))
            return 1;
    return 0;
}

unsigned
group_in(GroupFixed *f, GroupNumbers *numbers, EntropyLane *const *lanes, int n,
         const uint8_t *base)
{
    unsigned active = 0;
    memset(numbers, 0, sizeof *numbers);
    memset(f, 0, sizeof *f);
    for (int i = 0; i < GROUP_MAX; i++) {
        f->data[i] = (int64_t)(intptr_t)zeros;
        if (i >= n)
            continue;
        EntropyLane *lane = lanes[i];
        f->lane[i] = lane;
        f->data[i] = (int64_t)(intptr_t)lane->data;
        f->blocks[i] = lane->blocks;
        int second = second_tables(lane), other = second ? __builtin_ctz(second) : 0;
        f->second[i] = second;
        f->dc[0][i] = (int32_t)((const uint8_t *)lane->dc[0] - base);
        f->ac[0][i] = (int32_t)((const uint8_t *)lane->ac[0] - base);
        f->dc[1][i] = (int32_t)((const uint8_t *)lane->dc[other] - base);
        f->ac[1][i] = (int32_t)((const uint8_t *)lane->ac[other] - base);
        f->restarts[i] = lane->interval ? -1 : 0;
        active |= 1u << i;
        reload(numbers, f, i);
    }
    return active;
}

void
group_out(const GroupFixed *f, const GroupNumbers *numbers, unsigned active)
{
    for (unsigned m = active; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        write_back(numbers, i, f->lane[i]);
    }
}
