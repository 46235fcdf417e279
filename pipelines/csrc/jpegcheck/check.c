/* fastload.data.format._jpegcheck: is a JPEG's entropy-coded data intact? Without pixels.
 *
 * check(data) -> None | str. None: libjpeg-turbo decodes ``data`` without a warning or an
 * error (what fastload's strict check, a strict 1/8-scale grey decode, accepts). Otherwise
 * a reason: libjpeg's warning or error text ("Corrupt JPEG data: ...", "Premature end of
 * JPEG file", "Bogus marker length", ...), or "libjpeg decides: ..." where this check does
 * not answer for the file (a kind its decoder does not handle, or a case where libjpeg-turbo
 * may answer otherwise). A caller that needs the strict decode's own verdict (its exact
 * message) asks it whenever the answer is not None: None is the only answer that is final
 * (fastload/data/format/jpeg_damage.py).
 *
 * How: libjpeg-turbo reads the markers up to the scan (its own marker reader: its warnings
 * and errors are the strict decode's) and sets the scan up, as for a 1/8-scale grey decode;
 * then fastload's Huffman decoder (pipelines/csrc/jpegroi/huffman.c, the one the region
 * decoder uses) entropy-decodes every MCU, discarding the coefficients: no inverse DCT,
 * no upsampling, no colour conversion, no output rows. Its warnings are libjpeg's (a bad
 * code, data that ends or hits a marker early, restart markers missing or out of order,
 * bytes before a restart marker), and it reports some damage libjpeg's fast path lets pass:
 * every warning is "not None", never a false "None". After the last MCU libjpeg's marker
 * reader reads on to the end of the image from where the scan ended (bytes before the
 * next marker, a missing end of image: its warnings again).
 *
 * Where the two decoders' bit readers may stop at different places, this check does not
 * answer (libjpeg reads up to 8 bytes ahead and does not count what it read ahead as
 * extraneous; this decoder reads ahead by another amount): data left over after the last
 * MCU beyond the padding of its last byte, fill bytes before a stuffed zero, data that ends
 * without a marker. Kinds it does not decode: progressive, arithmetic-coded, 12-bit (or any
 * precision but 8), more than one scan, components other than grey or YCbCr, chroma
 * sampling other than 4:4:4, 4:2:2, 4:4:0, 4:2:0 and 4:1:1 (TurboJPEG's own list), grey not
 * 1x1.
 *
 * Sizes: the data's length is a size_t checked against libjpeg's unsigned long; the MCU
 * count is a 64-bit product of two JDIMENSIONs. The GIL is released while it runs; nothing
 * is written to stderr.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jpegint.h> /* the entropy decoder's and input controller's structs */

#include "../jpegroi/jpegroi.h"

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} ErrorManager;

