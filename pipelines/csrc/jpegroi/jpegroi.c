/* A region of a JPEG at a DCT scale, and nothing more: libjpeg-turbo's region API.
 *
 * decode_region(data, m, top, left, height, width, out[, mode]) decodes ``data`` at scale
 * m/8 and writes the rows top .. top+height-1, columns left .. left+width-1 of the scaled
 * image into their places in ``out``, a uint8 RGB canvas of the whole scaled image (H x W x 3, the
 * size libjpeg gives: ceil(h * m / 8) x ceil(w * m / 8), exactly); what lies outside the region is
 * left as it was (a few columns either side are written too: libjpeg-turbo widens the
 * columns to whole iMCUs). Returns ``(first_column, row_width)``, the columns written.
 *
 * What this saves over a whole-image decode at the same scale (simplejpeg's), for the
 * crop of a RandomResizedCrop or a CenterCrop: rows above the region are entropy-decoded
 * only (jpeg_skip_scanlines: no inverse DCT, upsampling or colour conversion), the MCUs of
 * columns outside it get no inverse DCT either (jpeg_crop_scanline) and their coefficients
 * are discarded as they are decoded, not stored, and nothing below its
 * last row is read at all (jpeg_abort_decompress): the entropy decoding of the rest of the file,
 * which no DCT scale reduces, is skipped. The pixels of the region are the ones a
 * whole-image decode gives (islow inverse DCT, fancy upsampling: simplejpeg's defaults).
 *
 * ``mode`` (for benchmarks/highres_floor.py): 2, the default, entropy-decodes one-scan
 * baseline JPEGs with fastload's own Huffman decoder (_jpegroi_huffman.c: the same
 * coefficients, fewer steps each); 1 keeps libjpeg-turbo's Huffman decoder; 0 also has
 * every MCU's coefficients stored, cropped columns' too (libjpeg-turbo's own crop). On
 * damaged data, or data that ends right after the region, mode 2 decodes again with mode 1:
 * every mode gives libjpeg-turbo's pixels or its error (tests/fuzz checks it).
 *
 * The region and the canvas are checked before anything is decoded; sizes are summed in 64
 * bits (a region's int sides near INT_MAX).
 *
 * Because the tail of the file is never read, damage there goes unseen: callers use this
 * for data already found intact (fastload decodes each sample strictly once; see
 * fastload/loader/damage.py). Any libjpeg warning (corrupt data inside what was read) is an
 * error here, and no message goes to stderr: errors come back as ValueError with
 * libjpeg's text. The GIL is released while libjpeg runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jpegint.h> /* struct jpeg_entropy_decoder: its decode_mcu is wrapped below */
#include <stdint.h>
#include <stdlib.h>

#include "jpegroi.h"

typedef struct {
    const unsigned char *data;
    unsigned long size;
    int m, top, left, height, width, mode;
    unsigned char *out;
    Py_ssize_t out_size;
    /* results */
    int first_column, row_width;
    int own_huffman; /* fastload's Huffman decoder ran (mode 2 on a file it applies to) */
    char message[JMSG_LENGTH_MAX];
} Job;

#define ROWS_AT_ONCE 16

/* The MCUs outside the cropped columns: entropy-decoded and discarded.
 *
 * jpeg_crop_scanline saves the inverse DCT of the MCU columns outside the crop, but
 * libjpeg-turbo's one-pass coefficient controller still has every MCU's coefficients
 * stored into its (zeroed) block buffer. decode_mcu(cinfo, NULL) is the entropy decoder's
 * own discard mode (what jpeg_skip_scanlines uses): the same bits read and the same DC
 * predictions kept, nothing stored. The MCUs of a one-scan sequential JPEG reach the
 * decoder in raster order, one call each, so a counter gives each call's column. */
typedef struct {
    boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW *);
    HuffScan *huffman; /* fastload's Huffman decoder (mode 2), or NULL: libjpeg-turbo's */
    JDIMENSION column, per_row, first, last;
} Columns;

