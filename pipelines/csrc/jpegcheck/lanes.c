/* The check's entropy pass, two files at a time in one thread.
 *
 * Why: the pass over one file is a chain of dependent steps (the bits a look-up takes
 * decide where the next look-up reads), about 15 cycles each, so one file leaves most of
 * the core idle (benchmarks/NOTES.md C12). Two files have no step in common: decoded in
 * turns in one loop, the core runs both chains at once.
 *
 * The same decoding as huff_skip_mcus (pipelines/csrc/jpegroi/huffman.c), organised for
 * that: the data is unstuffed first (0xFF 0x00 -> 0xFF, up to the marker that ends it, zeros
 * after), so the bit reader refills without a branch; DC codes have a look-up in HuffSkip's
 * entry format too, and a lane's place is one number (64 per block: 64 * block + zig-zag
 * index), so one step serves DC and AC alike. Nothing here warns or jumps: a bad code or
 * bits used past the data's end mark the lane bad, and the caller (check.c) reports it.
 * Only scans without restart markers come here.
 */
#include <string.h>

#include "lanes.h"

void
lane_dc_table(const HuffTable *t, LaneDcSkip *skip)
{
    for (uint32_t v = 0; v < (1u << LANE_DC_BITS); v++) {
        unsigned f = t->fast[v >> (LANE_DC_BITS - HUFF_FAST_BITS)];
        unsigned len = f >> 8, size = f & 0xFF;
        /* bits | one position advanced << 4 | none before the last symbol << 10 */
        skip->e[v] = f && size <= 15 && len + size <= LANE_DC_BITS
                         ? (uint16_t)((len + size) | 1u << 4)
                         : 0;
    }
}

ptrdiff_t
lane_unstuff(const uint8_t *p, const uint8_t *end, uint8_t *out, const uint8_t **marker)
{
    uint8_t *o = out;
    while (p < end) {
        const uint8_t *ff = memchr(p, 0xFF, (size_t)(end - p));
        if (ff == NULL)
            return -1; /* the data ends without a marker */
        memcpy(o, p, (size_t)(ff - p));
        o += ff - p;
        const uint8_t *q = ff + 1;
        while (q < end && *q == 0xFF) /* fill bytes */
            q++;
        if (q == end)
            return -1;
        if (*q != 0) { /* a marker ends the data */
            *marker = ff;
            memset(o, 0, LANE_PADDING);
            return o - out;
        }
        if (q > ff + 1)
            return -1; /* fill bytes before a stuffed zero */
        *o++ = 0xFF;
        p = q + 1;
    }
    return -1;
}

void
lane_start(EntropyLane *lane)
{
    lane->buf = 0;
    lane->count = 0;
    lane->p = lane->data;
    lane->block = -1; /* before the first block of the first MCU */
    lane->k = 64;
    lane->bad = 0;
}

static inline uint64_t
load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline int
lane_done(const EntropyLane *lane)
{
    return lane->bad || lane->mcus == 0;
}

/* The bit reader, in locals of the loop (registers) */
typedef struct {
    uint64_t buf;
    const uint8_t *p;
    int64_t count;
} Reader;

/* Branch-free: 56 to 63 bits held after (the data is unstuffed, zeros after it) */
static inline __attribute__((always_inline)) void
refill(Reader *r)
{
    r->buf |= load_be64(r->p) >> r->count;
    r->p += (63 - r->count) >> 3;
    r->count |= 56;
}

static inline __attribute__((always_inline)) void
drop(Reader *r, int bits)
{
    r->buf <<= bits;
    r->count -= bits;
}

/* One symbol by the table itself (the look-up does not hold its code); -1: no such code */
static inline __attribute__((always_inline)) int
symbol(Reader *r, const HuffTable *t)
{
    unsigned f = t->fast[r->buf >> (64 - HUFF_FAST_BITS)];
    if (f) {
        drop(r, (int)(f >> 8));
        return (int)(f & 0xFF);
    }
    for (int len = HUFF_FAST_BITS + 1; len <= 16; len++) {
        int32_t code = (int32_t)(r->buf >> (64 - len));
        if (code <= t->maxcode[len]) {
            drop(r, len);
            return t->huffval[(code + t->valoffset[len]) & 0xFF];
        }
    }
    return -1;
}

/* The slow way for one AC symbol (its code longer than the look-up, or the look-up's
 * symbols running past the block): the new zig-zag index, 64 at the block's end, -1 for a
 * code no table holds. Refills before and after (see lanes_run2). Apart from the loop, so
 * that the loop keeps its registers: the reader goes in and out by value. */
typedef struct {
    Reader r;
    int k;
} SlowStep;

static __attribute__((noinline)) SlowStep
slow_ac(const HuffTable *t, Reader r, int k)
{
    refill(&r);
    int sym = symbol(&r, t);
    if (sym < 0) {
        k = -1;
    } else if (sym & 15) {
        drop(&r, sym & 15);
        k += (sym >> 4) + 1;
    } else {
        k = sym == 0xF0 ? k + 16 : 64; /* sixteen zeros, or the end of the block */
    }
    refill(&r);
    return (SlowStep){r, k};
}

