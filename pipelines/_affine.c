/* Pillow's affine transform of an RGB image, bit for bit (pipelines/pil_affine.py).
 *
 * ``Image.transform(size, AFFINE, a, resample, fillcolor=...)`` maps each output pixel
 * (x, y) through the inverse matrix ``a`` and samples the source there. This file computes
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
 * Not Pillow's, and exact: the filters read a float copy of the source, 4 lanes a pixel (its
 * uint8 values, exact as floats), and compute the three channels as lanes of one vector of
 * doubles (element-wise IEEE operations: each lane is Pillow's scalar arithmetic); Pillow's
 * int differences of samples are exact in double. A fraction of exactly 0 along an axis makes
 * the interpolation along it return its centre sample (``p + 0 * q == p`` for finite q), so
 * a shear or translation, whose rows (columns) land on whole pixels, reads one row (column)
 * instead of four. Compiled with -ffp-contract=off: no product is fused into a sum, as in
 * Pillow's baseline x86-64 build; the filter loop also has an x86-64-v3 clone (AVX2), picked
 * at load time. The GIL is released while the loops run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *src;
    int w, h; /* source */
    unsigned char *dst;
    int ow, oh; /* output */
    double a[6];
    double *scratch; /* 2 * ow doubles, zeroed: allocated with the GIL held */
    float *srcf;     /* the filters' copy of src, 4 floats a pixel (nearest: NULL) */
} Job;

/* Pillow's COORD: -1 below zero, else truncation (what x86-64 gives for values past int) */
static inline int
coord(double v)
{
    if (v < 0.0)
        return -1;
    return v < 2147483648.0 ? (int)v : INT_MIN;
}

/* Pillow's FLOOR ((int)floor(v) below zero, else truncation) for |v| inside int range */
static inline int
floor_int(double v)
{
    int i = (int)v;
    return (v < 0.0 && i > v) ? i - 1 : i;
}

static inline int
clip(int v, int n)
{
    return v < 0 ? 0 : (v < n ? v : n - 1);
}

static inline unsigned char
cubic_u8(double v)
{
    if (v <= 0.0)
        return 0;
    if (v >= 255.0)
        return 255;
    return (unsigned char)v;
}

static inline void
put(unsigned char *out, const unsigned char *in)
{
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[2];
}

/* The three channels of a pixel as lanes (the fourth is padding): GCC vector extensions. */
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

