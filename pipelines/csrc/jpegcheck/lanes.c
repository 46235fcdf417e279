/* The check's entropy pass, two files at a time in one thread.
 *
 * Why: the pass over one file is a chain of dependent steps (the bits a look-up takes
 * decide where the next look-up reads), about 15 cycles each, so one file leaves most of
 * the core idle (benchmarks/NOTES.md C12). Two files have no step in common: decoded in
 * turns in one loop, the core runs both chains at once.
 *
 * The same symbols as huff_decode_mcu (pipelines/csrc/jpegroi/huffman.c), the values not
 * kept, with fewer steps and fewer mispredicted branches: the data is unstuffed first (0xFF
 * 0x00 -> 0xFF, up to the marker that ends it, zeros after), so the bit reader refills
 * without a branch, every other look-up; one AC look-up gives every whole symbol its bits
 * hold, to an end of block, and its last symbol may have its value bits past them (before,
 * two in three slow symbols on photographs were a value past the look-up's bits); a DC
 * look-up holds the code alone, the difference's bits being skipped; restart markers are
 * where the unstuffed data's intervals end. Nothing here warns or jumps: a bad code, bits
 * used past the data's end, a restart marker out of place mark the lane bad, and the caller
 * (check.c) reports it.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

void
lane_dc_table(const HuffTable *t, LaneDcSkip *skip)
{
    for (uint32_t v = 0; v < (1u << HUFF_FAST_BITS); v++) {
        unsigned f = t->fast[v];
        unsigned len = f >> 8, size = f & 0xFF;
        skip->e[v] = f && size <= 15 ? (len + size) | 1u << 8 | 1u << 16 : 0;
    }
}

/* An entry, a byte each: the bits its symbols take (the LANE_AC_BITS of the look-up at most,
 * and the value bits of the last symbol past them: at most 27), the zig-zag positions they
 * advance (at most 63: 63 ends any block, an end of block advances 63), and the first
 * zig-zag index at which the entry no longer holds (64 less the positions advanced before
 * its last symbol); 0: none, at any index. */
#define AC_MAX 63

static uint32_t
ac_entry(uint32_t bits, uint32_t advance, uint32_t before)
{
    return bits | (advance < AC_MAX ? advance : AC_MAX) << 8 |
           (AC_MAX + 1 - (before < AC_MAX ? before : AC_MAX)) << 16;
}

/* The symbol a code of at most avail bits at the top of the avail bits v holds: its code
 * length (0: no code that short) */
static int
code_in(const HuffTable *t, uint32_t v, int avail, int *symbol)
{
    int len, sym = huff_lookup(t, (uint64_t)v << (64 - avail), &len);
    if (sym < 0 || len > avail)
        return 0;
    *symbol = sym;
    return len;
}

/* The entry of the avail bits v from the entry of the bits left after its first symbol,
 * every (avail, v) once, shortest first, at (1 << avail) + v of level; a symbol whose
 * value bits run past v's is the entry's last. */
void
lane_ac_table(const HuffTable *t, LaneAcSkip *out)
{
    uint32_t *level = malloc(sizeof(uint32_t) << (LANE_AC_BITS + 1));
    if (level == NULL) { /* no look-up: every symbol the slow way */
        memset(out->e, 0, sizeof out->e);
        return;
    }
    level[1] = 0; /* no bits: no symbol */
    for (int avail = 1; avail <= LANE_AC_BITS; avail++) {
        for (uint32_t v = 0; v < (1u << avail); v++) {
            int sym = 0, len = code_in(t, v, avail, &sym);
            int run = sym >> 4, size = sym & 15, used = len + size;
            uint32_t e = 0;
            if (len) {
                uint32_t step = size ? (uint32_t)run + 1 : run == 15 ? 16 : AC_MAX;
                uint32_t rest = step == AC_MAX || used >= avail
                                    ? 0
                                    : level[(1u << (avail - used)) +
                                            (v & ((1u << (avail - used)) - 1))];
                e = rest ? ac_entry((uint32_t)used + (rest & 0xFF),
                                    step + ((rest >> 8) & 0xFF),
                                    step + AC_MAX + 1 - (rest >> 16))
                         : ac_entry((uint32_t)used, step, 0);
            }
            level[(1u << avail) + v] = e;
        }
    }
    memcpy(out->e, level + (1u << LANE_AC_BITS), sizeof out->e);
    free(level);
}

