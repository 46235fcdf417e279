"""Per-sample parameters of torchvision transforms, drawn and composed in Python.

DALI matches torchvision pixel for pixel only when output sizes and crop offsets come from
torchvision's own integer arithmetic, so every size and offset is computed here and fed to the
graph per sample. Random draws are torchvision's own (:mod:`~fastload.pipelines.draws`, the
copy the torch suffix's replays use too), made on a ``torch.Generator``: a generator seeded
like ``torch.manual_seed`` gives the very same parameters as the torchvision transform.

The steps of a plan (one dataclass per geometric or colour transform) are walked for each
sample and folded into one :class:`SampleParams`: a region of the source to decode, one
resample, a crop of the resampled image (which may reach past the edges: padding), flips and
colour-jitter factors. Flips are moved to the end by mirroring the crops that follow them.

timm's transforms draw from Python's ``random``; their parameters are drawn here from the
same distributions with the torch generator (the same distribution, not timm's stream): the
crop of ``RandomResizedCropAndInterpolation`` as torchvision's, and its
``interpolation='random'`` (``random.choice`` over bilinear, bicubic) as a uniform
``randint`` over the modes, drawn after the crop as timm draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import draws

__all__ = [
    "Resize",
    "CenterCrop",
    "RandomCrop",
    "RandomResizedCrop",
    "ResizeKeepRatio",
    "Flip",
    "ColorJitter",
    "SampleParams",
    "resized_output_size",
    "keep_ratio_output_size",
    "center_crop_offsets",
    "color_jitter_params",
    "contrast_before_crop",
    "contrast_jitter_at",
    "draw_interpolation",
    "draw_sample",
]


# ---------------------------------------------------------------- steps (static, from a plan)
# A resample's interpolation: one mode ("nearest" | "linear" | "cubic" | "lanczos"), or a
# tuple of modes of which each sample uses one, drawn uniformly (timm's 'random').
Interpolation = str | tuple[str, ...]


@dataclass(frozen=True)
class Resize:
    """``Resize``: ``size`` is ``(s,)`` for the shorter side, ``(h, w)``, or ``None`` (v2, with max_size)."""

    size: tuple[int, ...] | None
    max_size: int | None
    interpolation: Interpolation
    antialias: bool


@dataclass(frozen=True)
class ResizeKeepRatio:
    """timm's ``ResizeKeepRatio`` without its random scale/aspect: both sides divided by one
    ratio between the side ratios to ``size`` (``longest=0``: the shorter side fits, 1: the
    longer side fits)."""

    size: tuple[int, int]  # (h, w) target
    longest: float
    interpolation: Interpolation
    antialias: bool


@dataclass(frozen=True)
class CenterCrop:
    """``CenterCrop`` (pads with 0) or timm's ``CenterCropOrPad`` (pads with ``fill``)."""

    size: tuple[int, int]  # (h, w)
    fill: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class RandomCrop:
    size: tuple[int, int]  # (h, w)
    padding: tuple[int, int, int, int]  # (left, top, right, bottom)
    pad_if_needed: bool
    fill: tuple[int, ...]


@dataclass(frozen=True)
class RandomResizedCrop:
    size: tuple[int, int]  # (h, w)
    scale: tuple[float, float]
    ratio: tuple[float, float]
    interpolation: Interpolation
    antialias: bool


@dataclass(frozen=True)
class Flip:
    p: float
    vertical: bool


@dataclass(frozen=True)
class ColorJitter:
    brightness: tuple[float, float] | None
    contrast: tuple[float, float] | None
    saturation: tuple[float, float] | None
    hue: tuple[float, float] | None


Step = Resize | ResizeKeepRatio | CenterCrop | RandomCrop | RandomResizedCrop | Flip | ColorJitter
Resample = Resize | ResizeKeepRatio | RandomResizedCrop


def contrast_jitter_at(steps: tuple[Step, ...] | list[Step]) -> int | None:
    """The index of the ``ColorJitter`` with a contrast range among ``steps``, or None."""
    return next((k for k, s in enumerate(steps)
                 if isinstance(s, ColorJitter) and s.contrast is not None), None)


def contrast_before_crop(steps: tuple[Step, ...] | list[Step]) -> bool:
    """Whether a ``ColorJitter`` with a contrast range precedes a crop: its contrast blends
    with the mean grey of the image as it is there, before the crop, so the graph applies it
    between the resample and the crop (the crop not folded into the resample)."""
    jitter = contrast_jitter_at(steps)
    return jitter is not None and any(isinstance(s, (CenterCrop, RandomCrop))
                                      for s in steps[jitter + 1:])


