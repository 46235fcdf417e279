"""The DALI prefix of a transform: the plan it becomes and the builder its steps write into.

:class:`TransformPlan` is what one DALI graph does (geometry and colour steps, then one fused
normalisation). :class:`PrefixBuilder` is filled by each transform's prefix step (one per
class, in :mod:`~fastload.pipelines.prefix.steps`, chosen by the registry) and turned into
the plan by :meth:`PrefixBuilder.plan`. The argument readers below (``pair``, ``interp``,
``padding``, ``fill``) are shared by those steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ops import State
from . import geometry as g

__all__ = ["PrefixBuilder", "TransformPlan", "UnsupportedTransform"]


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
    ``pad_crop``: a crop of the resampled image may reach past its edges (filled with ``fill``),
    or, with ``jitter_before_crop``, follows the colour jitter (a slice after it).
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
    jitter_before_crop: bool = False  # the jitter's contrast needs the image before the crop

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


@dataclass
class PrefixBuilder:
    """The plan so far: steps, the :class:`State` the image is in, and the value mapping.

    Output value = ``(pixel * scale - mean) / std`` on 0..255 pixels; a ``Normalize`` composes
    into ``mean``/``std``, a dtype conversion sets ``scale``.
    """

    steps: list[g.Step] = field(default_factory=list)
    state: State = State.PIL
    scale: float = 1.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    dtype: torch.dtype = torch.uint8
    interpolation: g.Interpolation = "linear"
    antialias: bool = True
    resamples: int = 0
    jitters: int = 0
    names: list[str] = field(default_factory=list)

    def require(self, states: frozenset[State], name: str, hint: str) -> None:
        """Raise UnsupportedTransform(name, hint) unless the image is in one of ``states``."""
        if self.state not in states:
            raise UnsupportedTransform(name, hint)

    def crop(self, name: str) -> None:
        """Check a crop: after a contrast ``ColorJitter`` the graph cuts it after the jitter,
        which needs a resample before the jitter and no crop between them."""
        jitter = g.contrast_jitter_at(self.steps)
        if jitter is None:
            return
        before = self.steps[:jitter]
        resample = max((k for k, s in enumerate(before)
                        if isinstance(s, (g.Resize, g.ResizeKeepRatio, g.RandomResizedCrop))),
                       default=None)
        if resample is None or any(isinstance(s, (g.CenterCrop, g.RandomCrop))
                                   for s in before[resample + 1:]):
            raise UnsupportedTransform(
                name, "it crops after ColorJitter(contrast=...) where DALI would crop first "
                "(the contrast blends with the mean grey of the image before the crop); put "
                "the crop before the ColorJitter, or a resize before both")

    def resample(self, name: str) -> None:
        """Count one resampling step: at most one per plan, not after a padded crop."""
        self.resamples += 1
        if self.resamples > 1:
            raise UnsupportedTransform(
                name, "only one resampling step (Resize or RandomResizedCrop) is supported"
            )
        if any(isinstance(s, g.RandomCrop) and (any(s.padding) or s.pad_if_needed)
               for s in self.steps):
            raise UnsupportedTransform(name, "it follows a padded RandomCrop (padding before a resize)")

    def plan(self, *, pil_end: bool = False) -> TransformPlan:
        """The plan of the steps so far; UnsupportedTransform if it ends on a PIL image
        (unless ``pil_end``: the plan then outputs that image as uint8 CHW)."""
        if self.state == State.PIL and not pil_end:
            raise UnsupportedTransform(
                " -> ".join(self.names) or "Compose([])",
                "it yields PIL images, not tensors; add ToTensor()",
            )
        # output = ((pixel*scale) - mean)/std = (pixel - mean/scale) / (std/scale)
        pad_crop, fill = _pad_crop(self.steps)
        jitter_before_crop = g.contrast_before_crop(self.steps)
        return TransformPlan(
            steps=tuple(self.steps),
            output_dtype=self.dtype,
            mean=tuple(m / self.scale for m in self.mean),  # type: ignore[arg-type]
            std=tuple(s / self.scale for s in self.std),  # type: ignore[arg-type]
            interpolation=self.interpolation,
            antialias=self.antialias,
            has_resize=self.resamples > 0,
            decode_roi=_decode_roi(self.steps),
            pad_crop=pad_crop or jitter_before_crop,
            fill=fill,
            source=" -> ".join(self.names) or "decode",
            jitter_before_crop=jitter_before_crop,
        )


# ---------------------------------------------------------------- argument readers
_INTERP = {
    "nearest": "nearest",
    "nearest-exact": "nearest",
    "bilinear": "linear",
    "bicubic": "cubic",
    "lanczos": "lanczos",
}


def pair(name: str, size) -> tuple[int, int]:
    """``(h, w)`` of a transform's ``size`` (an int, or one or two values)."""
    if isinstance(size, int):
        return size, size
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise UnsupportedTransform(name, f"size={size!r} should have one or two values")
    return size  # type: ignore[return-value]


def mode_value(mode) -> str:
    """torchvision's name of one interpolation ``mode`` (an InterpolationMode, a PIL int
    constant or a string): ``"nearest"``, ``"bilinear"``, ..."""
    from torchvision.transforms import InterpolationMode

    from ..seams.torch_private import interpolation_modes_from_int

    if isinstance(mode, int):
        mode = interpolation_modes_from_int(mode)
    return mode.value if isinstance(mode, InterpolationMode) else str(mode)


def interp(name: str, mode) -> g.Interpolation:
    """DALI's name of ``mode``; for a list or tuple (timm's 'random'), a tuple of them."""
    if isinstance(mode, (list, tuple)):
        if not mode:
            raise UnsupportedTransform(name, "interpolation=() has no mode to choose from")
        return tuple(interp(name, m) for m in mode)  # type: ignore[misc]
    value = mode_value(mode)
    if value not in _INTERP:
        raise UnsupportedTransform(name, f"interpolation={value!r} has no DALI equivalent")
    return _INTERP[value]


def padding(name: str, value) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` of a ``padding`` argument (None, 1, 2 or 4 values)."""
    if value is None:
        return 0, 0, 0, 0
    if isinstance(value, int):
        return value, value, value, value
    value = [int(p) for p in value]
    if len(value) == 1:
        return (value[0],) * 4  # type: ignore[return-value]
    if len(value) == 2:
        return value[0], value[1], value[0], value[1]
    if len(value) == 4:
        return tuple(value)  # type: ignore[return-value]
    raise UnsupportedTransform(name, f"padding={value!r} should have 1, 2 or 4 values")


def fill(name: str, value) -> tuple[int, ...]:
    """A constant padding's ``fill`` as integers per channel (one value: all channels)."""
    if isinstance(value, dict):
        raise UnsupportedTransform(name, "fill given per type (a dict) is not supported")
    if value is None:
        return (0,)
    if isinstance(value, (int, float)):
        return (int(value),)
    return tuple(int(f) for f in value)


# ---------------------------------------------------------------- what the graph needs
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
    found: tuple[int, ...] | None = None
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
            if may_pad and found is not None and s.fill != found:
                raise UnsupportedTransform(
                    type(s).__name__, f"it may pad with fill {s.fill}, another crop with {found}"
                )
            if may_pad:
                found = s.fill
            known, cropped = s.size, True
    return found is not None, (0,) if found is None else found
