"""torchvision transforms (v1 and ``transforms.v2``) -> a :class:`TransformPlan` for one DALI graph.

Supported, with the same parameters: ``Compose``, ``RandomResizedCrop``, ``Resize`` (int or
``(h, w)``, ``max_size``; NEAREST/BILINEAR/BICUBIC/LANCZOS), ``CenterCrop``, ``RandomCrop``
(constant padding, ``pad_if_needed``), ``RandomHorizontalFlip``, ``RandomVerticalFlip``,
``ColorJitter``, ``ToTensor``, ``PILToTensor``, ``ConvertImageDtype``, ``Normalize`` and the v2
forms (``ToImage``, ``ToDtype(dtype, scale=...)``, ``ToPureTensor``). At most one resampling
step (``Resize``, ``RandomResizedCrop`` or timm's ``ResizeKeepRatio``) and one ``ColorJitter``
per plan.

timm (``timm.data.transforms``), what ``create_transform`` builds:

- ``RandomResizedCropAndInterpolation``: as ``RandomResizedCrop`` (the same crop
  distribution, drawn from fastload's torch generator, not timm's Python ``random``). With
  ``interpolation='random'`` each sample uses bilinear or bicubic, each with probability 1/2
  as timm's ``random.choice`` over that tuple; the choice is drawn from the same generator
  after the crop (the same distribution, not timm's stream) and fed to DALI's ``fn.resize``
  (or the torch resampler) per sample.
- ``ResizeKeepRatio`` with ``random_scale_prob=0`` and ``random_aspect_prob=0`` (eval: the
  'border' crop mode and 'center' with a non-square size): timm's ratio and rounding give the
  output size per image; any interpolation above, 'random' included. Its random scale and
  aspect raise UnsupportedTransform: only timm's train crop modes 'rkrc'/'rkrr' use them,
  with reflect padding after, which DALI cannot do either.
- ``CenterCropOrPad`` with ``padding_mode='constant'``: torchvision's ``CenterCrop``
  arithmetic (the same pad split and offsets), padding with its ``fill``.
- ``MaybeToTensor``/``MaybePILToTensor``: as ``ToTensor``/``PILToTensor`` on an image, no-ops
  on a tensor.

``ColorJitter``: torchvision applies its four adjustments in a random order; the graph applies
them in the fixed order brightness, contrast, saturation, hue, with factors drawn from the
same distributions (and the same random calls). Each adjustment reproduces PIL's (hue as an
exact HSV shift in DALI arithmetic, which is slow on CPU: about 20 ms per 224 px image).
On the CPU, :func:`~fastload.pipelines.split.split` leaves a ``ColorJitter`` that follows a
fixed-size step to the torch suffix instead (torchvision's random order, replayed, faster).

Anything else raises :class:`UnsupportedTransform` naming the transform or argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import geometry as g

__all__ = ["UnsupportedTransform", "TransformPlan", "translate"]


class UnsupportedTransform(ValueError):
    """Raised with a message naming the transform that cannot be translated and why."""

    def __init__(self, transform_name: str, reason: str):
        self.transform_name = transform_name
        super().__init__(f"{transform_name} cannot be translated to a DALI graph: {reason}")


@dataclass(frozen=True)
class TransformPlan:
    """What the DALI graph does: geometry/colour ``steps`` then one fused normalisation.

    Output value = ``(pixel - mean) / std`` per channel on 0..255 pixels, cast to
    ``output_dtype``, CHW. ``decode_roi``: decode a region of each image (a crop comes first);
    ``pad_crop``: a crop of the resampled image may reach past its edges (filled with ``fill``).
    """

    steps: tuple[g.Step, ...]
    output_dtype: torch.dtype
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: g.Interpolation  # a tuple: each sample draws one (SampleParams.interpolation)
    antialias: bool
    has_resize: bool
    decode_roi: bool
    pad_crop: bool
    fill: tuple[int, ...]
    source: str

    @property
    def has_vflip(self) -> bool:
        return any(isinstance(s, g.Flip) and s.vertical for s in self.steps)

    @property
    def interpolations(self) -> tuple[str, ...]:
        """The modes the resample may use (one, or the choices of a random interpolation)."""
        mode = self.interpolation
        return (mode,) if isinstance(mode, str) else mode

    @property
    def jitter(self) -> g.ColorJitter | None:
        return next((s for s in self.steps if isinstance(s, g.ColorJitter)), None)

    def describe(self) -> str:
        """One line, for logs."""
        return f"TransformPlan({self.source} -> {str(self.output_dtype).replace('torch.', '')} CHW)"


_INTERP = {
    "nearest": "nearest",
    "nearest-exact": "nearest",
    "bilinear": "linear",
    "bicubic": "cubic",
    "lanczos": "lanczos",
}


def _modules():
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    return v1, v2


def _is(t, name: str) -> bool:
    """``t`` is exactly torchvision's class ``name`` from v1 or v2 (no user subclasses)."""
    v1, v2 = _modules()
    return any(type(t) is getattr(mod, name, None) for mod in (v1, v2))


