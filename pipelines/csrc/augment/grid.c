/* torch's CPU grid_sample of uint8 planes (part of _augment: _augment.c), what
 * torchvision's tensor affine ops sample through (fast_ops.py, fast_ops_v2.py).
 *
 * torch's CPU grid_sample (2-D, padding "zeros", align_corners=False, the vectorised kernel
 * of aten/src/ATen/native/cpu/GridSamplerKernel.cpp) of uint8 planes through a float32 grid
 * (Ho x Wo x 2, normalised coordinates): the same unnormalisation, floor/round, weights
 * and sum order, with the multiply-adds fused as torch's x86-64 builds compile them
 * ((g + 1) * size/2 - 0.5 and the weighted sum; kernels.py checks this against torch's own
 * grid_sample once per process). Bilinear: out = nw*v_nw + ne*v_ne + sw*v_sw + se*v_se,
 * summed left to right, out-of-bounds neighbours 0; nearest: the pixel
 * at the rounded (half to even) location, 0 outside. Written as float32 (dst_f) or, when
 * no fill follows, rounded half to even to uint8 as torchvision's round().to(uint8) does.
 */
#include "augment.h"

/* the uint8 planes as float32, what the gathers read */
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

/* v clamped to [-2, hi], NaN to -2 */
static inline float
inside(float v, float hi)
{
    v = v > -2.0f ? v : -2.0f;
    return v < hi ? v : hi;
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
    /* a location is first clamped to [-2, size + 2] (NaN to -2): nothing changes inside, a
     * location further out still reads nothing, and the int conversions below stay defined
     * for a grid of any values (torch's vector conversion of a far or NaN location reads
     * nothing there too, but C's is undefined) */
    const float xhi = (float)w + 2.0f, yhi = (float)h + 2.0f;
    if (nearest) {
        for (Py_ssize_t i = 0; i < n; i++) {
            const float x = inside(fmaf(grid[2 * i] + 1.0f, sx, -0.5f), xhi);
            const float y = inside(fmaf(grid[2 * i + 1] + 1.0f, sy, -0.5f), yhi);
            const int32_t ix = (int32_t)nearbyintf(x), iy = (int32_t)nearbyintf(y);
            t->weight[0][i] = (float)((ix > -1) & (ix < w) & (iy > -1) & (iy < h));
            t->offset[0][i] = clampi(iy, h - 1) * w + clampi(ix, w - 1);
        }
        return;
    }
    float xs[CHUNK], ys[CHUNK];
    for (Py_ssize_t i = 0; i < n; i++) {
        xs[i] = inside(fmaf(grid[2 * i] + 1.0f, sx, -0.5f), xhi);
        ys[i] = inside(fmaf(grid[2 * i + 1] + 1.0f, sy, -0.5f), yhi);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const float x = xs[i], y = ys[i];
        /* floor: x is inside [-2, w + 2] */
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

PyObject *
fl_augment_grid_sample(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *grid_obj, *dst_obj;
    Py_ssize_t h, w;
    int nearest;
    if (!PyArg_ParseTuple(args, "OOOnnp", &src_obj, &grid_obj, &dst_obj, &h, &w, &nearest))
        return NULL;
    Py_buffer src, grid, dst;
    if (fl_augment_get_pair(src_obj, &src, 0, 1, "src",
                            grid_obj, &grid, 0, 4, "grid") < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&grid);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n = grid.len / 8; /* output pixels */
    /* h and w are the caller's: bounded before they are multiplied (h * w <= 2^24) */
    const int sizes_ok = h >= 1 && w >= 1 && h <= (1 << 24) && w <= (1 << 24) / h;
    const Py_ssize_t planes = sizes_ok ? src.len / (h * w) : 0;
    Py_ssize_t out_len;
    if (!sizes_ok || planes * h * w != src.len || n == 0 || grid.len % 8 != 0
        || (dst.itemsize != 1 && dst.itemsize != 4)
        || __builtin_mul_overflow(planes, n, &out_len)
        || __builtin_mul_overflow(out_len, dst.itemsize, &out_len) || dst.len != out_len) {
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
