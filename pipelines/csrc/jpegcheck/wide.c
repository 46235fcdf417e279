/* The check's entropy pass, up to WIDE_LANES files at once in one thread, with AVX-512.
 *
 * Why: lanes_run2 (lanes.c) is bound by the instructions of its look-ups, about 3 ns each
 * on a Xeon. Here a vector of 16 lanes, one file each, takes one look-up step for every
 * lane in about 25 vector instructions and two gathers (the data's next bits, the
 * look-up's entry), and two such vectors run at once (benchmarks/NOTES.md C15).
 *
 * Each lane holds where it stands as numbers: its bit position in the unstuffed data, its
 * zig-zag index k (0: the block's DC is next), its block in the MCU, the MCUs left and the
 * MCUs left in its restart interval; its data and its two pairs of tables (as byte offsets
 * from base: the thread's cache holds every look-up) stay in memory. The look-ups are
 * lanes.c's: an AC entry gives every whole symbol its 12 bits hold; a DC entry, in the same
 * form, the bits of the code and of the difference. A long code within the MCU is decoded
 * beside the loop (ac_symbol); anything else a look-up does not hold (a bad code, a long
 * code that ends the MCU's last block), an MCU that is the last, ends past the data or
 * before a restart marker, goes to lane_settle (lanes.c), the scalar
 * pass's own steps, one lane at a time; the lane then goes on here. So the verdicts are
 * lanes_run1's: the same symbols and checks in the same places.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "lanes.h"

#define WIDE __attribute__((target("avx512f,avx512bw,avx512dq")))
#define GROUP 16 /* lanes in a vector */
#define GROUPS (WIDE_LANES / GROUP)
#define NEAR ((int64_t)1 << 30) /* the most a table may lie from base */

int
lanes_wide_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
}

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

/* A vector of lanes: what changes at each step, in registers */
typedef struct {
    __m512i pos, k, block, mcus, to_go;
    __mmask16 active, restarts;
} Group;

/* ... and what does not, in memory */
typedef struct {
    int64_t data[GROUP];   /* each lane's data */
    int32_t blocks[GROUP]; /* blocks per MCU */
    int32_t ends[GROUP];   /* where the interval (or the data) ends, in bits */
    int32_t dc[2][GROUP], ac[2][GROUP]; /* its two pairs of tables, from base */
    int32_t second[GROUP]; /* the blocks that use the second pair (a bit each) */
    EntropyLane *lane[GROUP];
} GroupFixed;

static const uint8_t zeros[8 + LANE_PADDING]; /* an empty lane's data */

typedef struct {
    int32_t pos[GROUP], k[GROUP], block[GROUP], mcus[GROUP], to_go[GROUP];
} GroupNumbers;

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

static WIDE void
store(const Group *g, GroupNumbers *n)
{
    _mm512_storeu_si512(n->pos, g->pos);
    _mm512_storeu_si512(n->k, g->k);
    _mm512_storeu_si512(n->block, g->block);
    _mm512_storeu_si512(n->mcus, g->mcus);
    _mm512_storeu_si512(n->to_go, g->to_go);
}

