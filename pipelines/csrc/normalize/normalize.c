/* Interleaved uint8 RGB (H x W x 3, rows may be strided) -> planar float32 (3 x H x W),
 * normalised as (v - sub[c]) * mul[c], optionally mirrored left-right, in one pass.
 *
 * torch does the same with copy_() from a permuted view, then sub_() and mul_(): the copy
 * is a scalar strided loop and the two arithmetic passes read and write the float image
 * again. Here each row is converted in one loop the compiler vectorises (a subtraction,
 * then a multiplication, each rounded to float32 as torch rounds them: identical values).
 * A mirrored row is converted into a small buffer and then copied out in reverse order
 * (a reversed store does not vectorise). On x86-64 with glibc the row loops are also compiled
 * for AVX2 and picked at load time; the baseline SSE2 build is about as fast as the
 * 256-entry lookup table this replaced (benchmarks/NOTES.md P16).
 * The GIL is released while the loop runs.
 *
 * lookup_planes: planar (C x H x W) or interleaved (H x W x C, as a PIL image's pixels) uint8
 * -> C x H x W through one 256-entry table per
 * channel (any element size of 2, 4 or 8 bytes: the table's values are copied, not
 * computed, so the result is exactly the table's). The torch suffix's deterministic tail
 * (ToDtype / ConvertImageDtype / Normalize ...) becomes one such table (pipelines/suffix/tail.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int
get_three(PyObject *seq, const char *name, float out[3])
{
    PyObject *fast = PySequence_Fast(seq, name);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        PyErr_Format(PyExc_ValueError, "%s should hold 3 numbers", name);
        Py_DECREF(fast);
        return -1;
    }
    for (int c = 0; c < 3; c++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, c));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[c] = (float)v;
    }
    Py_DECREF(fast);
    return 0;
}

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) /* ifunc: glibc only */
#define ROW_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define ROW_LOOP
#endif

#define CHUNK 256 /* pixels of a mirrored row converted at a time */

typedef struct {
    float sub[3], mul[3];
} Norm;

ROW_LOOP static void
convert_row(const unsigned char *restrict px, float *restrict r, float *restrict g,
            float *restrict b, Py_ssize_t n, const Norm *norm)
{
    const float s0 = norm->sub[0], s1 = norm->sub[1], s2 = norm->sub[2];
    const float m0 = norm->mul[0], m1 = norm->mul[1], m2 = norm->mul[2];
    for (Py_ssize_t x = 0; x < n; x++) {
        r[x] = ((float)px[3 * x] - s0) * m0;
        g[x] = ((float)px[3 * x + 1] - s1) * m1;
        b[x] = ((float)px[3 * x + 2] - s2) * m2;
    }
}

ROW_LOOP static void
reverse_copy(const float *restrict from, float *restrict to, Py_ssize_t n)
{
    for (Py_ssize_t x = 0; x < n; x++)
        to[x] = from[n - 1 - x];
}

/* out[x] = pixel (width - 1 - x), chunk by chunk from the row's right end */
static void
convert_row_mirrored(const unsigned char *px, float *r, float *g, float *b, Py_ssize_t width,
                     const Norm *norm)
{
    float tmp[3][CHUNK];
    for (Py_ssize_t done = 0; done < width; done += CHUNK) {
        const Py_ssize_t n = width - done < CHUNK ? width - done : CHUNK;
        convert_row(px + 3 * (width - done - n), tmp[0], tmp[1], tmp[2], n, norm);
        reverse_copy(tmp[0], r + done, n);
        reverse_copy(tmp[1], g + done, n);
        reverse_copy(tmp[2], b + done, n);
    }
}