static boolean
decode_mcu_in_columns(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
    Columns *c = (Columns *)cinfo->client_data;
    JDIMENSION col = c->column;
    JBLOCKROW *kept = col >= c->first && col <= c->last ? MCU_data : NULL;
    boolean ok = c->huffman ? huff_decode_mcu(cinfo, c->huffman, kept)
                            : c->decode_mcu(cinfo, kept);
    if (ok) /* a suspended MCU is asked for again (a memory source never suspends) */
        c->column = col + 1 == c->per_row ? 0 : col + 1;
    return ok;
}

/* Runs without the GIL. Returns 0, or -1 with job->message set. */
static int
decode_with(Job *job, HuffScan *scan)
{
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    /* volatile: read after a longjmp */
    volatile int created = 0;
    Columns columns;

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
        snprintf(job->message, sizeof job->message, "%s", err.message);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, job->data, job->size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.num_components != 1 && cinfo.num_components != 3) {
        snprintf(job->message, sizeof job->message,
                 "a JPEG of %d components (only grey and three-component JPEGs here)",
                 cinfo.num_components);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = (unsigned int)job->m;
    cinfo.scale_denom = 8;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    /* The region and the canvas are checked against the header's sizes before anything is
     * decoded or allocated (a progressive JPEG's coefficients are, in
     * jpeg_start_decompress): a header that claims a huge image costs nothing more than the
     * canvas the caller sized for it. The sums in 64 bits: top + height of two ints can
     * pass INT_MAX. */
    jpeg_calc_output_dimensions(&cinfo);
    if (job->top < 0 || job->left < 0 || job->height < 1 || job->width < 1 ||
        (int64_t)job->top + job->height > (int64_t)cinfo.output_height ||
        (int64_t)job->left + job->width > (int64_t)cinfo.output_width) {
        snprintf(job->message, sizeof job->message,
                 "the region (top %d, left %d, %dx%d) is not inside the %ux%u image at scale %d/8",
                 job->top, job->left, job->height, job->width, cinfo.output_height,
                 cinfo.output_width, job->m);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    /* the canvas: jpeg_crop_scanline sets output_width to the cropped width */
    JDIMENSION canvas_width = cinfo.output_width;
    size_t stride = (size_t)canvas_width * 3;
    if (job->out_size < 0 || (size_t)job->out_size != stride * cinfo.output_height) {
        snprintf(job->message, sizeof job->message, "the output buffer holds %zd bytes, "
                 "the %ux%u canvas %zu", job->out_size, cinfo.output_height,
                 canvas_width, stride * cinfo.output_height);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_width != canvas_width || cinfo.output_height * stride !=
        (size_t)job->out_size) { /* the same function computed them: never, but checked */
        snprintf(job->message, sizeof job->message, "the decoder's output size changed");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    /* One column more on each side: fancy upsampling treats the first and last column of a
     * cropped row as image edges (measured: they differ from a whole decode at 8/8 with
     * subsampled chroma), so the region must not touch them unless the image's edge does. */
    JDIMENSION x = job->left > 0 ? (JDIMENSION)job->left - 1 : 0;
    JDIMENSION end = (JDIMENSION)job->left + (JDIMENSION)job->width + 1; /* both checked */
    if (end > cinfo.output_width)
        end = cinfo.output_width;
    JDIMENSION w = end - x;
    /* one interleaved scan (or one grey component unsampled): an MCU is an iMCU, and the
     * MCUs reach decode_mcu in raster order, one call each */
    int interleaved = cinfo.comps_in_scan == cinfo.num_components &&
        (cinfo.num_components > 1 || (cinfo.comp_info[0].h_samp_factor == 1 &&
                                       cinfo.comp_info[0].v_samp_factor == 1));
    int sequential = !cinfo.progressive_mode && !jpeg_has_multiple_scans(&cinfo);
    columns.decode_mcu = cinfo.entropy->decode_mcu;
    columns.huffman = job->mode >= 2 && huff_scan_start(&cinfo, scan) == 0 ? scan : NULL;
    job->own_huffman = columns.huffman != NULL;
    columns.column = 0;
    columns.per_row = cinfo.MCUs_per_row;
    columns.first = 0;
    columns.last = cinfo.MCUs_per_row - 1;
    if (w < cinfo.output_width) {
        jpeg_crop_scanline(&cinfo, &x, &w);
        if (job->mode >= 1 && interleaved && sequential) {
            /* jpeg_crop_scanline's iMCU width: x and w are multiples of it */
            int mcu_width = cinfo.num_components > 1 ? cinfo.max_h_samp_factor : 1;
            JDIMENSION align = (JDIMENSION)(cinfo.min_DCT_scaled_size * mcu_width);
            columns.first = x / align;
            columns.last = (x + w - 1) / align;
        }
    } else
        x = 0, w = cinfo.output_width;
    if (columns.huffman || columns.first > 0 || columns.last + 1 < columns.per_row) {
        cinfo.client_data = &columns;
        cinfo.entropy->decode_mcu = decode_mcu_in_columns;
    }
    unsigned char *origin = job->out + (size_t)job->top * stride + (size_t)x * 3;
    if (job->top > 0)
        jpeg_skip_scanlines(&cinfo, (JDIMENSION)job->top);
    JSAMPROW rows[ROWS_AT_ONCE];
    int done = 0;
    while (done < job->height) {
        int ask = job->height - done < ROWS_AT_ONCE ? job->height - done : ROWS_AT_ONCE;
        for (int r = 0; r < ask; r++)
            rows[r] = origin + (size_t)(done + r) * stride;
        JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)ask);
        if (got == 0) {
            snprintf(job->message, sizeof job->message, "the decoder returned no rows at "
                     "row %d of the region", done);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
        done += (int)got;
    }
    if (columns.huffman && huff_libjpeg_decides(scan)) {
        snprintf(job->message, sizeof job->message, "libjpeg's decoder decides");
        jpeg_destroy_decompress(&cinfo);
        return -1; /* run() asks libjpeg's decoder, which decides */
    }
    jpeg_abort_decompress(&cinfo); /* the rows below the region are never decoded */
    jpeg_destroy_decompress(&cinfo);
    job->first_column = (int)x;
    job->row_width = (int)w;
    return 0;
}

static int
run(Job *job)
{
    HuffScan *scan = malloc(sizeof(HuffScan)); /* ~50 KB of tables: not on the stack */
    if (scan == NULL) {
        snprintf(job->message, sizeof job->message, "out of memory");
        return -1;
    }
    job->own_huffman = 0;
    int status = decode_with(job, scan);
    if (status != 0 && job->own_huffman) {
        /* Corrupt data, or data that ends close by: fastload's decoder reports every bad
         * code, libjpeg-turbo's does not (its fast path, used where 512 bytes a block are
         * left and no restart interval, decodes a bad code as a zero without a warning),
         * libjpeg's read-ahead can reach the end of a file this decoder never reaches, and
         * its fast path mistakes fill bytes for a marker (huff_libjpeg_decides). What libjpeg
         * decodes is decoded here too, with its decoder: the same pixels or the same error,
         * whatever the mode. */
        int mode = job->mode;
        job->mode = 1;
        job->message[0] = '\0';
        status = decode_with(job, scan);
        job->mode = mode;
    }
    free(scan);
    return status;
}

static PyObject *
decode_region(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer data, out;
    Job job;
    job.mode = 2;
    if (!PyArg_ParseTuple(args, "y*iiiiiw*|i", &data, &job.m, &job.top, &job.left, &job.height,
                          &job.width, &out, &job.mode))
        return NULL;
    if (job.m < 1 || job.m > 8) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return PyErr_Format(PyExc_ValueError, "the scale should be 1..8 (eighths), but got %d",
                            job.m);
    }
    job.data = (const unsigned char *)data.buf;
    job.size = (unsigned long)data.len;
    job.out = (unsigned char *)out.buf;
    job.out_size = out.len;
    job.message[0] = '\0';
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = run(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (status != 0)
        return PyErr_Format(PyExc_ValueError, "%s", job.message);
    return Py_BuildValue("(ii)", job.first_column, job.row_width);
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, m, top, left, height, width, out, mode=2) -> (first_column, "
     "row_width)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegroi",
    "A region of a JPEG at an M/8 DCT scale (libjpeg-turbo's region API).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__jpegroi(void)
{
    return PyModule_Create(&module);
}
