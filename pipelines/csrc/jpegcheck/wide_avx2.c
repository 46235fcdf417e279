/* The check's entropy pass, up to AVX2_LANES files at once in one thread, with AVX2: wide.c's
 * steps on two vectors of 8 lanes, for CPUs without AVX-512.
 *
 * AVX2 has no mask registers: a lane's flags are vectors (-1 where set), turned into bits
 * (movemask) where the scalar side takes over. The data's next bits are a 64-bit word a
 * lane by eight scalar loads, each word for two steps or more (two gathers of four 64-bit
 * addresses were slower on a Xeon, one gather of 32-bit offsets on a Zen 4); the look-up's
 * entry one gather of eight offsets from base, or eight loads where gathers are slow (AMD's
 * Zen 1, 2 and 4, Intel's with the Downfall microcode; benchmarks/NOTES.md C17). Two vectors,
 * not four: 32 lanes ran slower.
 * Everything else (the look-ups, what goes to lane_settle, so the verdicts) is wide.c's,
 * through group.c.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "group.h"

#define AVX2 __attribute__((target("avx2")))
#define GROUP 8 /* lanes in a vector */
#define GROUPS (AVX2_LANES / GROUP)

/* Where gathers are slow: AMD's Zen 1 and 2 run them in microcode (GCC's tuning for them
 * emits none); Intel's microcode against Gather Data Sampling (Downfall) slows them down
 * (compilers added -mno-gather for it); on Zen 4 (lanes_wide_slower) an 8-lane gather costs
 * what eight loads do, and with the words' fewer data loads the loads ran 3.5% faster
 * (benchmarks/NOTES.md C21). Set where lanes_avx2_supported is asked. */
static int gathers_slow;

static int
gather_mitigated(void)
{
    FILE *file = fopen("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", "r");
    char line[64] = "";
    if (file == NULL)
        return 0;
    if (fgets(line, sizeof line, file) == NULL)
        line[0] = '\0';
    fclose(file);
    return strncmp(line, "Mitigation: Microcode", 21) == 0;
}

int
lanes_avx2_supported(void)
{
    static int supported = -1; /* asked once (the table lists the pass twice; /sys is read) */
    if (supported < 0) {
        __builtin_cpu_init();
        gathers_slow = __builtin_cpu_is("znver1") || __builtin_cpu_is("znver2") ||
                       gather_mitigated() || lanes_wide_slower();
        supported = __builtin_cpu_supports("avx2");
    }
    return supported;
}

/* A vector of lanes: what changes at each step (active: -1 for a lane that runs). The
 * block and the MCU counts are kept as the step needs them, not as GroupNumbers holds them:
 * tables, the lane's blocks that use its second pair of tables from the current one on, with
 * a bit set past the MCU's last (its value 1: the last block); left, the MCUs before one
 * whose end the scalar side takes (the scan's last, or with restart markers an interval's
 * last), counting the current one. Two vectors fewer than GroupNumbers' five: fewer spilled
 * to the stack (benchmarks/NOTES.md C23). */
typedef struct {
    __m256i pos, k, tables, left, active;
} Group;

/* What the Group's numbers are counted from, per vector: each lane's tables at an MCU's
 * first block, and its left, MCUs and to_go when the vector was last loaded */
typedef struct {
    int32_t tables[GROUP], left[GROUP], mcus[GROUP], to_go[GROUP];
} Counts;

static inline AVX2 __m256i
in(const int32_t *numbers)
{
    return _mm256_loadu_si256((const __m256i *)numbers);
}

static inline AVX2 unsigned
bits_of(__m256i flags)
{
    return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(flags));
}

static inline AVX2 __m256i
flags_of(unsigned bits)
{
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane_bit),
                              lane_bit);
}

/* The index of each lane's highest set bit (x >= 1): a float's exponent */
static inline AVX2 __m256i
top_bit(__m256i x)
{
    __m256i exponent = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(x)), 23);
    return _mm256_sub_epi32(exponent, _mm256_set1_epi32(127));
}

