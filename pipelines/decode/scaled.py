"""CPU decode of large JPEGs at a reduced scale: only the pixels the output needs.

libjpeg-turbo can run its inverse DCT at ``M/8`` of the size (M = 1..8), which costs a
fraction of a full decode and is itself a good low-pass downscale. For each sample the crop
and resize are drawn by :mod:`geometry` on the FULL-size image (torchvision's arithmetic, so
the crop boxes and flips are torchvision's); here :func:`decode_scale` picks ``M`` (1, 2, 4
or 8: libjpeg-turbo's 1/8, 2/8, 4/8 and 8/8 inverse DCTs are vectorised, the others cost
more than the next power of two), the region is mapped onto the scaled image, and the same
antialiased resample, crop, flip and normalisation as :mod:`torch_resample` follow.

Which ``M`` (the parity rule, measured on real photographs: benchmarks/NOTES.md H13):

* a transform whose decoded region is fixed (``Resize``, ``CenterCrop``, the val presets
  of torchvision and timm): the smallest ``M`` at which the region's four edges lie on the
  scaled image's pixel grid (multiples of ``8/M`` full-size pixels, so the scaled region
  maps onto the full one exactly, with no sub-pixel shift or stretch) and the resample after
  the DCT scale still shrinks it by at least :data:`PARITY_SHRINK` (1.6x after 2/8 or 4/8,
  2x after 1/8) in each direction. Each image then stays within 0.01 mean absolute
  difference of torchvision's full decode (the most detailed real textures measured: 0.0078
  at the bounds; mixed photos about 0.002);
* a random region (``RandomResizedCrop``, a ``RandomCrop`` before the resize): the smallest
  ``M`` whose region still has the rows and columns the resample produces (:func:`eighths`),
  its edges rounded to the scaled grid. Its promise is torchvision's crop boxes and flips;
  its values move by the rounding of its edges (up to half a scaled pixel), not bounded
  by 0.01 on detailed photos (``scaled_decode="off"`` gives torchvision's values).

Decoding: where the optional ``_jpegroi`` extension is built (libjpeg-turbo's headers at
install), only the region is decoded (no inverse DCT outside it, and nothing of the file
below its last row is read: the entropy decoding of the rest is skipped; baseline JPEGs are
entropy-decoded by fastload's own Huffman decoder, the same coefficients in fewer steps,
NOTES.md H11) — for samples
already found intact; a strict decode (a sample's first, see fastload/loader/damage.py)
and installs without the extension decode the whole image at that scale with
``simplejpeg`` (strict; measured fastest of Pillow ``draft()``, simplejpeg and a full
decode). Both release the GIL, so the pool's threads decode in parallel; both give the same
pixels for the region (benchmarks/NOTES.md, "High-resolution photos", H5-H7, H9, H11).

Where it cannot apply (not a JPEG, a progressive or arithmetic-coded JPEG, a CMYK JPEG, a
plan :mod:`torch_resample` cannot finish) the caller runs the DALI graph instead. The
choice is made per batch by :func:`worth_it`, from the batch's files and draws only; a
strict decode of a batch that goes DALI's way runs here at 8/8 (``full_size``: the pixels
DALI's decode gives), so checking a file never changes a batch's pixels.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ..prefix import geometry as g
from ..prefix.plan import TransformPlan
from . import resample as torch_resample

__all__ = ["MAX_PIXEL_RATIO", "MIN_PIXELS", "PARITY_SHRINK", "Claims", "ScaledBatch",
           "ScaledDecodeError", "available", "decode_batch", "decode_sample", "decode_scale",
           "describe", "eighths", "fixed_region", "jpeg_is_sequential", "least_eighths",
           "region_decoder",
           "worth_it"]

# The scaled path pays off when it decodes far fewer pixels than DALI's region decode would
# (both pay the entropy decoding of the file, which no scale reduces). Measured, in CPU time
# per image (benchmarks/NOTES.md, "High-resolution photos"): at a ratio of scaled to region
# pixels of 0.78 (RRC on 1000x750) the scaled path was 9% slower, at 0.43 (RRC, 1400x1050)
# even, at 0.21 (RRC, 2100x1680) 12% faster, at 0.14 and below (Resize+CenterCrop) 19-60%
# faster.
MAX_PIXEL_RATIO = 0.4
# ImageNet-sized photos (~0.2 MP) keep DALI's path; tiny images would lose parity (the
# 8x8 DCT blocks of a scaled decode are coarse against a 32-px output).
MIN_PIXELS = 500_000
# The parity rule for a fixed region (see the module): a DCT scale M/8 below 8/8 only where
# the resample after it still shrinks the scaled region by at least PARITY_SHRINK[M] in each
# direction. Measured on real photographs with the region on the scaled grid
# (benchmarks/NOTES.md H13; Resize+CenterCrop, bilinear and bicubic), the per-image mean
# absolute difference from torchvision's full decode at those bounds was at most 0.0078 on
# the most detailed textures (0.0023 on mixed photos); at a 1.5x shrink bicubic reached
# 0.0091 at 2/8 and 0.0096 at 1/8 (the 1/8 decode is a block average: it needs more), at
# 1.2x 0.014, at 1.07x 0.015.
PARITY_SHRINK = {1: 2.0, 2: 1.6, 4: 1.6}

try:  # the region decoder (setup.py builds it where libjpeg-turbo's headers are)
    from .._jpegroi import decode_region as _decode_region
except ImportError:  # whole-image decodes at the same scale: the same pixels, more work
    _decode_region = None

_SOF_SEQUENTIAL = (0xC0, 0xC1)  # baseline, extended sequential (Huffman)
_SOF_OTHER = frozenset(range(0xC2, 0xD0)) - {0xC4, 0xC8, 0xCC}  # progressive, lossless, ...


def available() -> bool:
    """simplejpeg is importable (a core dependency; without it the DALI path runs)."""
    import importlib.util

    return importlib.util.find_spec("simplejpeg") is not None


# Luma sampling factors (h, v) libjpeg-turbo's TurboJPEG API (simplejpeg) decodes, the
# chroma at 1x1: 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1. Others (4:1:0, 4:4:1, 3x1) it refuses
# ("Could not determine subsampling level"): DALI decodes them.
_TURBO_LUMA = frozenset({(1, 1), (2, 1), (2, 2), (1, 2), (4, 1)})
# Chroma subsampled across only: a scaled decode's chroma differs more from a full decode
# resampled (4:2:2 at 2/8 on 2.1 MP photos: 0.0042 median per-image difference, 4:1:1 up to
# 0.0103, against 0.0015 and 0.0044 at 4/8): at least 4/8 where the parity rule applies.
_WIDE_CHROMA = frozenset({(2, 1), (4, 1)})


def _frame(data: np.ndarray | bytes) -> tuple[int, int, list[tuple[int, int]]] | None:
    """``(SOF marker, sample precision, sampling factors (h, v) per component)`` of a JPEG's
    frame header; None for no JPEG, a scan before any frame header, or a header cut short."""
    view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else data
    n = len(view)
    if n < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    pos = 2
    while pos + 4 <= n:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = (int(view[pos + 2]) << 8) | int(view[pos + 3])
        if marker in _SOF_SEQUENTIAL or marker in _SOF_OTHER:
            if pos + 10 > n:
                return None
            count = int(view[pos + 9])
            if pos + 10 + 3 * count > n:
                return None
            factors = [(int(view[pos + 11 + 3 * k]) >> 4, int(view[pos + 11 + 3 * k]) & 15)
                       for k in range(count)]
            return int(marker), int(view[pos + 4]), factors
        if marker == 0xDA:  # a scan before any frame header
            return None
        pos += 2 + length
    return None


def jpeg_is_sequential(data: np.ndarray | bytes) -> bool:
    """``data`` is an 8-bit sequential Huffman JPEG with 1 component, or 3 in a sampling
    layout libjpeg-turbo's TurboJPEG API decodes (what the scaled path decodes); False for
    progressive, arithmetic or 12-bit JPEGs, other layouts and formats, damaged headers."""
    frame = _frame(data)
    if frame is None:
        return False
    marker, precision, factors = frame
    if marker not in _SOF_SEQUENTIAL or precision != 8 or len(factors) not in (1, 3):
        return False
    return len(factors) == 1 or (factors[1] == factors[2] == (1, 1)
                                 and factors[0] in _TURBO_LUMA)


def least_eighths(data: np.ndarray | bytes) -> int:
    """The smallest DCT scale ``M`` (of ``M/8``) the parity rule allows for ``data``: 4 for
    chroma subsampled across only (4:2:2, 4:1:1), else 1."""
    frame = _frame(data)
    return 4 if frame is not None and len(frame[2]) == 3 and frame[2][0] in _WIDE_CHROMA else 1


def region_decoder() -> bool:
    """The ``_jpegroi`` extension is built: regions are decoded alone (see the module)."""
    return _decode_region is not None


def eighths(params: g.SampleParams) -> int:
    """Smallest ``M`` (1..8) such that the decoded region at scale ``M/8`` has at least the
    rows and columns it is resampled to (8: full size, no reduction)."""
    rh, rw, _, _ = torch_resample.full_resize(params)
    dh, dw = params.decode[2], params.decode[3]
    return max(1, math.ceil(8 * rh / dh), math.ceil(8 * rw / dw)) if dh and dw else 8


def fixed_region(steps: Sequence[g.Step]) -> bool:
    """The plan's decoded region is the same for every draw: no ``RandomResizedCrop`` and no
    ``RandomCrop`` before its resample (flips and crops after the resample do not move it).
    :func:`decode_scale` applies the parity rule to such plans."""
    for step in steps:
        if isinstance(step, (g.RandomResizedCrop, g.RandomCrop)):
            return False
        if isinstance(step, (g.Resize, g.ResizeKeepRatio)):
            return True
    return True


def decode_scale(params: g.SampleParams, parity: bool = True, least: int = 1) -> int:
    """The ``M`` the sample is decoded at: :func:`eighths` rounded up to 1, 2, 4 or 8, and,
    with ``parity`` (a :func:`fixed_region` plan), at least ``least`` (the file's
    :func:`least_eighths`) and raised until the region's edges lie on the ``M/8`` grid and the
    resample still shrinks by ``PARITY_SHRINK[M]`` (8 at most).

    libjpeg-turbo vectorises only those inverse DCTs (and, at them, can size the chroma
    blocks to skip upsampling). Measured on 2100x1680 photos, whole-image decodes cost 1.0,
    1.1, 1.4, 1.2, 2.0, 2.4, 2.9, 1.5 times the 1/8 decode for M = 1..8, so 3/8 costs more than
    4/8 and 5/8-7/8 far more than 8/8 (benchmarks/NOTES.md H6); the larger scale also keeps
    more detail for the resample."""
    m = eighths(params)
    m = 1 if m <= 1 else 2 if m <= 2 else 4 if m <= 4 else 8
    if not parity:
        return m
    m = max(m, least)
    rh, rw, _, _ = torch_resample.full_resize(params)
    top, left, dh, dw = params.decode
    while m < 8:
        pixel = 8 // m  # full-size pixels per scaled pixel
        on_grid = top % pixel == 0 and left % pixel == 0 and dh % pixel == 0 and dw % pixel == 0
        least = PARITY_SHRINK[m]
        if on_grid and dh * m >= least * 8 * rh and dw * m >= least * 8 * rw:
            return m
        m *= 2
    return 8


def worth_it(plan_ok: bool, encoded: Sequence[np.ndarray], sizes: Sequence[tuple[int, int]],
             params: Sequence[g.SampleParams], parity: bool = True) -> bool:
    """The batch goes the scaled way: ``plan_ok`` (device and plan allow it), every sample a
    sequential JPEG of at least ``MIN_PIXELS`` (``sizes``: (height, width) each), and the
    scaled decodes (at :func:`decode_scale` with ``parity``) produce at most
    ``MAX_PIXEL_RATIO`` of the pixels that decoding each sample's region at full size would
    (with the region decoder that ratio is (M/8)^2: batches decoded at 4/8 or less qualify;
    without it, the whole image at M/8 counts). Depends only on the batch's files and
    draws, never on what this process has decoded before."""
    if not plan_ok or not params:
        return False
    if any(h * w < MIN_PIXELS for h, w in sizes):
        return False
    if any(p.resize != params[0].resize for p in params):  # the DALI path names the error
        return False
    # pixels decoded: the region only with the region decoder, else the whole image
    scaled = sum((p.decode[2] * p.decode[3] if region_decoder() else h * w)
                 * decode_scale(p, parity, least_eighths(e)) ** 2 / 64
                 for (h, w), p, e in zip(sizes, params, encoded, strict=True))
    region = sum(p.decode[2] * p.decode[3] for p in params)
    if scaled > MAX_PIXEL_RATIO * region:
        return False
    return all(jpeg_is_sequential(e) for e in encoded)


_LOCAL = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's reusable decode buffer (large blocks would be mapped afresh each time)."""
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _LOCAL.buf = np.empty(nbytes, np.uint8)
    return buf


