"""Exact, faster drop-in for torchvision's auto-augment ``_apply_op`` on uint8 CPU tensors.

Contract: ``apply_op(img, op_name, magnitude, interpolation, fill)`` takes the same arguments as
``torchvision.transforms.autoaugment._apply_op`` and returns the same values, bit for bit
(``torch.equal``), for every input; errors are torchvision's too.

Fast paths apply to contiguous CPU ``torch.uint8`` tensors of shape (..., C, H, W), C in {1, 3},
with a finite int/float magnitude (within float32's range) in the op's valid range. Everything
else (PIL images, other dtypes, CUDA, "Identity", "Invert", "Posterize", batched affine ops, a
larger magnitude) goes to torchvision unchanged.

Why each fast path is exact:

* Brightness, Contrast, Color, AutoContrast: torchvision's per-pixel float32 arithmetic
  (``_blend``, ``autocontrast``) is replayed op for op (same IEEE multiplications, additions,
  clamps, same operand order), only in place and without the zero image / temporaries
  (the blends and Sharpness in one pass per image, :mod:`.kernels`, where it is built). The
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
* ShearX/Y, TranslateX/Y, Rotate: torchvision builds the same sampling grid (and, with a
  fill, samples the same all-ones mask channel) for every image of a size and magnitude;
  both are made once by torchvision's own ``_gen_affine_grid``/``grid_sample`` and cached.
  Each image then takes one ``grid_sample`` of its channels (channels are sampled
  independently, so dropping the mask channel from the call changes no value) and
  torchvision's fill blend, rounding and cast. Where :func:`.kernels.grid_sample_ok`
  confirms it on this machine, that ``grid_sample`` and (without a fill) the rounding run
  as one C loop on the uint8 planes, torch's arithmetic replayed.
* Solarize: a per-pixel, per-value map, so its 256-entry table is taken by running torchvision
  itself on a 0..255 ramp (cached per threshold) and applied with one gather.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

# torchvision's ``_apply_op`` is private API (see torch_seams). Every delegated call, and the
# Solarize table, goes through this one name.
from ..seams.torch_private import autoaugment_apply_op as _torchvision_apply_op
from ..seams.torch_private import gen_affine_grid, inverse_affine_matrix
from . import kernels

__all__ = ["adjust", "apply_op", "gather_luts", "is_plain_number"]

_FAST_OPS = frozenset(
    {"Brightness", "Color", "Contrast", "Sharpness", "AutoContrast", "Equalize", "Solarize"}
)
_GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale coefficients


def apply_op(img: Any, op_name: str, magnitude: float, interpolation: Any, fill: Any) -> Any:
    """``torchvision.transforms.autoaugment._apply_op`` with exact fast paths (see module doc)."""
    if op_name in _FAST_OPS and _is_fast_input(img) and is_plain_number(magnitude):
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
            # below 0 torchvision raises; above the kernels' bound its float32 overflows
            if 0 <= factor <= kernels.BLEND_FACTOR_MAX:
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
    if op_name in _AFFINE_OPS and _is_fast_input(img) and is_plain_number(magnitude) \
            and (img.ndim == 3 or (img.ndim == 4 and img.shape[0] == 1)):
        mode, fills = _grid_mode(interpolation), _fill_values(fill, img.shape[0])
        if mode is not None and fills is not False:
            return _affine(img, op_name, magnitude, mode, fills)
    return _torchvision_apply_op(img, op_name, magnitude, interpolation=interpolation, fill=fill)


_ADJUST = {"adjust_brightness": "brightness_factor", "adjust_contrast": "contrast_factor",
           "adjust_saturation": "saturation_factor", "adjust_sharpness": "sharpness_factor"}


def adjust(img: Any, name: str, kwargs: dict) -> Any | None:
    """``torchvision.transforms.functional.<name>(img, **kwargs)`` for ``adjust_brightness``,
    ``adjust_contrast``, ``adjust_saturation`` and ``adjust_sharpness`` through the exact fast
    paths above (the factor given directly, not as ``1 + magnitude``); None where they do not
    apply (the caller then calls torchvision)."""
    factor = kwargs.get(_ADJUST.get(name, ""))
    if (len(kwargs) != 1 or not _is_fast_input(img) or not is_plain_number(factor)
            or not 0 <= factor <= kernels.BLEND_FACTOR_MAX):
        return None
    if name == "adjust_brightness":
        return _brightness(img, factor)
    if name == "adjust_contrast":
        return _contrast(img, factor)
    if name == "adjust_saturation" and img.shape[-3] == 3:
        return _color(img, factor)
    if name == "adjust_sharpness" and img.ndim <= 4 and min(img.shape[-2:]) > 2:
        return _sharpness(img, factor)
    return None


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


def is_plain_number(magnitude: Any) -> bool:
    """Whether a magnitude or factor is a plain int or float the fast paths take (also used by
    :mod:`.ops_v2`)."""
    # within float32's range too: the C loops compute in float32, where torchvision's float32
    # arithmetic of a larger value (inf, inf - inf) is its own to replay (or to raise on)
    # (NaN and inf fail the comparison; an int of any size is compared exactly)
    return type(magnitude) in (float, int) and abs(magnitude) <= kernels.FLOAT32_MAX


def _to_uint8(x: Tensor) -> Tensor:
    # x is float32 already clamped to [0, 255]: float -> int32 -> uint8 truncates exactly like
    # torchvision's float -> uint8 cast, at half the cost on CPU.
    return x.to(torch.int32).to(torch.uint8)


def _finish_blend(x: Tensor) -> Tensor:
    return _to_uint8(x.clamp_(0, 255))


def _brightness(img: Tensor, factor: float) -> Tensor:
    # torchvision: factor * img + (1 - factor) * zeros; adding the (signed) zero changes nothing.
    if kernels.AVAILABLE:
        return kernels.blend(img, factor, "zero", fused=False)
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
    if kernels.AVAILABLE:
        return kernels.blend(img, factor, "mean", fused=False)
    img_f = img.to(torch.float32)
    gray = _gray(img_f) if img.shape[-3] == 3 else img_f
    mean = torch.mean(gray, dim=(-3, -2, -1), keepdim=True)
    return _finish_blend(img_f.mul_(factor).add_((1.0 - factor) * mean))


def _color(img: Tensor, factor: float) -> Tensor:
    if kernels.AVAILABLE:
        return kernels.blend(img, factor, "gray", fused=False)
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
    if kernels.AVAILABLE:
        return kernels.sharpen(img, factor, fused=False)
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
    return gather_luts(lut.to(torch.uint8), rows).view(img.shape)


def gather_luts(luts: Tensor, rows: Tensor) -> Tensor:
    """out[i, j] = luts[i, rows[i, j]] for uint8 luts (M, 256) and uint8 rows (M, N): one
    gather applies a per-row 256-entry table (Equalize, Solarize; also :mod:`.ops_v2`)."""
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
    return gather_luts(_solarize_lut(threshold), img.view(1, -1)).view(img.shape)


_AFFINE_OPS = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"})
_GRID_CACHE_ENTRIES = 64  # a 224 px grid and mask take ~0.6 MB: ~38 MB at most


def _grid_mode(interpolation: Any) -> str | None:
    from torchvision.transforms import InterpolationMode

    if isinstance(interpolation, InterpolationMode) and interpolation.value in ("nearest",
                                                                                 "bilinear"):
        return interpolation.value
    return None


def _fill_values(fill: Any, channels: int) -> list[float] | None | bool:
    """The fill as torchvision's grid transform uses it; None for none; False: not handled."""
    if fill is None:
        return None
    if isinstance(fill, (list, tuple)) and len(fill) in (1, channels) \
            and all(type(f) in (int, float) for f in fill):
        return list(fill)
    return False


