/* torchvision's colour ops on uint8 planes, bit for bit (part of _augment: _augment.c):
 * grayscale, the blends of brightness, contrast and saturation, and sharpness.
 *
 *   v1 (torchvision.transforms.functional): products and sums each rounded to float32
 *       (``ratio * img1 + (1 - ratio) * img2``): compiled with -ffp-contract=off, so the
 *       compiler never fuses them.
 *   v2 (torchvision.transforms.v2.functional): ``image.mul(r).add_(other, alpha=q)``; torch's
 *       CPU ``add`` with ``alpha`` is a fused multiply-add, hence fmaf(). kernels.py checks
 *       once per process that the installed torch computes it so (a CPU build without FMA
 *       does not) and leaves v2 to torchvision otherwise.
 *
 * Blend results are clamped to [0, 255] and truncated to uint8, as torch's clamp_ and
 * .to(uint8).
 */
#include "augment.h"

/* clamp to [0, 255] and truncate; NaN (a product of 0 and inf) becomes 0, what torch's
 * float -> uint8 cast gives on x86-64, so that no conversion is undefined */
static inline unsigned char
to_u8(float x)
{
    x = x > 0.0f ? x : 0.0f;
    x = x < 255.0f ? x : 255.0f;
    return (unsigned char)(int32_t)x;
}

/* torchvision's grayscale of a 3-channel uint8 image as float32, floored (both versions
 * floor or truncate a non-negative value) */
LOOP static void
gray_loop(const unsigned char *restrict src, float *restrict dst, Py_ssize_t n, int fused)
{
    const unsigned char *r = src, *g = src + n, *b = src + 2 * n;
    const float cr = 0.2989f, cg = 0.587f, cb = 0.114f;
    if (fused) {
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = (float)(int32_t)fmaf((float)b[i], cb, fmaf((float)g[i], cg, (float)r[i] * cr));
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            float s = (float)r[i] * cr;
            s = s + (float)g[i] * cg;
            s = s + (float)b[i] * cb;
            dst[i] = (float)(int32_t)s; /* floor: s >= 0 */
        }
    }
}

/* out = clamp(v * r + other * q): other 0 (mode 0), a scalar (mode 1) or a plane (mode 2) */
LOOP static void
blend_loop(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n,
           float r, float q, int mode, float scalar, const float *restrict plane, int fused)
{
    if (mode == 0) {
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = to_u8((float)src[i] * r);
    } else if (mode == 1 && fused) {
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = to_u8(fmaf(scalar, q, (float)src[i] * r));
    } else if (mode == 1) {
        const float qs = q * scalar;
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = to_u8((float)src[i] * r + qs);
    } else if (fused) {
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = to_u8(fmaf(plane[i], q, (float)src[i] * r));
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i] = to_u8((float)src[i] * r + plane[i] * q);
    }
}

/* one row of the sharpness blend: d = round((3x3 box sum + 4 * centre) / 13), exact as
 * ((n + 6) * 5042) >> 16 for 0 <= n <= 3315 (see fast_ops.py) */
LOOP static void
sharpen_row(const unsigned char *restrict up, const unsigned char *restrict mid,
            const unsigned char *restrict down, unsigned char *restrict out, Py_ssize_t w,
            float r, float q, int fused)
{
#define DEGENERATE                                                                        \
    int32_t n = up[x - 1] + up[x] + up[x + 1] + mid[x - 1] + 5 * mid[x] + mid[x + 1]        \
                + down[x - 1] + down[x] + down[x + 1];                                      \
    float d = (float)(((n + 6) * 5042) >> 16);                                              \
    float v = (float)mid[x];
    if (fused) {
        for (Py_ssize_t x = 1; x < w - 1; x++) {
            DEGENERATE
            out[x] = to_u8(fmaf(d - v, q, v));
        }
    } else {
        for (Py_ssize_t x = 1; x < w - 1; x++) {
            DEGENERATE
            out[x] = to_u8(v * r + d * q);
        }
    }
#undef DEGENERATE
}