static AVX2 void
store(const Group *g, const GroupFixed *f, const Counts *c, GroupNumbers *n)
{
    __m256i blocks = in(f->blocks);
    __m256i spent = _mm256_sub_epi32(in(c->left), g->left);
    _mm256_storeu_si256((__m256i *)n->pos, g->pos);
    _mm256_storeu_si256((__m256i *)n->k, g->k);
    _mm256_storeu_si256((__m256i *)n->block, _mm256_sub_epi32(blocks, top_bit(g->tables)));
    _mm256_storeu_si256((__m256i *)n->mcus, _mm256_sub_epi32(in(c->mcus), spent));
    _mm256_storeu_si256((__m256i *)n->to_go,
                        _mm256_sub_epi32(in(c->to_go), _mm256_and_si256(spent, in(f->restarts))));
}

static AVX2 void
load(Group *g, const GroupFixed *f, Counts *c, const GroupNumbers *n)
{
    __m256i mcus = in(n->mcus), to_go = in(n->to_go);
    g->pos = in(n->pos);
    g->k = in(n->k);
    g->tables = _mm256_srlv_epi32(in(c->tables), in(n->block));
    g->left = _mm256_blendv_epi8(mcus, _mm256_min_epu32(mcus, to_go), in(f->restarts));
    _mm256_storeu_si256((__m256i *)c->left, g->left);
    _mm256_storeu_si256((__m256i *)c->mcus, mcus);
    _mm256_storeu_si256((__m256i *)c->to_go, to_go);
}

/* As wide.c's settle */
static __attribute__((noinline)) AVX2 int
settle(Group *g, GroupFixed *f, Counts *c, unsigned special, unsigned slow)
{
    GroupNumbers n;
    store(g, f, c, &n);
    unsigned done = group_settle(f, &n, special, slow);
    load(g, f, c, &n);
    g->active = flags_of(bits_of(g->active) & ~done);
    return done != 0;
}

/* Each lane's next 64 bits of data from its bit position's byte, first in the top (lanes 0-3
 * in lo, 4-7 in hi), and where each word starts (in bits). A step takes at most 27 bits and
 * reads a look-up's 12 from where it stands: so a word loaded at a byte (7 bits at most
 * before the position) serves two steps, and more while every lane has 12 bits left in it.
 * One load of eight for two or more steps, and the steps after the first take their bits by
 * shifts (benchmarks/NOTES.md C21). */
typedef struct {
    __m256i lo, hi, start;
} Words;

#define WORD_BITS 64
#define SURE_STEPS 2 /* steps a word serves whatever the codes: 7 + 27 + 12 <= 64 */
#define WORD_STEPS 4 /* steps a word serves at most, while every lane has 12 bits left */

static inline __attribute__((always_inline)) AVX2 void
load_words(Words *w, const GroupFixed *f, __m256i pos)
{
    int32_t at[GROUP] __attribute__((aligned(32)));
    uint64_t word[GROUP] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)at, pos);
    for (int i = 0; i < GROUP; i++) {
        uint64_t bytes;
        memcpy(&bytes, (const uint8_t *)(intptr_t)f->data[i] + ((uint32_t)at[i] >> 3), 8);
        word[i] = __builtin_bswap64(bytes);
    }
    w->lo = _mm256_load_si256((const __m256i *)word);
    w->hi = _mm256_load_si256((const __m256i *)(word + 4));
    w->start = _mm256_slli_epi32(_mm256_srli_epi32(pos, 3), 3);
}

