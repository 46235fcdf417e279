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
 * before a restart marker, goes to lane_settle (lanes.c), the scalar pass's own steps
 * (through group.c), one lane at a time; the lane then goes on here. So the verdicts are
 * lanes_run1's: the same symbols and checks in the same places.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>

#include "group.h"

#define WIDE __attribute__((target("avx512f,avx512bw,avx512dq")))
#define GROUP 16 /* lanes in a vector */
#define GROUPS (WIDE_LANES / GROUP)

int
lanes_wide_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
}

/* AMD's Zen 4 (family 19h, the one with AVX-512) runs 512-bit operations as two halves, and a
 * gather of 16 lanes, or of 8 from 64-bit addresses, costs more than the AVX2 pass's eight
 * loads: there 0.158 CPU-ms a photograph against 0.141 (benchmarks/NOTES.md C18; the AVX2
 * pass 0.130 since C21). GCC 12 cannot name znver4, so the family is read from CPUID. */
int
lanes_wide_slower(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!lanes_wide_supported() || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_is("amd") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    unsigned family = (eax >> 8) & 0xF;
    if (family == 0xF)
        family += (eax >> 20) & 0xFF;
    return family == 0x19;
}

/* A vector of lanes: what changes at each step, in registers */
typedef struct {
    __m512i pos, k, block, mcus, to_go;
    __mmask16 active, restarts;
} Group;

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

/* Each lane of special moved on the slow way (those of slow: an AC symbol the look-up does
 * not hold; the others: the DC's, or the MCU's end). Returns whether a lane is done (then
 * no longer active). */
static __attribute__((noinline)) WIDE int
settle(Group *g, GroupFixed *f, __mmask16 special, __mmask16 slow)
{
    GroupNumbers n;
    store(g, &n);
    unsigned done = group_settle(f, &n, special, slow);
    g->active &= (__mmask16)~done;
    load(g, &n);
    return done != 0;
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
group_load(Group *g, GroupFixed *f, EntropyLane *const *lanes, int n, const uint8_t *base)
{
    GroupNumbers numbers;
    g->active = (__mmask16)group_in(f, &numbers, lanes, n, base);
    g->restarts = _mm512_movepi32_mask(_mm512_loadu_si512(f->restarts));
    load(g, &numbers);
}

/* ... and back into their EntropyLanes */
static WIDE void
group_store(const Group *g, const GroupFixed *f)
{
    GroupNumbers n;
    store(g, &n);
    group_out(f, &n, g->active);
}

WIDE void
lanes_run_wide(EntropyLane *const *lanes, int n, const uint8_t *base)
{
    if (group_start(lanes, n))
        return;
    Group g[GROUPS];
    GroupFixed f[GROUPS];
    int groups = (n + GROUP - 1) / GROUP;
    for (int j = 0; j < groups; j++)
        group_load(&g[j], &f[j], lanes + j * GROUP,
                   n - j * GROUP < GROUP ? n - j * GROUP : GROUP, base);
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
        group_store(&g[j], &f[j]);
}