/* v1 blends the border with itself, v2 keeps it */
LOOP static void
border_loop(const unsigned char *restrict src, unsigned char *restrict dst, Py_ssize_t n,
            Py_ssize_t step, float r, float q, int fused)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = (float)src[i * step];
        dst[i * step] = fused ? src[i * step] : to_u8(v * r + v * q);
    }
}

PyObject *
fl_augment_gray(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    int fused;
    if (!PyArg_ParseTuple(args, "OOp", &src_obj, &dst_obj, &fused))
        return NULL;
    Py_buffer src, dst;
    if (fl_augment_get_pair(src_obj, &src, 0, 1, "src",
                            dst_obj, &dst, 1, 4, "dst") < 0)
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = dst.len / 4;
    if (n == 0 || dst.len % 4 != 0 || src.len % 3 != 0 || src.len / 3 != n) {
        PyErr_SetString(PyExc_ValueError, "gray(src, dst, fused): src uint8 3 x N, dst float32 N");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    gray_loop(src.buf, dst.buf, n, fused);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

PyObject *
fl_augment_blend(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *other_obj;
    float r, q, scalar;
    int mode, fused;
    if (!PyArg_ParseTuple(args, "OOffifOp", &src_obj, &dst_obj, &r, &q, &mode, &scalar,
                          &other_obj, &fused))
        return NULL;
    Py_buffer src, dst, other = {0};
    if (fl_augment_get_pair(src_obj, &src, 0, 1, "src",
                            dst_obj, &dst, 1, 1, "dst") < 0)
        return NULL;
    PyObject *result = NULL;
    const float *plane = NULL;
    Py_ssize_t n = src.len, planes = 1;
    if (mode == 2) {
        if (fl_augment_get(other_obj, &other, 0, 4, "other") < 0)
            goto done;
        n = other.len / 4;
        plane = other.buf;
        planes = n ? src.len / n : 0;
    }
    if (dst.len != src.len || mode < 0 || mode > 2 || n == 0 || planes * n != src.len) {
        PyErr_SetString(PyExc_ValueError,
                        "blend(src, dst, r, q, mode, scalar, other, fused): src and dst uint8 of "
                        "one size; mode 2: other float32 of a plane's size");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < planes; c++)
        blend_loop((const unsigned char *)src.buf + c * n, (unsigned char *)dst.buf + c * n, n,
                   r, q, mode, scalar, plane, fused);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (other.obj != NULL)
        PyBuffer_Release(&other);
    return result;
}

PyObject *
fl_augment_sharpen(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t h, w;
    float r, q;
    int fused;
    if (!PyArg_ParseTuple(args, "OOnnffp", &src_obj, &dst_obj, &h, &w, &r, &q, &fused))
        return NULL;
    Py_buffer src, dst;
    if (fl_augment_get_pair(src_obj, &src, 0, 1, "src",
                            dst_obj, &dst, 1, 1, "dst") < 0)
        return NULL;
    PyObject *result = NULL;
    /* w <= len / h first: h * w is then at most len, no overflow (h, w from the caller) */
    if (h < 3 || w < 3 || dst.len != src.len || w > src.len / h || src.len % (h * w) != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "sharpen(src, dst, h, w, r, q, fused): uint8 planes of h x w, h, w >= 3");
        goto done;
    }
    const Py_ssize_t planes = src.len / (h * w);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < planes; c++) {
        const unsigned char *in = (const unsigned char *)src.buf + c * h * w;
        unsigned char *out = (unsigned char *)dst.buf + c * h * w;
        border_loop(in, out, w, 1, r, q, fused);
        border_loop(in + (h - 1) * w, out + (h - 1) * w, w, 1, r, q, fused);
        border_loop(in + w, out + w, h - 2, w, r, q, fused);
        border_loop(in + 2 * w - 1, out + 2 * w - 1, h - 2, w, r, q, fused);
        for (Py_ssize_t y = 1; y < h - 1; y++)
            sharpen_row(in + (y - 1) * w, in + y * w, in + (y + 1) * w, out + y * w, w, r, q,
                        fused);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}