/* Copies [p, the first 0xFF byte before end) to *o and moves *o past it; returns that
 * byte's address, or NULL where there is none. */
typedef const uint8_t *(*CopyToFF)(const uint8_t *p, const uint8_t *end, uint8_t **o);

static const uint8_t *
copy_to_ff(const uint8_t *p, const uint8_t *end, uint8_t **o)
{
    const uint8_t *ff = memchr(p, 0xFF, (size_t)(end - p));
    if (ff != NULL) {
        memcpy(*o, p, (size_t)(ff - p));
        *o += ff - p;
    }
    return ff;
}

/* The same, 32 bytes at a time: stored whole, *o moved to the first 0xFF among them. One
 * pass where memchr and memcpy took two and a call each for the 0xFF every few hundred
 * bytes of entropy-coded data (benchmarks/NOTES.md C34). Stores no further than
 * copy_to_ff's end - p bytes. */
static __attribute__((target("avx2"))) const uint8_t *
copy_to_ff_avx2(const uint8_t *p, const uint8_t *end, uint8_t **o)
{
    const __m256i ff = _mm256_set1_epi8((char)0xFF);
    uint8_t *to = *o;
    while (end - p >= 32) {
        __m256i bytes = _mm256_loadu_si256((const __m256i *)p);
        _mm256_storeu_si256((__m256i *)to, bytes);
        unsigned hits = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, ff));
        if (hits != 0) {
            int at = __builtin_ctz(hits);
            *o = to + at;
            return p + at;
        }
        p += 32;
        to += 32;
    }
    *o = to;
    return copy_to_ff(p, end, o);
}