/* One look-up: every whole AC symbol the next bits hold, to the block's end. Returns the
 * new zig-zag index: 64 or more where the block ended, negative where the lane went bad.
 * fill: refill first (else the caller knows that 13 bits are held). */
static inline __attribute__((always_inline)) int
ac_step(Reader *r, int k, const uint16_t *ac, const HuffTable *ac_table, int fill)
{
    if (fill)
        refill(r);
    uint32_t e = ac[r->buf >> (64 - HUFF_SKIP_BITS)];
    if (__builtin_expect(k > (int)(e >> 10), 0)) { /* past the entry's last index */
        SlowStep s = slow_ac(ac_table, *r, k);
        *r = s.r;
        return s.k;
    }
    drop(r, (int)(e & 15));
    return k + (int)((e >> 4) & 63);
}

/* After a block: the next block's DC (and the MCU's end: counted, and the data's end
 * checked). Returns whether the lane is done (k < 0 on entry: bad). */
static inline __attribute__((always_inline)) int
next_block(EntropyLane *lane, Reader *r, int *block, int *k)
{
    if (*k < 0) {
        lane->bad = LANE_BAD_CODE;
        return 1;
    }
    if (++*block == lane->blocks) {
        *block = 0;
        lane->mcus--;
        if ((uint64_t)(r->p - lane->data) * 8 - (uint64_t)r->count > lane->bits) {
            lane->bad = LANE_PAST_END; /* the bits used ran into the marker's zeros */
            return 1;
        }
        if (lane->mcus == 0)
            return 1;
    }
    refill(r);
    uint32_t e = lane->dc[*block][r->buf >> (64 - LANE_DC_BITS)];
    if (__builtin_expect(e != 0, 1)) {
        drop(r, (int)(e & 15));
    } else {
        int size = symbol(r, lane->dc_table[*block]);
        if (size < 0 || size > 15) {
            lane->bad = LANE_BAD_CODE;
            return 1;
        }
        drop(r, size);
    }
    refill(r);
    *k = 1;
    return 0;
}

/* The lane's cursor out of locals */
static inline void
keep(EntropyLane *lane, const Reader *r, int block, int k)
{
    lane->buf = r->buf;
    lane->p = r->p;
    lane->count = (int)r->count;
    lane->block = block;
    lane->k = k;
}

void
lanes_run2(EntropyLane *a, EntropyLane *b)
{
    if (lane_done(a) || lane_done(b))
        return;
    Reader ra = {a->buf, a->p, a->count}, rb = {b->buf, b->p, b->count};
    int ablock = a->block, ak = a->k, bblock = b->block, bk = b->k;
    if ((ak >= 64 && next_block(a, &ra, &ablock, &ak)) ||
        (bk >= 64 && next_block(b, &rb, &bblock, &bk)))
        goto out;
    const uint16_t *aac = a->ac[ablock], *bac = b->ac[bblock];
    /* Each lane refills every fourth look-up: after a refill 56 bits are held, a look-up
     * takes at most 13, and a slow symbol or a block's start refills after itself. */
#define A_STEP(fill)                                                                   \
    ak = ac_step(&ra, ak, aac, a->ac_table[ablock], fill);                             \
    if ((unsigned)ak >= 64) {                                                          \
        if (next_block(a, &ra, &ablock, &ak))                                          \
            break;                                                                     \
        aac = a->ac[ablock];                                                           \
    }
#define B_STEP(fill)                                                                   \
    bk = ac_step(&rb, bk, bac, b->ac_table[bblock], fill);                             \
    if ((unsigned)bk >= 64) {                                                          \
        if (next_block(b, &rb, &bblock, &bk))                                          \
            break;                                                                     \
        bac = b->ac[bblock];                                                           \
    }
    for (;;) {
        A_STEP(1) B_STEP(1) A_STEP(0) B_STEP(0) A_STEP(0) B_STEP(0) A_STEP(0) B_STEP(0)
    }
#undef A_STEP
#undef B_STEP
out:
    keep(a, &ra, ablock, ak);
    keep(b, &rb, bblock, bk);
}

void
lanes_run1(EntropyLane *a)
{
    if (lane_done(a))
        return;
    Reader r = {a->buf, a->p, a->count};
    int block = a->block, k = a->k;
    if (k >= 64 && next_block(a, &r, &block, &k))
        goto out;
    const uint16_t *ac = a->ac[block];
#define STEP(fill)                                                                     \
    k = ac_step(&r, k, ac, a->ac_table[block], fill);                                  \
    if ((unsigned)k >= 64) {                                                           \
        if (next_block(a, &r, &block, &k))                                             \
            break;                                                                     \
        ac = a->ac[block];                                                             \
    }
    for (;;) { /* as in lanes_run2 */
        STEP(1) STEP(0) STEP(0) STEP(0)
    }
#undef STEP
out:
    keep(a, &r, block, k);
}

int
lane_intact(const EntropyLane *lane)
{
    uint64_t used = (uint64_t)(lane->p - lane->data) * 8 - (uint64_t)lane->count;
    return !lane->bad && lane->mcus == 0 && used <= lane->bits && lane->bits - used < 8;
}