# ---------------------------------------------------------------- torchvision arithmetic
def resized_output_size(
    height: int, width: int, size: tuple[int, ...] | None, max_size: int | None
) -> tuple[int, int]:
    """``(h, w)`` after torchvision's ``Resize(size, max_size=...)`` of a ``height x width`` image."""
    short, long = (width, height) if width <= height else (height, width)
    if size is None:
        new_short, new_long = int(max_size * short / long), max_size
    elif len(size) == 1:
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    else:
        return size[0], size[1]
    return (new_long, new_short) if width <= height else (new_short, new_long)


def keep_ratio_output_size(
    height: int, width: int, size: tuple[int, int], longest: float
) -> tuple[int, int]:
    """``(h, w)`` after timm's ``ResizeKeepRatio(size, longest)`` (no random scale or aspect)."""
    ratio_h, ratio_w = height / size[0], width / size[1]
    ratio = max(ratio_h, ratio_w) * longest + min(ratio_h, ratio_w) * (1.0 - longest)
    h, w = round(height / ratio), round(width / ratio)  # Python's round, as timm's
    if h <= 0 or w <= 0:  # Pillow refuses such a resize too
        raise ValueError(
            f"ResizeKeepRatio of a {height}x{width} image to {size} gives an empty {h}x{w} image"
        )
    return h, w


