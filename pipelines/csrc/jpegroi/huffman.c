/* A Huffman decoder for one-scan baseline JPEGs, in place of libjpeg-turbo's decode_mcu.
 *
 * Why: the region decoder (see _jpegroi.c) spends ~86% of its time in the entropy decoding
 * (NOTES.md H9), most of it decoding coefficients the region keeps. This decoder gives the
 * same coefficients (the Huffman code is a function of the bits) with fewer steps per
 * coefficient: the bit buffer is refilled 8 bytes at a time where no 0xFF byte is among
 * them, and an AC code whose code and value bits fit in HUFF_FAST_BITS comes out of one
 * table look-up as (run, value, bits), where libjpeg-turbo looks up the symbol and then
 * reads and sign-extends the value. Where the bits of the next AC code fit in what is left of
 * those HUFF_FAST_BITS, the same look-up gives it too (the pair table: one dependent load per
 * two coefficients, NOTES.md H12); end-of-block and sixteen-zeros codes are runs there, so
 * the loop has no branch of its own for them. The bit buffer lives in locals (registers)
 * while a block is decoded.
 *
 * The bitstream rules are libjpeg's: 0xFF 0x00 is a 0xFF data byte, 0xFF fill bytes are
 * skipped, any other marker ends the data and zeros follow (using one of those zeros is
 * corrupt data: JWRN_HIT_MARKER; the buffer's end without one: JWRN_JPEG_EOF), restart
 * markers are expected in order every restart_interval MCUs. Anything libjpeg would warn
 * about is reported with its warning, which the region decoder turns into an error; so is
 * some damage libjpeg lets pass (a bad code in its fast path), and huff_libjpeg_decides says
 * where libjpeg may answer otherwise (its read-ahead reaching the end of a file, fill bytes
 * inside the data): in both cases the region decoder asks libjpeg's own decoder, whose
 * answer is the one given.
 */
#include <string.h>

#include "jpegroi.h"

#include <jerror.h>

/* zig-zag index -> natural index; indices past 63 (an end of block, below, or a corrupt
 * run) all map to 63, a coefficient that is still zero whenever one is stored there */
static const int natural_order[128] = {
     0,  1,  8, 16,  9,  2,  3, 10, 17, 24, 32, 25, 18, 11,  4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13,  6,  7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

/* fast_ac's run for the end-of-block code: the index passes 63, ending the block, and the
 * zero it stores lands on coefficient 63, which an end of block leaves zero */
#define AC_END_OF_BLOCK 64

static inline int
extend(int v, int s)
{
    return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

/* pair[i]: the fast_ac symbol the 10 bits i start with and, where the bits left hold the
 * whole of another, that one too. Bytes, low to high: the first symbol's bits; the bits of
 * both (the first's alone where there is no second); the first's run; the second's run,
 * with 0x80 where there is a second; then the first's value and the second's (int16).
 * With no second its run and value are 0: storing it writes a zero to the next coefficient,
 * still zero, and does not advance the index. */
#define PAIR_SECOND 0x80

static void
build_pairs(HuffTable *t)
{
    const int mask = (1 << HUFF_FAST_BITS) - 1;
    for (int i = 0; i < (1 << HUFF_FAST_BITS); i++) {
        int32_t f1 = t->fast_ac[i];
        if (!f1) {
            t->pair[i] = 0;
            continue;
        }
        int bits1 = f1 & 0xFF, run1 = (f1 >> 8) & 0xFF, both = bits1, run2 = 0;
        int16_t v1 = (int16_t)(f1 >> 16), v2 = 0;
        int32_t f2 = run1 == AC_END_OF_BLOCK ? 0 : t->fast_ac[(i << bits1) & mask];
        if (f2 && bits1 + (f2 & 0xFF) <= HUFF_FAST_BITS) { /* the second lies in i's bits */
            both = bits1 + (f2 & 0xFF);
            run2 = ((f2 >> 8) & 0xFF) | PAIR_SECOND;
            v2 = (int16_t)(f2 >> 16);
        }
        t->pair[i] = (uint64_t)bits1 | (uint64_t)both << 8 | (uint64_t)run1 << 16 |
                     (uint64_t)run2 << 24 | (uint64_t)(uint16_t)v1 << 32 |
                     (uint64_t)(uint16_t)v2 << 48;
    }
}

int
huff_build_table(const JHUFF_TBL *source, int is_ac, HuffTable *t)
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
        if (len && symbol == 0xF0) { /* sixteen zeros: the zero stored is one of them */
            t->fast_ac[i] = 15 * 256 + len;
            continue;
        }
        if (!len || !size || len + size > HUFF_FAST_BITS)
            continue;
        int bits = (i >> (HUFF_FAST_BITS - len - size)) & ((1 << size) - 1);
        t->fast_ac[i] = extend(bits, size) * 65536 + run * 256 + len + size;
    }
    build_pairs(t);
    return 0;
}