/* The 32 bits at each lane's position, first in the top (zeros past its word's end) */
static inline __attribute__((always_inline)) AVX2 __m256i
bits_at(const Words *w, __m256i pos)
{
    __m256i into = _mm256_sub_epi32(pos, w->start);
    __m256i into_lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(into));
    __m256i into_hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(into, 1));
    __m256i lo = _mm256_srli_epi64(_mm256_sllv_epi64(w->lo, into_lo), 32);
    __m256i hi = _mm256_sllv_epi64(w->hi, into_hi);
    __m256i mixed = _mm256_blend_epi32(lo, hi, 0xAA); /* lanes 0 4 1 5 2 6 3 7 */
    return _mm256_permutevar8x32_epi32(mixed, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

/* Whether a lane of g has fewer than a look-up's bits left in its word */
static inline __attribute__((always_inline)) AVX2 int
word_spent(const Group *g, const Words *w)
{
    __m256i into = _mm256_sub_epi32(g->pos, w->start);
    return bits_of(_mm256_cmpgt_epi32(into, _mm256_set1_epi32(WORD_BITS - LANE_AC_BITS))) != 0;
}

/* The look-up entries at base + 4 x at of the active lanes (0 for the others): a gather, or
 * eight loads where gathers are slow */
static inline __attribute__((always_inline)) AVX2 __m256i
entries(const uint8_t *base, __m256i at, __m256i active, int gather)
{
    if (gather)
        return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)base, at,
                                           active, 4);
    int32_t offset[GROUP] __attribute__((aligned(32)));
    uint32_t e[GROUP] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)offset, at);
    for (int i = 0; i < GROUP; i++)
        memcpy(&e[i], base + 4 * (int64_t)offset[i], 4); /* an inactive lane's: unused */
    return _mm256_and_si256(_mm256_load_si256((const __m256i *)e), active);
}

/* One look-up step of every active lane, as wide.c's step */
static inline __attribute__((always_inline)) AVX2 unsigned
step(Group *g, const GroupFixed *f, const Counts *c, const Words *w, const uint8_t *base,
     unsigned *slow, int gather)
{
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    const __m256i byte_mask = _mm256_set1_epi32(0xFF);
    /* at k = 0 the DC look-up (an inactive lane's entry is 0 whichever it reads) */
    __m256i at_dc = _mm256_cmpeq_epi32(g->k, zero);
    /* the next 12 or more bits, first in the top */
    __m256i bits = bits_at(w, g->pos);
    /* the entry's offset from base, in entries, in the AC look-up or the DC one; the
     * choice last, so that a block's end reaches it by one step */
    __m256i second = _mm256_cmpeq_epi32(_mm256_and_si256(g->tables, one), one);
    __m256i dc = _mm256_blendv_epi8(in(f->dc[0]), in(f->dc[1]), second);
    __m256i ac = _mm256_blendv_epi8(in(f->ac[0]), in(f->ac[1]), second);
    __m256i at = _mm256_blendv_epi8(
        _mm256_add_epi32(_mm256_srli_epi32(bits, 32 - LANE_AC_BITS), ac),
        _mm256_add_epi32(_mm256_srli_epi32(bits, 32 - HUFF_FAST_BITS), dc), at_dc);
    __m256i e = entries(base, at, g->active, gather);
    /* ok: k below the entry's first index where it stops holding (an inactive lane's entry
     * is 0: never) */
    __m256i ok = _mm256_cmpgt_epi32(_mm256_srli_epi32(e, 16), g->k);
    __m256i slow_flags = _mm256_andnot_si256(ok, g->active);
    g->pos = _mm256_add_epi32(g->pos, _mm256_and_si256(ok, _mm256_and_si256(e, byte_mask)));
    g->k = _mm256_add_epi32(
        g->k, _mm256_and_si256(ok, _mm256_and_si256(_mm256_srli_epi32(e, 8), byte_mask)));
    /* a block's end (a slow lane's k stays below 64): the next block's DC, an MCU's end
     * counted here unless it needs more */
    __m256i ended = _mm256_cmpgt_epi32(g->k, _mm256_set1_epi32(63));
    __m256i next = _mm256_srli_epi32(g->tables, 1);
    __m256i mcu_end = _mm256_and_si256(ended, _mm256_cmpeq_epi32(next, one));
    __m256i held = _mm256_and_si256(
        mcu_end, _mm256_or_si256(_mm256_cmpgt_epi32(g->pos, in(f->ends)),
                                 _mm256_cmpeq_epi32(g->left, one)));
    __m256i in_mcu = _mm256_andnot_si256(mcu_end, ended);
    __m256i new_mcu = _mm256_andnot_si256(held, mcu_end); /* -1 where a new MCU starts */
    g->tables = _mm256_blendv_epi8(g->tables, next, in_mcu);
    g->tables = _mm256_blendv_epi8(g->tables, in(c->tables), new_mcu);
    g->left = _mm256_add_epi32(g->left, new_mcu);
    /* k to 0 at a block's end, but where the lane is held (its end is settle's) */
    g->k = _mm256_blendv_epi8(_mm256_andnot_si256(ended, g->k), g->k, held);
    *slow = bits_of(slow_flags);
    return bits_of(_mm256_or_si256(slow_flags, held));
}

