/* A Huffman decoder for one-scan baseline JPEGs, in place of libjpeg-turbo's decode_mcu.
 *
 * Why: the region decoder (see _jpegroi.c) spends ~86% of its time in the entropy decoding
 * (NOTES.md H9), most of it decoding coefficients the region keeps. This decoder gives the
 * same coefficients (the Huffman code is a function of the bits) with fewer steps per
 * coefficient: the bit buffer is refilled 8 bytes at a time where no 0xFF byte is among
 * them, and an AC code whose code and value bits fit in HUFF_FAST_BITS comes out of one
 * table look-up as (run, value, bits), where libjpeg-turbo looks up the symbol and then
 * reads and sign-extends the value.
 *
 * The bitstream rules are libjpeg's: 0xFF 0x00 is a 0xFF data byte, 0xFF fill bytes are
 * skipped, any other marker ends the data and zeros follow (using one of those zeros is
 * corrupt data: JWRN_HIT_MARKER; the buffer's end without one: JWRN_JPEG_EOF), restart markers are expected in order every
 * restart_interval MCUs. Anything libjpeg would warn about is reported with its warning,
 * which the region decoder turns into an error.
 */
#include <string.h>

#include "_jpegroi.h"

#include <jerror.h>

/* zig-zag index -> natural index, with 16 spare entries for a corrupt run past 63 */
static const int natural_order[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

#define AC_END_OF_BLOCK 0xFF /* fast_ac's run for the end-of-block code */

static inline int
extend(int v, int s)
{
    return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

static int
build_table(const JHUFF_TBL *source, int is_ac, HuffTable *t)
{
    int p = 0, code = 0;
    memset(t->fast, 0, sizeof t->fast);
    memset(t->fast_ac, 0, sizeof t->fast_ac);
    for (int len = 1; len <= 16; len++) {
        int n = source->bits[len];
        t->valoffset[len] = p - code;
        for (int i = 0; i < n; i++, p++, code++) {
            if (p >= 256 || code >= (1 << len))
                return -1; /* libjpeg rejects such a table (JERR_BAD_HUFF_TABLE) first */
            if (len <= HUFF_FAST_BITS) {
                int shift = HUFF_FAST_BITS - len;
                for (int j = 0; j < (1 << shift); j++)
                    t->fast[(code << shift) | j] = (uint16_t)((len << 8) | source->huffval[p]);
            }
        }
        t->maxcode[len] = n ? code - 1 : -1;
        code <<= 1;
    }
    t->maxcode[17] = INT32_MAX; /* unused: a code longer than 16 bits is corrupt */
    memcpy(t->huffval, source->huffval, sizeof t->huffval);
    if (!is_ac) {
        for (int i = 0; i < (1 << HUFF_FAST_BITS); i++) {
            /* DC: the difference's size is the symbol; code and value bits in one look-up */
            int len = t->fast[i] >> 8, size = t->fast[i] & 0xFF;
            if (len && size <= 11 && len + size <= HUFF_FAST_BITS) {
                int bits = size ? (i >> (HUFF_FAST_BITS - len - size)) & ((1 << size) - 1) : 0;
                t->fast_ac[i] = (size ? extend(bits, size) : 0) * 65536 + len + size;
            }
        }
        return 0;
    }
    for (int i = 0; i < (1 << HUFF_FAST_BITS); i++) {
        int len = t->fast[i] >> 8, symbol = t->fast[i] & 0xFF;
        int run = symbol >> 4, size = symbol & 15;
        if (len && symbol == 0) { /* end of block: once per block, worth its own entry */
            t->fast_ac[i] = AC_END_OF_BLOCK * 256 + len;
            continue;
        }
        if (!len || !size || len + size > HUFF_FAST_BITS)
            continue;
        int bits = (i >> (HUFF_FAST_BITS - len - size)) & ((1 << size) - 1);
        t->fast_ac[i] = extend(bits, size) * 65536 + run * 256 + len + size;
    }
    return 0;
}

int
huff_scan_start(j_decompress_ptr cinfo, HuffScan *scan)
{
    if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 ||
        jpeg_has_multiple_scans(cinfo) || cinfo->src == NULL || cinfo->blocks_in_MCU < 1 ||
        cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU)
        return -1;
    int table_of[2][NUM_HUFF_TBLS];
    memset(table_of, -1, sizeof table_of);
    int tables = 0;
    for (int blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
        int ci = cinfo->MCU_membership[blkn];
        jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        int numbers[2] = {comp->dc_tbl_no, comp->ac_tbl_no};
        for (int kind = 0; kind < 2; kind++) {
            int no = numbers[kind];
            if (no < 0 || no >= NUM_HUFF_TBLS)
                return -1;
            JHUFF_TBL *source = kind ? cinfo->ac_huff_tbl_ptrs[no] : cinfo->dc_huff_tbl_ptrs[no];
            if (source == NULL)
                return -1;
            if (table_of[kind][no] < 0) {
                if (build_table(source, kind, &scan->tables[tables]) != 0)
                    return -1;
                table_of[kind][no] = tables++;
            }
            if (kind)
                scan->ac[blkn] = &scan->tables[table_of[kind][no]];
            else
                scan->dc[blkn] = &scan->tables[table_of[kind][no]];
        }
        scan->component[blkn] = ci;
        /* at 1/8 the inverse DCT reads the DC term alone */
        scan->ac_stored[blkn] = comp->component_needed && comp->DCT_scaled_size > 1;
    }
    scan->blocks = cinfo->blocks_in_MCU;
    scan->buf = 0;
    scan->count = scan->zeros = scan->at_marker = scan->truncated = 0;
    scan->p = cinfo->src->next_input_byte;
    scan->end = scan->p + cinfo->src->bytes_in_buffer;
    memset(scan->last_dc, 0, sizeof scan->last_dc);
    scan->restarts_to_go = cinfo->restart_interval;
    scan->next_restart = 0;
    return 0;
}

/* Byte by byte: stuffed zeros, fill bytes, a marker (or the buffer's end) ends the data. */
static void
refill_slowly(HuffScan *s)
{
    while (s->count <= 56) {
        unsigned c = 0;
        if (!s->at_marker) {
            if (s->p >= s->end) {
                s->at_marker = s->truncated = 1;
            } else if ((c = *s->p) != 0xFF) {
                s->p++;
            } else {
                const uint8_t *q = s->p + 1;
                while (q < s->end && *q == 0xFF)
                    q++;
                if (q < s->end && *q == 0) {
                    s->p = q + 1;
                } else {
                    s->at_marker = 1; /* p stays at the marker */
                    c = 0;
                }
            }
        }
        if (s->at_marker)
            s->zeros += 8;
        s->buf |= (uint64_t)c << (56 - s->count);
        s->count += 8;
    }
}

static inline void
refill(HuffScan *s)
{
    if (s->count >= 32)
        return;
    if (!s->at_marker && s->end - s->p >= 8) {
        uint64_t v;
        memcpy(&v, s->p, 8);
        v = __builtin_bswap64(v);
        uint64_t x = ~v; /* a 0xFF byte of v is a zero byte of x */
        if (!((x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL)) {
            int n = (64 - s->count) >> 3;
            s->buf |= v >> s->count;
            s->p += n;
            s->count += n << 3;
            return;
        }
    }
    refill_slowly(s);
}

static inline void
drop(HuffScan *s, int n)
{
    s->buf <<= n;
    s->count -= n;
}

static inline int
symbol(j_decompress_ptr cinfo, HuffScan *s, const HuffTable *t)
{
    unsigned e = t->fast[s->buf >> (64 - HUFF_FAST_BITS)];
    if (e) {
        drop(s, (int)(e >> 8));
        return (int)(e & 0xFF);
    }
    for (int len = HUFF_FAST_BITS + 1; len <= 16; len++) {
        int32_t code = (int32_t)(s->buf >> (64 - len));
        if (code <= t->maxcode[len]) {
            drop(s, len);
            return t->huffval[(code + t->valoffset[len]) & 0xFF];
        }
    }
    WARNMS(cinfo, JWRN_HUFF_BAD_CODE); /* an error in the region decoder */
    return 0;
}

static inline int
value(HuffScan *s, int size)
{
    int v = (int)(s->buf >> (64 - size));
    drop(s, size);
    return extend(v, size);
}

/* The AC coefficients of one block, stored (store) or only decoded. */
static inline void
ac_block(j_decompress_ptr cinfo, HuffScan *s, const HuffTable *t, JCOEF *block, int store)
{
    for (int k = 1; k < 64;) {
        refill(s);
        int32_t f = t->fast_ac[s->buf >> (64 - HUFF_FAST_BITS)];
        if (f) {
            int run = (f >> 8) & 0xFF;
            drop(s, f & 0xFF);
            if (run == AC_END_OF_BLOCK)
                break;
            k += run;
            if (store)
                block[natural_order[k]] = (JCOEF)(f >> 16);
            k++;
            continue;
        }
        int sym = symbol(cinfo, s, t);
        int run = sym >> 4, size = sym & 15;
        if (size) {
            k += run;
            int v = value(s, size);
            if (store)
                block[natural_order[k]] = (JCOEF)v;
            k++;
        } else if (run == 15) {
            k += 16;
        } else {
            break; /* end of block */
        }
    }
}

static void
restart(j_decompress_ptr cinfo, HuffScan *s)
{
    /* the interval's last byte is padded: its unread bits are dropped */
    s->buf = 0;
    s->count = s->zeros = 0;
    if (!s->at_marker) { /* bytes between the last MCU and the marker: corrupt */
        if (s->p < s->end && *s->p != 0xFF)
            WARNMS2(cinfo, JWRN_EXTRANEOUS_DATA, 1, 0xD0 + s->next_restart);
    }
    const uint8_t *q = s->p;
    while (q < s->end && *q == 0xFF)
        q++;
    if (q >= s->end || *q != 0xD0 + s->next_restart)
        WARNMS2(cinfo, JWRN_MUST_RESYNC, q < s->end ? *q : 0, s->next_restart);
    s->p = q + 1;
    s->at_marker = 0;
    s->next_restart = (s->next_restart + 1) & 7;
    s->restarts_to_go = cinfo->restart_interval;
    memset(s->last_dc, 0, sizeof s->last_dc);
}

boolean
huff_decode_mcu(j_decompress_ptr cinfo, HuffScan *s, JBLOCKROW *MCU_data)
{
    if (cinfo->restart_interval) {
        if (s->restarts_to_go == 0)
            restart(cinfo, s);
        s->restarts_to_go--;
    }
    for (int blkn = 0; blkn < s->blocks; blkn++) {
        JCOEF *block = MCU_data ? (JCOEF *)MCU_data[blkn] : NULL;
        refill(s);
        const HuffTable *dc = s->dc[blkn];
        int32_t f = dc->fast_ac[s->buf >> (64 - HUFF_FAST_BITS)];
        int diff;
        if (f) {
            drop(s, f & 0xFF);
            diff = f >> 16;
        } else {
            int size = symbol(cinfo, s, dc);
            diff = size ? value(s, size) : 0;
        }
        int ci = s->component[blkn];
        s->last_dc[ci] += diff;
        if (block) {
            block[0] = (JCOEF)s->last_dc[ci];
            if (s->ac_stored[blkn]) {
                ac_block(cinfo, s, s->ac[blkn], block, 1);
                continue;
            }
        }
        ac_block(cinfo, s, s->ac[blkn], NULL, 0);
    }
    if (s->at_marker && s->zeros > s->count) /* bits past the data's end were used */
        WARNMS(cinfo, s->truncated ? JWRN_JPEG_EOF : JWRN_HIT_MARKER);
    cinfo->src->next_input_byte = s->p;
    cinfo->src->bytes_in_buffer = (size_t)(s->end - s->p);
    return TRUE;
}
