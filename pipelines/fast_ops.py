"""Exact, faster drop-in for torchvision's auto-augment ``_apply_op`` on uint8 CPU tensors.

Contract: ``apply_op(img, op_name, magnitude, interpolation, fill)`` takes the same arguments as
``torchvision.transforms.autoaugment._apply_op`` and returns the same values, bit for bit
(``torch.equal``), for every input; errors are torchvision's too.

Fast paths apply to contiguous CPU ``torch.uint8`` tensors of shape (..., C, H, W), C in {1, 3},
with a finite int/float magnitude in the op's valid range. Everything else (PIL images, other
dtypes, CUDA, "Identity", "Invert", "Posterize", the affine ops) goes to torchvision unchanged.

Why each fast path is exact:

* Brightness, Contrast, Color, AutoContrast: torchvision's per-pixel float32 arithmetic
  (``_blend``, ``autocontrast``) is replayed op for op (same IEEE multiplications, additions,
  clamps, same operand order), only in place and without the zero image / temporaries. The
  per-image statistics (grayscale, its mean, per-channel min/max) are computed with the same
  torch ops on same-shaped tensors. The final float -> uint8 cast goes through int32: both
  truncate, and the values are already clamped to [0, 255].
* Sharpness: torchvision's degenerate image is ``round(conv2d(img, [[1,1,1],[1,5,1],[1,1,1]]/13))``
  in float32. With n = (3x3 box sum + 4 * centre), an integer in [0, 3315], the exact value is n/13,
  which is never within 1/26 of a half-integer (2n - 13(2k+1) is odd), while the float32 error of
  the 9-tap conv is below 1e-3; so rounding the float conv equals rounding n/13, computed here
  in int32 as ((n + 6) * 5042) >> 16 (exact for all n in range).
* Equalize: the same integer histogram / step / cumulative-sum lut as torchvision's
  ``_scale_channel``, for all channels at once, applied with one gather.
* Solarize: a per-pixel, per-value map, so its 256-entry table is taken by running torchvision
  itself on a 0..255 ramp (cached per threshold) and applied with one gather.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

# Seam: torchvision's ``_apply_op`` is private API (torchvision.transforms.autoaugment). Every
# delegated call, and the Solarize table, goes through this one name.
from torchvision.transforms.autoaugment import _apply_op as _torchvision_apply_op

__all__ = ["apply_op"]

_FAST_OPS = frozenset(
    {"Brightness", "Color", "Contrast", "Sharpness", "AutoContrast", "Equalize", "Solarize"}
)
_GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale coefficients


def apply_op(img: Any, op_name: str, magnitude: float, interpolation: Any, fill: Any) -> Any:
    """``torchvision.transforms.autoaugment._apply_op`` with exact fast paths (see module doc)."""
    if op_name in _FAST_OPS and _is_fast_input(img) and _is_plain_number(magnitude):
        if op_name == "Equalize":
            if img.ndim <= 4:  # torchvision rejects other ranks
                return _equalize(img)
        elif op_name == "AutoContrast":
            return _autocontrast(img)
        elif op_name == "Solarize":
            if magnitude <= 255:  # above: torchvision raises
                return _solarize(img, magnitude)
        else:
            factor = 1.0 + magnitude
            if factor >= 0:  # below: torchvision raises
                if op_name == "Brightness":
                    return _brightness(img, factor)
                if op_name == "Contrast":
                    return _contrast(img, factor)
                # Color of a 1-channel image and Sharpness of an image thinner than 3 pixels
                # return the input object itself in torchvision; left to it.
                if op_name == "Color" and img.shape[-3] == 3:
                    return _color(img, factor)
                # torchvision's conv2d rejects more than 4 dimensions.
                if op_name == "Sharpness" and img.ndim <= 4 and min(img.shape[-2:]) > 2:
                    return _sharpness(img, factor)
    return _torchvision_apply_op(img, op_name, magnitude, interpolation=interpolation, fill=fill)


def _is_fast_input(img: Any) -> bool:
    return (
        type(img) is Tensor
        and img.dtype == torch.uint8
        and img.device.type == "cpu"
        and img.ndim >= 3
        and img.shape[-3] in (1, 3)
        and img.numel() > 0
        and img.is_contiguous()
    )


def _is_plain_number(magnitude: Any) -> bool:
    return type(magnitude) in (float, int) and math.isfinite(magnitude)


def _to_uint8(x: Tensor) -> Tensor:
    # x is float32 already clamped to [0, 255]: float -> int32 -> uint8 truncates exactly like
    # torchvision's float -> uint8 cast, at half the cost on CPU.
    return x.to(torch.int32).to(torch.uint8)


def _finish_blend(x: Tensor) -> Tensor:
    return _to_uint8(x.clamp_(0, 255))


def _brightness(img: Tensor, factor: float) -> Tensor:
    # torchvision: factor * img + (1 - factor) * zeros; adding the (signed) zero changes nothing.
    return _finish_blend(img.to(torch.float32).mul_(factor))


def _gray(img_f: Tensor) -> Tensor:
    """torchvision's rgb_to_grayscale of a 3-channel float32 copy, as float32, shape (..., 1, H, W)."""
    r, g, b = img_f.unbind(-3)
    wr, wg, wb = _GRAY_WEIGHTS
    gray = r * wr
    gray += g * wg
    gray += b * wb
    # torchvision casts to uint8 here; the sum is in [0, 255), so that truncation is a floor
    # (floor_ is vectorised on CPU, trunc_ is not).
    return gray.floor_().unsqueeze_(-3)


