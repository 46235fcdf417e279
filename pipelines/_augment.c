/* Exact kernels of torchvision's colour ops, grid_sample, AugMix's and MixUp's mixing
 * (pipelines/kernels.py).
 *
 * Each loop computes, pixel by pixel, the float32 arithmetic torchvision's tensor kernels
 * run as a sequence of whole-image torch ops (cast, multiply, add, clamp, cast back), with
 * the same operands, the same order and the same roundings, but in one pass over the uint8
 * planes and without float temporaries:
 *
 *   v1 (torchvision.transforms.functional): products and sums each rounded to float32
 *       (``ratio * img1 + (1 - ratio) * img2``): compiled with -ffp-contract=off, so the
 *       compiler never fuses them.
 *   v2 (torchvision.transforms.v2.functional): ``image.mul(r).add_(other, alpha=q)``; torch's
 *       CPU ``add`` with ``alpha`` is a fused multiply-add, hence fmaf(). kernels.py checks
 *       once per process that the installed torch computes it so (a CPU build without FMA
 *       does not) and leaves v2 to torchvision otherwise.
 *
 * grid_sample: see its comment. Blend results are clamped to [0, 255] and truncated to uint8, as torch's clamp_ and .to(uint8).
 * The loops are compiled for x86-64-v3 (AVX2 + FMA) beside the baseline and picked at load
 * time (glibc ifunc). The GIL is released while they run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) /* ifunc: glibc only */
#define LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOP
#endif