ptrdiff_t
lane_unstuff(const uint8_t *p, const uint8_t *end, uint8_t *out, const uint8_t **marker,
             size_t wanted, uint64_t *ends, uint8_t *rst, size_t *restarts, int avx2)
{
    CopyToFF copy = avx2 ? copy_to_ff_avx2 : copy_to_ff;
    uint8_t *o = out;
    *restarts = 0;
    while (p < end) {
        const uint8_t *ff = copy(p, end, &o);
        if (ff == NULL)
            return -1; /* the data ends without a marker */
        const uint8_t *q = ff + 1;
        while (q < end && *q == 0xFF) /* fill bytes */
            q++;
        if (q == end)
            return -1;
        if (*q >= 0xD0 && *q <= 0xD7 && *restarts < wanted) { /* an interval's end */
            ends[*restarts] = (uint64_t)(o - out);
            rst[(*restarts)++] = (uint8_t)(*q - 0xD0);
            p = q + 1;
            continue;
        }
        if (*q != 0) { /* a marker ends the data */
            if (*restarts < wanted)
                return -1; /* libjpeg warns of the missing restart marker */
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
    lane->to_go = lane->interval;
    lane->next_restart = 0;
    lane->bits = lane->restarts ? 8 * lane->ends[0] : lane->total_bits;
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
    int len, sym = huff_lookup(t, r->buf, &len);
    if (sym >= 0)
        drop(r, len);
    return sym;
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
    } else {
        drop(&r, sym & 15);
        k = lane_ac_next(sym, k);
    }
    refill(&r);
    return (SlowStep){r, k};
}

/* One look-up: every whole AC symbol the next bits hold, to the block's end. Returns the
 * new zig-zag index: 64 or more where the block ended, negative where the lane went bad.
 * fill: refill first (else the caller knows that 27 bits are held, the most one look-up
 * takes: a code within its LANE_AC_BITS bits and up to 15 value bits after). */
static inline __attribute__((always_inline)) int
ac_step(Reader *r, int k, const uint32_t *ac, const HuffTable *ac_table, int fill)
{
    if (fill)
        refill(r);
    uint32_t e = ac[r->buf >> (64 - LANE_AC_BITS)];
    if (__builtin_expect(k >= (int)(e >> 16), 0)) { /* where the entry does not hold */
        SlowStep s = slow_ac(ac_table, *r, k);
        *r = s.r;
        return s.k;
    }
    drop(r, (int)(e & 0xFF));
    return k + (int)((e >> 8) & 0xFF);
}

/* An interval's end (its last MCU decoded, the data not passed): nothing but the padding
 * of its last byte left, its restart marker next in order; the bit reader starts again on
 * the next interval's first byte. Returns whether the lane went bad. As huffman.c's
 * restart(), which warns where this marks the lane bad. */
static __attribute__((noinline)) int
restart(EntropyLane *lane, Reader *r)
{
    uint64_t used = (uint64_t)(r->p - lane->data) * 8 - (uint64_t)r->count;
    size_t n = lane->next_restart;
    if (lane->bits - used >= 8) {
        lane->bad = LANE_EXTRANEOUS;
        return 1;
    }
    if (n >= lane->restarts || lane->rst[n] != (n & 7)) {
        lane->bad = LANE_RESYNC;
        return 1;
    }
    r->p = lane->data + lane->ends[n];
    r->buf = 0;
    r->count = 0;
    lane->next_restart = ++n;
    lane->bits = n < lane->restarts ? 8 * lane->ends[n] : lane->total_bits;
    lane->to_go = lane->interval;
    return 0;
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
            lane->bad = LANE_PAST_END; /* the bits used ran past the data or interval */
            return 1;
        }
        if (lane->mcus == 0)
            return 1;
        if (lane->interval && --lane->to_go == 0 && restart(lane, r))
            return 1;
    }
    refill(r); /* 56 bits: a code and its difference take at most 31 */
    int bits = (int)(lane->dc[*block][r->buf >> (64 - HUFF_FAST_BITS)] & 0xFF);
    if (__builtin_expect(bits != 0, 1)) {
        drop(r, bits);
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

/* One look-up of lane's AC symbols in a loop of lanes_run2 or lanes_run1 (its reader r,
 * block, k and current AC look-up look in locals); at the block's end, the next block's
 * DC, and out of the loop where the lane is done */
#define LANE_STEP(lane, r, block, k, look, fill)                                         \
    k = ac_step(&r, k, look, (lane)->ac_table[block], fill);                             \
    if ((unsigned)k >= 64) {                                                             \
        if (next_block(lane, &r, &block, &k))                                            \
            break;                                                                       \
        look = (lane)->ac[block];                                                        \
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
    const uint32_t *aac = a->ac[ablock], *bac = b->ac[bblock];
    /* Each lane refills every other look-up: after a refill 56 bits are held, a look-up
     * takes at most 27, and a slow symbol or a block's start refills after itself. */
    for (;;) {
        LANE_STEP(a, ra, ablock, ak, aac, 1)
        LANE_STEP(b, rb, bblock, bk, bac, 1)
        LANE_STEP(a, ra, ablock, ak, aac, 0)
        LANE_STEP(b, rb, bblock, bk, bac, 0)
    }
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
    const uint32_t *ac = a->ac[block];
    for (;;) { /* as in lanes_run2 */
        LANE_STEP(a, r, block, k, ac, 1)
        LANE_STEP(a, r, block, k, ac, 0)
    }
out:
    keep(a, &r, block, k);
}

uint64_t
lane_position(const EntropyLane *lane)
{
    return (uint64_t)(lane->p - lane->data) * 8 - (uint64_t)lane->count;
}

void
lane_seek(EntropyLane *lane, uint64_t bit)
{
    Reader r = {0, lane->data + bit / 8, 0};
    refill(&r);
    drop(&r, (int)(bit % 8));
    lane->buf = r.buf;
    lane->p = r.p;
    lane->count = (int)r.count;
}

int
lane_settle(EntropyLane *lane, int slow)
{
    if (lane_done(lane))
        return 1;
    Reader r = {lane->buf, lane->p, lane->count};
    int block = lane->block, k = lane->k;
    if (slow) {
        SlowStep s = slow_ac(lane->ac_table[block], r, k);
        r = s.r;
        k = s.k;
    }
    if (k < 0 || k >= 64)
        next_block(lane, &r, &block, &k);
    keep(lane, &r, block, k);
    return lane_done(lane);
}

int
lane_intact(const EntropyLane *lane)
{
    uint64_t used = lane_position(lane);
    return !lane->bad && lane->mcus == 0 && used <= lane->bits && lane->bits - used < 8;
}
