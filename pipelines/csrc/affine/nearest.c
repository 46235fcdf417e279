/* Pillow's three nearest-neighbour affine engines, bit for bit (part of _affine: _affine.c),
 * and the choice among them Pillow makes. */
#include "affine.h"

#include <limits.h>
#include <math.h>

/* Pillow's COORD: -1 below zero, else truncation (what x86-64 gives for values past int) */
static inline int
coord(double v)
{
    if (v < 0.0)
        return -1;
    return v < 2147483648.0 ? (int)v : INT_MIN;
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

void
fl_affine_nearest(const Job *j)
{
    if (j->a[1] == 0 && j->a[3] == 0)
        nearest_scale(j);
    else if (fits_fixed(j->a, 0, 0) && fits_fixed(j->a, j->ow, j->oh) &&
             fits_fixed(j->a, 0, j->oh) && fits_fixed(j->a, j->ow, 0))
        nearest_fixed(j);
    else
        nearest_float(j);
}