static void
on_error(j_common_ptr cinfo)
{
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void
on_message(j_common_ptr cinfo, int level)
{
    if (level < 0) /* a warning: the strict decode stops on it */
        on_error(cinfo);
    /* trace messages are dropped: nothing goes to stderr */
}

enum { CLEAN = 0, NOT_CLEAN = 1 };

/* Whether TurboJPEG's strict grey decode takes this layout (see the top comment). */
static const char *
unsupported(j_decompress_ptr cinfo)
{
    if (cinfo->progressive_mode)
        return "progressive";
    if (cinfo->arith_code)
        return "arithmetic-coded";
    if (cinfo->data_precision != 8)
        return "not 8-bit";
    if (cinfo->comps_in_scan != cinfo->num_components)
        return "more than one scan";
    if (cinfo->num_components == 1) {
        if (cinfo->jpeg_color_space != JCS_GRAYSCALE)
            return "one component, not grey";
        if (cinfo->comp_info[0].h_samp_factor != 1 || cinfo->comp_info[0].v_samp_factor != 1)
            return "grey sampled other than 1x1";
        return NULL;
    }
    if (cinfo->num_components != 3 || cinfo->jpeg_color_space != JCS_YCbCr)
        return "components other than grey or YCbCr";
    for (int ci = 1; ci < 3; ci++)
        if (cinfo->comp_info[ci].h_samp_factor != 1 || cinfo->comp_info[ci].v_samp_factor != 1)
            return "chroma sampled other than 1x1";
    int h = cinfo->comp_info[0].h_samp_factor, v = cinfo->comp_info[0].v_samp_factor;
    if (!((h == 1 && v == 1) || (h == 2 && v == 1) || (h == 1 && v == 2) || (h == 2 && v == 2) ||
          (h == 4 && v == 1)))
        return "a chroma subsampling other than 4:4:4, 4:2:2, 4:4:0, 4:2:0 or 4:1:1";
    return NULL;
}

/* A Huffman table's identity in this thread's caches: its code counts and symbols */
typedef struct {
    UINT8 bits[17], huffval[256];
} TableKey;

static int
is_table(const TableKey *key, const JHUFF_TBL *source)
{
    return memcmp(key->bits, source->bits, sizeof key->bits) == 0 &&
           memcmp(key->huffval, source->huffval, sizeof key->huffval) == 0;
}

static void
set_table_key(TableKey *key, const JHUFF_TBL *source)
{
    memcpy(key->bits, source->bits, sizeof key->bits);
    memcpy(key->huffval, source->huffval, sizeof key->huffval);
}

/* The AC tables' look-ups (HuffSkip, 16 KB each: ~0.1 ms to build two, a third of an 80 KB
 * photo's decoding) of the last tables met, per thread: files from one encoder share
 * their tables. Keyed by the table's bytes (counts and symbols); freed when the thread ends.
 * A table is built the second time it is met: files whose tables are their own (optimised
 * per file) never pay for one, and are decoded by huff_decode_mcu's pair look-ups. */
#define SKIP_SLOTS 4
enum { SLOT_EMPTY, SLOT_SEEN, SLOT_BUILT };
typedef struct {
    int state;
    TableKey key;
    HuffSkip skip;
} SkipSlot;
/* The Huffman look-ups of the last tables met, per thread (built in huff_scan_start for
 * every file otherwise: an eighth of an 80 KB photo's check). Keyed by the table's kind and
 * bytes; a slot the current check uses is not given to another table during that check. */
#define TABLE_SLOTS 8 /* a scan uses at most 2 * NUM_HUFF_TBLS tables */
typedef struct {
    int built, is_ac;
    unsigned check; /* the check that last used it */
    TableKey key;
    HuffTable table;
} TableSlot;
/* One thread's caches (allocated on its first check, freed when it ends) */
typedef struct {
    unsigned next;
    SkipSlot slot[SKIP_SLOTS];
    unsigned next_table, check;
    TableSlot table[TABLE_SLOTS];
} ThreadCache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_key_made;

static void
make_cache_key(void)
{
    cache_key_made = pthread_key_create(&cache_key, free) == 0;
}

/* This thread's cache, or NULL (out of memory) */
static ThreadCache *
thread_cache(void)
{
    pthread_once(&cache_once, make_cache_key);
    if (!cache_key_made)
        return NULL;
    ThreadCache *cache = pthread_getspecific(cache_key);
    if (cache == NULL) {
        cache = calloc(1, sizeof *cache);
        if (cache != NULL && pthread_setspecific(cache_key, cache) != 0) {
            free(cache);
            cache = NULL;
        }
    }
    return cache;
}

/* The look-up of this table, or NULL the first time it is met */
static const HuffSkip *
skip_for(ThreadCache *cache, const JHUFF_TBL *source, const HuffTable *table)
{
    for (int i = 0; i < SKIP_SLOTS; i++) {
        SkipSlot *slot = &cache->slot[i];
        if (slot->state != SLOT_EMPTY && is_table(&slot->key, source)) {
            if (slot->state == SLOT_SEEN) {
                huff_skip_table(table, &slot->skip);
                slot->state = SLOT_BUILT;
            }
            return &slot->skip;
        }
    }
    /* the least recently added slot: a built one gives way to a new table only once that
     * table is seen; empty slots first */
    SkipSlot *slot = &cache->slot[cache->next++ % SKIP_SLOTS];
    set_table_key(&slot->key, source);
    slot->state = SLOT_SEEN;
    return NULL;
}

/* huff_scan_start_with's source of tables: this thread's cache (NULL: the scan builds its
 * own, for a table libjpeg refuses or when every slot is in use by this check) */
static const HuffTable *
cached_table(void *context, const JHUFF_TBL *source, int is_ac)
{
    ThreadCache *cache = context;
    for (int i = 0; i < TABLE_SLOTS; i++) {
        TableSlot *slot = &cache->table[i];
        if (slot->built && slot->is_ac == is_ac && is_table(&slot->key, source)) {
            slot->check = cache->check;
            return &slot->table;
        }
    }
    for (int i = 0; i < TABLE_SLOTS; i++) {
        unsigned k = (cache->next_table + (unsigned)i) % TABLE_SLOTS;
        TableSlot *slot = &cache->table[k];
        if (slot->built && slot->check == cache->check)
            continue; /* this check's scan points at it */
        cache->next_table = k + 1;
        slot->built = huff_build_table(source, is_ac, &slot->table) == 0;
        if (!slot->built)
            return NULL;
        slot->is_ac = is_ac;
        slot->check = cache->check;
        set_table_key(&slot->key, source);
        return &slot->table;
    }
    return NULL;
}

/* Runs without the GIL. Returns CLEAN, or NOT_CLEAN with message set. */
static int
check_with(const unsigned char *data, size_t size, HuffScan *scan, ThreadCache *cache,
           char *message)
{
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    volatile int created = 0; /* read after a longjmp */

    if (size > ULONG_MAX) { /* jpeg_mem_src's length is an unsigned long */
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg decides: %zu bytes", size);
        return NOT_CLEAN;
    }
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
        snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        return NOT_CLEAN;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    const char *kind = unsupported(&cinfo);
    if (kind != NULL) {
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg decides: %s", kind);
        jpeg_destroy_decompress(&cinfo);
        return NOT_CLEAN;
    }
    /* the strict decode's settings: its errors here are the same (a scale, a conversion) */
    cinfo.out_color_space = JCS_GRAYSCALE;
    cinfo.scale_num = 1;
    cinfo.scale_denom = 8;
    cinfo.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&cinfo);
    cache->check++; /* a new check: the slots of earlier ones may be given away */
    if (huff_scan_start_with(&cinfo, scan, cached_table, cache) != 0) {
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg decides: a scan fastload's decoder does "
                 "not take");
        jpeg_destroy_decompress(&cinfo);
        return NOT_CLEAN;
    }
    uint64_t mcus = (uint64_t)cinfo.MCUs_per_row * (uint64_t)cinfo.MCU_rows_in_scan;
    const HuffSkip *ac_skip[D_MAX_BLOCKS_IN_MCU];
    int skips = 1;
    for (int blkn = 0; blkn < scan->blocks; blkn++) {
        int same = 0; /* a table asked for once per file (see skip_for) */
        while (same < blkn && scan->ac[same] != scan->ac[blkn])
            same++;
        if (same < blkn) {
            ac_skip[blkn] = ac_skip[same];
            continue;
        }
        int no = cinfo.cur_comp_info[cinfo.MCU_membership[blkn]]->ac_tbl_no; /* checked */
        ac_skip[blkn] = skip_for(cache, cinfo.ac_huff_tbl_ptrs[no], scan->ac[blkn]);
        skips &= ac_skip[blkn] != NULL;
    }
    /* a warning longjmps */
    if (skips)
        huff_skip_mcus(&cinfo, scan, ac_skip, mcus);
    else
        for (uint64_t i = 0; i < mcus; i++)
            huff_decode_mcu(&cinfo, scan, NULL);
    /* The scan's end: only the padding of its last byte may be left unread (see the top) */
    const uint8_t *q = scan->p;
    while (q < scan->end && *q == 0xFF)
        q++;
    int at_marker = q > scan->p && q < scan->end && *q != 0;
    if (scan->truncated || scan->fill_stuffed || scan->count - scan->zeros >= 8 || !at_marker) {
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg decides: what follows the scan's data");
        jpeg_destroy_decompress(&cinfo);
        return NOT_CLEAN;
    }
    /* libjpeg's marker reader on from the marker after the scan, to the end of the image */
    cinfo.src->next_input_byte = scan->p;
    cinfo.src->bytes_in_buffer = (size_t)(scan->end - scan->p);
    (*cinfo.inputctl->finish_input_pass)(&cinfo);
    cinfo.output_scanline = cinfo.output_height; /* no rows are wanted */
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return CLEAN;
}