def decode_sample(data: np.ndarray, params: g.SampleParams, full_size: bool = False,
                  strict: bool = False, parity: bool = True) -> tuple[np.ndarray, g.SampleParams]:
    """Decode ``data`` at the scale :func:`decode_scale` picks (with ``parity``; 8/8 with
    ``full_size``); return the HWC uint8 region the resample reads (a view into this
    thread's scratch buffer, valid until its next call) and ``params`` restated for that
    region (the same output size and crop). Damaged entropy-coded data in what is decoded
    raises ``ValueError`` with libjpeg's report; ``strict`` decodes the whole file
    (simplejpeg, the same pixels), so damage anywhere in it does."""
    import simplejpeg

    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    top, left, dh, dw = params.decode
    if top + dh > height or left + dw > width:  # drawn for another size: as DALI's slice says
        raise ValueError(f"the cropping window (anchor [{top}, {left}], shape [{dh}, {dw}]) "
                         f"is not valid for image dimensions [{height} x {width}]")
    m = 8 if full_size else decode_scale(params, parity, least_eighths(data))
    sh, sw = -(-height * m // 8), -(-width * m // 8)
    # The region's edges on the scaled grid, rounded to whole pixels.
    y0, x0 = min(sh - 1, round(top * m / 8)), min(sw - 1, round(left * m / 8))
    y1 = max(y0 + 1, min(sh, round((top + dh) * m / 8)))
    x1 = max(x0 + 1, min(sw, round((left + dw) * m / 8)))
    buf = _scratch(sh * sw * 3)
    if _decode_region is not None and not strict:
        buf = buf[: sh * sw * 3]
        image = buf.reshape(sh, sw, 3)
        # only the rows and columns the kept output pixels read (a crop after the resize
        # reads part of the region): the resample of the rest of the canvas is discarded
        rows, cols = _support(params, m, y1 - y0, x1 - x0)
        _decode_region(data, m, y0 + rows[0], x0 + cols[0], rows[1] - rows[0],
                       cols[1] - cols[0], buf)
    else:
        image = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=sh, min_width=sw,
                                       buffer=buf)
        if image.shape[:2] != (sh, sw):  # libjpeg-turbo picked another scale: say it plainly
            raise ValueError(f"expected a {sh}x{sw} decode at scale {m}/8 of {height}x{width}, "
                             f"got {image.shape[0]}x{image.shape[1]}")
    region = image[y0:y1, x0:x1]
    fy, fx = (y1 - y0) / dh, (x1 - x0) / dw
    (a, b), (c, d) = params.resize_roi
    scaled = dataclasses.replace(params, decode=(0, 0, y1 - y0, x1 - x0),
                                 resize_roi=((a * fy, b * fx), (c * fy, d * fx)))
    return region, scaled


