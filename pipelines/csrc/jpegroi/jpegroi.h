/* Shared by _jpegroi and _jpegcheck: libjpeg's strict error handler, and _jpegroi's own Huffman
 * decoder (pipelines/csrc/jpegroi/huffman.c). */
#ifndef FASTLOAD_JPEGROI_H
#define FASTLOAD_JPEGROI_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

/* libjpeg's error handler for both strict decoders (_jpegroi's region decode, _jpegcheck's
 * check): an error jumps back with libjpeg's message kept; a warning (corrupt data inside
 * what was read) is an error too; trace messages are dropped, so nothing goes to stderr. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} ErrorManager;

static inline void
on_error(j_common_ptr cinfo)
{
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static inline void
on_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        on_error(cinfo);
}

#define HUFF_FAST_BITS 10

/* One Huffman table, decoded FAST_BITS at a time. */
typedef struct {
    uint16_t fast[1 << HUFF_FAST_BITS];   /* (code length << 8) | symbol; 0: a longer code */
    int32_t fast_ac[1 << HUFF_FAST_BITS]; /* value * 65536 + run * 256 + bits, or 0 (DC too) */
    uint64_t pair[1 << HUFF_FAST_BITS];   /* AC: one or two symbols of fast_ac, or 0 (see .c) */
    int32_t maxcode[18];                  /* the largest code of each length, -1: none */
    int32_t valoffset[17];
    uint8_t huffval[256];
} HuffTable;

/* The symbol whose code starts the bits (first bit in the top), with the code's length in
 * *length; -1 where no code of at most 16 bits matches (corrupt data). */
static inline int
huff_lookup(const HuffTable *t, uint64_t bits, int *length)
{
    unsigned f = t->fast[bits >> (64 - HUFF_FAST_BITS)];
    if (f) {
        *length = (int)(f >> 8);
        return (int)(f & 0xFF);
    }
    for (int len = HUFF_FAST_BITS + 1; len <= 16; len++) {
        int32_t code = (int32_t)(bits >> (64 - len));
        if (code <= t->maxcode[len]) {
            *length = len;
            return t->huffval[(code + t->valoffset[len]) & 0xFF];
        }
    }
    return -1;
}

/* The scan's state: the bit reader over the entropy-coded bytes and the DC predictions. */
typedef struct {
    uint64_t buf;  /* the next bits, first bit in the top */
    int count;     /* bits held in buf (zeros appended past a marker count too) */
    int zeros;     /* of those, the zeros appended after the data ended */
    int at_marker; /* the reader stopped at a marker (p points at its 0xFF) or the end */
    int truncated; /* ... at the buffer's end, no marker: the file is cut short */
    int fill_stuffed; /* 0xFF fill bytes before a stuffed 0x00 were read (see the .c) */
    const uint8_t *p, *end;
    int last_dc[MAX_COMPS_IN_SCAN];
    unsigned restarts_to_go, next_restart;
    int blocks;
    const HuffTable *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
    int component[D_MAX_BLOCKS_IN_MCU], ac_stored[D_MAX_BLOCKS_IN_MCU];
    HuffTable tables[2 * NUM_HUFF_TBLS];
} HuffScan;

/* Sets the scan up after jpeg_start_decompress (the source at the scan's first byte).
 * Returns 0, or -1 where this decoder does not apply (not a one-scan baseline Huffman
 * JPEG of 8-bit samples, a memory source, a table libjpeg would refuse); libjpeg's own
 * decoder is used then. */
int huff_scan_start(j_decompress_ptr cinfo, HuffScan *scan);

/* A table built by huff_build_table for source (is_ac: an AC table), kept by the caller at
 * least until the scan ends; NULL: the scan builds its own copy. */
typedef const HuffTable *(*HuffTableSource)(void *context, const JHUFF_TBL *source,
                                            int is_ac);

/* huff_scan_start, taking its tables from table_for(context, ...) where it gives one */
int huff_scan_start_with(j_decompress_ptr cinfo, HuffScan *scan, HuffTableSource table_for,
                         void *context);

/* The look-ups of one table; 0, or -1 for a table libjpeg refuses (JERR_BAD_HUFF_TABLE) */
int huff_build_table(const JHUFF_TBL *source, int is_ac, HuffTable *table);

/* One MCU, as struct jpeg_entropy_decoder's decode_mcu: coefficients into the zeroed
 * MCU_data blocks, or decoded and discarded where MCU_data is NULL. Corrupt data is
 * reported with libjpeg's own warnings (JWRN_HUFF_BAD_CODE, JWRN_HIT_MARKER, ...). */
boolean huff_decode_mcu(j_decompress_ptr cinfo, HuffScan *scan, JBLOCKROW *MCU_data);

/* After the last MCU wanted: whether libjpeg-turbo's decoder may have given another
 * answer, so that the region decoder must ask it: the data ends, without a marker, within
 * what its bit reader may have read ahead (it warns that the file ends, this decoder does
 * not), or the data holds fill bytes before a stuffed zero (its fast path takes them for a
 * marker and leaves coefficients of zero bits in the block it then decodes again). */
int huff_libjpeg_decides(const HuffScan *scan);

#endif