def _is_v2(t) -> bool:
    return type(t).__module__.startswith("torchvision.transforms.v2")


def _pair(name: str, size) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise UnsupportedTransform(name, f"size={size!r} should have one or two values")
    return size  # type: ignore[return-value]


def _interp(name: str, mode) -> g.Interpolation:
    """DALI's name of ``mode``; for a list or tuple (timm's 'random'), a tuple of them."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import _interpolation_modes_from_int

    if isinstance(mode, (list, tuple)):
        if not mode:
            raise UnsupportedTransform(name, "interpolation=() has no mode to choose from")
        return tuple(_interp(name, m) for m in mode)  # type: ignore[misc]
    if isinstance(mode, int):
        mode = _interpolation_modes_from_int(mode)
    value = mode.value if isinstance(mode, InterpolationMode) else str(mode)
    if value not in _INTERP:
        raise UnsupportedTransform(name, f"interpolation={value!r} has no DALI equivalent")
    return _INTERP[value]


def _padding(name: str, padding) -> tuple[int, int, int, int]:
    if padding is None:
        return 0, 0, 0, 0
    if isinstance(padding, int):
        return padding, padding, padding, padding
    padding = [int(p) for p in padding]
    if len(padding) == 1:
        return (padding[0],) * 4  # type: ignore[return-value]
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if len(padding) == 4:
        return tuple(padding)  # type: ignore[return-value]
    raise UnsupportedTransform(name, f"padding={padding!r} should have 1, 2 or 4 values")


def _fill(name: str, fill) -> tuple[int, ...]:
    if isinstance(fill, dict):
        raise UnsupportedTransform(name, "fill given per type (a dict) is not supported")
    if fill is None:
        return (0,)
    if isinstance(fill, (int, float)):
        return (int(fill),)
    return tuple(int(f) for f in fill)


def _flatten(transform) -> list:
    if _is(transform, "Compose"):
        out = []
        for t in transform.transforms:
            out.extend(_flatten(t))
        return out
    return [transform]


def translate(transform) -> TransformPlan:
    """Translate a torchvision transform (or ``Compose``) to a plan, or raise UnsupportedTransform."""
    if transform is None:
        raise UnsupportedTransform(
            "transform=None", "the dataset would yield PIL images, not tensors; add ToTensor()"
        )
    return translate_list(_flatten(transform))[0]


def _timm(t, name: str) -> bool:
    """``t`` is exactly timm's ``timm.data.transforms`` class ``name``."""
    cls = type(t)
    return cls.__name__ == name and cls.__module__ == "timm.data.transforms"