static WIDE void
load(Group *g, const GroupNumbers *n)
{
    g->pos = _mm512_loadu_si512(n->pos);
    g->k = _mm512_loadu_si512(n->k);
    g->block = _mm512_loadu_si512(n->block);
    g->mcus = _mm512_loadu_si512(n->mcus);
    g->to_go = _mm512_loadu_si512(n->to_go);
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

/* Each lane of special moved on the slow way (those of slow: an AC symbol the look-up does
 * not hold; the others: the DC's, or the MCU's end). Returns whether a lane is done (then
 * no longer active). */
static __attribute__((noinline)) WIDE int
settle(Group *g, GroupFixed *f, __mmask16 special, __mmask16 slow)
{
    GroupNumbers n;
    int done = 0;
    store(g, &n);
    for (unsigned m = special; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        EntropyLane *lane = f->lane[i];
        if ((slow >> i) & 1 && n.k[i] != 0 && ac_symbol(lane, &n, i))
            continue; /* most often: a code longer than the look-up's */
        write_back(&n, i, lane);
        if (lane_settle(lane, (slow >> i) & 1 && n.k[i] != 0)) {
            g->active &= (__mmask16) ~(1u << i);
            done = 1;
        } else {
            reload(&n, f, i);
        }
    }
    load(g, &n);
    return done;
}

/* One look-up step of every active lane; returns the lanes left to settle, *slow those of
 * them whose symbol the look-up does not hold */
static inline __attribute__((always_inline)) WIDE __mmask16
step(Group *g, const GroupFixed *f, const uint8_t *base, __mmask16 *slow)
{
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    const __m512i byte_mask = _mm512_set1_epi32(0xFF);
    const __m512i bswap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
    __mmask16 at_dc = _mm512_mask_cmpeq_epi32_mask(g->active, g->k, zero);
    /* the next 25 or more bits, first in the top */
    __m512i byte = _mm512_srli_epi32(g->pos, 3);
    __m512i low = _mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(byte)),
                                   _mm512_loadu_si512(f->data));
    __m512i high = _mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(byte, 1)),
                                    _mm512_loadu_si512(f->data + 8));
    __m512i bits = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_i64gather_epi32(low, NULL, 1)),
        _mm512_i64gather_epi32(high, NULL, 1), 1);
    bits = _mm512_shuffle_epi8(bits, bswap);
    bits = _mm512_sllv_epi32(bits, _mm512_and_si512(g->pos, _mm512_set1_epi32(7)));
    /* the entry, of the AC look-up or (at k = 0) the DC one */
    __m512i at = _mm512_slli_epi32(
        _mm512_srlv_epi32(bits, _mm512_mask_blend_epi32(
                                    at_dc, _mm512_set1_epi32(32 - LANE_AC_BITS),
                                    _mm512_set1_epi32(32 - HUFF_FAST_BITS))),
        2);
    __mmask16 second = _mm512_test_epi32_mask(
        _mm512_srlv_epi32(_mm512_loadu_si512(f->second), g->block), one);
    __m512i dc = _mm512_mask_blend_epi32(second, _mm512_loadu_si512(f->dc[0]),
                                         _mm512_loadu_si512(f->dc[1]));
    __m512i ac = _mm512_mask_blend_epi32(second, _mm512_loadu_si512(f->ac[0]),
                                         _mm512_loadu_si512(f->ac[1]));
    at = _mm512_add_epi32(at, _mm512_mask_blend_epi32(at_dc, ac, dc));
    __m512i e = _mm512_mask_i32gather_epi32(zero, g->active, at, base, 1);
    *slow = _mm512_mask_cmpge_epi32_mask(g->active, g->k, _mm512_srli_epi32(e, 16));
    __mmask16 ok = g->active & (__mmask16)~*slow;
    g->pos = _mm512_mask_add_epi32(g->pos, ok, g->pos, _mm512_and_si512(e, byte_mask));
    g->k = _mm512_mask_add_epi32(g->k, ok, g->k,
                                 _mm512_and_si512(_mm512_srli_epi32(e, 8), byte_mask));
    /* a block's end: the next block's DC, an MCU's end counted here unless it needs more */
    __mmask16 ended = _mm512_mask_cmpge_epi32_mask(ok, g->k, _mm512_set1_epi32(64));
    __m512i next = _mm512_add_epi32(g->block, one);
    __mmask16 mcu_end =
        _mm512_mask_cmpeq_epi32_mask(ended, next, _mm512_loadu_si512(f->blocks));
    __mmask16 held =
        _mm512_mask_cmpgt_epi32_mask(mcu_end, g->pos, _mm512_loadu_si512(f->ends)) |
        _mm512_mask_cmpeq_epi32_mask(mcu_end, g->mcus, one) |
        _mm512_mask_cmpeq_epi32_mask(mcu_end & g->restarts, g->to_go, one);
    __mmask16 in_mcu = ended & (__mmask16)~mcu_end, new_mcu = mcu_end & (__mmask16)~held;
    g->block = _mm512_mask_mov_epi32(g->block, in_mcu, next);
    g->block = _mm512_mask_mov_epi32(g->block, new_mcu, zero);
    g->mcus = _mm512_mask_sub_epi32(g->mcus, new_mcu, g->mcus, one);
    g->to_go = _mm512_mask_sub_epi32(g->to_go, new_mcu & g->restarts, g->to_go, one);
    g->k = _mm512_mask_mov_epi32(g->k, in_mcu | new_mcu, zero);
    return *slow | held;
}

/* The group's lanes from lanes[0..n) (n <= GROUP) */
static WIDE void
group_in(Group *g, GroupFixed *f, EntropyLane *const *lanes, int n, const uint8_t *base)
{
    GroupNumbers numbers;
    memset(&numbers, 0, sizeof numbers);
    memset(f, 0, sizeof *f);
    g->active = 0;
    g->restarts = 0;
    for (int i = 0; i < GROUP; i++) {
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
        if (lane->interval)
            g->restarts |= (__mmask16)(1u << i);
        g->active |= (__mmask16)(1u << i);
        reload(&numbers, f, i);
    }
    load(g, &numbers);
}

/* ... and back into their EntropyLanes */
static WIDE void
group_out(const Group *g, const GroupFixed *f)
{
    GroupNumbers n;
    store(g, &n);
    for (unsigned m = g->active; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        write_back(&n, i, f->lane[i]);
    }
}

WIDE void
lanes_run_wide(EntropyLane *const *lanes, int n, const uint8_t *base)
{
    /* every lane at a block's AC (a block's end, or the start, the scalar way first) */
    for (int i = 0; i < n; i++)
        if (lanes[i]->k >= 64 && lane_settle(lanes[i], 0))
            return;
    Group g[GROUPS];
    GroupFixed f[GROUPS];
    int groups = (n + GROUP - 1) / GROUP;
    for (int j = 0; j < groups; j++)
        group_in(&g[j], &f[j], lanes + j * GROUP, n - j * GROUP < GROUP ? n - j * GROUP : GROUP,
                 base);
    /* the groups in locals whose address is never taken (registers), apart from settle */
    Group g0 = g[0], g1 = g[groups - 1];
    int done = 0;
    if (groups == 2) {
        while (!done) {
            __mmask16 slow0, slow1;
            __mmask16 s0 = step(&g0, &f[0], base, &slow0);
            __mmask16 s1 = step(&g1, &f[1], base, &slow1);
            if (__builtin_expect(s0 | s1, 0)) {
                g[0] = g0;
                g[1] = g1;
                if (s0)
                    done |= settle(&g[0], &f[0], s0, slow0);
                if (s1)
                    done |= settle(&g[1], &f[1], s1, slow1);
                g0 = g[0];
                g1 = g[1];
            }
        }
    } else {
        while (!done) {
            __mmask16 slow0, s0 = step(&g0, &f[0], base, &slow0);
            if (__builtin_expect(s0, 0)) {
                g[0] = g0;
                done = settle(&g[0], &f[0], s0, slow0);
                g0 = g[0];
            }
        }
    }
    for (int j = 0; j < groups; j++)
        group_out(&g[j], &f[j]);
}
