/* AugMix's and MixUp's mixing (part of _augment: _augment.c): AugMix's weighted sum of its
 * chains into a float32 accumulator and its truncation back to uint8, v2 MixUp's blend of
 * two rows of a batch, and the planar -> interleaved copy of a finished image. The float32
 * products and sums are each rounded (-ffp-contract=off), as torch's separate ops round them.
 */
#include "augment.h"

/* AugMix's sum of its chains: acc = w * src (init) or acc + w * src */
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

PyObject *
fl_augment_mix(PyObject *self, PyObject *args)
{
    PyObject *acc_obj, *src_obj;
    float w;
    int init;
    if (!PyArg_ParseTuple(args, "OOfp", &acc_obj, &src_obj, &w, &init))
        return NULL;
    Py_buffer acc, src;
    if (fl_augment_get_pair(acc_obj, &acc, 1, 4, "acc",
                            src_obj, &src, 0, 1, "src") < 0)
        return NULL;
    PyObject *result = NULL;
    if (acc.len % 4 != 0 || acc.len / 4 != src.len) {
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

/* the accumulator back to uint8, truncated (torch's .to(uint8) of values in [0, 256)); a
 * value outside (a caller's weights outside [0, 1], NaN) is clamped first, NaN to 0, so
 * that no conversion is undefined */
LOOP static void
truncate_loop(const float *restrict src, unsigned char *restrict dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        float x = src[i] > 0.0f ? src[i] : 0.0f;
        x = x < 255.0f ? x : 255.0f;
        dst[i] = (unsigned char)(int32_t)x;
    }
}

PyObject *
fl_augment_truncate_u8(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    if (!PyArg_ParseTuple(args, "OO", &src_obj, &dst_obj))
        return NULL;
    Py_buffer src, dst;
    if (fl_augment_get_pair(src_obj, &src, 0, 4, "src",
                            dst_obj, &dst, 1, 1, "dst") < 0)
        return NULL;
    PyObject *result = NULL;
    if (src.len % 4 != 0 || src.len / 4 != dst.len) {
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

/* v2 MixUp's image blend, one row of the batch in place: cur = prev * a + cur * b
 * (torchvision: inpt.roll(1, 0).mul_(1 - lam).add_(inpt.mul(lam)), each step rounded) */
LOOP static void
mixup_loop(const float *restrict prev, float *restrict cur, Py_ssize_t n, float a, float b)
{
    for (Py_ssize_t i = 0; i < n; i++)
        cur[i] = prev[i] * a + cur[i] * b;
}

PyObject *
fl_augment_mixup(PyObject *self, PyObject *args)
{
    PyObject *prev_obj, *cur_obj;
    float a, b;
    if (!PyArg_ParseTuple(args, "OOff", &prev_obj, &cur_obj, &a, &b))
        return NULL;
    Py_buffer prev, cur;
    if (fl_augment_get_pair(prev_obj, &prev, 0, 4, "prev",
                            cur_obj, &cur, 1, 4, "cur") < 0)
        return NULL;
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

PyObject *
fl_augment_interleave(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *dst_obj;
    Py_ssize_t channels;
    if (!PyArg_ParseTuple(args, "OOn", &src_obj, &dst_obj, &channels))
        return NULL;
    Py_buffer src, dst;
    if (fl_augment_get_pair(src_obj, &src, 0, 1, "src",
                            dst_obj, &dst, 1, 1, "dst") < 0)
        return NULL;
    PyObject *result = NULL;
    if (channels < 1 || dst.len != src.len || src.len % channels != 0) {
        PyErr_SetString(PyExc_ValueError, "interleave(src, dst, channels): uint8 C x N -> N x C");
        goto done;
    }
    const Py_ssize_t n = src.len / channels;
    const unsigned char *in = src.buf;
    unsigned char *out = dst.buf;
    Py_BEGIN_ALLOW_THREADS
    if (n == 0) {
        /* no pixels: nothing to copy (the loop over channels would run channels times) */
    } else if (channels == 3) {
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