def translate_list(transforms: list, *, pil_end: bool = False) -> tuple[TransformPlan, str]:
    """``(plan, state)`` for a flat list of transforms; ``state`` is what the last one yields:
    ``"pil"`` (only with ``pil_end``: the plan outputs the image as uint8 CHW, the tensor form
    of the PIL image), ``"uint8"``, ``"float"`` or ``"normalized"``."""
    steps: list[g.Step] = []
    state = "pil"  # pil -> uint8 (tensor) -> float -> normalized
    scale = 1.0  # output = pixel * scale (before Normalize), pixel in 0..255
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    dtype = torch.uint8
    interpolation: g.Interpolation = "linear"
    antialias = True
    resamples = jitters = 0
    names: list[str] = []
    for t in transforms:
        name = type(t).__name__
        keep_ratio = _timm(t, "ResizeKeepRatio")
        crop_or_pad = _timm(t, "CenterCropOrPad")
        modes: g.Interpolation | None = None  # the resample's, when not t.interpolation
        if _timm(t, "RandomResizedCropAndInterpolation"):
            modes = _interp(name, t.interpolation)  # a tuple for interpolation='random'
            t = _modules()[0].RandomResizedCrop(t.size, t.scale, t.ratio)
        elif _timm(t, "MaybeToTensor") and state == "pil":
            t = _modules()[0].ToTensor()
        elif _timm(t, "MaybePILToTensor") and state == "pil":
            t = _modules()[0].PILToTensor()
        elif _timm(t, "MaybeToTensor") or _timm(t, "MaybePILToTensor"):
            continue  # a tensor passes through unchanged
        names.append(name)
        geometric = keep_ratio or crop_or_pad or any(
            _is(t, n) for n in ("Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop")
        )
        if geometric and state == "normalized":
            raise UnsupportedTransform(name, "a crop or resize after Normalize is not supported")
        if _is(t, "Resize") or _is(t, "RandomResizedCrop") or keep_ratio:
            resamples += 1
            if resamples > 1:
                raise UnsupportedTransform(
                    name, "only one resampling step (Resize or RandomResizedCrop) is supported"
                )
            if any(
                isinstance(s, g.RandomCrop) and (any(s.padding) or s.pad_if_needed) for s in steps
            ):
                raise UnsupportedTransform(
                    name, "it follows a padded RandomCrop (padding before a resize)"
                )
            interpolation = modes if modes is not None else _interp(name, t.interpolation)
            # timm's ResizeKeepRatio calls F.resize with its default, antialias=True
            antialias = True if state == "pil" or keep_ratio else bool(t.antialias)
            if keep_ratio:
                steps.append(_keep_ratio(t, name, interpolation))
            elif _is(t, "Resize"):
                size = t.size
                if isinstance(size, int):
                    size = (size,)
                elif size is not None:
                    size = tuple(int(s) for s in size)
                if (
                    t.max_size is not None
                    and size is not None
                    and len(size) == 1
                    and t.max_size <= size[0]
                ):
                    raise UnsupportedTransform(
                        name, f"max_size={t.max_size} should be larger than size={size[0]}"
                    )
                steps.append(g.Resize(size, t.max_size, interpolation, antialias))
            else:
                steps.append(
                    g.RandomResizedCrop(
                        _pair(name, t.size),
                        tuple(float(s) for s in t.scale),
                        tuple(float(r) for r in t.ratio),
                        interpolation,
                        antialias,
                    )
                )
        elif _is(t, "CenterCrop"):
            steps.append(g.CenterCrop(_pair(name, t.size)))
        elif crop_or_pad:  # torchvision's CenterCrop padding arithmetic, with timm's fill
            if t.padding_mode != "constant":
                raise UnsupportedTransform(
                    name, f"padding_mode={t.padding_mode!r} (only 'constant' is supported)"
                )
            steps.append(g.CenterCrop(_pair(name, t.size), _fill(name, t.fill)))
        elif _is(t, "RandomCrop"):
            if t.padding_mode != "constant":
                raise UnsupportedTransform(
                    name, f"padding_mode={t.padding_mode!r} (only 'constant' is supported)"
                )
            steps.append(
                g.RandomCrop(
                    _pair(name, t.size),
                    _padding(name, t.padding),
                    bool(t.pad_if_needed),
                    _fill(name, t.fill),
                )
            )
        elif _is(t, "RandomHorizontalFlip") or _is(t, "RandomVerticalFlip"):
            steps.append(g.Flip(float(t.p), vertical=_is(t, "RandomVerticalFlip")))
        elif _is(t, "ColorJitter"):
            if state != "pil":
                raise UnsupportedTransform(
                    name, "ColorJitter on tensors is not supported; put it before ToTensor"
                )
            jitters += 1
            if jitters > 1:
                raise UnsupportedTransform(name, "only one ColorJitter is supported")
            ranges = [
                None if r is None else (float(r[0]), float(r[1]))
                for r in (t.brightness, t.contrast, t.saturation, t.hue)
            ]
            steps.append(g.ColorJitter(*ranges))
        elif _is(t, "ToTensor"):
            if state != "pil":
                raise UnsupportedTransform(
                    name, "ToTensor expects a PIL image, but it follows a tensor conversion"
                )
            state, dtype, scale = "float", torch.float32, 1.0 / 255.0
        elif _is(t, "PILToTensor") or _is(t, "ToImage"):
            if state != "pil":
                raise UnsupportedTransform(name, "it follows a tensor conversion")
            state, dtype = "uint8", torch.uint8
        elif _is(t, "ToPureTensor"):
            if state == "pil":
                raise UnsupportedTransform(name, "it would return a PIL image; add ToImage() first")
        elif _is(t, "ConvertImageDtype") or _is(t, "ToDtype"):
            state, dtype, scale = _dtype_step(t, name, state, dtype, scale)
        elif _is(t, "Normalize"):
            if state not in ("float", "normalized"):
                raise UnsupportedTransform(
                    name, "Normalize needs a float tensor; add ToTensor() before it"
                )
            m = [float(v) for v in t.mean]
            s = [float(v) for v in t.std]
            m, s = (m * 3 if len(m) == 1 else m), (s * 3 if len(s) == 1 else s)
            if len(m) != 3 or len(s) != 3 or any(v == 0 for v in s):
                raise UnsupportedTransform(
                    name, f"mean={t.mean} and std={t.std} should have 1 or 3 values, std non-zero"
                )
            # (x*scale - mean')/std' ... composed with an earlier Normalize
            mean = tuple(mo + so * mi for mo, so, mi in zip(mean, std, m, strict=True))
            std = tuple(so * si for so, si in zip(std, s, strict=True))
            state = "normalized"
        else:
            raise UnsupportedTransform(name, "no DALI translation for this transform")
    if state == "pil" and not pil_end:
        raise UnsupportedTransform(
            " -> ".join(names) or "Compose([])", "it yields PIL images, not tensors; add ToTensor()"
        )
    # output = ((pixel*scale) - mean)/std = (pixel - mean/scale) / (std/scale)
    plan_mean = tuple(m / scale for m in mean)
    plan_std = tuple(s / scale for s in std)
    pad_crop, fill = _pad_crop(steps)
    plan = TransformPlan(
        steps=tuple(steps),
        output_dtype=dtype,
        mean=plan_mean,  # type: ignore[arg-type]
        std=plan_std,  # type: ignore[arg-type]
        interpolation=interpolation,
        antialias=antialias,
        has_resize=resamples > 0,
        decode_roi=_decode_roi(steps),
        pad_crop=pad_crop,
        fill=fill,
        source=" -> ".join(names) or "decode",
    )
    return plan, state