static inline unsigned char
to_u8(float x)
{
    x = x < 0.0f ? 0.0f : x;
    x = x > 255.0f ? 255.0f : x;
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

LOOP static void
mix_loop(float *restrict acc, const unsigned char *restrict src, Py_ssize_t n, float w, int init)
{
    if (init) {
        for (Py_ssize_t i = 0; i < n; i++)
            acc[i] = w * (float)src[i];
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            acc[i] = acc[i] + w * (float)src[i];
    }
}

LOOP static void
truncate_loop(const float *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = (unsigned char)(int32_t)src[i];
}

static int
get(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name)
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

static PyObject *
gray(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    int fused;
    if (!PyArg_ParseTuple(args, "OOp", &src_obj, &dst_obj, &fused))
        return NULL;
    Py_buffer src, dst;
    if (get(src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, 4, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n = dst.len / 4;
    if (n == 0 || src.len % (3 * n) != 0 || src.len != 3 * n) {
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

static PyObject *
blend(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj, *other_obj;
    float r, q, scalar;
    int mode, fused;
    if (!PyArg_ParseTuple(args, "OOffifOp", &src_obj, &dst_obj, &r, &q, &mode, &scalar,
                          &other_obj, &fused))
        return NULL;
    Py_buffer src, dst, other = {0};
    if (get(src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    const float *plane = NULL;
    Py_ssize_t n = src.len, planes = 1;
    if (mode == 2) {
        if (get(other_obj, &other, 0, 4, "other") < 0)
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

static PyObject *
sharpen(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t h, w;
    float r, q;
    int fused;
    if (!PyArg_ParseTuple(args, "OOnnffp", &src_obj, &dst_obj, &h, &w, &r, &q, &fused))
        return NULL;
    Py_buffer src, dst;
    if (get(src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    if (h < 3 || w < 3 || dst.len != src.len || src.len % (h * w) != 0) {
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

static PyObject *
mix(PyObject *self, PyObject *args)
{
    PyObject *acc_obj, *src_obj;
    float w;
    int init;
    if (!PyArg_ParseTuple(args, "OOfp", &acc_obj, &src_obj, &w, &init))
        return NULL;
    Py_buffer acc, src;
    if (get(acc_obj, &acc, 1, 4, "acc") < 0)
        return NULL;
    if (get(src_obj, &src, 0, 1, "src") < 0) {
        PyBuffer_Release(&acc);
        return NULL;
    }
    PyObject *result = NULL;
    if (acc.len != 4 * src.len) {
        PyErr_SetString(PyExc_ValueError, "mix(acc, src, w, init): acc float32, src uint8, one count");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    mix_loop(acc.buf, src.buf, src.len, w, init);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&acc);
    PyBuffer_Release(&src);
    return result;
}

static PyObject *
truncate_u8(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    if (!PyArg_ParseTuple(args, "OO", &src_obj, &dst_obj))
        return NULL;
    Py_buffer src, dst;
    if (get(src_obj, &src, 0, 4, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    if (src.len != 4 * dst.len) {
        PyErr_SetString(PyExc_ValueError, "truncate_u8(src, dst): src float32, dst uint8, one count");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    truncate_loop(src.buf, dst.buf, dst.len);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *
interleave(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t channels;
    if (!PyArg_ParseTuple(args, "OOn", &src_obj, &dst_obj, &channels))
        return NULL;
    Py_buffer src, dst;
    if (get(src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    if (get(dst_obj, &dst, 1, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    if (channels < 1 || dst.len != src.len || src.len % channels != 0) {
        PyErr_SetString(PyExc_ValueError, "interleave(src, dst, channels): uint8 C x N -> N x C");
        goto done;
    }
    const Py_ssize_t n = src.len / channels;
    const unsigned char *in = src.buf;
    unsigned char *out = dst.buf;
    Py_BEGIN_ALLOW_THREADS
    if (channels == 3) {
        const unsigned char *r = in, *g = in + n, *b = in + 2 * n;
        for (Py_ssize_t i = 0; i < n; i++) {
            out[3 * i] = r[i];
            out[3 * i + 1] = g[i];
            out[3 * i + 2] = b[i];
        }
    } else {
        for (Py_ssize_t c = 0; c < channels; c++)
            for (Py_ssize_t i = 0; i < n; i++)
                out[i * channels + c] = in[c * n + i];
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}


/* torch's CPU grid_sample (2-D, padding "zeros", align_corners=False, the vectorised kernel
 * of aten/src/ATen/native/cpu/GridSamplerKernel.cpp) of uint8 planes through a float32 grid
 * (Ho x Wo x 2, normalised coordinates): the same unnormalisation, floor/round, weights
 * and sum order, with the multiply-adds fused as torch's x86-64 builds compile them
 * ((g + 1) * size/2 - 0.5 and the weighted sum; kernels.py checks this against torch's own
 * grid_sample once per process). Bilinear: out = nw*v_nw + ne*v_ne + sw*v_sw + se*v_se,
 * summed left to right, out-of-bounds neighbours 0; nearest: the pixel
 * at the rounded (half to even) location, 0 outside. Written as float32 (dst_f) or, when
 * no fill follows, rounded half to even to uint8 as torchvision's round().to(uint8) does. */
LOOP static void
widen_loop(const unsigned char *restrict src, float *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* torch.round (half to even) then .to(uint8), for values in [0, 255.5) */
LOOP static void
round_loop(const float *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = (unsigned char)(int32_t)nearbyintf(src[i]);
}

static inline int32_t
clampi(int32_t v, int32_t hi)
{
    return v < 0 ? 0 : (v > hi ? hi : v);
}

#define CHUNK 512 /* output pixels whose locations and weights are computed at a time */

typedef struct {
    int32_t offset[4][CHUNK]; /* nw, ne, sw, se (clamped inside the plane) */
    float weight[4][CHUNK];   /* 0 for a neighbour outside the plane */
} Taps;

/* Locations and weights of ``n`` <= CHUNK output pixels. A neighbour outside the plane
 * reads a clamped pixel with weight 0: v * 0 = 0 and fma(v, 0, a) = a (v finite), what
 * torch's masked gather of 0 gives. Nearest keeps one tap. */
LOOP static void
taps_loop(const float *restrict grid, Taps *restrict t, Py_ssize_t n, int32_t h, int32_t w,
          int nearest)
{
    const float sx = (float)w / 2, sy = (float)h / 2;
    if (nearest) {
        for (Py_ssize_t i = 0; i < n; i++) {
            const float x = fmaf(grid[2 * i] + 1.0f, sx, -0.5f);
            const float y = fmaf(grid[2 * i + 1] + 1.0f, sy, -0.5f);
            const int32_t ix = (int32_t)nearbyintf(x), iy = (int32_t)nearbyintf(y);
            t->weight[0][i] = (float)((ix > -1) & (ix < w) & (iy > -1) & (iy < h));
            t->offset[0][i] = clampi(iy, h - 1) * w + clampi(ix, w - 1);
        }
        return;
    }
    float xs[CHUNK], ys[CHUNK];
    for (Py_ssize_t i = 0; i < n; i++) {
        xs[i] = fmaf(grid[2 * i] + 1.0f, sx, -0.5f);
        ys[i] = fmaf(grid[2 * i + 1] + 1.0f, sy, -0.5f);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const float x = xs[i], y = ys[i];
        /* floor, for |x| < 2^31 (a location further out reads nothing, as in torch) */
        const int32_t tx = (int32_t)x, ty = (int32_t)y;
        const int32_t ixw = tx - ((float)tx > x), iyn = ty - ((float)ty > y);
        const int32_t ixe = ixw + 1, iys = iyn + 1;
        const float x_w = (float)ixw, y_n = (float)iyn;
        const float dw = x - x_w, de = 1.0f - dw, dn = y - y_n, ds = 1.0f - dn;
        const float wm = (float)((ixw > -1) & (ixw < w)), em = (float)((ixe > -1) & (ixe < w));
        const float nm = (float)((iyn > -1) & (iyn < h)), sm = (float)((iys > -1) & (iys < h));
        const int32_t rn = clampi(iyn, h - 1) * w, rs = clampi(iys, h - 1) * w;
        const int32_t cw = clampi(ixw, w - 1), ce = clampi(ixe, w - 1);
        t->weight[0][i] = (ds * de) * (wm * nm);
        t->weight[1][i] = (ds * dw) * (em * nm);
        t->weight[2][i] = (dn * de) * (wm * sm);
        t->weight[3][i] = (dn * dw) * (em * sm);
        t->offset[0][i] = rn + cw;
        t->offset[1][i] = rn + ce;
        t->offset[2][i] = rs + cw;
        t->offset[3][i] = rs + ce;
    }
}

/* out = nw*v_nw + ne*v_ne + sw*v_sw + se*v_se, fused left to right (torch's order) */
LOOP static void
gather_loop(const float *restrict plane, const Taps *restrict t, float *restrict out,
            Py_ssize_t n, int nearest)
{
    if (nearest) {
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = plane[t->offset[0][i]] * t->weight[0][i];
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = fmaf(plane[t->offset[3][i]], t->weight[3][i],
                      fmaf(plane[t->offset[2][i]], t->weight[2][i],
                           fmaf(plane[t->offset[1][i]], t->weight[1][i],
                                plane[t->offset[0][i]] * t->weight[0][i])));
}

static PyObject *
grid_sample(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *grid_obj, *dst_obj;
    Py_ssize_t h, w;
    int nearest;
    if (!PyArg_ParseTuple(args, "OOOnnp", &src_obj, &grid_obj, &dst_obj, &h, &w, &nearest))
        return NULL;
    Py_buffer src, grid, dst;
    if (get(src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    if (get(grid_obj, &grid, 0, 4, "grid") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&grid);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n = grid.len / 8;  /* output pixels */
    const Py_ssize_t planes = h * w > 0 ? src.len / (h * w) : 0;
    if (h < 1 || w < 1 || h * w > (1 << 24) || planes * h * w != src.len || n == 0
        || grid.len != 8 * n || (dst.itemsize != 1 && dst.itemsize != 4)
        || dst.len != planes * n * dst.itemsize) {
        PyErr_SetString(PyExc_ValueError,
                        "grid_sample(src, grid, dst, h, w, nearest): src uint8 C x h x w, grid "
                        "float32 N x 2, dst uint8 or float32 C x N");
        goto done;
    }
    float *planes_f = PyMem_RawMalloc(sizeof(float) * (planes * h * w + CHUNK));
    Taps *taps = PyMem_RawMalloc(sizeof(Taps));
    if (planes_f == NULL || taps == NULL) {
        PyMem_RawFree(planes_f);
        PyMem_RawFree(taps);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    float *row = planes_f + planes * h * w;
    widen_loop(src.buf, planes_f, planes * h * w);
    for (Py_ssize_t start = 0; start < n; start += CHUNK) {
        const Py_ssize_t len = n - start < CHUNK ? n - start : CHUNK;
        taps_loop((const float *)grid.buf + 2 * start, taps, len, (int32_t)h, (int32_t)w,
                  nearest);
        for (Py_ssize_t c = 0; c < planes; c++) {
            float *out = dst.itemsize == 4 ? (float *)dst.buf + c * n + start : row;
            gather_loop(planes_f + c * h * w, taps, out, len, nearest);
            if (dst.itemsize == 1)
                round_loop(row, (unsigned char *)dst.buf + c * n + start, len);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(planes_f);
    PyMem_RawFree(taps);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&grid);
    PyBuffer_Release(&dst);
    return result;
}


/* v2 MixUp's image blend, one row of the batch in place: cur = prev * a + cur * b
 * (torchvision: inpt.roll(1, 0).mul_(1 - lam).add_(inpt.mul(lam)), each step rounded) */
LOOP static void
mixup_loop(const float *restrict prev, float *restrict cur, Py_ssize_t n, float a, float b)
{
    for (Py_ssize_t i = 0; i < n; i++)
        cur[i] = prev[i] * a + cur[i] * b;
}

static PyObject *
mixup(PyObject *self, PyObject *args)
{
    PyObject *prev_obj, *cur_obj;
    float a, b;
    if (!PyArg_ParseTuple(args, "OOff", &prev_obj, &cur_obj, &a, &b))
        return NULL;
    Py_buffer prev, cur;
    if (get(prev_obj, &prev, 0, 4, "prev") < 0)
        return NULL;
    if (get(cur_obj, &cur, 1, 4, "cur") < 0) {
        PyBuffer_Release(&prev);
        return NULL;
    }
    PyObject *result = NULL;
    if (prev.len != cur.len) {
        PyErr_SetString(PyExc_ValueError, "mixup(prev, cur, a, b): float32 rows of one size");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    mixup_loop(prev.buf, cur.buf, cur.len / 4, a, b);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&prev);
    PyBuffer_Release(&cur);
    return result;
}

static PyMethodDef methods[] = {
    {"gray", gray, METH_VARARGS,
     "gray(src, dst, fused): dst = floor(grayscale(src)); src uint8 3 x N, dst float32 N."},
    {"blend", blend, METH_VARARGS,
     "blend(src, dst, r, q, mode, scalar, other, fused): dst = clamp(src * r + o * q) as uint8,\n"
     "o = 0 (mode 0), scalar (mode 1) or other (mode 2, float32, one plane: every plane of src)."},
    {"sharpen", sharpen, METH_VARARGS,
     "sharpen(src, dst, h, w, r, q, fused): torchvision's adjust_sharpness of uint8 h x w planes."},
    {"mix", mix, METH_VARARGS,
     "mix(acc, src, w, init): acc = w * src (init) or acc + w * src; acc float32, src uint8."},
    {"truncate_u8", truncate_u8, METH_VARARGS,
     "truncate_u8(src, dst): dst = (uint8) src, float32 values in [0, 256)."},
    {"grid_sample", grid_sample, METH_VARARGS,
     "grid_sample(src, grid, dst, h, w, nearest): torch's grid_sample (zeros padding,\n"
     "align_corners=False) of uint8 planes; dst float32, or uint8 rounded half to even."},
    {"mixup", mixup, METH_VARARGS,
     "mixup(prev, cur, a, b): cur = prev * a + cur * b in place, float32 (v2 MixUp's blend)."},
    {"interleave", interleave, METH_VARARGS,
     "interleave(src, dst, channels): uint8 C x N planes -> N x C interleaved pixels."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_augment",
    "Exact uint8 kernels of torchvision's colour ops and AugMix's mixing (pipelines/kernels.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__augment(void)
{
    return PyModule_Create(&module);
}
