"""CPU resampling in torch after a DALI region-of-interest decode.

On CPU the resize, not the decode, dominates the graph. torch's antialiased bilinear resize of
uint8 images reproduces Pillow's to one grey level and costs about half of DALI's CPU resize,
so for plans whose resample is followed only by flips and crops inside the image
(``RandomResizedCrop`` and flips; ``Resize`` then ``CenterCrop``) the DALI graph stops after
decoding (the region, where a crop comes first) and this module resizes, crops, flips and
normalises each sample straight into the output batch, with each sample's interpolation
(``SampleParams.interpolation``: drawn per sample for timm's ``interpolation='random'``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

from ..prefix import geometry as g
from ..prefix.plan import TransformPlan
from ..seams.torch_private import upsample_aa_out

try:  # the one-pass C kernel (setup.py builds it when a compiler is there)
    from .._normalize import hwc_to_chw as _hwc_to_chw
except ImportError:  # torch ops below give the same values, slower
    _hwc_to_chw = None

__all__ = ["eligible", "resample_batch", "SampleWriter", "check_sizes", "thread_count",
           "thread_shares", "full_resize"]

_MODES = {"linear": "bilinear", "cubic": "bicubic"}
# The kernels F.interpolate(..., antialias=True) runs (torch_seams.upsample_aa_out), called
# with an ``out=`` tensor: for a 3-channel uint8 image, a channels-last output lets torch skip
# repacking its RGBA work buffer into planes (about 0.2 of 0.5 ms per image); the values are
# the same.


def eligible(plan: TransformPlan) -> bool:
    """After its resample the plan only crops inside the image (``CenterCrop``, unpadded
    ``RandomCrop``) and flips; no padding, no colour jitter."""
    if not plan.has_resize or plan.pad_crop or plan.jitter is not None:
        return False
    if any(mode not in _MODES for mode in plan.interpolations):
        return False
    if plan.output_dtype not in (torch.float32, torch.float16, torch.uint8):
        return False
    seen_resample = False
    for step in plan.steps:
        if isinstance(step, (g.Resize, g.ResizeKeepRatio, g.RandomResizedCrop)):
            seen_resample = True
        elif seen_resample and not isinstance(step, (g.Flip, g.CenterCrop, g.RandomCrop)):
            return False
    return True


def full_resize(p: g.SampleParams) -> tuple[int, int, int, int]:
    """``(height, width, top, left)``: the size the whole decoded region is resampled to, and
    where the output lies in it (geometry folds a crop after the resize into ``resize_roi``;
    its integers come back exactly from the float region)."""
    dh, dw = p.decode[2], p.decode[3]
    h, w = p.resize
    (y0, x0), (y1, x1) = p.resize_roi
    rh, rw = round(h * dh / (y1 - y0)), round(w * dw / (x1 - x0))
    return rh, rw, round(y0 * rh / dh), round(x0 * rw / dw)


class SampleWriter:
    """Writes resampled, cropped, flipped, normalised samples into one output batch ``out``
    (N x C x H x W of ``plan.output_dtype``); one per batch, shared by the pool's threads."""

    def __init__(self, plan: TransformPlan, out: torch.Tensor):
        self.out = out
        self.size = (out.shape[2], out.shape[3])
        self._default = plan.interpolations[0]
        self._antialias = plan.antialias
        # per mode: F.interpolate's name, and its antialiased kernel with out= (or None)
        self._kernels = {
            m: (_MODES[m], upsample_aa_out(_MODES[m]) if plan.antialias else None)
            for m in plan.interpolations
        }
        self._normalise = plan.output_dtype != torch.uint8
        self._in_place = plan.output_dtype == torch.float32
        if self._normalise:
            self._mean = torch.tensor(plan.mean, dtype=torch.float32).view(3, 1, 1)
            self._inv_std = (1.0 / torch.tensor(plan.std, dtype=torch.float32)).view(3, 1, 1)
            # The same float32 numbers for the C kernel, which computes (v - mean) * inv_std
            # into the batch in one pass (torch: a strided copy, then two more passes).
            self._sub = self._mean.flatten().tolist()
            self._mul = self._inv_std.flatten().tolist()
        self._kernel = _hwc_to_chw if self._in_place else None
        self._local = threading.local()

    def write(self, i: int, decoded, params: g.SampleParams) -> None:
        """Resample the HWC uint8 region ``decoded`` per ``params`` into ``out[i]``."""
        h, w = self.size
        src = torch.from_numpy(np.asarray(decoded)).permute(2, 0, 1).unsqueeze(0)
        rh, rw, top, left = full_resize(params)
        mode, aa_out = self._kernels[params.interpolation or self._default]
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.shape[2:] != (rh, rw):  # (rh, rw) != (h, w): a crop follows
            buf = self._local.buf = torch.empty((1, rh, rw, 3), dtype=torch.uint8).permute(
                0, 3, 1, 2)
        if aa_out is not None:  # into a channels-last buffer: no RGBA -> planar repack
            y = aa_out(src, [rh, rw], False, None, None, out=buf)[0]
        else:
            y = torch.nn.functional.interpolate(
                src, size=(rh, rw), mode=mode, antialias=self._antialias,
                align_corners=False,
            )[0]
        y = y[:, top : top + h, left : left + w]
        hwc = y.permute(1, 2, 0)
        if self._kernel is not None and not params.vflip and hwc.stride()[1:] == (3, 1):
            self._kernel(hwc.numpy(), self.out[i].numpy(), self._sub, self._mul, params.hflip)
            return
        flips = [d for d, on in ((-1, params.hflip), (-2, params.vflip)) if on]
        if flips:
            y = y.flip(flips)
        dst = self.out[i]
        if not self._normalise:
            dst.copy_(y)
        elif self._in_place:  # (y - mean) * inv_std in float32, straight into the batch
            dst.copy_(y).sub_(self._mean).mul_(self._inv_std)
        else:  # float16: the float32 arithmetic, then one rounding
            dst.copy_((y.to(torch.float32) - self._mean).mul_(self._inv_std))