def _support(params: g.SampleParams, m: int, height: int, width: int
             ) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((row0, row1), (col0, col1))`` of the ``height`` x ``width`` decoded region that the
    resample reads for the output pixels it keeps, with a pixel of margin: torch's (and
    Pillow's) filter for output pixel i spans ``s * (i + 0.5) +- support`` source pixels,
    ``s`` the scale and ``support`` the kernel's half width (1 bilinear, 2 bicubic) times
    ``max(s, 1)``."""
    rh, rw, top, left = torch_resample.full_resize(params)
    oh, ow = params.resize
    half = 1 if params.interpolation == "linear" else 2  # None (the plan's mode): bicubic's

    def span(size: int, resized: int, first: int, count: int) -> tuple[int, int]:
        s = size / resized
        support = half * max(s, 1.0)
        lo = math.floor(s * (first + 0.5) - support + 0.5) - 1
        hi = math.ceil(s * (first + count - 0.5) + support + 0.5) + 1
        return max(0, lo), min(size, hi)

    return span(height, rh, top, oh), span(width, rw, left, ow)


class Claims:
    """Sample positions ``0..n-1``, each handed to the first thread that asks for one: the
    pool's threads share a batch's samples as they come free, so one with cheaper samples
    (RandomResizedCrop's crops differ 10x in area) does not wait for the other at the end
    of each batch, as fixed shares did."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._next = 0
        self._lock = threading.Lock()

    def __iter__(self):
        while True:
            with self._lock:
                i, self._next = self._next, self._next + 1
            if i >= self._n:
                return
            yield i


def decode_batch(plan: TransformPlan, encoded: Sequence[np.ndarray],
                 params: Sequence[g.SampleParams], out: torch.Tensor,
                 indices: Iterable[int], full_size: bool = False, strict: bool = False) -> None:
    """Decode (at :func:`decode_scale`, the parity rule where the plan's region is fixed;
    8/8 with ``full_size``), resample, flip and normalise samples ``indices`` of the batch
    into ``out`` (N x C x H x W of ``plan.output_dtype``); ``ValueError`` names a sample that
    fails (the first one this call meets: it decodes none after it)."""
    writer = torch_resample.SampleWriter(plan, out)
    parity = fixed_region(plan.steps)
    for i in indices:
        try:
            region, scaled = decode_sample(encoded[i], params[i], full_size, strict, parity)
        except Exception as err:  # any failure names the sample
            raise ScaledDecodeError(str(err), [i]) from None
        writer.write(i, region, scaled)


class ScaledDecodeError(ValueError):
    """A sample the scaled path could not decode; ``sample_indices`` are its batch positions."""

    def __init__(self, message: str, sample_indices: Sequence[int]):
        self.message = message
        self.sample_indices = list(sample_indices)
        super().__init__(f"cannot decode samples {self.sample_indices} of the batch: {message}")


class ScaledBatch:
    """One batch in flight on the scaled path: one task per ``pool`` thread, submitted at
    construction, each decoding the samples it :class:`Claims` until none is left;
    :meth:`result` waits and returns the N x C x H x W batch."""

    def __init__(self, plan: TransformPlan, encoded: Sequence[np.ndarray],
                 params: Sequence[g.SampleParams], pool, buffers=None, full_size: bool = False,
                 strict: bool = False):
        n = len(params)
        h, w = torch_resample.check_sizes(params)
        shape = (n, 3, h, w)
        out = (torch.empty(shape, dtype=plan.output_dtype) if buffers is None
               else buffers.empty(shape, plan.output_dtype))
        self._out = out
        claims = Claims(n)
        self._futures = [pool.submit(decode_batch, plan, encoded, params, out, claims,
                                     full_size, strict)
                         for _ in range(torch_resample.thread_count(pool, n))]

    def result(self) -> torch.Tensor:
        """The batch; :class:`ScaledDecodeError` names the samples that failed."""
        failed: list[int] = []
        message = ""
        for future in self._futures:
            try:
                future.result()
            except ScaledDecodeError as err:
                failed += err.sample_indices
                message = message or err.message
        if failed:
            raise ScaledDecodeError(message, sorted(failed))
        out, self._out = self._out, None
        return out

    def cancel(self) -> None:
        """Drop the batch: tasks not started are cancelled, running ones finish unseen."""
        for future in self._futures:
            future.cancel()
        self._out = None


def describe(plan: TransformPlan, device: str) -> str:
    """One line: how a plan's JPEGs are decoded on ``device`` ("cpu" or "cuda"/"gpu")."""
    if device == "cpu" and torch_resample.eligible(plan) and available():
        how = ("the crop's region only (libjpeg-turbo's region API, fastload's Huffman "
               "decoder for baseline JPEGs; a sample's first decode whole, simplejpeg)"
               if region_decoder() else "the whole image (simplejpeg)")
        rule = ("parity with torchvision: the smallest whose grid holds the region's edges "
                f"and leaves the resample shrinking >= {PARITY_SHRINK[2]:g}x, "
                f"{PARITY_SHRINK[1]:g}x after 1/8" if fixed_region(plan.steps) else
                "a random crop: the smallest that keeps the resample's pixels")
        return (f"decode: sequential JPEGs of >= {MIN_PIXELS / 1e6:g} MP at a 1/8, 2/8, 4/8 or "
                f"8/8 DCT scale ({rule}) in the resample threads, {how}, when that decodes "
                f"<= {MAX_PIXEL_RATIO:.0%} of the pixels of a full-size region decode; "
                "else DALI's decoder")
    return "decode: DALI's decoder (full size or region)"