def _affine_matrix(op_name: str, magnitude: float, width: int, height: int) -> list[float]:
    """The inverse matrix ``F.affine``/``F.rotate`` compute for tensors in ``_apply_op``."""
    if op_name in ("ShearX", "ShearY"):  # center=[0, 0] in pixels: image centre at (-w/2, -h/2)
        centre = [1.0 * (0 - width * 0.5), 1.0 * (0 - height * 0.5)]
        shear = math.degrees(math.atan(magnitude))
        shears = [shear, 0.0] if op_name == "ShearX" else [0.0, shear]
        return inverse_affine_matrix(centre, 0.0, [0.0, 0.0], 1.0, shears)
    if op_name in ("TranslateX", "TranslateY"):
        shift = [1.0 * int(magnitude), 0.0] if op_name == "TranslateX" else [0.0, 1.0 * int(magnitude)]
        return inverse_affine_matrix([0.0, 0.0], 0.0, shift, 1.0, [0.0, 0.0])
    return inverse_affine_matrix([0.0, 0.0], -magnitude, [0.0, 0.0], 1.0, [0.0, 0.0])


@functools.lru_cache(maxsize=_GRID_CACHE_ENTRIES)
def _grid_and_mask(matrix: tuple[float, ...], width: int, height: int,
                   mode: str) -> tuple[Tensor, Tensor]:
    theta = torch.tensor(list(matrix), dtype=torch.float32).reshape(1, 2, 3)
    grid = gen_affine_grid(theta, w=width, h=height, ow=width, oh=height)
    ones = torch.ones((1, 1, height, width), dtype=torch.float32)
    mask = torch.nn.functional.grid_sample(ones, grid, mode=mode, padding_mode="zeros",
                                           align_corners=False)
    return grid, mask


def _affine(img: Tensor, op_name: str, magnitude: float, mode: str,
            fill: list[float] | None) -> Tensor:
    """``fill``: as :func:`_fill_values` gives it (None: no fill blend)."""
    height, width = img.shape[-2:]
    matrix = _affine_matrix(op_name, magnitude, width, height)
    grid, mask = _grid_and_mask(tuple(matrix), width, height, mode)
    if kernels.AVAILABLE and kernels.grid_sample_ok():
        out = kernels.grid_sample(img, grid, mode == "nearest", rounded=fill is None)
        if fill is None:
            return out.view(img.shape)
        out = out.unsqueeze(0)
    else:
        batch = img.view(1, *img.shape[-3:])  # one image: torchvision's batch of 1 (AugMix's)
        out = torch.nn.functional.grid_sample(batch.to(torch.float32), grid, mode=mode,
                                              padding_mode="zeros", align_corners=False)
    if fill is not None:
        mask = mask.expand_as(out)
        fill_img = torch.tensor(fill, dtype=torch.float32).view(1, len(fill), 1, 1).expand_as(out)
        if mode == "nearest":
            outside = mask < 0.5
            out[outside] = fill_img[outside]
        else:
            out = out * mask + (1.0 - mask) * fill_img
    return torch.round(out).to(torch.uint8).view(img.shape)