def _keep_ratio(t, name: str, interpolation: g.Interpolation) -> g.ResizeKeepRatio:
    """timm's ``ResizeKeepRatio``; its random scale and aspect are not translated (timm's
    train crop modes 'rkrc'/'rkrr' use them with reflect padding, which DALI has not)."""
    for arg in ("random_scale_prob", "random_aspect_prob"):
        if getattr(t, arg) > 0:
            raise UnsupportedTransform(name, f"{arg}={getattr(t, arg)} is not translated")
    longest = float(t.longest)
    if not 0.0 <= longest <= 1.0:
        raise UnsupportedTransform(name, f"longest={longest} should be within [0, 1]")
    return g.ResizeKeepRatio(_pair(name, t.size), longest, interpolation, True)


def _dtype_step(t, name: str, state: str, dtype: torch.dtype, scale: float):
    target = t.dtype
    do_scale = getattr(t, "scale", True)
    if isinstance(target, dict):
        raise UnsupportedTransform(name, "dtype given per type (a dict) is not supported")
    if state == "pil":
        if _is_v2(t):  # v2 dtype conversions pass PIL images through unchanged
            raise UnsupportedTransform(name, "it receives a PIL image; add ToImage() first")
        raise UnsupportedTransform(name, "it needs a tensor; add PILToTensor() first")
    if target == torch.uint8:
        if dtype != torch.uint8:
            raise UnsupportedTransform(
                name, "converting float images back to uint8 is not supported"
            )
        return state, dtype, scale
    if target not in (torch.float32, torch.float16):
        raise UnsupportedTransform(
            name, f"dtype={target} (only float32, float16 and uint8 are supported)"
        )
    if dtype == torch.uint8:
        return "float", target, (1.0 / 255.0 if do_scale else 1.0)
    if state == "normalized" and target != dtype:
        raise UnsupportedTransform(
            name, "changing the float dtype after Normalize is not supported"
        )
    return state, target, scale