int
huff_scan_start(j_decompress_ptr cinfo, HuffScan *scan)
{
    return huff_scan_start_with(cinfo, scan, NULL, NULL);
}

int
huff_scan_start_with(j_decompress_ptr cinfo, HuffScan *scan, HuffTableSource table_for,
                     void *context)
{
    if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 ||
        jpeg_has_multiple_scans(cinfo) || cinfo->src == NULL || cinfo->blocks_in_MCU < 1 ||
        cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU)
        return -1;
    const HuffTable *table_of[2][NUM_HUFF_TBLS] = {{NULL}};
    int tables = 0; /* built in scan->tables */
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
            if (table_of[kind][no] == NULL) {
                table_of[kind][no] = table_for ? table_for(context, source, kind) : NULL;
                if (table_of[kind][no] == NULL) {
                    if (huff_build_table(source, kind, &scan->tables[tables]) != 0)
                        return -1;
                    table_of[kind][no] = &scan->tables[tables++];
                }
            }
            if (kind)
                scan->ac[blkn] = table_of[kind][no];
            else
                scan->dc[blkn] = table_of[kind][no];
        }
        scan->component[blkn] = ci;
        /* at 1/8 the inverse DCT reads the DC term alone */
        scan->ac_stored[blkn] = comp->component_needed && comp->DCT_scaled_size > 1;
    }
    scan->blocks = cinfo->blocks_in_MCU;
    scan->buf = 0;
    scan->count = scan->zeros = scan->at_marker = scan->truncated = scan->fill_stuffed = 0;
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
                    s->fill_stuffed |= q > s->p + 1; /* 0xFF 0xFF ... 0x00 */
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

/* The hot loop's bit reader: buf and count in locals (registers), the rest in the scan. */
typedef struct {
    uint64_t buf;
    int count;
} Bits;

