/* Pillow's bilinear and bicubic affine sampling of an RGB image, bit for bit (part of
 * _affine: _affine.c describes what it computes).
 *
 * Not Pillow's, and exact: the filters read a float copy of the source, 4 lanes a pixel (its
 * uint8 values, exact as floats), and compute the three channels as lanes of one vector of
 * doubles (element-wise IEEE operations: each lane is Pillow's scalar arithmetic); Pillow's
 * int differences of samples are exact in double. A fraction of exactly 0 along an axis makes
 * the interpolation along it return its centre sample (``p + 0 * q == p`` for finite q), so
 * a shear or translation, whose rows (columns) land on whole pixels, reads one row (column)
 * instead of four. The filter loop also has an x86-64-v3 clone (AVX2), picked at load time.
 */
#include "affine.h"

#include <string.h>

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

/* the entry _affine.c calls: the clone for this CPU (a static one, so that only the module's
 * init function is exported) */
void
fl_affine_filtered(const Job *j, int bicubic)
{
    filtered(j, bicubic);
}
