"""torchvision transforms (v1 and ``transforms.v2``) -> a :class:`TransformPlan` for one DALI graph.

Supported, with the same parameters: ``Compose``, ``RandomResizedCrop``, ``Resize`` (int or
``(h, w)``, ``max_size``; NEAREST/BILINEAR/BICUBIC/LANCZOS, and on a tensor NEAREST_EXACT
but not NEAREST, whose tensor form samples another grid), ``CenterCrop``, ``RandomCrop``
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

Anything else raises :class:`UnsupportedTransform` naming the transform or argument. Which
classes are supported, and each one's step, is the registry's
(:mod:`~fastload.pipelines.registry`); the steps are in :mod:`~fastload.pipelines.prefix.steps`.
"""

from __future__ import annotations

from .ops import State
from .prefix.plan import PrefixBuilder, TransformPlan, UnsupportedTransform
from .registry import lookup, named

__all__ = ["UnsupportedTransform", "TransformPlan", "translate", "translate_list"]


def _flatten(transform) -> list:
    if named(transform, "Compose"):
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


def translate_list(transforms: list, *, pil_end: bool = False) -> tuple[TransformPlan, State]:
    """``(plan, state)`` for a flat list of transforms; ``state`` is what the last one yields
    (``State.PIL`` only with ``pil_end``: the plan outputs the image as uint8 CHW, the tensor
    form of the PIL image)."""
    builder = PrefixBuilder()
    for t in transforms:
        name = type(t).__name__
        op = lookup(t)
        if op is None or op.prefix is None:
            raise UnsupportedTransform(name, "no DALI translation for this transform")
        builder.require(op.needs, name, op.hint)
        if op.prefix(t, builder) is not False:
            builder.names.append(name)
    return builder.plan(pil_end=pil_end), builder.state
