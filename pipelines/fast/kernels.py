"""torchvision's colour blends, sharpness and AugMix's mixing on uint8 planes, in one pass each
(the C loops of ``pipelines/_augment*.c``), bit for bit the values of torchvision's kernels.

``fused=False`` gives v1's arithmetic (``torchvision.transforms.functional``: each product
and sum rounded to float32), ``fused=True`` v2's (``torchvision.transforms.v2.functional``,
whose ``add_(x, alpha=a)`` torch computes as one fused multiply-add). :func:`fused_ok` checks
once per process that the installed torch really fuses it (a CPU build without FMA does
not); callers leave v2 to torchvision where it says no. Every function takes a contiguous
uint8 CPU tensor of shape (..., C, H, W), C in {1, 3} (3 where a grayscale is taken), and
returns a new one; :data:`AVAILABLE` is False where the C extension was not built (no
compiler at install time): callers keep torch's own ops then.

The numbers are checked here, before they reach C: a blend factor below zero gets
torchvision's own ``ValueError`` ("brightness_factor (-1.0) is not non-negative."), and
NaN, infinity, a weight float32 cannot hold (the loops compute in float32) or a factor
above :data:`BLEND_FACTOR_MAX` a ``ValueError`` naming it; the fast paths hand such values to torchvision instead
(:mod:`.fast_ops`). The C loops themselves stay defined on any input (sizes checked before
they are multiplied, NaN converted to 0).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

try:
    from .. import _augment as _c
except ImportError:  # no C compiler at install time
    _c = None

__all__ = ["AVAILABLE", "augmix_mix", "blend", "fused_ok", "gray", "grid_sample", "grid_sample_ok",
           "interleave", "mixup_rows", "sharpen"]

AVAILABLE = _c is not None
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32
# The largest blend factor whose products with a pixel value (and with 1 - factor) stay
# finite in float32; above it torch's float32 blend overflows (inf - inf), and which of its
# loops fuses the multiply-add decides the result: not the kernels' to replay.
BLEND_FACTOR_MAX = FLOAT32_MAX / 256
_FACTORS = {"zero": "brightness_factor", "mean": "contrast_factor", "gray": "saturation_factor"}


def _finite(value: float, name: str) -> float:
    """``value`` as a float32-finite number, or a ValueError naming ``name``."""
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        number = math.inf
    if not (math.isfinite(number) and abs(number) <= FLOAT32_MAX):
        raise ValueError(f"{name} should be a finite number within float32's range, but got "
                         f"{name}={value}")
    return number


def _factor(value: float, name: str) -> float:
    """A blend factor: torchvision's error below zero, :func:`_finite`'s for NaN and inf,
    and one above :data:`BLEND_FACTOR_MAX`."""
    if value < 0:
        raise ValueError(f"{name} ({value}) is not non-negative.")  # torchvision's words
    number = _finite(value, name)
    if number > BLEND_FACTOR_MAX:
        raise ValueError(f"{name} should be at most {BLEND_FACTOR_MAX:.4g} (float32 products "
                         f"of a larger one overflow), but got {name}={value}")
    return number


def _images(img: Tensor) -> tuple[Tensor, Tensor]:
    """``(inputs, outputs)`` as (N, C, H, W) views: the input and a new uint8 tensor."""
    src = img.reshape(-1, *img.shape[-3:])
    return src, torch.empty_like(src)


def gray(img: Tensor, fused: bool) -> Tensor:
    """The floored float32 grayscale (N, H*W) of each 3-channel image of ``img``."""
    src = img.reshape(-1, 3, img.shape[-2] * img.shape[-1])
    out = torch.empty(src.shape[0], src.shape[2], dtype=torch.float32)
    for k in range(src.shape[0]):
        _c.gray(src[k].numpy(), out[k].numpy(), fused)
    return out


def blend(img: Tensor, ratio: float, other: str, fused: bool) -> Tensor:
    """``clamp(img * ratio + o * (1 - ratio))`` as uint8, per image, ``o`` being ``other``:
    ``"zero"`` (brightness), ``"mean"`` (the mean of the image's grayscale: contrast) or
    ``"gray"`` (its grayscale: saturation)."""
    if other not in _FACTORS:
        raise ValueError(f"other should be 'zero', 'mean' or 'gray', but got other={other!r}")
    ratio = _factor(ratio, _FACTORS[other])
    src, out = _images(img)
    q = 1.0 - ratio
    channels = src.shape[1]
    grays = None
    if other != "zero":
        grays = gray(src, fused) if channels == 3 else src.reshape(src.shape[0], -1).float()
    for k in range(src.shape[0]):
        if other == "zero":
            _c.blend(src[k].numpy(), out[k].numpy(), ratio, q, 0, 0.0, None, fused)
        elif other == "mean":
            # torch's own mean of the float32 grayscale: the reduction order is torch's
            mean = float(torch.mean(grays[k]))
            _c.blend(src[k].numpy(), out[k].numpy(), ratio, q, 1, mean, None, fused)
        else:
            _c.blend(src[k].numpy(), out[k].numpy(), ratio, q, 2, 0.0, grays[k].numpy(), fused)
    return out.view(img.shape)


def sharpen(img: Tensor, ratio: float, fused: bool) -> Tensor:
    """torchvision's ``adjust_sharpness`` of an image at least 3 x 3 (v1's or v2's border)."""
    ratio = _factor(ratio, "sharpness_factor")
    src, out = _images(img)
    height, width = img.shape[-2:]
    _c.sharpen(src.numpy(), out.numpy(), height, width, ratio, 1.0 - ratio, fused)
    return out.view(img.shape)


def augmix_mix(batch: Tensor, first: Tensor, chains: list[tuple[Tensor, Tensor]]) -> Tensor:
    """AugMix's ``(first * batch + sum_i w_i * chain_i).to(uint8)`` for a batch of one:
    ``first`` and each ``w_i`` float32 one-element tensors, products and sums rounded in
    torchvision's order (``mix = m * batch; mix.add_(w_i * aug_i)``)."""
    acc = torch.empty(batch.shape, dtype=torch.float32)
    _c.mix(acc.numpy(), batch.contiguous().numpy(), _finite(first, "AugMix's weight"), True)
    for weight, aug in chains:
        _c.mix(acc.numpy(), aug.contiguous().numpy(), _finite(weight, "AugMix's weight"), False)
    out = torch.empty(batch.shape, dtype=torch.uint8)
    _c.truncate_u8(acc.numpy(), out.numpy())
    return out


def grid_sample(img: Tensor, grid: Tensor, nearest: bool, rounded: bool) -> Tensor:
    """``torch.nn.functional.grid_sample(img[None].float(), grid, mode, padding_mode="zeros",
    align_corners=False)[0]`` for a uint8 C x H x W image and a float32 (1, Ho, Wo, 2) grid;
    ``rounded``: then ``round().to(uint8)`` (torchvision's last step without a fill). Valid
    where :func:`grid_sample_ok` says so."""
    channels = img.shape[-3]
    height, width = img.shape[-2:]
    out_h, out_w = grid.shape[1], grid.shape[2]
    out = torch.empty(channels, out_h, out_w, dtype=torch.uint8 if rounded else torch.float32)
    _c.grid_sample(img.reshape(channels, height, width).numpy(), grid.contiguous().numpy(),
                   out.numpy(), height, width, nearest)
    return out


@functools.cache
def grid_sample_ok() -> bool:
    """Whether :func:`grid_sample` gives torch's own ``grid_sample`` values on this machine
    (the C loop fuses the multiply-adds as torch's vectorised x86-64 kernel is compiled to;
    a torch build or CPU that computes otherwise is left to torch): checked once on a
    rotated, sheared probe image, both modes."""
    if _c is None:
        return False
    gen = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 57, 110), dtype=torch.uint8, generator=gen)
    angle, shear = 0.23, 0.31
    theta = torch.tensor([[[np.cos(angle), -np.sin(angle) + shear, 0.07],
                           [np.sin(angle), np.cos(angle), -0.11]]], dtype=torch.float32)
    grid = torch.nn.functional.affine_grid(theta, [1, 3, 57, 110], align_corners=False)
    for mode in ("bilinear", "nearest"):
        want = torch.nn.functional.grid_sample(img[None].float(), grid, mode=mode,
                                               padding_mode="zeros", align_corners=False)[0]
        if not torch.equal(grid_sample(img, grid, mode == "nearest", False), want):
            return False
    return True