static AVX2 void
group_load(Group *g, GroupFixed *f, Counts *c, EntropyLane *const *lanes, int n,
           const uint8_t *base)
{
    GroupNumbers numbers;
    g->active = flags_of(group_in(f, &numbers, lanes, n, base));
    for (int i = 0; i < GROUP; i++) {
        c->tables[i] = f->second[i] | 1 << f->blocks[i];
        for (int pair = 0; pair < 2; pair++) { /* in entries: step's at is an index */
            f->dc[pair][i] /= 4;
            f->ac[pair][i] /= 4;
        }
    }
    load(g, f, c, &numbers);
}

static AVX2 void
group_store(const Group *g, const GroupFixed *f, const Counts *c)
{
    GroupNumbers n;
    store(g, f, c, &n);
    group_out(f, &n, bits_of(g->active));
}

static inline __attribute__((always_inline)) AVX2 void
run(EntropyLane *const *lanes, int n, const uint8_t *base, int gather)
{
    if (group_start(lanes, n))
        return;
    Group g[GROUPS];
    GroupFixed f[GROUPS];
    Counts c[GROUPS];
    for (int j = 0; j < GROUPS; j++) {
        int from = j * GROUP, count = n - from < GROUP ? n - from : GROUP;
        group_load(&g[j], &f[j], &c[j], lanes + (count > 0 ? from : 0), count > 0 ? count : 0,
                   base);
    }
    /* the vectors in locals whose address is never taken (registers), apart from settle */
    Group v[GROUPS];
#pragma GCC unroll 8
    for (int j = 0; j < GROUPS; j++)
        v[j] = g[j];
    int done = 0;
    while (!done) {
        unsigned special[GROUPS], slow[GROUPS], any = 0;
        Words w[GROUPS];
#pragma GCC unroll 8
        for (int j = 0; j < GROUPS; j++)
            load_words(&w[j], &f[j], v[j].pos);
#pragma GCC unroll 2
        for (int s = 0; s < SURE_STEPS && !any; s++) {
#pragma GCC unroll 8
            for (int j = 0; j < GROUPS; j++) {
                special[j] = step(&v[j], &f[j], &c[j], &w[j], base, &slow[j], gather);
                any |= special[j];
            }
        }
        for (int s = SURE_STEPS; s < WORD_STEPS && !any; s++) {
            int spent = 0;
#pragma GCC unroll 8
            for (int j = 0; j < GROUPS; j++)
                spent |= word_spent(&v[j], &w[j]);
            if (spent)
                break;
#pragma GCC unroll 8
            for (int j = 0; j < GROUPS; j++) {
                special[j] = step(&v[j], &f[j], &c[j], &w[j], base, &slow[j], gather);
                any |= special[j];
            }
        }
        if (__builtin_expect(any != 0, 0)) {
#pragma GCC unroll 8
            for (int j = 0; j < GROUPS; j++)
                g[j] = v[j];
            for (int j = 0; j < GROUPS; j++)
                if (special[j])
                    done |= settle(&g[j], &f[j], &c[j], special[j], slow[j]);
#pragma GCC unroll 8
            for (int j = 0; j < GROUPS; j++)
                v[j] = g[j];
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < GROUPS; j++)
        g[j] = v[j];
    for (int j = 0; j < GROUPS; j++)
        group_store(&g[j], &f[j], &c[j]);
}

static __attribute__((noinline)) AVX2 void
run_gathers(EntropyLane *const *lanes, int n, const uint8_t *base)
{
    run(lanes, n, base, 1);
}

AVX2 void
lanes_run_avx2_loads(EntropyLane *const *lanes, int n, const uint8_t *base)
{
    run(lanes, n, base, 0);
}

void
lanes_run_avx2(EntropyLane *const *lanes, int n, const uint8_t *base)
{
    if (gathers_slow)
        lanes_run_avx2_loads(lanes, n, base);
    else
        run_gathers(lanes, n, base);
}
