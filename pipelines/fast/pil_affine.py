"""Pillow's ``Image.transform(..., AFFINE, ...)`` and ``Image.rotate`` of RGB images, bit for
bit, in one C pass (``pipelines/_affine*.c``) instead of Pillow's per-pixel filter calls.

:func:`transform` and :func:`rotate` take the arguments of the Pillow methods they stand for
and return what those return. They compute it themselves for an RGB image with bilinear or
bicubic resampling and a fill of ``None`` or three ints; anything else (another mode, nearest
or another filter, a fill given as a name or one number, a non-finite matrix, the C
extension not built, a Pillow release or build the kernel does not match) goes to Pillow
itself. The kernel also does nearest, bit for bit (tested), but Pillow's own is faster
there. Only fastload's private copy of timm's auto-augment module calls them
(:mod:`~fastload.pipelines.replays.timm_aug`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from ..seams.torch_private import pillow_affine_checked

try:
    from .. import _affine as _c
except ImportError:  # no C compiler at install time
    _c = None

__all__ = ["available", "rotate", "transform"]

_RESAMPLE = frozenset({0, 2, 3})  # Pillow's NEAREST, BILINEAR, BICUBIC: what the kernel does
# What transform() and rotate() give it: Pillow's own nearest (16.16 fixed point on its pixel
# buffer) is faster than the kernel plus the round trip through bytes (benchmarks/NOTES.md).
_ROUTED = frozenset({2, 3})


@functools.cache
def available() -> bool:
    """Whether the kernel runs: built, the installed Pillow is a release it was checked on,
    and this Pillow build gives the kernel's values (checked once per process on a small
    image: a build that fuses multiply-adds, e.g. with -march=native, does not)."""
    if _c is None or not pillow_affine_checked():
        return False
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (23, 19, 3), dtype=np.uint8))
    for matrix in [(0.83, 0.41, -3.3, -0.37, 0.91, 5.7), (1, 0.27, 0, 0, 1, 0)]:
        for resample in _ROUTED:
            expected = img.transform(img.size, Image.Transform.AFFINE, matrix, resample,
                                     fillcolor=(1, 2, 3))
            if _run(img, img.size, tuple(map(float, matrix)), resample, (1, 2, 3)).tobytes() \
                    != expected.tobytes():
                return False
    return True


def _fill(fillcolor: Any) -> tuple[int, int, int] | None:
    """``fillcolor`` as Pillow's ``new("RGB", size, fillcolor)`` paints it, where it is
    ``None`` or three ints in [0, 255]; else None (Pillow's own parsing then)."""
    if fillcolor is None:
        return (0, 0, 0)
    if (isinstance(fillcolor, tuple) and len(fillcolor) == 3
            and all(type(v) is int and 0 <= v <= 255 for v in fillcolor)):
        return fillcolor
    return None


def _kernel(img: Any, size: tuple[int, int], matrix: Sequence[float], resample: int,
            fillcolor: Any) -> Image.Image | None:
    """The transformed image, or None where the kernel does not apply."""
    if not available() or not isinstance(img, Image.Image) or img.mode != "RGB":
        return None
    if resample not in _RESAMPLE or len(matrix) < 6:
        return None
    fill = _fill(fillcolor)
    try:
        a = tuple(float(v) for v in matrix[:6])
        ow, oh = (int(v) for v in size)
    except (TypeError, ValueError):
        return None
    if (fill is None or ow <= 0 or oh <= 0 or not all(map(math.isfinite, a))
            or any(abs(a[k]) >= 32768.0 for k in (0, 1, 3, 4))):
        return None
    out = _run(img, (ow, oh), a, resample, fill)
    out.info = {k: v.copy() if isinstance(v, list) else v for k, v in img.info.items()}
    return out


def _run(img: Image.Image, size: tuple[int, int], a: tuple[float, ...], resample: int,
         fill: tuple[int, int, int]) -> Image.Image:
    dst = bytearray(size[0] * size[1] * 3)
    _c.affine(img.tobytes(), img.size[0], img.size[1], dst, size[0], size[1], a,
              int(resample), fill)
    return Image.frombytes("RGB", size, dst)


def transform(img: Image.Image, size: tuple[int, int], matrix: Sequence[float],
              resample: int = Image.Resampling.NEAREST, fillcolor: Any = None) -> Image.Image:
    """``img.transform(size, Image.AFFINE, matrix, resample, fillcolor=fillcolor)``."""
    out = _kernel(img, size, matrix, resample, fillcolor) if resample in _ROUTED else None
    if out is None:
        return img.transform(size, Image.Transform.AFFINE, matrix, resample,
                             fillcolor=fillcolor)
    return out


def rotate(img: Image.Image, angle: float, resample: int = Image.Resampling.NEAREST,
           fillcolor: Any = None) -> Image.Image:
    """``img.rotate(angle, resample, fillcolor=fillcolor)`` (no expand, centre or
    translation): Pillow's matrix, computed with its own double arithmetic."""
    try:
        turn = angle % 360.0
    except TypeError:
        turn = None
    w, h = getattr(img, "size", (0, 0))
    # Pillow's exact fast paths (a copy or a transpose) stay Pillow's
    if (resample not in _ROUTED or turn is None or turn in (0, 180)
            or (turn in (90, 270) and w == h)):
        return img.rotate(angle, resample, fillcolor=fillcolor)
    center = (w / 2, h / 2)
    theta = -math.radians(turn)
    matrix = [round(math.cos(theta), 15), round(math.sin(theta), 15), 0.0,
              round(-math.sin(theta), 15), round(math.cos(theta), 15), 0.0]
    a, b, c, d, e, f = matrix
    x, y = -center[0], -center[1]
    matrix[2], matrix[5] = a * x + b * y + c, d * x + e * y + f
    matrix[2] += center[0]
    matrix[5] += center[1]
    out = _kernel(img, (w, h), matrix, resample, fillcolor)
    if out is None:
        return img.rotate(angle, resample, fillcolor=fillcolor)
    return out