def center_crop_offsets(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """``(top, left)`` of torchvision's ``CenterCrop``; negative where it pads with zeros."""
    top = -((crop_h - height) // 2) if crop_h > height else int(round((height - crop_h) / 2.0))
    left = -((crop_w - width) // 2) if crop_w > width else int(round((width - crop_w) / 2.0))
    return top, left


# ---------------------------------------------------------------- one sample, composed
@dataclass
class SampleParams:
    """What the graph does to one sample.

    ``decode``: ``(top, left, h, w)`` region of the source to decode (inside the image).
    ``resize``: output ``(h, w)`` of the one resample, or None. ``resize_roi``: the part of
    the decoded region mapped onto that output, ``((y0, x0), (y1, x1))`` in decoded pixels.
    ``crop``: ``(top, left, h, w)`` taken from the resampled (or decoded) image afterwards;
    may reach outside it (filled with ``fill``). ``jitter``: colour factors or None.
    ``interpolation``: the resample's mode for this sample (drawn where the plan has a choice).
    """

    decode: tuple[int, int, int, int]
    resize: tuple[int, int] | None
    resize_roi: tuple[tuple[float, float], tuple[float, float]] | None
    crop: tuple[int, int, int, int] | None
    hflip: bool
    vflip: bool
    jitter: tuple[float, float, float, float] | None
    interpolation: str | None = None

    @property
    def output_size(self) -> tuple[int, int]:
        if self.crop is not None:
            return self.crop[2], self.crop[3]
        if self.resize is not None:
            return self.resize
        return self.decode[2], self.decode[3]


def color_jitter_params(
    step: ColorJitter, generator: torch.Generator
) -> tuple[float, float, float, float]:
    """``(brightness, contrast, saturation, hue)`` factors drawn as ``ColorJitter.get_params``
    draws them (the permutation is drawn too, to keep the stream aligned, and then unused:
    the graph applies the four adjustments in this fixed order). Neutral where a range is None."""
    _, factors = draws.color_jitter(
        (step.brightness, step.contrast, step.saturation, step.hue), generator
    )
    b, c, s, h = (
        neutral if f is None else f for f, neutral in zip(factors, (1.0, 1.0, 1.0, 0.0), strict=True)
    )
    return b, c, s, h


def draw_interpolation(mode: Interpolation, generator: torch.Generator) -> str:
    """``mode`` itself, or one of the modes of a tuple drawn uniformly (as ``random.choice``)."""
    if isinstance(mode, str):
        return mode
    return mode[draws.randint(0, len(mode), generator)]


def _pad_ltrb(step: RandomCrop, height: int, width: int) -> tuple[int, int, int, int]:
    left, top, right, bottom = step.padding
    width_p, height_p = width + left + right, height + top + bottom
    if step.pad_if_needed and width_p < step.size[1]:
        extra = step.size[1] - width_p
        left, right = left + extra, right + extra
    if step.pad_if_needed and height_p < step.size[0]:
        extra = step.size[0] - height_p
        top, bottom = top + extra, bottom + extra
    return left, top, right, bottom


def draw_sample(
    steps: tuple[Step, ...], height: int, width: int, generator: torch.Generator
) -> SampleParams:
    """Walk ``steps`` for one ``height x width`` source image, drawing random parameters."""
    if height <= 0 or width <= 0:
        raise ValueError(
            f"image size should be positive, but got (height, width)={(height, width)}"
        )
    roi = [0, 0, height, width]  # region of the source (may reach outside before a resize: padding)
    resized: tuple[int, int] | None = None
    crop: list[int] | None = None  # region of the resized image
    hflip = vflip = False
    jitter = None
    interpolation: str | None = None

    def current() -> tuple[int, int]:
        if crop is not None:
            return crop[2], crop[3]
        if resized is not None:
            return resized
        return roi[2], roi[3]

    def apply_crop(top: int, left: int, h: int, w: int) -> None:
        nonlocal crop
        cur_h, cur_w = current()
        if hflip:
            left = cur_w - left - w
        if vflip:
            top = cur_h - top - h
        if resized is None:
            roi[:] = [roi[0] + top, roi[1] + left, h, w]
        elif crop is None:
            crop = [top, left, h, w]
        else:
            crop = [crop[0] + top, crop[1] + left, h, w]

    def apply_resize(h: int, w: int) -> None:
        nonlocal resized
        if resized is not None:  # translate() rejects a second resample
            raise ValueError("only one resampling step per transform is supported")
        if roi[0] < 0 or roi[1] < 0 or roi[0] + roi[2] > height or roi[1] + roi[3] > width:
            raise ValueError(
                f"a crop of {roi[2]}x{roi[3]} at {(roi[0], roi[1])} reaches outside the "
                f"{height}x{width} image before a resize; padding before a resize is not supported"
            )
        resized = (h, w)

    for step in steps:
        cur_h, cur_w = current()
        if isinstance(step, Resize):
            h, w = resized_output_size(cur_h, cur_w, step.size, step.max_size)
            apply_resize(h, w)
            interpolation = draw_interpolation(step.interpolation, generator)
        elif isinstance(step, ResizeKeepRatio):
            h, w = keep_ratio_output_size(cur_h, cur_w, step.size, step.longest)
            apply_resize(h, w)
            interpolation = draw_interpolation(step.interpolation, generator)
        elif isinstance(step, CenterCrop):
            top, left = center_crop_offsets(cur_h, cur_w, *step.size)
            apply_crop(top, left, *step.size)
        elif isinstance(step, RandomCrop):
            left_pad, top_pad, right_pad, bottom_pad = _pad_ltrb(step, cur_h, cur_w)
            top, left = draws.crop_offsets(
                cur_h + top_pad + bottom_pad, cur_w + left_pad + right_pad, *step.size, generator
            )
            apply_crop(top - top_pad, left - left_pad, *step.size)
        elif isinstance(step, RandomResizedCrop):
            top, left, h, w = draws.resized_crop_box(
                cur_h, cur_w, step.scale, step.ratio, generator
            )
            apply_crop(top, left, h, w)
            apply_resize(*step.size)
            interpolation = draw_interpolation(step.interpolation, generator)
        elif isinstance(step, Flip):
            if draws.coin(step.p, generator):
                if step.vertical:
                    vflip = not vflip
                else:
                    hflip = not hflip
        elif isinstance(step, ColorJitter):
            jitter = color_jitter_params(step, generator)
        else:
            raise TypeError(f"unknown geometry step {step!r}")
    params = _finish(roi, resized, crop, hflip, vflip, jitter, height, width,
                     fold=not contrast_before_crop(steps))
    params.interpolation = interpolation
    return params


def _finish(roi, resized, crop, hflip, vflip, jitter, height, width, *,
            fold: bool = True) -> SampleParams:
    """The sample's parameters; ``fold``: resample only the part a crop inside the resampled
    image keeps (else the whole, then the crop)."""
    top, left = max(roi[0], 0), max(roi[1], 0)
    bottom, right = min(roi[0] + roi[2], height), min(roi[1] + roi[3], width)
    if bottom <= top or right <= left:
        raise ValueError(f"the crop {roi} does not overlap the {height}x{width} image")
    decode = (top, left, bottom - top, right - left)
    if resized is None:
        inside = decode == tuple(roi)
        crop_out = None if inside else (roi[0] - top, roi[1] - left, roi[2], roi[3])
        return SampleParams(decode, None, None, crop_out, hflip, vflip, jitter)
    rh, rw = resized
    if (
        fold
        and crop is not None
        and crop[0] >= 0
        and crop[1] >= 0
        and crop[0] + crop[2] <= rh
        and crop[1] + crop[3] <= rw
    ):
        # Resample only the part the crop keeps: the same source positions, less work.
        sy, sx = decode[2] / rh, decode[3] / rw
        roi_pts = (
            (crop[0] * sy, crop[1] * sx),
            ((crop[0] + crop[2]) * sy, (crop[1] + crop[3]) * sx),
        )
        return SampleParams(decode, (crop[2], crop[3]), roi_pts, None, hflip, vflip, jitter)
    crop_out = None if crop is None else tuple(crop)
    full = ((0.0, 0.0), (float(decode[2]), float(decode[3])))
    return SampleParams(decode, resized, full, crop_out, hflip, vflip, jitter)