def _contrast(img: Tensor, factor: float) -> Tensor:
    img_f = img.to(torch.float32)
    gray = _gray(img_f) if img.shape[-3] == 3 else img_f
    mean = torch.mean(gray, dim=(-3, -2, -1), keepdim=True)
    return _finish_blend(img_f.mul_(factor).add_((1.0 - factor) * mean))


def _color(img: Tensor, factor: float) -> Tensor:
    img_f = img.to(torch.float32)
    gray = _gray(img_f).mul_(1.0 - factor)
    return _finish_blend(img_f.mul_(factor).add_(gray))


def _autocontrast(img: Tensor) -> Tensor:
    minimum = img.amin(dim=(-2, -1), keepdim=True).to(torch.float32)
    maximum = img.amax(dim=(-2, -1), keepdim=True).to(torch.float32)
    # Same expression as torchvision: int / tensor is reciprocal-then-multiply, not a division.
    scale = 255 / (maximum - minimum)
    flat = ~torch.isfinite(scale)
    minimum[flat] = 0
    scale[flat] = 1
    return _finish_blend(img.to(torch.float32).sub_(minimum).mul_(scale))


def _sharpness(img: Tensor, factor: float) -> Tensor:
    x = img.to(torch.int32)
    rows = x[..., :-2] + x[..., 1:-1]
    rows += x[..., 2:]
    n = rows[..., :-2, :] + rows[..., 1:-1, :]
    n += rows[..., 2:, :]
    n.add_(x[..., 1:-1, 1:-1], alpha=4)
    # round(n / 13) for 0 <= n <= 3315 (never a tie): floor((n + 6) / 13) by multiply-shift.
    n.add_(6).mul_(5042).bitwise_right_shift_(16)

    img_f = img.to(torch.float32)
    degenerate = img_f.clone()  # torchvision keeps the border pixels
    degenerate[..., 1:-1, 1:-1] = n
    return _finish_blend(img_f.mul_(factor).add_(degenerate.mul_(1.0 - factor)))


def _equalize(img: Tensor) -> Tensor:
    hw = img.shape[-2] * img.shape[-1]
    rows = img.view(-1, hw)  # one row per channel of each image
    m = rows.shape[0]
    if m <= 16:
        hist = torch.stack([torch.bincount(row, minlength=256) for row in rows])
    else:
        offsets = torch.arange(m, dtype=torch.int64).mul_(256).unsqueeze_(1)
        hist = torch.bincount((rows + offsets).view(-1), minlength=256 * m).view(m, 256)

    values = torch.arange(256, dtype=torch.int64)
    top = torch.where(hist > 0, values, -1).amax(dim=1, keepdim=True)
    # torchvision: step = (sum of the nonzero bins but the last) // 255; the last nonzero bin is
    # the channel's maximum, so that sum is hw - hist[max].
    step = (hw - hist.gather(1, top)) // 255
    safe_step = step.clamp(min=1)
    lut = (hist.cumsum(1) + safe_step // 2) // safe_step
    lut = torch.cat([torch.zeros_like(lut[:, :1]), lut[:, :-1]], dim=1).clamp_(0, 255)
    lut = torch.where(step == 0, values, lut)  # step 0: torchvision leaves the channel as is
    return _gather(lut.to(torch.uint8), rows).view(img.shape)


def _gather(luts: Tensor, rows: Tensor) -> Tensor:
    """out[i, j] = luts[i, rows[i, j]] for uint8 luts (M, 256) and uint8 rows (M, N)."""
    index = rows.to(torch.int32)
    if luts.shape[0] > 1:
        index += torch.arange(luts.shape[0], dtype=torch.int32).mul_(256).unsqueeze_(1)
    return torch.index_select(luts.view(-1), 0, index.view(-1)).view(rows.shape)


@functools.lru_cache(maxsize=512)
def _solarize_lut(threshold: float) -> Tensor:
    ramp = torch.arange(256, dtype=torch.uint8).view(1, 1, 256)
    lut = _torchvision_apply_op(ramp, "Solarize", threshold, interpolation=None, fill=None)
    return lut.view(1, 256)


def _solarize(img: Tensor, threshold: float) -> Tensor:
    return _gather(_solarize_lut(threshold), img.view(1, -1)).view(img.shape)
