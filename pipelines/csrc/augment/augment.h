/* Private declarations shared by the sources of the _augment extension (setup.py lists
 * them): the loop attribute, the buffer helper and the Python-visible functions, which
 * _augment.c puts in the module table. Not installed; nothing outside these files uses it. */
#ifndef FASTLOAD_AUGMENT_H
#define FASTLOAD_AUGMENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

/* Shared between the pieces, kept out of the module's exported symbols */
#define FL_HIDDEN __attribute__((visibility("hidden")))

/* The loops are compiled for x86-64-v3 (AVX2 + FMA) beside the baseline and picked at load
 * time */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) /* ifunc: glibc only */
#define LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOP
#endif

/* A C-contiguous buffer of ``itemsize``-byte items (writable if asked); -1 with an error set */
FL_HIDDEN int fl_augment_get(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize,
                             const char *name);
/* Two buffers as fl_augment_get gets each; on failure neither is held. */
FL_HIDDEN int fl_augment_get_pair(PyObject *a_obj, Py_buffer *a, int a_writable,
                                  Py_ssize_t a_itemsize, const char *a_name, PyObject *b_obj,
                                  Py_buffer *b, int b_writable, Py_ssize_t b_itemsize,
                                  const char *b_name);

/* _augment_colour.c */
FL_HIDDEN PyObject *fl_augment_gray(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_augment_blend(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_augment_sharpen(PyObject *self, PyObject *args);

/* _augment_mix.c */
FL_HIDDEN PyObject *fl_augment_mix(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_augment_truncate_u8(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_augment_mixup(PyObject *self, PyObject *args);
FL_HIDDEN PyObject *fl_augment_interleave(PyObject *self, PyObject *args);

/* _augment_grid.c */
FL_HIDDEN PyObject *fl_augment_grid_sample(PyObject *self, PyObject *args);

#endif