static int
run(const unsigned char *data, size_t size, char *message)
{
    HuffScan *scan = malloc(sizeof(HuffScan)); /* ~110 KB of tables: not on the stack */
    ThreadCache *cache = thread_cache();
    if (scan == NULL || cache == NULL) {
        free(scan);
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg decides: out of memory");
        return NOT_CLEAN;
    }
    int status = check_with(data, size, scan, cache, message);
    free(scan);
    return status;
}

static PyObject *
check(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) != 0)
        return NULL;
    char message[JMSG_LENGTH_MAX];
    message[0] = '\0';
    int status;
    size_t size = data.len > 0 ? (size_t)data.len : 0;
    Py_BEGIN_ALLOW_THREADS
    status = run((const unsigned char *)data.buf, size, message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (status == CLEAN)
        Py_RETURN_NONE;
    return PyUnicode_DecodeLatin1(message, (Py_ssize_t)strlen(message), "replace");
}

static PyMethodDef methods[] = {
    {"check", check, METH_O,
     "check(data) -> None | str: None where libjpeg-turbo decodes the JPEG data without a "
     "warning, else a reason (its message, or 'libjpeg decides: ...')."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcheck",
    "A JPEG's markers and entropy-coded data checked without decoding pixels.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__jpegcheck(void)
{
    return PyModule_Create(&module);
}