def _decode_roi(steps: list[g.Step]) -> bool:
    """A crop precedes the resample (or there is no resample): decode only that region."""
    for s in steps:
        if isinstance(s, (g.Resize, g.ResizeKeepRatio)):
            return False
        if isinstance(s, (g.CenterCrop, g.RandomCrop, g.RandomResizedCrop)):
            return True
    return False


def _pad_crop(steps: list[g.Step]) -> tuple[bool, tuple[int, ...]]:
    """Whether some crop may reach past the image (so the graph needs a padding slice), and
    the fill of the crops that may.

    Raises UnsupportedTransform for a crop that may pad after another crop of the same
    (un-resampled) image: the composed crop would show image pixels where torchvision pads.
    """
    known: tuple[int, int] | None = None  # guaranteed minimum (h, w) of the current image
    cropped = False  # a crop happened since the last resample
    fill: tuple[int, ...] | None = None
    for s in steps:
        if isinstance(s, g.Resize):
            if s.size is not None and len(s.size) == 2:
                known = (s.size[0], s.size[1])
            elif s.size is not None and s.max_size is None:
                known = (s.size[0], s.size[0])
            else:
                known = None
            cropped = False
        elif isinstance(s, g.ResizeKeepRatio):
            # the shorter side fits (longest=0): both sides reach at least the target
            known, cropped = (s.size if s.longest == 0.0 else None), False
        elif isinstance(s, g.RandomResizedCrop):
            known, cropped = s.size, False
        elif isinstance(s, (g.CenterCrop, g.RandomCrop)):
            if isinstance(s, g.CenterCrop):
                may_pad = known is None or s.size[0] > known[0] or s.size[1] > known[1]
            else:
                too_small = known is None or s.size[0] > known[0] or s.size[1] > known[1]
                may_pad = any(s.padding) or (s.pad_if_needed and too_small)
            if may_pad and cropped:
                raise UnsupportedTransform(
                    type(s).__name__,
                    f"it may pad (size {s.size}) after an earlier crop of the same image",
                )
            if may_pad and fill is not None and s.fill != fill:
                raise UnsupportedTransform(
                    type(s).__name__, f"it may pad with fill {s.fill}, another crop with {fill}"
                )
            if may_pad:
                fill = s.fill
            known, cropped = s.size, True
    return fill is not None, (0,) if fill is None else fill