/* Pillow's cubic through v1..v4 at d, in its nested form (the operand order matters) */
static inline __attribute__((always_inline)) v4d
cubic(v4d v1, v4d v2, v4d v3, v4d v4, double d)
{
    v4d p1 = v2;
    v4d p2 = -v1 + v3;
    v4d p3 = 2 * (v1 - v2) + v3 - v4;
    v4d p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* a pixel of the float copy as doubles */
static inline __attribute__((always_inline)) v4d
pixel(const float *r, int c)
{
    v4f f;
    memcpy(&f, r + 4 * (size_t)c, 16);
    return __builtin_convertvector(f, v4d);
}

/* Pillow's linear step along a row: a + (b - a) * dx, its int difference exact in double */
static inline __attribute__((always_inline)) v4d
linear_row(const float *r, int c0, int c1, double dx)
{
    const v4d a = pixel(r, c0);
    if (dx == 0.0)
        return a;
    return a + (pixel(r, c1) - a) * dx;
}

static inline __attribute__((always_inline)) void
bilinear_pixel(const Job *j, unsigned char *out, double xin, double yin)
{
    xin -= 0.5;
    yin -= 0.5;
    const int x = floor_int(xin), y = floor_int(yin);
    const double dx = xin - x, dy = yin - y;
    const size_t stride = (size_t)j->w * 4;
    const int c0 = clip(x, j->w), c1 = clip(x + 1, j->w);
    v4d v = linear_row(j->srcf + (size_t)clip(y, j->h) * stride, c0, c1, dx);
    /* a row past the image repeats the one before, and a zero fraction keeps it */
    if (dy != 0.0 && y + 1 >= 0 && y + 1 < j->h) {
        const v4d v2 = linear_row(j->srcf + (size_t)(y + 1) * stride, c0, c1, dx);
        v = v + (v2 - v) * dy;
    }
    for (int b = 0; b < 3; b++)
        out[b] = (unsigned char)v[b];
}

/* Pillow's cubic along a row: its p-terms are ints (exact in double in any order) */
static inline __attribute__((always_inline)) v4d
cubic_row(const float *r, const int *c, double dx)
{
    v4f f[4];
    memcpy(&f[1], r + 4 * (size_t)c[1], 16);
    const v4d v2 = __builtin_convertvector(f[1], v4d);
    if (dx == 0.0)
        return v2;
    memcpy(&f[0], r + 4 * (size_t)c[0], 16);
    memcpy(&f[2], r + 4 * (size_t)c[2], 16);
    memcpy(&f[3], r + 4 * (size_t)c[3], 16);
    const v4d v1 = __builtin_convertvector(f[0], v4d), v3 = __builtin_convertvector(f[2], v4d),
              v4 = __builtin_convertvector(f[3], v4d);
    const v4d p2 = -v1 + v3;
    const v4d p3 = 2 * (v1 - v2) + v3 - v4;
    const v4d p4 = -v1 + v2 - v3 + v4;
    return v2 + dx * (p2 + dx * (p3 + dx * p4));
}

static inline __attribute__((always_inline)) void
bicubic_pixel(const Job *j, unsigned char *out, double xin, double yin)
{
    xin -= 0.5;
    yin -= 0.5;
    int x = floor_int(xin), y = floor_int(yin);
    const double dx = xin - x, dy = yin - y;
    x--;
    y--;
    int c[4];
    for (int k = 0; k < 4; k++)
        c[k] = clip(x + k, j->w);
    int rows[4];
    rows[0] = clip(y, j->h);
    for (int k = 1; k < 4; k++)
        rows[k] = (y + k >= 0 && y + k < j->h) ? y + k : rows[k - 1];
    const size_t stride = (size_t)j->w * 4;
    v4d v;
    if (dy == 0.0) {
        v = cubic_row(j->srcf + (size_t)rows[1] * stride, c, dx);
    } else {
        v4d h[4];
        for (int k = 0; k < 4; k++)
            h[k] = cubic_row(j->srcf + (size_t)rows[k] * stride, c, dx);
        v = cubic(h[0], h[1], h[2], h[3], dy);
    }
    for (int b = 0; b < 3; b++)
        out[b] = cubic_u8(v[b]);
}

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) /* ifunc: glibc only */
#define LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOP
#endif

/* bilinear or bicubic: Pillow's generic engine with its affine map */
LOOP static void
filtered(const Job *j, int bicubic)
{
    const double *a = j->a;
    const double w = j->w, h = j->h;
    double *ax = j->scratch;
    const size_t n = (size_t)j->w * j->h;
    for (size_t i = 0; i < n; i++) {
        j->srcf[4 * i] = j->src[3 * i];
        j->srcf[4 * i + 1] = j->src[3 * i + 1];
        j->srcf[4 * i + 2] = j->src[3 * i + 2];
        j->srcf[4 * i + 3] = 0.0f;
    }
    for (int x = 0; x < j->ow; x++) {
        const double xin = x + 0.5;
        ax[2 * x] = a[0] * xin;
        ax[2 * x + 1] = a[3] * xin;
    }
    for (int y = 0; y < j->oh; y++) {
        const double yin = y + 0.5;
        const double by = a[1] * yin, ey = a[4] * yin;
        unsigned char *out = j->dst + (size_t)y * j->ow * 3;
        for (int x = 0; x < j->ow; x++, out += 3) {
            const double xx = ax[2 * x] + by + a[2];
            const double yy = ax[2 * x + 1] + ey + a[5];
            if (xx < 0.0 || xx >= w || yy < 0.0 || yy >= h)
                continue;
            if (bicubic)
                bicubic_pixel(j, out, xx, yy);
            else
                bilinear_pixel(j, out, xx, yy);
        }
    }
}