static PyObject *
hwc_to_chw(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *sub_obj, *mul_obj;
    int hflip;
    if (!PyArg_ParseTuple(args, "OOOOp", &src_obj, &dst_obj, &sub_obj, &mul_obj, &hflip))
        return NULL;
    Norm norm;
    if (get_three(sub_obj, "sub", norm.sub) < 0 || get_three(mul_obj, "mul", norm.mul) < 0)
        return NULL;

    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    if (src.ndim != 3 || src.itemsize != 1 || src.shape[2] != 3 || src.strides[2] != 1
        || src.strides[1] != 3) {
        PyErr_SetString(PyExc_ValueError,
                        "src should be uint8 H x W x 3 with interleaved pixels (rows may be strided)");
        goto done;
    }
    const Py_ssize_t height = src.shape[0], width = src.shape[1];
    /* a buffer's shape need not be backed by as many bytes (a zero stride): products checked */
    Py_ssize_t row_bytes, plane_bytes;
    if (dst.ndim != 3 || dst.itemsize != 4 || dst.format == NULL || strcmp(dst.format, "f") != 0
        || dst.shape[0] != 3 || dst.shape[1] != height || dst.shape[2] != width
        || __builtin_mul_overflow(width, (Py_ssize_t)4, &row_bytes)
        || __builtin_mul_overflow(row_bytes, height, &plane_bytes)
        || dst.strides[2] != 4 || dst.strides[1] != row_bytes
        || dst.strides[0] != plane_bytes) {
        PyErr_SetString(PyExc_ValueError,
                        "dst should be a contiguous float32 3 x H x W array matching src");
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t plane = height * width;
    float *out = (float *)dst.buf;
    for (Py_ssize_t y = 0; y < height; y++) {
        const unsigned char *px = (const unsigned char *)src.buf + y * src.strides[0];
        float *r = out + y * width, *g = r + plane, *b = g + plane;
        if (hflip)
            convert_row_mirrored(px, r, g, b, width, &norm);
        else
            convert_row(px, r, g, b, width, &norm);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

#define LOOKUP_LOOP(T)                                                              \
    for (Py_ssize_t c = 0; c < channels; c++) {                                     \
        const T *table = (const T *)lut.buf + 256 * c;                              \
        const unsigned char *in = (const unsigned char *)src.buf + c * plane;       \
        T *out = (T *)dst.buf + c * plane;                                          \
        for (Py_ssize_t i = 0; i < plane; i++)                                      \
            out[i] = table[in[i]];                                                  \
    }

/* src H x W x C (interleaved), dst C x H x W */
#define INTERLEAVED_LOOP(T)                                                         \
    for (Py_ssize_t c = 0; c < channels; c++) {                                     \
        const T *table = (const T *)lut.buf + 256 * c;                              \
        const unsigned char *in = (const unsigned char *)src.buf + c;               \
        T *out = (T *)dst.buf + c * plane;                                          \
        for (Py_ssize_t i = 0; i < plane; i++)                                      \
            out[i] = table[in[i * channels]];                                       \
    }

static PyObject *
lookup_planes(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *lut_obj;
    int interleaved = 0;
    if (!PyArg_ParseTuple(args, "OOO|p", &src_obj, &dst_obj, &lut_obj, &interleaved))
        return NULL;
    Py_buffer src, dst, lut;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(lut_obj, &lut, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t size = dst.itemsize;
    const Py_ssize_t channels = lut.len / (256 * (lut.itemsize ? lut.itemsize : 1));
    if (src.itemsize != 1 || (size != 2 && size != 4 && size != 8) || lut.itemsize != size
        || channels < 1 || lut.len != channels * 256 * size || src.len % channels != 0
        || dst.len % size != 0 || dst.len / size != src.len) {
        PyErr_SetString(PyExc_ValueError,
                        "lookup_planes(src, dst, lut): src contiguous uint8 C x H x W, lut "
                        "contiguous C x 256 with dst's element size (2, 4 or 8), dst contiguous "
                        "with src's element count");
        goto done;
    }
    const Py_ssize_t plane = src.len / channels;
    Py_BEGIN_ALLOW_THREADS
    if (interleaved) {
        if (size == 2) {
            INTERLEAVED_LOOP(uint16_t)
        } else if (size == 4) {
            INTERLEAVED_LOOP(uint32_t)
        } else {
            INTERLEAVED_LOOP(uint64_t)
        }
    } else if (size == 2) {
        LOOKUP_LOOP(uint16_t)
    } else if (size == 4) {
        LOOKUP_LOOP(uint32_t)
    } else {
        LOOKUP_LOOP(uint64_t)
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&lut);
    return result;
}

static PyMethodDef methods[] = {
    {"hwc_to_chw", hwc_to_chw, METH_VARARGS,
     "hwc_to_chw(src, dst, sub, mul, hflip): dst[c, y, x] = (src[y, x', c] - sub[c]) * mul[c],\n"
     "x' = W - 1 - x when hflip else x; src uint8 H x W x 3, dst float32 3 x H x W."},
    {"lookup_planes", lookup_planes, METH_VARARGS,
     "lookup_planes(src, dst, lut, interleaved=False): dst[c, i] = lut[c, src[c, i]]; src\n"
     "uint8 C x H x W (H x W x C when interleaved), lut C x 256 and dst C x H x W of one\n"
     "element size (2, 4 or 8 bytes), all contiguous."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_normalize",
    "uint8 image kernels: HWC -> normalised CHW (pipelines/decode/resample.py), per-channel\n"
    "table lookup (pipelines/suffix/tail.py).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__normalize(void)
{
    return PyModule_Create(&module);
}
