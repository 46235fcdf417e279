/* The check's entropy pass, two files at a time (pipelines/csrc/jpegcheck/lanes.c). */
#ifndef FASTLOAD_JPEGCHECK_LANES_H
#define FASTLOAD_JPEGCHECK_LANES_H

#include <stddef.h>
#include <stdint.h>

#include "../jpegroi/jpegroi.h"

/* A DC table's look-up: for the HUFF_FAST_BITS bits a code starts with, an entry as an AC
 * look-up's (below): the bits of the code and of the difference after it (its size is the
 * symbol), one position, held at k = 0; or 0 for a longer code. The difference's bits need
 * not be in the look-up's bits: a block's DC is skipped. */
typedef struct {
    uint32_t e[1 << HUFF_FAST_BITS];
} LaneDcSkip;

void lane_dc_table(const HuffTable *table, LaneDcSkip *skip);

/* An AC table's look-up of LANE_AC_BITS bits: every whole AC symbol they hold, to an end of
 * block, where the value bits of the last one may lie past them (see lanes.c). */
#define LANE_AC_BITS 12
typedef struct {
    uint32_t e[1 << LANE_AC_BITS];
} LaneAcSkip;

void lane_ac_table(const HuffTable *table, LaneAcSkip *skip);

/* The zig-zag index after an AC symbol read at k: k past its run and value, k + 16 for
 * sixteen zeros, 64 (the block's end) for an end of block; 64 or more: the block ended */
static inline int
lane_ac_next(int symbol, int k)
{
    return symbol & 15 ? k + (symbol >> 4) + 1 : symbol == 0xF0 ? k + 16 : 64;
}

/* Bytes of zeros after a lane's data: more than one MCU can read (at most 10 blocks of
 * 64 symbols of at most 31 bits) plus the bit reader's 8 bytes ahead. */
#define LANE_PADDING 4096

/* One file's entropy-coded data, unstuffed, and where its decoding stands. */
typedef struct {
    const uint8_t *data; /* the data bytes (0xFF 0x00 -> 0xFF), LANE_PADDING zeros after */
    uint64_t bits;       /* where the current restart interval's data ends (8 x bytes) */
    uint64_t total_bits; /* where the data ends (8 x its bytes) */
    uint64_t mcus;       /* MCUs still to decode */
    /* a scan with restart markers: MCUs per interval (0: none), MCUs left in this one,
     * where each interval but the last ends in data (bytes) and the number (0-7) of the
     * marker that ends it, how many, and the next interval's */
    unsigned interval, to_go;
    const uint64_t *ends;
    const uint8_t *rst;
    size_t restarts, next_restart;
    int blocks;          /* per MCU */
    /* per block of the MCU: its DC look-up, its AC look-up, and their tables (for codes
     * longer than a look-up holds) */
    const uint32_t *dc[D_MAX_BLOCKS_IN_MCU];
    const uint32_t *ac[D_MAX_BLOCKS_IN_MCU];
    const HuffTable *dc_table[D_MAX_BLOCKS_IN_MCU], *ac_table[D_MAX_BLOCKS_IN_MCU];
    /* the cursor: bit buffer (first bit in the top), bits in it, the next byte to load,
     * the block of the MCU and the zig-zag index in it (64: the block has ended) */
    uint64_t buf;
    const uint8_t *p;
    int count, block, k;
    int bad; /* one of the LANE_ reasons below, else 0 */
} EntropyLane;

enum {
    LANE_BAD_CODE = 1,   /* a code no table holds */
    LANE_PAST_END = 2,   /* bits past the data's (or interval's) end were used */
    LANE_EXTRANEOUS = 3, /* a whole byte of an interval left before its restart marker */
    LANE_RESYNC = 4,     /* a restart marker out of order */
};

/* Where a scan's data ends in [p, end): its unstuffed bytes into out (room for end - p
 * bytes and LANE_PADDING), and the marker that ends it. With restart markers, the first
 * ``wanted`` restart markers (RST0-7) are the ends of intervals, not of the data: where
 * each one was in the unstuffed data and its number go to ends and rst (room for wanted),
 * how many to *restarts. Returns the bytes written, or -1 where libjpeg may answer
 * otherwise than this check (no marker before the end, fill bytes before a stuffed zero,
 * fewer restart markers than wanted). avx2: the CPU runs AVX2 (the same answer, faster). */
ptrdiff_t lane_unstuff(const uint8_t *p, const uint8_t *end, uint8_t *out,
                       const uint8_t **marker, size_t wanted, uint64_t *ends, uint8_t *rst,
                       size_t *restarts, int avx2);

/* Starts lane over its data (data, total_bits, mcus, blocks, the tables and the restart
 * intervals set by the caller). */
void lane_start(EntropyLane *lane);

/* Decodes both lanes' MCUs, interleaved, until one of them is done (all its MCUs decoded,
 * or bad); the other keeps its place. */
void lanes_run2(EntropyLane *a, EntropyLane *b);

/* Decodes the lane's MCUs until it is done. */
void lanes_run1(EntropyLane *a);

/* Where the lane's cursor is, in bits from its data's start; and the cursor set there */
uint64_t lane_position(const EntropyLane *lane);
void lane_seek(EntropyLane *lane, uint64_t bit);

/* The lane moved on the slow way from where a faster pass stopped: with slow, one AC
 * symbol by its table (1 <= k <= 63); then, where the block has ended (k >= 64, or k < 0:
 * a bad code), the block's end as lanes_run1 does it (the MCU's end, the data's end, a
 * restart) and the next block's DC. Returns whether the lane is done. */
int lane_settle(EntropyLane *lane, int slow);

/* The lanes' pass with AVX-512 (wide.c): up to WIDE_LANES files at once in one thread, on
 * CPUs that have it (lanes_wide_supported); its tables and lanes are group.c's. */
#define WIDE_LANES 32
int lanes_wide_supported(void);
/* Whether this CPU runs AVX-512 but its gathers make the pass slower than the AVX2 one (AMD's
 * Zen 4): then the AVX2 pass is the default (check.c) */
int lanes_wide_slower(void);

/* The same pass with AVX2 (wide_avx2.c), up to AVX2_LANES files at once, for CPUs without
 * AVX-512 (lanes_avx2_supported, asked before the first lanes_run_avx2) */
#define AVX2_LANES 16
int lanes_avx2_supported(void);
void lanes_run_avx2(EntropyLane *const *lanes, int n, const uint8_t *base);
/* ... with loads, not gathers, for the look-ups' entries (as it runs where gathers are slow) */
void lanes_run_avx2_loads(EntropyLane *const *lanes, int n, const uint8_t *base);

/* Whether the wide passes take the lane (its data and MCU count within 32-bit counts, its
 * tables within 1 GB of base); else lanes_run1 decodes it. */
int lane_wide_ok(const EntropyLane *lane, const uint8_t *base);

/* Decodes the lanes' MCUs (n <= WIDE_LANES, each taken by lane_wide_ok, none done) until
 * one of them is done; the others keep their place. base: as for lane_wide_ok. */
void lanes_run_wide(EntropyLane *const *lanes, int n, const uint8_t *base);

/* Whether the lane ended intact: every MCU decoded with known codes, no bit past the data
 * used, and no whole byte left over. */
int lane_intact(const EntropyLane *lane);

#endif