static inline void
refill(HuffScan *s, Bits *b)
{
    if (b->count >= 32)
        return;
    if (!s->at_marker && s->end - s->p >= 8) {
        uint64_t v;
        memcpy(&v, s->p, 8);
        v = __builtin_bswap64(v);
        uint64_t x = ~v; /* a 0xFF byte of v is a zero byte of x */
        if (!((x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL)) {
            int n = (64 - b->count) >> 3;
            b->buf |= v >> b->count;
            s->p += n;
            b->count += n << 3;
            return;
        }
    }
    s->buf = b->buf;
    s->count = b->count;
    refill_slowly(s);
    b->buf = s->buf;
    b->count = s->count;
}

static inline void
drop(Bits *b, int n)
{
    b->buf <<= n;
    b->count -= n;
}

static inline int
symbol(j_decompress_ptr cinfo, Bits *b, const HuffTable *t)
{
    int len, sym = huff_lookup(t, b->buf, &len);
    if (sym >= 0) {
        drop(b, len);
        return sym;
    }
    WARNMS(cinfo, JWRN_HUFF_BAD_CODE); /* an error in the region decoder */
    return 0;
}

static inline int
value(Bits *b, int size)
{
    int v = (int)(b->buf >> (64 - size));
    drop(b, size);
    return extend(v, size);
}

/* The AC coefficients of one block, stored (store) or only decoded. */
static inline void
ac_block(j_decompress_ptr cinfo, HuffScan *s, Bits *b, const HuffTable *t, JCOEF *block,
         int store)
{
    for (int k = 1; k < 64;) {
        refill(s, b);
        uint64_t e = t->pair[b->buf >> (64 - HUFF_FAST_BITS)];
        if (e) {
            k += (int)(e >> 16) & 0xFF;
            if (store)
                block[natural_order[k]] = (JCOEF)(int16_t)(e >> 32);
            k++;
            if (k < 64) { /* the second symbol (if any) is this block's */
                drop(b, (int)(e >> 8) & 0xFF);
                int run2 = (int)(e >> 24) & 0xFF;
                k += run2 & (PAIR_SECOND - 1);
                if (store)
                    block[natural_order[k]] = (JCOEF)(int16_t)(e >> 48);
                k += run2 >> 7;
            } else {
                drop(b, (int)e & 0xFF);
            }
            continue;
        }
        int sym = symbol(cinfo, b, t);
        int run = sym >> 4, size = sym & 15;
        if (size) {
            k += run;
            int v = value(b, size);
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
    /* The interval's last byte is padded: its unread bits are dropped. Bytes between the
     * last MCU and the marker are corrupt data: a whole byte of the bits read but not used,
     * or one not read yet (libjpeg counts both as discarded bytes). */
    if (s->count - s->zeros >= 8 || (!s->at_marker && s->p < s->end && *s->p != 0xFF))
        WARNMS2(cinfo, JWRN_EXTRANEOUS_DATA, 1, 0xD0 + s->next_restart);
    s->buf = 0;
    s->count = s->zeros = 0;
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
    Bits b = {s->buf, s->count};
    for (int blkn = 0; blkn < s->blocks; blkn++) {
        JCOEF *block = MCU_data ? (JCOEF *)MCU_data[blkn] : NULL;
        refill(s, &b);
        const HuffTable *dc = s->dc[blkn];
        int32_t f = dc->fast_ac[b.buf >> (64 - HUFF_FAST_BITS)];
        int diff;
        if (f) {
            drop(&b, f & 0xFF);
            diff = f >> 16;
        } else {
            int size = symbol(cinfo, &b, dc);
            diff = size ? value(&b, size) : 0;
        }
        int ci = s->component[blkn];
        /* libjpeg-turbo's int sum, which wraps (its UBSan check is off there): crafted data
         * can repeat a difference until the prediction passes INT_MAX. Summed as unsigned
         * here, defined, the same bits, and (JCOEF) keeps the same low 16 of them. */
        s->last_dc[ci] = (int)((unsigned)s->last_dc[ci] + (unsigned)diff);
        if (block) {
            block[0] = (JCOEF)s->last_dc[ci];
            if (s->ac_stored[blkn]) {
                ac_block(cinfo, s, &b, s->ac[blkn], block, 1);
                continue;
            }
        }
        ac_block(cinfo, s, &b, s->ac[blkn], NULL, 0);
    }
    s->buf = b.buf;
    s->count = b.count;
    if (s->at_marker && s->zeros > s->count) /* bits past the data's end were used */
        WARNMS(cinfo, s->truncated ? JWRN_JPEG_EOF : JWRN_HIT_MARKER);
    cinfo->src->next_input_byte = s->p;
    cinfo->src->bytes_in_buffer = (size_t)(s->end - s->p);
    return TRUE;
}

int
huff_libjpeg_decides(const HuffScan *s)
{
    /* libjpeg-turbo's fast path reads 0xFF 0xFF as a marker (its slow path as a fill byte):
     * it fills zero bits, decodes the MCU from them, then decodes it again with its slow
     * path into the same, not re-zeroed, blocks. Its pixels are what a user of it gets. */
    if (s->truncated || s->fill_stuffed)
        return 1;
    /* libjpeg-turbo reads at most 8 data bytes past the bits it has used; this reader's
     * position is never behind those bits. Within 16 data bytes of the buffer's end, with no
     * marker in between, libjpeg may have asked its source for more (a warning there). */
    int data_bytes = 0;
    for (const uint8_t *q = s->p; q < s->end && data_bytes < 16;) {
        if (*q != 0xFF) {
            q++, data_bytes++;
            continue;
        }
        while (q < s->end && *q == 0xFF) /* fill bytes */
            q++;
        if (q == s->end)
            return 1;
        if (*q != 0)
            return 0; /* a marker: libjpeg stops there too */
        q++, data_bytes++; /* a stuffed 0xFF */
    }
    return data_bytes < 16;
}
