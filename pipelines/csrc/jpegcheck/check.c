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
 * check_many(files, *, wide=True) -> list: the same for each buffer, several files decoded
 * at once: 32 (wide.c, AVX-512) or 16 (wide_avx2.c, AVX2; also on AMD's Zen 4, where it is
 * the faster) where the CPU has either (WIDE_PASS, WIDE_LANES; FASTLOAD_CPU_CAPABILITY caps
 * it) and 10 or more are given, else two; wide=False (two at a time) or a pass's name (one
 * of WIDE_PASSES) chooses.
 *
 * How: libjpeg-turbo reads the markers up to the scan (its own marker reader: its warnings
 * and errors are the strict decode's) and sets the scan up, as for a 1/8-scale grey decode;
 * then fastload's entropy decoding goes over every MCU, discarding the coefficients: no
 * inverse DCT, no upsampling, no colour conversion, no output rows. That is the lanes
 * (lanes.c: two files at once; wide.c: 32, wide_avx2.c: 16) where this thread's cache
 * holds the file's look-ups, else the region decoder's Huffman decoder
 * (pipelines/csrc/jpegroi/huffman.c). Either reports what libjpeg would warn of (a bad
 * code, data that ends or hits a marker early, restart markers missing or out of order,
 * bytes before a restart marker) and some damage libjpeg's fast path lets pass: every
 * warning is "not None", never a false "None". After the last MCU libjpeg's marker reader
 * reads on to the end of the image from where the scan ended (bytes before the next
 * marker, a missing end of image: its warnings again).
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
#include <jerror.h>  /* libjpeg's warnings, for damage the lanes found */

#include "../jpegroi/jpegroi.h"
#include "lanes.h"

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

#define LANES WIDE_LANES /* files in flight at most (lanes.c, wide.c; AVX2_LANES <= it) */
#define WIDE_MIN 10 /* files in flight from which a wide pass takes them (else two at a time) */
/* Whether the scan's data is unstuffed with AVX2: where a wide pass is taken (every one
 * needs AVX2), set with it at import */
static int unstuff_avx2;

/* The AC tables' look-ups (LaneAcSkip, 16 KB each, about 0.05 ms to build) of the last
 * tables met, per thread: files from one encoder share their tables. Keyed by the table's
 * bytes (counts and symbols); freed when the thread ends. A look-up is built the first time
 * its table is met in a file of EAGER_BYTES or more of scan data (tables optimised for each
 * file: the lanes' pass pays back its build there), else the second time: a small file
 * whose tables are its own is decoded by huff_decode_mcu's pair look-ups, no look-up built. */
#define SKIP_SLOTS (2 * LANES + 8) /* two AC tables per file in flight, and some kept */
#define EAGER_BYTES ((size_t)32 << 10)
typedef struct {
    int seen, built;
    unsigned users; /* files in flight that use it: never given to another table */
    TableKey key;
    LaneAcSkip skip;
} SkipSlot;
/* The Huffman look-ups of the last tables met, per thread (built in huff_scan_start for
 * every file otherwise: an eighth of an 80 KB photo's check), and a DC table's look-up for
 * the lanes (lanes.h). Keyed by the table's kind and bytes. */
#define TABLE_SLOTS (4 * LANES + 16) /* four tables per file in flight (wide.c takes two pairs) */
typedef struct {
    int built, is_ac, dc_built;
    unsigned users; /* files in flight that use it: never given to another table */
    TableKey key;
    HuffTable table;
    LaneDcSkip dc_skip;
} TableSlot;
typedef struct FileCheck FileCheck;
#define HELD (3 * NUM_HUFF_TBLS) /* slots a file holds at most: its AC look-ups, its tables */

/* One thread's caches (allocated on its first check, freed when it ends). A slot used by a
 * file in flight (counted in its users: see hold and release) is never given to another
 * table. The lanes' state is kept too (each ~110 KB of scan and a file's unstuffed data:
 * allocated once, not per call). */
typedef struct {
    unsigned next;
    SkipSlot slot[SKIP_SLOTS];
    unsigned next_table;
    FileCheck *taking; /* the file whose scan is being set up: the slots it is given */
    TableSlot table[TABLE_SLOTS];
    FileCheck *lane[LANES];
} ThreadCache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_key_made;

static void free_lane(FileCheck *fc);

static void
free_cache(void *p)
{
    ThreadCache *cache = p;
    for (int i = 0; i < LANES; i++)
        free_lane(cache->lane[i]);
    free(cache);
}

static void
make_cache_key(void)
{
    cache_key_made = pthread_key_create(&cache_key, free_cache) == 0;
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

static int hold(ThreadCache *cache, unsigned *users);

/* The look-up of this table, or NULL the first time it is met (unless eager) */
static const LaneAcSkip *
skip_for(ThreadCache *cache, const JHUFF_TBL *source, const HuffTable *table, int eager)
{
    for (int i = 0; i < SKIP_SLOTS; i++) {
        SkipSlot *slot = &cache->slot[i];
        if (slot->seen && is_table(&slot->key, source)) {
            if (!slot->built)
                lane_ac_table(table, &slot->skip);
            slot->built = 1;
            return hold(cache, &slot->users) == 0 ? &slot->skip : NULL;
        }
    }
    /* the least recently added slot not in use: a built one gives way to a new table only
     * once that table is seen; empty slots first */
    for (int i = 0; i < SKIP_SLOTS; i++) {
        SkipSlot *slot = &cache->slot[cache->next++ % SKIP_SLOTS];
        if (slot->users > 0)
            continue; /* a file in flight reads it */
        set_table_key(&slot->key, source);
        slot->seen = 1;
        slot->built = eager;
        if (!eager)
            return NULL;
        lane_ac_table(table, &slot->skip);
        return hold(cache, &slot->users) == 0 ? &slot->skip : NULL;
    }
    return NULL;
}

/* huff_scan_start_with's source of tables: this thread's cache (NULL: the scan builds its
 * own, for a table libjpeg refuses or when every slot is in use) */
static const HuffTable *
cached_table(void *context, const JHUFF_TBL *source, int is_ac)
{
    ThreadCache *cache = context;
    for (int i = 0; i < TABLE_SLOTS; i++) {
        TableSlot *slot = &cache->table[i];
        if (slot->built && slot->is_ac == is_ac && is_table(&slot->key, source))
            return hold(cache, &slot->users) == 0 ? &slot->table : NULL;
    }
    for (int i = 0; i < TABLE_SLOTS; i++) {
        unsigned k = (cache->next_table + (unsigned)i) % TABLE_SLOTS;
        TableSlot *slot = &cache->table[k];
        if (slot->users > 0)
            continue; /* a file in flight's scan points at it */
        cache->next_table = k + 1;
        slot->built = huff_build_table(source, is_ac, &slot->table) == 0;
        slot->dc_built = 0;
        if (!slot->built)
            return NULL;
        slot->is_ac = is_ac;
        set_table_key(&slot->key, source);
        return hold(cache, &slot->users) == 0 ? &slot->table : NULL;
    }
    return NULL;
}

/* The lanes' look-up of a DC table the cache holds, or NULL (a table the scan built) */
static const LaneDcSkip *
dc_skip_for(ThreadCache *cache, const HuffTable *table)
{
    for (int i = 0; i < TABLE_SLOTS; i++) {
        TableSlot *slot = &cache->table[i];
        if (slot->built && &slot->table == table) {
            if (!slot->dc_built) {
                lane_dc_table(table, &slot->dc_skip);
                slot->dc_built = 1;
            }
            return &slot->dc_skip;
        }
    }
    return NULL;
}

/* One file's check, across the calls below: prepared (markers up to the scan), its
 * entropy-coded data in a lane, finished (markers after the scan). */
struct FileCheck {
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    int created;
    HuffScan *scan;
    /* the cache's slots its scan and lane use, held until its verdict (release) */
    unsigned *held[HELD]; /* their users counts */
    int holds;
    EntropyLane lane;
    const uint8_t *marker; /* the marker after the scan's data */
    uint8_t *unstuffed;    /* the lane's data (room bytes) */
    size_t room;
    uint64_t *ends; /* the lane's restart intervals (restart_room of each) */
    uint8_t *rst;
    size_t restart_room;
    char message[JMSG_LENGTH_MAX];
};

/* The slot whose users count this is (a SkipSlot's or a TableSlot's) counted as used by
 * the file being set up, once; -1 where the file holds as many as it may (the caller gives
 * it no slot then) */
static int
hold(ThreadCache *cache, unsigned *users)
{
    FileCheck *fc = cache->taking;
    if (fc == NULL)
        return -1; /* no file being set up: give no slot */
    for (int i = 0; i < fc->holds; i++)
        if (fc->held[i] == users)
            return 0;
    if (fc->holds == HELD)
        return -1;
    fc->held[fc->holds++] = users;
    ++*users;
    return 0;
}

/* The file's verdict is given: the slots it held may go to other tables */
static void
release(FileCheck *fc)
{
    for (int i = 0; i < fc->holds; i++)
        --*fc->held[i];
    fc->holds = 0;
}

/* The unstuffed data (and restart intervals) kept between calls: up to this many bytes per
 * lane (a larger file's are freed at the call's end): 16 MB for a thread's 32 lanes */
#define KEPT_ROOM ((size_t)512 << 10)

static void
free_lane(FileCheck *fc)
{
    if (fc != NULL) {
        free(fc->unstuffed);
        free(fc->ends);
        free(fc->rst);
        free(fc->scan);
        free(fc);
    }
}

/* Frees the lane's buffers past KEPT_ROOM (a large file's), kept otherwise */
static void
trim(FileCheck *fc)
{
    if (fc->room > KEPT_ROOM) {
        free(fc->unstuffed);
        fc->unstuffed = NULL;
        fc->room = 0;
    }
    if (fc->restart_room * (sizeof *fc->ends + sizeof *fc->rst) > KEPT_ROOM) {
        free(fc->ends);
        free(fc->rst);
        fc->ends = NULL;
        fc->rst = NULL;
        fc->restart_room = 0;
    }
}

/* This thread's lane i, allocated on first use; NULL when out of memory */
static FileCheck *
lane_check(ThreadCache *cache, int i)
{
    if (cache->lane[i] == NULL) {
        FileCheck *fc = calloc(1, sizeof(FileCheck));
        if (fc != NULL && (fc->scan = malloc(sizeof(HuffScan))) == NULL) {
            free(fc);
            fc = NULL;
        }
        cache->lane[i] = fc;
    }
    return cache->lane[i];
}

enum { PENDING = 2 }; /* beside CLEAN and NOT_CLEAN: its lane has data to decode */

static int
not_clean(FileCheck *fc, const char *reason)
{
    if (reason != fc->message)
        snprintf(fc->message, JMSG_LENGTH_MAX, "%s", reason);
    if (fc->created)
        jpeg_destroy_decompress(&fc->cinfo);
    fc->created = 0;
    return NOT_CLEAN;
}

/* libjpeg's marker reader on from the marker after the scan (p), to the end of the image.
 * Runs where fc's error handler can jump to. */
static int
finish_from(FileCheck *fc, const uint8_t *p)
{
    struct jpeg_decompress_struct *cinfo = &fc->cinfo;
    cinfo->src->next_input_byte = p;
    cinfo->src->bytes_in_buffer = (size_t)(fc->scan->end - p);
    (*cinfo->inputctl->finish_input_pass)(cinfo);
    cinfo->output_scanline = cinfo->output_height; /* no rows are wanted */
    jpeg_finish_decompress(cinfo);
    jpeg_destroy_decompress(cinfo);
    fc->created = 0;
    return CLEAN;
}

/* Room for n restart intervals' ends in fc; 0, or -1 when out of memory */
static int
restart_room(FileCheck *fc, size_t n)
{
    if (n <= fc->restart_room)
        return 0;
    uint64_t *ends = realloc(fc->ends, n * sizeof *ends);
    if (ends != NULL)
        fc->ends = ends;
    uint8_t *rst = ends != NULL ? realloc(fc->rst, n) : NULL;
    if (rst == NULL)
        return -1;
    fc->rst = rst;
    fc->restart_room = n;
    return 0;
}

/* The lane's data: the scan's bytes unstuffed into fc's buffer, and its restart intervals.
 * 0, or -1 (out of memory, or a scan's end the lanes leave to libjpeg: its message set). */
static int
unstuff(FileCheck *fc, uint64_t mcus, unsigned interval)
{
    size_t span = (size_t)(fc->scan->end - fc->scan->p), need = span + LANE_PADDING;
    /* restart markers between intervals, room for no more than the data could hold */
    uint64_t needed = interval ? (mcus - 1) / interval : 0;
    uint64_t wanted = needed < span / 2 + 1 ? needed : span / 2 + 1;
    if (need > fc->room) {
        uint8_t *bigger = realloc(fc->unstuffed, need);
        if (bigger == NULL) {
            snprintf(fc->message, JMSG_LENGTH_MAX, "libjpeg decides: out of memory");
            return -1;
        }
        fc->unstuffed = bigger;
        fc->room = need;
    }
    if (restart_room(fc, (size_t)wanted) != 0) {
        snprintf(fc->message, JMSG_LENGTH_MAX, "libjpeg decides: out of memory");
        return -1;
    }
    EntropyLane *lane = &fc->lane;
    ptrdiff_t bytes = lane_unstuff(fc->scan->p, fc->scan->end, fc->unstuffed, &fc->marker,
                                   (size_t)wanted, fc->ends, fc->rst, &lane->restarts,
                                   unstuff_avx2);
    if (bytes < 0 || lane->restarts < needed) {
        snprintf(fc->message, JMSG_LENGTH_MAX, "libjpeg decides: what follows the scan's data");
        return -1;
    }
    lane->data = fc->unstuffed;
    lane->total_bits = (uint64_t)bytes * 8;
    lane->interval = interval;
    lane->ends = fc->ends;
    lane->rst = fc->rst;
    return 0;
}

/* Reads the markers up to the scan. Returns CLEAN or NOT_CLEAN (fc->message) where the file
 * is decided here (a kind the check does not decode, damage in its markers, or a scan the
 * lanes do not take, decoded here in one go), PENDING where its lane is ready. */
static int
prepare(FileCheck *fc, const unsigned char *data, size_t size, ThreadCache *cache)
{
    struct jpeg_decompress_struct *cinfo = &fc->cinfo;
    HuffScan *scan = fc->scan;
    fc->created = 0;
    fc->message[0] = '\0';
    if (size > ULONG_MAX) { /* jpeg_mem_src's length is an unsigned long */
        snprintf(fc->message, JMSG_LENGTH_MAX, "libjpeg decides: %zu bytes", size);
        return NOT_CLEAN;
    }
    cinfo->err = jpeg_std_error(&fc->err.pub);
    fc->err.pub.error_exit = on_error;
    fc->err.pub.emit_message = on_message;
    fc->err.message[0] = '\0';
    if (setjmp(fc->err.jump))
        return not_clean(fc, fc->err.message);
    jpeg_create_decompress(cinfo);
    fc->created = 1;
    jpeg_mem_src(cinfo, data, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);
    const char *kind = unsupported(cinfo);
    if (kind != NULL) {
        char reason[JMSG_LENGTH_MAX];
        snprintf(reason, sizeof reason, "libjpeg decides: %s", kind);
        return not_clean(fc, reason);
    }
    /* the strict decode's settings: its errors here are the same (a scale, a conversion) */
    cinfo->out_color_space = JCS_GRAYSCALE;
    cinfo->scale_num = 1;
    cinfo->scale_denom = 8;
    cinfo->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(cinfo);
    if (huff_scan_start_with(cinfo, scan, cached_table, cache) != 0)
        return not_clean(fc, "libjpeg decides: a scan fastload's decoder does not take");
    uint64_t mcus = (uint64_t)cinfo->MCUs_per_row * (uint64_t)cinfo->MCU_rows_in_scan;
    const LaneAcSkip *ac_skip[D_MAX_BLOCKS_IN_MCU];
    int skips = 1;
    for (int blkn = 0; blkn < scan->blocks; blkn++) {
        int same = 0; /* a table asked for once per file (see skip_for) */
        while (same < blkn && scan->ac[same] != scan->ac[blkn])
            same++;
        if (same < blkn) {
            ac_skip[blkn] = ac_skip[same];
            continue;
        }
        int no = cinfo->cur_comp_info[cinfo->MCU_membership[blkn]]->ac_tbl_no; /* checked */
        ac_skip[blkn] = skip_for(cache, cinfo->ac_huff_tbl_ptrs[no], scan->ac[blkn],
                                 (size_t)(scan->end - scan->p) >= EAGER_BYTES);
        skips &= ac_skip[blkn] != NULL;
    }
    if (skips) {
        EntropyLane *lane = &fc->lane;
        for (int blkn = 0; blkn < scan->blocks && skips; blkn++) {
            const LaneDcSkip *dc = dc_skip_for(cache, scan->dc[blkn]);
            skips = dc != NULL;
            if (!skips)
                break;
            lane->dc[blkn] = dc->e;
            lane->dc_table[blkn] = scan->dc[blkn];
            lane->ac[blkn] = ac_skip[blkn]->e;
            lane->ac_table[blkn] = scan->ac[blkn];
        }
        if (skips) {
            if (unstuff(fc, mcus, cinfo->restart_interval) != 0)
                return not_clean(fc, fc->message);
            lane->mcus = mcus;
            lane->blocks = scan->blocks;
            lane_start(lane);
            return PENDING;
        }
    }
    /* in one go, here: a warning longjmps */
    for (uint64_t i = 0; i < mcus; i++)
        huff_decode_mcu(cinfo, scan, NULL);
    /* The scan's end: only the padding of its last byte may be left unread (see the top) */
    const uint8_t *q = scan->p;
    while (q < scan->end && *q == 0xFF)
        q++;
    int at_marker = q > scan->p && q < scan->end && *q != 0;
    if (scan->truncated || scan->fill_stuffed || scan->count - scan->zeros >= 8 || !at_marker)
        return not_clean(fc, "libjpeg decides: what follows the scan's data");
    return finish_from(fc, scan->p);
}

/* After the lane's pass: the verdict, with libjpeg's words for damage the lane found. */
static int
finish(FileCheck *fc)
{
    if (setjmp(fc->err.jump))
        return not_clean(fc, fc->err.message);
    if (fc->lane.bad == LANE_BAD_CODE)
        WARNMS(&fc->cinfo, JWRN_HUFF_BAD_CODE); /* jumps, with its message */
    if (fc->lane.bad == LANE_PAST_END)
        WARNMS(&fc->cinfo, JWRN_HIT_MARKER);
    if (fc->lane.bad == LANE_EXTRANEOUS)
        return not_clean(fc, "libjpeg decides: data before a restart marker");
    if (fc->lane.bad == LANE_RESYNC)
        return not_clean(fc, "libjpeg decides: a restart marker out of place");
    if (!lane_intact(&fc->lane))
        return not_clean(fc, "libjpeg decides: what follows the scan's data");
    return finish_from(fc, fc->marker);
}

/* The wide passes, widest first: a name (as torch's CPU capabilities), whether this CPU
 * runs it, whether a narrower pass runs faster on this CPU (NULL: never), the pass, and the
 * files in flight it takes */
typedef struct {
    const char *name;
    int (*supported)(void);
    int (*slower)(void);
    void (*run)(EntropyLane *const *lanes, int n, const uint8_t *base);
    int lanes;
} WidePass;

static const WidePass wide_passes[] = {
    {"avx512", lanes_wide_supported, lanes_wide_slower, lanes_run_wide, WIDE_LANES},
    {"avx2", lanes_avx2_supported, NULL, lanes_run_avx2, AVX2_LANES},
    {"avx2-loads", lanes_avx2_supported, NULL, lanes_run_avx2_loads, AVX2_LANES}, /* to compare */
};
#define WIDE_PASSES ((int)(sizeof wide_passes / sizeof wide_passes[0]))

/* Which passes this CPU runs (asked once, at import: the AVX2 pass reads a file of /sys), and
 * the pass check_many takes by default (wide=True): the widest of them that no narrower one
 * outruns here, or the widest at most the one FASTLOAD_CPU_CAPABILITY names; NULL: none */
static int pass_runs[WIDE_PASSES];
static const WidePass *default_pass;

/* Checks files[0..n) into status[] and messages[] (JMSG_LENGTH_MAX each), up to width in
 * flight at a time (2: lanes_run2; more: the wide pass); runs without the GIL. Returns 0,
 * or -1 when out of memory. */
static int
run(const Py_buffer *files, Py_ssize_t n, int *status, char *messages, int width,
    const WidePass *pass)
{
    ThreadCache *cache = thread_cache();
    const uint8_t *base = (const uint8_t *)cache; /* the look-ups lie in the cache */
    FileCheck *fc[LANES] = {NULL};
    EntropyLane *lanes[LANES];
    Py_ssize_t lane_file[LANES], next = 0;
    int ok = cache != NULL;
    for (int i = 0; i < width && ok; i++)
        ok = (fc[i] = lane_check(cache, i)) != NULL;
    for (int i = 0; i < LANES; i++)
        lane_file[i] = -1;
    while (ok) {
        int running = 0;
        for (int i = 0; i < width; i++) {
            while (lane_file[i] < 0 && next < n) {
                Py_ssize_t f = next++;
                size_t size = files[f].len > 0 ? (size_t)files[f].len : 0;
                cache->taking = fc[i]; /* the slots it is given stay its own till its verdict */
                status[f] = prepare(fc[i], files[f].buf, size, cache);
                cache->taking = NULL;
                if (status[f] == PENDING && width > 2 && !lane_wide_ok(&fc[i]->lane, base)) {
                    lanes_run1(&fc[i]->lane); /* beyond the wide pass's counts or tables */
                    status[f] = finish(fc[i]);
                }
                if (status[f] == PENDING) {
                    lane_file[i] = f;
                } else {
                    release(fc[i]);
                    memcpy(messages + f * JMSG_LENGTH_MAX, fc[i]->message, JMSG_LENGTH_MAX);
                }
            }
            if (lane_file[i] >= 0) { /* the files in flight first, in order */
                FileCheck *c = fc[running];
                Py_ssize_t g = lane_file[running];
                fc[running] = fc[i];
                lane_file[running] = lane_file[i];
                fc[i] = c;
                lane_file[i] = g;
                lanes[running] = &fc[running]->lane;
                running++;
            }
        }
        if (running == 0)
            break;
        if (running >= WIDE_MIN)
            pass->run(lanes, running, base);
        else if (running >= 2) /* the tail of a call: two at a time */
            lanes_run2(lanes[0], lanes[1]);
        else
            lanes_run1(lanes[0]);
        for (int i = 0; i < running; i++) {
            Py_ssize_t f = lane_file[i];
            if (!(fc[i]->lane.bad || fc[i]->lane.mcus == 0))
                continue;
            status[f] = finish(fc[i]);
            release(fc[i]);
            memcpy(messages + f * JMSG_LENGTH_MAX, fc[i]->message, JMSG_LENGTH_MAX);
            lane_file[i] = -1;
        }
    }
    for (int i = 0; i < width; i++)
        if (fc[i] != NULL)
            trim(fc[i]);
    return ok ? 0 : -1;
}

static PyObject *
verdict(int status, const char *message)
{
    if (status == CLEAN)
        Py_RETURN_NONE;
    return PyUnicode_DecodeLatin1(message, (Py_ssize_t)strlen(message), "replace");
}

/* Files in flight for a call of n files: as many as the wide pass takes (NULL: none),
 * else two */
static int
width_for(Py_ssize_t n, const WidePass *pass)
{
    if (pass == NULL || n < WIDE_MIN)
        return 2;
    return n < pass->lanes ? (int)n : pass->lanes;
}

static PyObject *
check_buffers(Py_buffer *files, Py_ssize_t n, const WidePass *pass)
{
    int *status = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    char *messages = PyMem_Calloc((size_t)(n ? n : 1), JMSG_LENGTH_MAX);
    if (status == NULL || messages == NULL) {
        PyMem_Free(status);
        PyMem_Free(messages);
        return PyErr_NoMemory();
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = run(files, n, status, messages, width_for(n, pass), pass);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; failed && i < n; i++) { /* out of memory: not decided here */
        status[i] = NOT_CLEAN;
        snprintf(messages + i * JMSG_LENGTH_MAX, JMSG_LENGTH_MAX,
                 "libjpeg decides: out of memory");
    }
    PyObject *verdicts = PyList_New(n);
    for (Py_ssize_t i = 0; verdicts != NULL && i < n; i++) {
        PyObject *one = verdict(status[i], messages + i * JMSG_LENGTH_MAX);
        if (one == NULL)
            Py_CLEAR(verdicts);
        else
            PyList_SET_ITEM(verdicts, i, one);
    }
    PyMem_Free(status);
    PyMem_Free(messages);
    return verdicts;
}

static PyObject *
check(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) != 0)
        return NULL;
    PyObject *verdicts = check_buffers(&data, 1, NULL);
    PyBuffer_Release(&data);
    if (verdicts == NULL)
        return NULL;
    PyObject *one = PyList_GET_ITEM(verdicts, 0);
    Py_INCREF(one);
    Py_DECREF(verdicts);
    return one;
}

