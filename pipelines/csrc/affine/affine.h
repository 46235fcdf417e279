/* Private declarations shared by the sources of the _affine extension (setup.py lists
 * them): the job both engines read, the two Pillow helpers both use, and the engines that
 * _affine.c calls. Not installed; nothing outside these files uses it. */
#ifndef FASTLOAD_AFFINE_H
#define FASTLOAD_AFFINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Shared between the pieces, kept out of the module's exported symbols */
#define FL_HIDDEN __attribute__((visibility("hidden")))

typedef struct {
    const unsigned char *src;
    int w, h; /* source */
    unsigned char *dst;
    int ow, oh; /* output */
    double a[6];
    double *scratch; /* 2 * ow doubles, zeroed: allocated with the GIL held */
    float *srcf;     /* the filters' copy of src, 4 floats a pixel (nearest: NULL) */
} Job;

/* Pillow's FLOOR ((int)floor(v) below zero, else truncation) for |v| inside int range */
static inline int
floor_int(double v)
{
    int i = (int)v;
    return (v < 0.0 && i > v) ? i - 1 : i;
}

/* one RGB pixel */
static inline void
put(unsigned char *out, const unsigned char *in)
{
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[2];
}

/* _affine_filter.c: bilinear (bicubic false) or bicubic into the filled j->dst */
FL_HIDDEN void fl_affine_filtered(const Job *j, int bicubic);

/* _affine_nearest.c: nearest into the filled j->dst, with the engine Pillow picks for j->a */
FL_HIDDEN void fl_affine_nearest(const Job *j);

#endif