/* nearest, a1 == a3 == 0: Pillow's scale engine (doubles stepped per column and row) */
static void
nearest_scale(const Job *j)
{
    const double *a = j->a;
    int *tab = (int *)j->scratch; /* zeroed, as Pillow's calloc'd table */
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    int xmin = j->ow, xmax = 0;
    for (int x = 0; x < j->ow; x++) {
        const int xin = coord(xo);
        if (xin >= 0 && xin < j->w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
            tab[x] = xin;
        }
        xo += a[0];
    }
    for (int y = 0; y < j->oh; y++) {
        const int yi = coord(yo);
        if (yi >= 0 && yi < j->h) {
            const unsigned char *in = j->src + (size_t)yi * j->w * 3;
            unsigned char *out = j->dst + (size_t)y * j->ow * 3;
            for (int x = xmin; x < xmax; x++)
                put(out + 3 * x, in + 3 * tab[x]);
        }
        yo += a[4];
    }
}

static inline int
fits_fixed(const double *a, int x, int y)
{
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
           fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

static inline int32_t
fixed(double v)
{
    return floor_int(v * 65536.0 + 0.5);
}

/* nearest: Pillow's 16.16 fixed-point engine (wrapping int32 sums, as its build does) */
static void
nearest_fixed(const Job *j)
{
    const double *a = j->a;
    const uint32_t a0 = (uint32_t)fixed(a[0]), a1 = (uint32_t)fixed(a[1]);
    const uint32_t a3 = (uint32_t)fixed(a[3]), a4 = (uint32_t)fixed(a[4]);
    uint32_t a2 = (uint32_t)fixed(a[2] + a[0] * 0.5 + a[1] * 0.5);
    uint32_t a5 = (uint32_t)fixed(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for (int y = 0; y < j->oh; y++) {
        uint32_t xx = a2, yy = a5;
        unsigned char *out = j->dst + (size_t)y * j->ow * 3;
        for (int x = 0; x < j->ow; x++, out += 3) {
            const int xin = (int32_t)xx >> 16;
            if (xin >= 0 && xin < j->w) {
                const int yin = (int32_t)yy >> 16;
                if (yin >= 0 && yin < j->h)
                    put(out, j->src + ((size_t)yin * j->w + xin) * 3);
            }
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

/* nearest: Pillow's floating-point engine (doubles stepped per pixel) */
static void
nearest_float(const Job *j)
{
    const double *a = j->a;
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < j->oh; y++) {
        double xx = xo, yy = yo;
        unsigned char *out = j->dst + (size_t)y * j->ow * 3;
        for (int x = 0; x < j->ow; x++, out += 3) {
            const int xin = coord(xx);
            if (xin >= 0 && xin < j->w) {
                const int yin = coord(yy);
                if (yin >= 0 && yin < j->h)
                    put(out, j->src + ((size_t)yin * j->w + xin) * 3);
            }
            xx += a[0];
            yy += a[3];
        }
        xo += a[1];
        yo += a[4];
    }
}

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
    if (src.len != (Py_ssize_t)j.w * j.h * 3 || dst.len != (Py_ssize_t)j.ow * j.oh * 3) {
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
    if (resample != 0) {
        filtered(&j, resample == 3);
    } else if (j.a[1] == 0 && j.a[3] == 0) {
        nearest_scale(&j);
    } else if (fits_fixed(j.a, 0, 0) && fits_fixed(j.a, j.ow, j.oh) &&
               fits_fixed(j.a, 0, j.oh) && fits_fixed(j.a, j.ow, 0)) {
        nearest_fixed(&j);
    } else {
        nearest_float(&j);
    }
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
    "Pillow's affine transform of RGB images, bit for bit (pipelines/pil_affine.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__affine(void)
{
    return PyModule_Create(&module);
}
