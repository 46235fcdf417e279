"""Exact, faster paths for ``torchvision.transforms.v2``'s auto-augment ops and colour
adjustments on uint8 CPU tensors (the v2 counterpart of :mod:`.fast_ops`).

Contract: :func:`apply_op` (an op of v2's ``_AutoAugmentBase._apply_image_or_video_transform``)
and :func:`adjust` (``v2.functional.adjust_brightness`` / ``_contrast`` / ``_saturation`` /
``_sharpness``) return v2's values, bit for bit, and its output type (a ``tv_tensors.Image``
stays one), or None where they have no fast path: the caller then calls torchvision.

Fast paths apply to contiguous CPU ``torch.uint8`` plain tensors and ``tv_tensors.Image``\\ s of
shape (..., C, H, W), C in {1, 3}, with a finite magnitude or factor (within float32's range) in the op's valid range.
Why each is exact:

* Brightness, Color, Contrast, Sharpness: v2's kernels blend with ``mul`` then
  ``add_(other, alpha=1 - f)``, which torch computes as a fused multiply-add; the C loops
  of :mod:`.kernels` compute the same fused operations pixel by pixel, with v2's grayscale
  (also fused, floored) and torch's own mean of it. Used only where
  :func:`.kernels.fused_ok` confirms torch fuses on this machine.
* Solarize: ``where(image >= threshold, 255 - image, image)`` is a per-value map: its
  256-entry table is v2's own ``solarize`` of a 0..255 ramp, cached per threshold.
* ShearX/Y, TranslateX/Y, Rotate: v2 builds the sampling grid from the op, the magnitude and
  the image size alone, with its own ``_get_inverse_affine_matrix`` and ``_affine_grid``;
  those grids are made by v2's functions once and cached. Each image then takes the C
  ``grid_sample`` (:func:`.kernels.grid_sample`, torch's arithmetic, checked once per
  process) and v2's fill blend, rounding and cast.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from ..seams import torch_private as seams
from . import kernels
from .ops_v1 import gather_luts, is_plain_number

__all__ = ["adjust", "apply_op"]

_BLENDS = {"Brightness": "zero", "Color": "gray", "Contrast": "mean"}
_ADJUST = {"adjust_brightness": ("brightness_factor", "Brightness"),
           "adjust_contrast": ("contrast_factor", "Contrast"),
           "adjust_saturation": ("saturation_factor", "Color"),
           "adjust_sharpness": ("sharpness_factor", "Sharpness")}
_AFFINE = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"})
_FAST = frozenset({*_BLENDS, "Sharpness", "Solarize", *_AFFINE})
_GRID_CACHE_ENTRIES = 64  # a 224 px grid and mask take ~0.6 MB: ~38 MB at most


def apply_op(img: Any, op_name: str, magnitude: Any, interpolation: Any, fill: Any) -> Any:
    """v2's ``_apply_image_or_video_transform(img, op_name, magnitude, interpolation, fill)``
    (``fill``: v2's per-type dict), or None where there is no fast path."""
    if op_name not in _FAST or not kernels.AVAILABLE or not _is_fast_input(img) \
            or not is_plain_number(magnitude):
        return None
    plain = img.as_subclass(Tensor)
    if op_name in _BLENDS or op_name == "Sharpness":
        out = _blend(plain, op_name, 1.0 + magnitude)
    elif op_name == "Solarize":
        threshold = 255.0 * magnitude
        out = None if threshold > 255 else gather_luts(_solarize_lut(threshold),
                                                       plain.reshape(1, -1)).view(plain.shape)
    else:
        out = _affine(plain, op_name, magnitude, interpolation,
                      seams.v2_get_fill(fill, type(img)))
    return None if out is None else _like(out, img)


def adjust(img: Any, name: str, kwargs: Any) -> Any:
    """``v2.functional.<name>(img, **kwargs)`` for the four colour adjustments, or None."""
    key, op_name = _ADJUST.get(name, (None, None))
    if (key is None or not isinstance(kwargs, dict) or len(kwargs) != 1 or key not in kwargs
            or not kernels.AVAILABLE or not _is_fast_input(img)
            or not is_plain_number(kwargs[key])):
        return None
    out = _blend(img.as_subclass(Tensor), op_name, kwargs[key])
    return None if out is None else _like(out, img)


def _is_fast_input(img: Any) -> bool:
    from torchvision import tv_tensors

    return (type(img) in (Tensor, tv_tensors.Image) and img.dtype == torch.uint8
            and img.device.type == "cpu" and img.ndim >= 3 and img.shape[-3] in (1, 3)
            and img.numel() > 0 and img.is_contiguous())


def _like(out: Tensor, img: Any) -> Any:
    from torchvision import tv_tensors

    return tv_tensors.wrap(out, like=img) if isinstance(img, tv_tensors.Image) else out


def _blend(img: Tensor, op_name: str, factor: float) -> Tensor | None:
    # Below zero v2 raises, above the kernels' bound its float32 overflows; a 1-channel
    # Color and a Sharpness thinner than 3 pixels return the input itself: all left to v2.
    if not 0 <= factor <= kernels.BLEND_FACTOR_MAX or not kernels.fused_ok():
        return None
    if op_name == "Sharpness":
        return kernels.sharpen(img, factor, fused=True) if min(img.shape[-2:]) > 2 else None
    if op_name == "Color" and img.shape[-3] != 3:
        return None
    return kernels.blend(img, factor, _BLENDS[op_name], fused=True)


@functools.lru_cache(maxsize=512)
def _solarize_lut(threshold: float) -> Tensor:
    from torchvision.transforms.v2 import functional as F

    ramp = torch.arange(256, dtype=torch.uint8).view(1, 1, 256)
    return F.solarize(ramp, threshold=threshold).view(1, 256)


def _matrix(op_name: str, magnitude: float, width: int, height: int) -> list[float] | None:
    """The inverse matrix v2's ``affine_image``/``rotate_image`` build for the op (None:
    a rotation v2 makes without a grid)."""
    if op_name in ("ShearX", "ShearY"):  # center=[0, 0]: the image centre at (-w/2, -h/2)
        shear = math.degrees(math.atan(magnitude))
        shears = [shear, 0.0] if op_name == "ShearX" else [0.0, shear]
        centre = [0.0 - width * 0.5, 0.0 - height * 0.5]
        return seams.v2_inverse_affine_matrix(centre, 0.0, [0.0, 0.0], 1.0, shears)
    if op_name in ("TranslateX", "TranslateY"):
        shift = [float(int(magnitude)), 0.0] if op_name == "TranslateX" \
            else [0.0, float(int(magnitude))]
        return seams.v2_inverse_affine_matrix([0.0, 0.0], 0.0, shift, 1.0, [0.0, 0.0])
    angle = magnitude % 360
    if angle in (0, 90, 180, 270):  # v2's clone / rot90 paths
        return None
    return seams.v2_inverse_affine_matrix([0.0, 0.0], -angle, [0.0, 0.0], 1.0, [0.0, 0.0])


@functools.lru_cache(maxsize=_GRID_CACHE_ENTRIES)
def _grid_and_mask(matrix: tuple[float, ...], width: int, height: int,
                   nearest: bool) -> tuple[Tensor, Tensor]:
    theta = torch.tensor(list(matrix), dtype=torch.float32).reshape(1, 2, 3)
    grid = seams.v2_affine_grid(theta, w=width, h=height, ow=width, oh=height)
    ones = torch.ones((1, height, width), dtype=torch.uint8)
    return grid, kernels.grid_sample(ones, grid, nearest, rounded=False).unsqueeze(0)


def _affine(img: Tensor, op_name: str, magnitude: float, interpolation: Any,
            fill: Any) -> Tensor | None:
    from torchvision.transforms import InterpolationMode

    if not (img.ndim == 3 or (img.ndim == 4 and img.shape[0] == 1)):
        return None  # a batch: v2 expands one grid over it; left to v2
    if interpolation not in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR):
        return None
    channels = img.shape[-3]
    if fill is not None and not (isinstance(fill, (int, float)) or (
            isinstance(fill, (list, tuple)) and len(fill) in (1, channels)
            and all(isinstance(f, (int, float)) for f in fill))):
        return None  # v2 raises (or broadcasts oddly): left to it
    if not kernels.grid_sample_ok():
        return None
    height, width = img.shape[-2:]
    matrix = _matrix(op_name, magnitude, width, height)
    if matrix is None:
        return None
    nearest = interpolation == InterpolationMode.NEAREST
    grid, mask = _grid_and_mask(tuple(matrix), width, height, nearest)
    if fill is None:
        return kernels.grid_sample(img, grid, nearest, rounded=True).view(img.shape)
    # v2's _apply_grid_transform after its grid_sample, on the float samples
    out = kernels.grid_sample(img, grid, nearest, rounded=False).unsqueeze(0)
    fill_list = list(fill) if isinstance(fill, (list, tuple)) else [float(fill)]
    fill_img = torch.tensor(fill_list, dtype=torch.float32).view(1, -1, 1, 1)
    mask = mask.expand_as(out)
    if nearest:
        out = torch.where(mask < 0.5, fill_img.expand_as(out), out)
    else:
        out = out.sub_(fill_img).mul_(mask).add_(fill_img)
    return out.round_().to(torch.uint8).view(img.shape)
