"""torchvision's random draws from an explicit generator: the one copy the DALI prefix
(:mod:`~fastload.pipelines.prefix.geometry`) and the torch suffix's replays
(:mod:`~fastload.pipelines.replays.v1`, :mod:`~fastload.pipelines.replays.v2`) share.

Each function makes the calls a transform's ``get_params``/``make_params`` makes on torch's
default generator, in the same order, on ``generator``: seeded alike, it returns the very
numbers torchvision draws (tests/pipelines/test_draws.py checks each against torchvision's own).

The one-element draws write into tensors kept per thread: ``t.uniform_(a, b)`` and
``t.random_(lo, hi)`` consume the generator exactly as torchvision's
``torch.empty(1).uniform_(a, b)``, ``torch.rand(1)`` and ``torch.randint(lo, hi, (1,))`` do
(those allocate a tensor, then call the same in-place ops), without an allocation per draw
(drawing is the loader's serial part, ~64 samples a batch).
"""

from __future__ import annotations

import functools
import math
import struct
import threading
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "affine_params",
    "coin",
    "color_jitter",
    "crop_offsets",
    "crop_offsets_v2",
    "erase_box",
    "exp_uniform",
    "log_ratio",
    "perspective_points",
    "randint",
    "resized_crop_box",
    "uniform",
]

_SCRATCH = threading.local()


def _float_scratch() -> torch.Tensor:
    scratch = getattr(_SCRATCH, "float", None)
    if scratch is None:
        scratch = _SCRATCH.float = torch.empty(1)
    return scratch


def uniform(low: float, high: float, generator: torch.Generator) -> float:
    """``torch.empty(1).uniform_(low, high, generator=generator).item()``."""
    return _float_scratch().uniform_(low, high, generator=generator).item()


def exp_uniform(low: float, high: float, generator: torch.Generator) -> float:
    """``torch.exp(torch.empty(1).uniform_(low, high)).item()``: the exponential in float32,
    as torchvision takes it for an aspect ratio drawn on the log scale."""
    return _float_scratch().uniform_(low, high, generator=generator).exp_().item()


def randint(low: int, high: int, generator: torch.Generator) -> int:
    """``int(torch.randint(low, high, size=(1,), generator=generator).item())``."""
    scratch = getattr(_SCRATCH, "long", None)
    if scratch is None:
        scratch = _SCRATCH.long = torch.empty(1, dtype=torch.long)
    return int(scratch.random_(low, high, generator=generator).item())


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def coin(p: float, generator: torch.Generator) -> bool:
    """``bool(torch.rand(1, generator=generator) < p)``: the float32 comparison torch makes
    (``p`` rounded to float32 first), so it agrees with torchvision's ``torch.rand(1) < p``."""
    return uniform(0.0, 1.0, generator) < _float32(float(p))


@functools.lru_cache(maxsize=64)
def log_ratio(ratio: tuple[float, float]) -> tuple[float, float]:
    """``torch.log(torch.tensor(ratio))`` as torchvision computes it (float32), as floats."""
    values = torch.log(torch.tensor(ratio))
    return float(values[0]), float(values[1])