def mixup_rows(prev: Tensor, cur: Tensor, a: float, b: float) -> None:
    """``cur = prev * a + cur * b`` in place, float32, each product and the sum rounded (v2
    MixUp's ``roll(1, 0).mul_(1 - lam).add_(x.mul(lam))`` for one image)."""
    _c.mixup(prev.contiguous().numpy(), cur.numpy(), _finite(a, "a"), _finite(b, "b"))


def interleave(img: Tensor) -> np.ndarray:
    """A contiguous uint8 C x H x W tensor as an H x W x C array (a PIL image's layout)."""
    channels, height, width = img.shape
    out = np.empty((height, width, channels), dtype=np.uint8)
    _c.interleave(img.numpy(), out, channels)
    return out


@functools.cache
def fused_ok() -> bool:
    """Whether torch's ``add_(x, alpha=a)`` on float32 CPU tensors is a fused multiply-add
    here (v2's arithmetic as ``fused=True`` computes it), in its vector loop and its
    remainder: checked on values where the two roundings differ."""
    if _c is None:
        return False
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(4099, generator=gen) * 255
    b = torch.rand(4099, generator=gen) * 255
    alpha = 0.587
    got = a.clone().add_(b, alpha=alpha)
    exact = (a.double() + b.double() * float(np.float32(alpha))).float()
    return bool(torch.equal(got, exact))