/* check_many's wide: a bool (True: the default pass), or the name of a pass this CPU runs.
 * Returns 0 with *pass set (NULL: two at a time), or -1 with an error set. */
static int
pass_named(PyObject *wide, const WidePass **pass)
{
    if (PyBool_Check(wide)) {
        *pass = wide == Py_True ? default_pass : NULL;
        return 0;
    }
    if (!PyUnicode_Check(wide)) {
        PyErr_Format(PyExc_TypeError, "check_many(): wide must be a bool or a pass name, "
                     "not %.100s", Py_TYPE(wide)->tp_name);
        return -1;
    }
    for (int i = 0; i < WIDE_PASSES; i++)
        if (PyUnicode_CompareWithASCIIString(wide, wide_passes[i].name) == 0 &&
            pass_runs[i]) {
            *pass = &wide_passes[i];
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "check_many(): wide=%R is not a pass this CPU runs "
                 "(WIDE_PASSES lists them)", wide);
    return -1;
}

static PyObject *
check_many(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"files", "wide", NULL};
    PyObject *arg, *wide = Py_True;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:check_many", keywords, &arg, &wide))
        return NULL;
    const WidePass *pass;
    if (pass_named(wide, &pass) != 0)
        return NULL;
    PyObject *items = PySequence_Fast(arg, "check_many() takes a sequence of buffers");
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items), got = 0;
    Py_buffer *files = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    PyObject *verdicts = NULL;
    if (files == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++)
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(items, got), &files[got],
                               PyBUF_SIMPLE) != 0)
            goto done;
    verdicts = check_buffers(files, n, pass);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&files[i]);
    PyMem_Free(files);
    Py_DECREF(items);
    return verdicts;
}

