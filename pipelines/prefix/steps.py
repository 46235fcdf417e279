"""Each supported transform's step of the DALI prefix: ``step(t, builder)``.

A step reads the transform's arguments (refusing, with UnsupportedTransform, what the graph
cannot do), appends its :mod:`~fastload.pipelines.prefix.geometry` step or changes the builder's
state and value mapping. The registry (:mod:`~fastload.pipelines.registry`) says which step
a class has and which states it takes (checked before the step runs); a step returning
False passed the image through and is left out of the plan's description.
"""

from __future__ import annotations

import torch

from ..ops import GEOMETRIC, State, family
from . import geometry as g
from .plan import PrefixBuilder, UnsupportedTransform, fill, interp, mode_value, padding, pair

__all__ = [
    "center_crop", "center_crop_or_pad", "color_jitter", "hflip", "keep_ratio",
    "maybe_pil_to_tensor", "maybe_to_tensor", "normalize", "random_crop",
    "random_resized_crop", "resize", "timm_random_resized_crop", "to_dtype",
    "to_pure_tensor", "to_tensor", "to_uint8", "vflip",
]

AFTER_NORMALIZE = "a crop or resize after Normalize is not supported"


def _name(t) -> str:
    return type(t).__name__


def _check_tensor_nearest(name: str, mode, b: PrefixBuilder) -> None:
    """Refuse NEAREST on a tensor: there torch's interpolate takes source pixel
    ``floor(i * scale)``, where DALI (and Pillow, on a PIL image) samples the pixel centres,
    as torchvision's NEAREST_EXACT does on tensors."""
    modes = mode if isinstance(mode, (list, tuple)) else (mode,)
    if b.state != State.PIL and any(mode_value(m) == "nearest" for m in modes):
        raise UnsupportedTransform(
            name, "interpolation=NEAREST on a tensor takes pixel floor(i * scale), which DALI "
            "does not; use NEAREST_EXACT (pixel centres), or resize before the tensor "
            "conversion (a PIL image's NEAREST samples the centres too)")


def resize(t, b: PrefixBuilder) -> None:
    """``Resize``: ``(s,)`` for the shorter side, ``(h, w)``, or v2's ``None`` with ``max_size``."""
    name = _name(t)
    _check_tensor_nearest(name, t.interpolation, b)
    b.resample(name)
    mode = b.interpolation = interp(name, t.interpolation)
    b.antialias = True if b.state == State.PIL else bool(t.antialias)
    size = t.size
    if isinstance(size, int):
        size = (size,)
    elif size is not None:
        size = tuple(int(s) for s in size)
    if t.max_size is not None and size is not None and len(size) == 1 and t.max_size <= size[0]:
        raise UnsupportedTransform(name, f"max_size={t.max_size} should be larger than size={size[0]}")
    b.steps.append(g.Resize(size, t.max_size, mode, b.antialias))


def random_resized_crop(t, b: PrefixBuilder, modes: g.Interpolation | None = None,
                        name: str | None = None) -> None:
    """``RandomResizedCrop``; ``modes``: the resample's, when not ``t.interpolation``;
    ``name``: the transform's, when ``t`` stands for another one."""
    name = name or _name(t)
    if modes is None:
        _check_tensor_nearest(name, t.interpolation, b)
    b.resample(name)
    mode = b.interpolation = modes if modes is not None else interp(name, t.interpolation)
    b.antialias = True if b.state == State.PIL else bool(t.antialias)
    b.steps.append(g.RandomResizedCrop(
        pair(name, t.size), tuple(float(s) for s in t.scale), tuple(float(r) for r in t.ratio),
        mode, b.antialias))


def timm_random_resized_crop(t, b: PrefixBuilder) -> None:
    """timm's ``RandomResizedCropAndInterpolation``: torchvision's crop (the same
    distribution, drawn from fastload's generator), each sample's mode drawn from the tuple
    of ``interpolation='random'``."""
    import torchvision.transforms as v1

    _check_tensor_nearest(_name(t), t.interpolation, b)
    modes = interp(_name(t), t.interpolation)  # a tuple for interpolation='random'
    b.require(GEOMETRIC, _name(t), AFTER_NORMALIZE)
    crop = v1.RandomResizedCrop(t.size, t.scale, t.ratio)
    random_resized_crop(crop, b, modes, _name(t))


def keep_ratio(t, b: PrefixBuilder) -> None:
    """timm's ``ResizeKeepRatio``; its random scale and aspect are not translated (timm's
    train crop modes 'rkrc'/'rkrr' use them with reflect padding, which DALI has not)."""
    name = _name(t)
    _check_tensor_nearest(name, t.interpolation, b)
    b.resample(name)
    mode = b.interpolation = interp(name, t.interpolation)
    b.antialias = True  # timm calls F.resize with its default, antialias=True
    for arg in ("random_scale_prob", "random_aspect_prob"):
        if getattr(t, arg) > 0:
            raise UnsupportedTransform(name, f"{arg}={getattr(t, arg)} is not translated")
    longest = float(t.longest)
    if not 0.0 <= longest <= 1.0:
        raise UnsupportedTransform(name, f"longest={longest} should be within [0, 1]")
    b.steps.append(g.ResizeKeepRatio(pair(name, t.size), longest, mode, True))