def check_sizes(params: Sequence[g.SampleParams]) -> tuple[int, int]:
    """The batch's one output ``(h, w)``; ``ValueError`` when samples differ."""
    h, w = params[0].resize
    if any(p.resize != (h, w) for p in params):
        sizes = sorted({p.resize for p in params})
        raise ValueError(
            f"the images of a batch have different sizes {sizes}; add a crop so they can be stacked"
        )
    return h, w


def thread_count(pool, n: int) -> int:
    """How many of ``pool``'s threads a batch of ``n`` samples keeps busy (1 to n)."""
    return max(1, min(n, getattr(pool, "_max_workers", 1)))


def thread_shares(pool, n: int) -> list[range]:
    """Samples ``0..n-1`` dealt round-robin into one share per pool thread (a few hand-overs
    per batch instead of one per image)."""
    parts = thread_count(pool, n)
    return [range(k, n, parts) for k in range(parts)]


def resample_batch(
    plan: TransformPlan,
    decoded: Sequence,
    params: Sequence[g.SampleParams],
    pool=None,
    buffers=None,
) -> torch.Tensor:
    """Resize each decoded HWC uint8 sample to its ``params.resize``, flip, normalise; return
    an N x C x H x W tensor of ``plan.output_dtype`` (fresh memory). ``decoded[i]`` must
    stay valid during the call. ``pool``: an executor to spread samples over threads (on a
    loaded 2-core machine, calling these small ops from the main thread with torch's default
    intra-op threads was measured up to 10x slower than from worker threads). ``buffers``: a
    :class:`~fastload.pipelines.decode.buffers.BatchBuffers` to take the output's memory from."""
    n = len(params)
    h, w = check_sizes(params)
    if buffers is None:
        out = torch.empty((n, 3, h, w), dtype=plan.output_dtype)
    else:
        out = buffers.empty((n, 3, h, w), plan.output_dtype)
    writer = SampleWriter(plan, out)

    def some(indices: range) -> None:
        for i in indices:
            writer.write(i, decoded[i], params[i])

    if pool is None:
        some(range(n))
    else:
        list(pool.map(some, thread_shares(pool, n)))
    return out
