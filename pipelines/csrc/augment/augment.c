/* Exact kernels of torchvision's colour ops, grid_sample, AugMix's and MixUp's mixing
 * (pipelines/fast/kernels.py): the module table and the buffer helper. The kernels are in
 *
 *   _augment_colour.c  gray, blend, sharpen: torchvision's colour ops (v1 and v2)
 *   _augment_mix.c     mix, truncate_u8, mixup, interleave: AugMix's and MixUp's mixing
 *   _augment_grid.c    grid_sample: torch's CPU grid_sample of uint8 planes
 *
 * built into one extension (setup.py) with -O3 -ffp-contract=off, so the compiler never
 * fuses a product into a sum the code does not fuse itself (fmaf). Each loop computes, pixel
 * by pixel, the float32 arithmetic torch's whole-image ops run (cast, multiply, add, clamp,
 * cast back), with the same operands, the same order and the same roundings, but in one pass
 * over the uint8 planes and without float temporaries. The loops are compiled for x86-64-v3
 * (AVX2 + FMA) beside the baseline and picked at load time (glibc ifunc). The GIL is
 * released while they run.
 */
#include "augment.h"

int
fl_augment_get(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s should hold %zd-byte items", name, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int
fl_augment_get_pair(PyObject *a_obj, Py_buffer *a, int a_writable, Py_ssize_t a_itemsize,
                    const char *a_name, PyObject *b_obj, Py_buffer *b, int b_writable,
                    Py_ssize_t b_itemsize, const char *b_name)
{
    if (fl_augment_get(a_obj, a, a_writable, a_itemsize, a_name) < 0)
        return -1;
    if (fl_augment_get(b_obj, b, b_writable, b_itemsize, b_name) < 0) {
        PyBuffer_Release(a);
        return -1;
    }
    return 0;
}

static PyMethodDef methods[] = {
    {"gray", fl_augment_gray, METH_VARARGS,
     "gray(src, dst, fused): dst = floor(grayscale(src)); src uint8 3 x N, dst float32 N."},
    {"blend", fl_augment_blend, METH_VARARGS,
     "blend(src, dst, r, q, mode, scalar, other, fused): dst = clamp(src * r + o * q) as uint8,\n"
     "o = 0 (mode 0), scalar (mode 1) or other (mode 2, float32, one plane: every plane of src)."},
    {"sharpen", fl_augment_sharpen, METH_VARARGS,
     "sharpen(src, dst, h, w, r, q, fused): torchvision's adjust_sharpness of uint8 h x w planes."},
    {"mix", fl_augment_mix, METH_VARARGS,
     "mix(acc, src, w, init): acc = w * src (init) or acc + w * src; acc float32, src uint8."},
    {"truncate_u8", fl_augment_truncate_u8, METH_VARARGS,
     "truncate_u8(src, dst): dst = (uint8) src, float32 values in [0, 256)."},
    {"grid_sample", fl_augment_grid_sample, METH_VARARGS,
     "grid_sample(src, grid, dst, h, w, nearest): torch's grid_sample (zeros padding,\n"
     "align_corners=False) of uint8 planes; dst float32, or uint8 rounded half to even."},
    {"mixup", fl_augment_mixup, METH_VARARGS,
     "mixup(prev, cur, a, b): cur = prev * a + cur * b in place, float32 (v2 MixUp's blend)."},
    {"interleave", fl_augment_interleave, METH_VARARGS,
     "interleave(src, dst, channels): uint8 C x N planes -> N x C interleaved pixels."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_augment",
    "Exact uint8 kernels of torchvision's colour ops and AugMix's mixing (pipelines/fast/kernels.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__augment(void)
{
    return PyModule_Create(&module);
}
