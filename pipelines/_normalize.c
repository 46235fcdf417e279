/* Interleaved uint8 RGB (H x W x 3, rows may be strided) -> planar float32 (3 x H x W),
 * normalised as (v - sub[c]) * mul[c], optionally mirrored left-right, in one pass.
 *
 * torch does the same with copy_() from a permuted view, then sub_() and mul_(): the copy
 * is a scalar strided loop and the two arithmetic passes read and write the float image
 * again. Here each output value is a lookup in a 256-entry table per channel, filled with
 * the same float32 arithmetic, so the results are identical to torch's.
 * The GIL is released while the loop runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int
get_table(PyObject *seq, const char *name, float out[3])
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

static PyObject *
hwc_to_chw(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *sub_obj, *mul_obj;
    int hflip;
    if (!PyArg_ParseTuple(args, "OOOOp", &src_obj, &dst_obj, &sub_obj, &mul_obj, &hflip))
        return NULL;
    float sub[3], mul[3];
    if (get_table(sub_obj, "sub", sub) < 0 || get_table(mul_obj, "mul", mul) < 0)
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
    if (dst.ndim != 3 || dst.itemsize != 4 || dst.format == NULL || strcmp(dst.format, "f") != 0
        || dst.shape[0] != 3 || dst.shape[1] != height || dst.shape[2] != width
        || dst.strides[2] != 4 || dst.strides[1] != 4 * width
        || dst.strides[0] != 4 * width * height) {
        PyErr_SetString(PyExc_ValueError,
                        "dst should be a contiguous float32 3 x H x W array matching src");
        goto done;
    }

    float table[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++)
            table[c][v] = ((float)v - sub[c]) * mul[c];

    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t plane = height * width;
    float *out = (float *)dst.buf;
    /* mirrored: read each row from its last pixel backwards */
    const Py_ssize_t first = hflip ? 3 * (width - 1) : 0, step = hflip ? -3 : 3;
    for (Py_ssize_t y = 0; y < height; y++) {
        const unsigned char *px = (const unsigned char *)src.buf + y * src.strides[0] + first;
        float *r = out + y * width, *g = r + plane, *b = g + plane;
        for (Py_ssize_t x = 0; x < width; x++, px += step) {
            r[x] = table[0][px[0]];
            g[x] = table[1][px[1]];
            b[x] = table[2][px[2]];
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"hwc_to_chw", hwc_to_chw, METH_VARARGS,
     "hwc_to_chw(src, dst, sub, mul, hflip): dst[c, y, x] = (src[y, x', c] - sub[c]) * mul[c],\n"
     "x' = W - 1 - x when hflip else x; src uint8 H x W x 3, dst float32 3 x H x W."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_normalize",
    "One-pass uint8 HWC -> normalised float32 CHW (see pipelines/torch_resample.py).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__normalize(void)
{
    return PyModule_Create(&module);
}
