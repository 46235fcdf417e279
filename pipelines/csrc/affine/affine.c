/* Pillow's affine transform of an RGB image, bit for bit (pipelines/fast/pil_affine.py).
 *
 * ``Image.transform(size, AFFINE, a, resample, fillcolor=...)`` maps each output pixel
 * (x, y) through the inverse matrix ``a`` and samples the source there. This extension computes
 * what Pillow's libImaging computes for a 3-band 8-bit image (checked on Pillow 13.0), with
 * the same double operands in the same order, on HWC uint8 arrays instead of Pillow's
 * 4-byte pixels and without its per-pixel function calls:
 *
 *   bilinear, bicubic: the source point is (a0 (x+.5) + a1 (y+.5) + a2, a3 (x+.5) + a4 (y+.5)
 *       + a5); outside [0, w) x [0, h) the pixel keeps the fill; else the 2x2 (4x4)
 *       neighbourhood around (point - .5), columns clamped to the image, rows below the
 *       image repeating the last one read, interpolated along x per row, then along y
 *       (bicubic: Pillow's a = -1/2 cubic in its nested form, clamped to [0, 255]),
 *       truncated to uint8.
 *   nearest: Pillow's three engines, chosen as it chooses them: a pure scale/translation
 *       (a1 == a3 == 0) steps a double per column and per row; otherwise 16.16 fixed point
 *       where the four corners map inside +-32768, else doubles stepped per pixel.
 *
 * The pieces, built into one extension (setup.py) with -O3 -ffp-contract=off: no product is
 * fused into a sum, as in Pillow's baseline x86-64 build:
 *
 *   _affine.c         argument checks, the fill, the choice of engine, the module table
 *   _affine_filter.c  bilinear and bicubic
 *   _affine_nearest.c Pillow's three nearest engines
 *
 * The GIL is released while the loops run.
 */
#include "affine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int
get(PyObject *obj, Py_buffer *view, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != 1) {
        PyErr_Format(PyExc_ValueError, "%s should hold uint8 items", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *
affine(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Job j;
    int resample, r, g, b;
    if (!PyArg_ParseTuple(args, "OiiOii(dddddd)i(iii)", &src_obj, &j.w, &j.h, &dst_obj, &j.ow,
                          &j.oh, &j.a[0], &j.a[1], &j.a[2], &j.a[3], &j.a[4], &j.a[5], &resample,
                          &r, &g, &b))
        return NULL;
    if (j.w <= 0 || j.h <= 0 || j.ow <= 0 || j.oh <= 0 || (resample != 0 && resample != 2 &&
        resample != 3) || r < 0 || r > 255 || g < 0 || g > 255 || b < 0 || b > 255) {
        PyErr_SetString(PyExc_ValueError,
                        "affine(src, w, h, dst, ow, oh, matrix, resample, fill): positive sizes, "
                        "resample 0, 2 or 3, fill three values in [0, 255]");
        return NULL;
    }
    for (int k = 0; k < 6; k++) {
        if (!isfinite(j.a[k]) || (k % 3 != 2 && fabs(j.a[k]) >= 32768.0)) {
            PyErr_SetString(PyExc_ValueError, "affine: matrix entries must be finite, the "
                                              "linear ones below 32768 in magnitude");
            return NULL;
        }
    }
    Py_buffer src, dst;
    if (get(src_obj, &src, 0, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    /* the sizes are the caller's ints: their products checked, not assumed to fit */
    Py_ssize_t src_len, dst_len;
    if (__builtin_mul_overflow((Py_ssize_t)j.w * j.h, (Py_ssize_t)3, &src_len) ||
        __builtin_mul_overflow((Py_ssize_t)j.ow * j.oh, (Py_ssize_t)3, &dst_len) ||
        src.len != src_len || dst.len != dst_len) {
        PyErr_SetString(PyExc_ValueError, "affine: src must hold h x w x 3 and dst oh x ow x 3 "
                                          "uint8 values");
        goto done;
    }
    j.src = src.buf;
    j.dst = dst.buf;
    j.scratch = calloc(2 * (size_t)j.ow, sizeof(double));
    j.srcf = resample != 0 ? malloc(16 * (size_t)j.w * j.h) : NULL;
    if (j.scratch == NULL || (resample != 0 && j.srcf == NULL)) {
        free(j.scratch);
        free(j.srcf);
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char fill[3] = {(unsigned char)r, (unsigned char)g, (unsigned char)b};
    Py_BEGIN_ALLOW_THREADS
    unsigned char *out = j.dst;
    const size_t n = (size_t)j.ow * j.oh;
    if (fill[0] == fill[1] && fill[1] == fill[2]) {
        memset(out, fill[0], n * 3);
    } else {
        for (size_t i = 0; i < n; i++, out += 3)
            put(out, fill);
    }
    if (resample != 0)
        fl_affine_filtered(&j, resample == 3);
    else
        fl_affine_nearest(&j);
    Py_END_ALLOW_THREADS
    free(j.scratch);
    free(j.srcf);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"affine", affine, METH_VARARGS,
     "affine(src, w, h, dst, ow, oh, matrix, resample, fill): Pillow's AFFINE transform of an\n"
     "RGB image (src h x w x 3 uint8) into dst (oh x ow x 3 uint8); matrix six floats,\n"
     "resample 0 (nearest), 2 (bilinear) or 3 (bicubic), fill an (r, g, b) of ints."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_affine",
    "Pillow's affine transform of RGB images, bit for bit (pipelines/fast/pil_affine.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__affine(void)
{
    return PyModule_Create(&module);
}