def resized_crop_box(height: int, width: int, scale: Sequence[float], ratio: Sequence[float],
                     generator: torch.Generator) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` as ``RandomResizedCrop.get_params`` draws them (v1 and v2 alike)."""
    area = height * width
    log_lo, log_hi = log_ratio(tuple(float(r) for r in ratio))
    for _ in range(10):
        target_area = area * uniform(scale[0], scale[1], generator)
        aspect = exp_uniform(log_lo, log_hi, generator)
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = randint(0, height - h + 1, generator)
            j = randint(0, width - w + 1, generator)
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _too_small(height: int, width: int, crop_h: int, crop_w: int) -> ValueError:
    return ValueError(f"RandomCrop size {(crop_h, crop_w)} is larger than the {height}x{width} "
                      "image; pass pad_if_needed=True or a smaller size")


def crop_offsets(height: int, width: int, crop_h: int, crop_w: int,
                 generator: torch.Generator) -> tuple[int, int]:
    """``(top, left)`` as v1 ``RandomCrop.get_params`` draws them (image already padded):
    both offsets, unless the image is exactly the crop's size."""
    if height < crop_h or width < crop_w:
        raise _too_small(height, width, crop_h, crop_w)
    if height == crop_h and width == crop_w:
        return 0, 0
    return randint(0, height - crop_h + 1, generator), randint(0, width - crop_w + 1, generator)


def crop_offsets_v2(height: int, width: int, crop_h: int, crop_w: int,
                    generator: torch.Generator) -> tuple[int, int]:
    """``(top, left)`` as v2 ``RandomCrop.make_params`` draws them (image already padded):
    each offset only along a side longer than the crop."""
    if height < crop_h or width < crop_w:
        raise _too_small(height, width, crop_h, crop_w)
    top = randint(0, height - crop_h + 1, generator) if height > crop_h else 0
    left = randint(0, width - crop_w + 1, generator) if width > crop_w else 0
    return top, left


def color_jitter(ranges: Sequence[Sequence[float] | None],
                 generator: torch.Generator) -> tuple[list[int], list[float | None]]:
    """``(order, factors)`` as ``ColorJitter.get_params`` (v1) and ``make_params`` (v2) draw
    them: a permutation of the four adjustments, then the brightness, contrast, saturation and
    hue factors of ``ranges`` (None where a range is None, drawing nothing)."""
    order = torch.randperm(4, generator=generator).tolist()
    factors = [None if r is None else uniform(r[0], r[1], generator) for r in ranges]
    return order, factors


def erase_box(channels: int, height: int, width: int, scale: Sequence[float],
              ratio: Sequence[float], value: Sequence[float] | None,
              generator: torch.Generator) -> tuple[int, int, int, int, torch.Tensor] | None:
    """``(top, left, h, w, values)`` as ``RandomErasing.get_params``/``make_params`` draw them
    (``value=None``: normal noise of the box's shape), or None when ten tries find no box."""
    area = height * width
    log_lo, log_hi = log_ratio(tuple(float(r) for r in ratio))
    for _ in range(10):
        erase_area = area * uniform(scale[0], scale[1], generator)
        aspect = exp_uniform(log_lo, log_hi, generator)
        h = int(round(math.sqrt(erase_area * aspect)))
        w = int(round(math.sqrt(erase_area / aspect)))
        if not (h < height and w < width):
            continue
        if value is None:
            v = torch.empty([channels, h, w], dtype=torch.float32).normal_(generator=generator)
        else:
            v = torch.tensor(value)[:, None, None]
        i = randint(0, height - h + 1, generator)
        j = randint(0, width - w + 1, generator)
        return i, j, h, w, v
    return None


def affine_params(degrees: Sequence[float], translate: Sequence[float] | None,
                  scale: Sequence[float] | None, shear: Sequence[float] | None, height: int,
                  width: int, generator: torch.Generator) -> dict[str, Any]:
    """``angle``, ``translate``, ``scale`` and ``shear`` as ``RandomAffine.get_params`` (v1)
    and ``make_params`` (v2) draw them for a ``height x width`` image."""
    angle = uniform(float(degrees[0]), float(degrees[1]), generator)
    shift = (0, 0)
    if translate is not None:
        max_dx, max_dy = float(translate[0] * width), float(translate[1] * height)
        shift = (int(round(uniform(-max_dx, max_dx, generator))),
                 int(round(uniform(-max_dy, max_dy, generator))))
    factor = 1.0 if scale is None else uniform(scale[0], scale[1], generator)
    shear_x = shear_y = 0.0
    if shear is not None:
        shear_x = uniform(shear[0], shear[1], generator)
        if len(shear) == 4:
            shear_y = uniform(shear[2], shear[3], generator)
    return {"angle": angle, "translate": shift, "scale": factor, "shear": (shear_x, shear_y)}


def perspective_points(width: int, height: int, distortion: float,
                       generator: torch.Generator) -> tuple[list[list[int]], list[list[int]]]:
    """``(startpoints, endpoints)`` as ``RandomPerspective.get_params`` (v1) and
    ``make_params`` (v2) draw them."""
    dw, dh = int(distortion * (width // 2)), int(distortion * (height // 2))

    def draw(low: int, high: int) -> int:
        return randint(low, high, generator)

    topleft = [draw(0, dw + 1), draw(0, dh + 1)]
    topright = [draw(width - dw - 1, width), draw(0, dh + 1)]
    botright = [draw(width - dw - 1, width), draw(height - dh - 1, height)]
    botleft = [draw(0, dw + 1), draw(height - dh - 1, height)]
    start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
    return start, [topleft, topright, botright, botleft]