/* release_thread_cache(): frees this thread's caches now (they are freed when it ends) */
static PyObject *
release_thread_cache(PyObject *self, PyObject *unused)
{
    pthread_once(&cache_once, make_cache_key);
    ThreadCache *cache = cache_key_made ? pthread_getspecific(cache_key) : NULL;
    if (cache != NULL && pthread_setspecific(cache_key, NULL) == 0)
        free_cache(cache);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check", check, METH_O,
     "check(data) -> None | str: None where libjpeg-turbo decodes the JPEG data without a "
     "warning, else a reason (its message, or 'libjpeg decides: ...')."},
    {"check_many", (PyCFunction)(void (*)(void))check_many, METH_VARARGS | METH_KEYWORDS,
     "check_many(files, *, wide=True) -> list[None | str]: check() of each buffer in a "
     "sequence, several files decoded at once in this thread (faster than one at a time): "
     "up to WIDE_LANES by the pass WIDE_PASS (AVX-512 or AVX2) where the CPU has one; "
     "wide=False: two at a time, as without; wide='avx2' (any of WIDE_PASSES): that pass."},
    {"release_thread_cache", release_thread_cache, METH_NOARGS,
     "release_thread_cache() -> None: frees the calling thread's look-ups and buffers now "
     "(a thread's are freed when it ends)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcheck",
    "A JPEG's markers and entropy-coded data checked without decoding pixels.", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* pass_runs, and default_pass: the widest pass this CPU runs and runs fastest (a pass whose
 * slower() says a narrower one outruns it is passed over), or, where FASTLOAD_CPU_CAPABILITY
 * names one (as torch's ATEN_CPU_CAPABILITY: a pass's name, or "default" for none; to compare
 * the passes on one machine), the widest this CPU runs at most that one. Returns -1 with a
 * warning raised as an error, else 0. */
static int
choose_default_pass(void)
{
    const char *cap = getenv("FASTLOAD_CPU_CAPABILITY");
    int from = 0;  /* the widest pass allowed */
    int named = 0; /* FASTLOAD_CPU_CAPABILITY names a pass, or none */
    for (int i = 0; i < WIDE_PASSES; i++)
        pass_runs[i] = wide_passes[i].supported();
    default_pass = NULL;
    if (cap != NULL && *cap != '\0') {
        from = -1;
        for (int i = 0; i < WIDE_PASSES && from < 0; i++)
            if (strcmp(cap, wide_passes[i].name) == 0)
                from = i;
        if (strcmp(cap, "default") == 0)
            from = WIDE_PASSES;
        if (from < 0 &&
            PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "FASTLOAD_CPU_CAPABILITY=%s is not one of avx512, avx2, "
                             "avx2-loads, default: ignored (the strict JPEG check takes the "
                             "fastest pass this CPU runs)", cap) != 0)
            return -1;
        named = from >= 0;
        from = from < 0 ? 0 : from;
    }
    for (int i = from; i < WIDE_PASSES && default_pass == NULL; i++)
        if (pass_runs[i] && (named || wide_passes[i].slower == NULL || !wide_passes[i].slower()))
            default_pass = &wide_passes[i];
    unstuff_avx2 = default_pass != NULL;
    return 0;
}

/* The names of the passes this CPU runs, widest first */
static PyObject *
supported_passes(void)
{
    PyObject *names = PyList_New(0);
    for (int i = 0; names != NULL && i < WIDE_PASSES; i++) {
        if (!pass_runs[i])
            continue;
        PyObject *name = PyUnicode_FromString(wide_passes[i].name);
        if (name == NULL || PyList_Append(names, name) != 0)
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    PyObject *tuple = names != NULL ? PyList_AsTuple(names) : NULL;
    Py_XDECREF(names);
    return tuple;
}

PyMODINIT_FUNC
PyInit__jpegcheck(void)
{
    if (choose_default_pass() != 0)
        return NULL;
    PyObject *m = PyModule_Create(&module), *passes = supported_passes();
    int lanes = default_pass ? default_pass->lanes : 0;
    const char *name = default_pass ? default_pass->name : "";
    if (m != NULL &&
        (passes == NULL || PyModule_AddObjectRef(m, "WIDE_PASSES", passes) != 0 ||
         PyModule_AddIntConstant(m, "WIDE_LANES", lanes) != 0 ||
         PyModule_AddStringConstant(m, "WIDE_PASS", name) != 0))
        Py_CLEAR(m);
    Py_XDECREF(passes);
    return m;
}