def center_crop(t, b: PrefixBuilder) -> None:
    b.crop(_name(t))
    b.steps.append(g.CenterCrop(pair(_name(t), t.size)))


def _constant_padding(t) -> None:
    if t.padding_mode != "constant":
        raise UnsupportedTransform(
            _name(t), f"padding_mode={t.padding_mode!r} (only 'constant' is supported)")


def center_crop_or_pad(t, b: PrefixBuilder) -> None:
    """timm's ``CenterCropOrPad``: torchvision's ``CenterCrop`` arithmetic, with its fill."""
    _constant_padding(t)
    b.crop(_name(t))
    b.steps.append(g.CenterCrop(pair(_name(t), t.size), fill(_name(t), t.fill)))


def random_crop(t, b: PrefixBuilder) -> None:
    _constant_padding(t)
    name = _name(t)
    b.crop(name)
    b.steps.append(g.RandomCrop(pair(name, t.size), padding(name, t.padding),
                                bool(t.pad_if_needed), fill(name, t.fill)))


def hflip(t, b: PrefixBuilder) -> None:
    b.steps.append(g.Flip(float(t.p), vertical=False))


def vflip(t, b: PrefixBuilder) -> None:
    b.steps.append(g.Flip(float(t.p), vertical=True))


def color_jitter(t, b: PrefixBuilder) -> None:
    """``ColorJitter``: the four ranges (drawn per sample; applied in a fixed order)."""
    b.jitters += 1
    if b.jitters > 1:
        raise UnsupportedTransform(_name(t), "only one ColorJitter is supported")
    ranges = [None if r is None else (float(r[0]), float(r[1]))
              for r in (t.brightness, t.contrast, t.saturation, t.hue)]
    b.steps.append(g.ColorJitter(*ranges))


def to_tensor(t, b: PrefixBuilder) -> None:
    b.state, b.dtype, b.scale = State.FLOAT, torch.float32, 1.0 / 255.0


def to_uint8(t, b: PrefixBuilder) -> None:
    """``PILToTensor``/``ToImage``: the uint8 pixels as they are."""
    b.state, b.dtype = State.UINT8, torch.uint8


def maybe_to_tensor(t, b: PrefixBuilder) -> bool | None:
    """timm's ``MaybeToTensor``: ``ToTensor`` of an image; a tensor passes through."""
    if b.state != State.PIL:
        return False
    to_tensor(t, b)
    return None


def maybe_pil_to_tensor(t, b: PrefixBuilder) -> bool | None:
    """timm's ``MaybePILToTensor``: ``PILToTensor`` of an image; a tensor passes through."""
    if b.state != State.PIL:
        return False
    to_uint8(t, b)
    return None


def to_pure_tensor(t, b: PrefixBuilder) -> None:
    """v2's ``ToPureTensor``: the graph's output is a plain tensor already."""


def to_dtype(t, b: PrefixBuilder) -> None:
    """``ConvertImageDtype``/``ToDtype``: uint8 -> float32/float16 (scaled to 0..1 unless
    ``scale=False``), or a float dtype for a float image."""
    name, target = _name(t), t.dtype
    if isinstance(target, dict):
        raise UnsupportedTransform(name, "dtype given per type (a dict) is not supported")
    if b.state == State.PIL:
        if family(t) == "v2":  # v2 dtype conversions pass PIL images through unchanged
            raise UnsupportedTransform(name, "it receives a PIL image; add ToImage() first")
        raise UnsupportedTransform(name, "it needs a tensor; add PILToTensor() first")
    if target == torch.uint8:
        if b.dtype != torch.uint8:
            raise UnsupportedTransform(name, "converting float images back to uint8 is not supported")
        return
    if target not in (torch.float32, torch.float16):
        raise UnsupportedTransform(name, f"dtype={target} (only float32, float16 and uint8 are supported)")
    if b.dtype == torch.uint8:
        b.state, b.dtype = State.FLOAT, target
        b.scale = 1.0 / 255.0 if getattr(t, "scale", True) else 1.0
        return
    if b.state == State.NORMALIZED and target != b.dtype:
        raise UnsupportedTransform(name, "changing the float dtype after Normalize is not supported")
    b.dtype = target


def normalize(t, b: PrefixBuilder) -> None:
    """``Normalize``: composed into the plan's mean and std (after any earlier one)."""
    name = _name(t)
    m = [float(v) for v in t.mean]
    s = [float(v) for v in t.std]
    m, s = (m * 3 if len(m) == 1 else m), (s * 3 if len(s) == 1 else s)
    if len(m) != 3 or len(s) != 3 or any(v == 0 for v in s):
        raise UnsupportedTransform(
            name, f"mean={t.mean} and std={t.std} should have 1 or 3 values, std non-zero")
    # (x*scale - mean')/std' ... composed with an earlier Normalize
    b.mean = tuple(mo + so * mi for mo, so, mi in zip(b.mean, b.std, m, strict=True))
    b.std = tuple(so * si for so, si in zip(b.std, s, strict=True))
    b.state = State.NORMALIZED
