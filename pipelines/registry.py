"""The one registry of transform classes fastload knows: one :class:`~fastload.pipelines.ops.Op`
entry per class, read by the translation, the split, the suffix and the replays.

Adding a transform is one entry here (its DALI prefix step in
:mod:`~fastload.pipelines.prefix.steps`, its replays in ``augment_v1``/``augment_v2``) plus
its tests. A class with no entry is not translated: the graph stops before it, and where the
torch suffix cannot take it either, the loader's ``FallbackWarning`` names it.
"""

from __future__ import annotations

import functools
import sys
from types import MappingProxyType
from typing import Any

from .ops import GEOMETRIC, PUBLIC_MODULES, TENSORS, Op, State, family_of_class
from .prefix import steps as step
from .prefix.plan import mode_value
from .replays import batch_mix, common
from .replays import timm_aug as augment_timm
from .replays import v1 as a1
from .replays import v2 as a2

__all__ = ["OPS", "lookup", "named", "pil_semantics"]

V1, V2, V1V2, TIMM = ("v1",), ("v2",), ("v1", "v2"), ("timm",)
_PIL = frozenset({State.PIL})
_AFTER_NORMALIZE = step.AFTER_NORMALIZE


def _both(maker_v1: Any, maker_v2: Any) -> MappingProxyType:
    return MappingProxyType({"v1": maker_v1, "v2": maker_v2})


def _each(maker: Any, families: tuple[str, ...] = V1V2) -> MappingProxyType:
    return MappingProxyType(dict.fromkeys(families, maker))


def _geometric(name: str, prefix: Any, replay: MappingProxyType, families=V1V2) -> Op:
    return Op(name, families, prefix, needs=GEOMETRIC, hint=_AFTER_NORMALIZE, replay=replay)


OPS: tuple[Op, ...] = (
    # containers: replayed when all their children are
    Op("Compose", V1V2, replay=_each(common.compose), container=True),
    Op("RandomApply", V1V2, replay=_both(a1.random_apply, a2.random_apply), container=True),
    Op("RandomChoice", V1V2, replay=_both(a1.random_choice, a2.random_choice), container=True),
    Op("RandomOrder", V1V2, replay=_both(a1.random_order, a2.random_order), container=True),
    # conversions and per-channel value maps
    Op("ToTensor", V1V2, step.to_tensor, needs=_PIL, leaves=State.FLOAT, per_pixel=True,
       hint="ToTensor expects a PIL image, but it follows a tensor conversion",
       replay=_each(common.itself)),
    Op("PILToTensor", V1V2, step.to_uint8, needs=_PIL, leaves=State.UINT8, per_pixel=True,
       hint="it follows a tensor conversion", replay=_each(common.itself)),
    Op("ToImage", V2, step.to_uint8, needs=_PIL, leaves=State.UINT8, per_pixel=True,
       hint="it follows a tensor conversion", replay=_each(common.itself, V2)),
    Op("ToPureTensor", V2, step.to_pure_tensor, needs=TENSORS, per_pixel=True, after_tail=True,
       hint="it would return a PIL image; add ToImage() first", replay=_each(common.itself, V2)),
    Op("ConvertImageDtype", V1V2, step.to_dtype, per_pixel=True, replay=_each(common.itself)),
    Op("ToDtype", V2, step.to_dtype, per_pixel=True, replay=_each(common.itself, V2)),
    Op("Normalize", V1V2, step.normalize, needs=frozenset({State.FLOAT, State.NORMALIZED}),
       leaves=State.NORMALIZED, per_pixel=True, replay=_each(common.itself),
       hint="Normalize needs a float tensor; add ToTensor() before it"),
    # geometry
    _geometric("Resize", step.resize, _each(common.itself)),
    _geometric("CenterCrop", step.center_crop, _each(common.itself)),
    _geometric("RandomCrop", step.random_crop, _both(a1.random_crop, a2.random_crop)),
    _geometric("RandomResizedCrop", step.random_resized_crop,
               _both(a1.random_resized_crop, a2.random_resized_crop)),
    Op("RandomHorizontalFlip", V1V2, step.hflip,
       replay=_both(a1.coin_op("hflip"), a2.coin_op("horizontal_flip"))),
    Op("RandomVerticalFlip", V1V2, step.vflip,
       replay=_both(a1.coin_op("vflip"), a2.coin_op("vertical_flip"))),
    # colour: DALI's CPU operators are slower than the suffix's replay (see split)
    Op("ColorJitter", V1V2, step.color_jitter, needs=_PIL, cpu_suffix=True,
       hint="ColorJitter on tensors is not supported; put it before ToTensor",
       replay=_both(a1.color_jitter, a2.color_jitter)),
    # the suffix only: replayed with an explicit generator
    Op("Grayscale", V1V2, replay=_each(common.itself)),
    Op("Pad", V1V2, replay=_each(common.itself)),
    Op("RandAugment", V1V2, replay=_both(a1.rand_augment, a2.rand_augment)),
    Op("TrivialAugmentWide", V1V2, replay=_both(a1.trivial_augment, a2.trivial_augment)),
    Op("AutoAugment", V1V2, replay=_both(a1.auto_augment, a2.auto_augment)),
    Op("AugMix", V1V2, replay=_both(a1.augmix, a2.augmix)),
    Op("RandomErasing", V1V2, replay=_both(a1.random_erasing, a2.random_erasing),
       after_tail=True),
    Op("RandomGrayscale", V1V2, replay=_both(a1.random_grayscale, a2.random_grayscale)),
    Op("RandomRotation", V1V2, replay=_both(a1.random_rotation, a2.random_rotation)),
    Op("RandomAffine", V1V2, replay=_both(a1.random_affine, a2.random_affine)),
    Op("RandomPerspective", V1V2, replay=_both(a1.random_perspective, a2.random_perspective)),
    Op("GaussianBlur", V1V2, replay=_both(a1.gaussian_blur, a2.gaussian_blur)),
    Op("RandomInvert", V1V2, replay=_both(a1.coin_op("invert"), a2.coin_op("invert"))),
    Op("RandomEqualize", V1V2, replay=_both(a1.coin_op("equalize"), a2.coin_op("equalize"))),
    Op("RandomAutocontrast", V1V2,
       replay=_both(a1.coin_op("autocontrast"), a2.coin_op("autocontrast"))),
    Op("RandomPosterize", V1V2,
       replay=_both(a1.coin_op("posterize", "bits"), a2.coin_op("posterize", "bits"))),
    Op("RandomSolarize", V1V2,
       replay=_both(a1.coin_op("solarize", "threshold"), a2.coin_op("solarize", "threshold"))),
    Op("RandomAdjustSharpness", V1V2,
       replay=_both(a1.coin_op("adjust_sharpness", "sharpness_factor"),
                    a2.coin_op("adjust_sharpness", "sharpness_factor"))),
    Op("RandomChannelPermutation", V2, replay=_each(a2.channel_permutation, V2)),
    # batch transforms of a collate_fn (torchvision's reference script): in place on the batch
    Op("MixUp", V2, batch_mix=batch_mix.mixup),
    Op("CutMix", V2, batch_mix=batch_mix.cutmix),
    Op("RandomPhotometricDistort", V2, replay=_each(a2.photometric_distort, V2)),
    # torchvision's that expect what they expect (a PIL image, for ToPILImage's input)
    Op("Lambda", V1V2, tensor_ok=False),
    Op("ToPILImage", V1V2, tensor_ok=False),
    # timm (timm.data.transforms: what create_transform builds)
    Op("RandomResizedCropAndInterpolation", TIMM, step.timm_random_resized_crop),
    Op("ResizeKeepRatio", TIMM, step.keep_ratio, needs=GEOMETRIC, hint=_AFTER_NORMALIZE),
    Op("CenterCropOrPad", TIMM, step.center_crop_or_pad, needs=GEOMETRIC,
       hint=_AFTER_NORMALIZE),
    Op("MaybeToTensor", TIMM, step.maybe_to_tensor, leaves=State.FLOAT, per_pixel=True,
       replay=_each(common.itself, TIMM)),
    Op("MaybePILToTensor", TIMM, step.maybe_pil_to_tensor, leaves=State.UINT8, per_pixel=True,
       replay=_each(common.itself, TIMM)),
    Op("ToTensor", TIMM, replay=_each(common.itself, TIMM)),
    # timm's augmentations draw from Python's random: replayed inside python_rng
    *(Op(name, ("timm.auto_augment",), replay=_each(augment_timm.replay, ("timm.auto_augment",)))
      for name in ("RandAugment", "AutoAugment", "AugMixAugment")),
    Op("RandomErasing", ("timm.random_erasing",),
       replay=_each(augment_timm.replay, ("timm.random_erasing",)), after_tail=True),
)

_INDEX = {(fam, op.name): op for op in OPS for fam in op.families}


def lookup(t: Any) -> Op | None:
    """The entry of ``t``'s exact class (a subclass has none: it may behave differently)."""
    return _entry(type(t))


@functools.cache
def _entry(cls: type) -> Op | None:
    fam = family_of_class(cls)
    op = _INDEX.get((fam, cls.__name__)) if fam is not None else None
    if op is None:
        return None
    public = sys.modules.get(PUBLIC_MODULES[fam])
    return op if getattr(public, op.name, None) is cls else None


def named(t: Any, name: str) -> bool:
    """``t`` is exactly the registered class ``name`` (torchvision's v1 or v2, or timm's)."""
    op = lookup(t)
    return op is not None and op.name == name


# torchvision's resampling classes: with NEAREST their tensor path takes source pixel
# floor(i * scale) (torch's interpolate), their PIL path Pillow's pixel centres
_RESAMPLES = frozenset({"Resize", "RandomResizedCrop", "RandomResize", "RandomShortestSize",
                        "ScaleJitter"})


# sampling-grid transforms (and the auto-augmentations that rotate, shear and translate):
# their tensor path samples with NEAREST or BILINEAR only, and refuses any other mode
_GRID_SAMPLES = frozenset({"RandomRotation", "RandomAffine", "RandomPerspective", "AutoAugment",
                           "RandAugment", "TrivialAugmentWide"})


def pil_semantics(t: Any) -> bool:
    """Whether ``t``, a torchvision transform that takes tensors, does something else with the
    uint8 tensor of a PIL image than with the image itself, as its arguments are set: a
    resample with NEAREST (another pixel grid), a rotation, affine or perspective warp with
    another mode than NEAREST or BILINEAR (BICUBIC: its tensor path refuses it), or v1's
    ``Pad``/``RandomCrop`` with a fill per channel (its tensor path refuses any fill but a
    number)."""
    name = type(t).__name__
    mode = getattr(t, "interpolation", None)
    if name in _RESAMPLES and mode is not None and mode_value(mode) == "nearest":
        return True
    if name in _GRID_SAMPLES and mode is not None and mode_value(mode) not in ("nearest",
                                                                               "bilinear"):
        return True
    padding = name == "Pad" or (name == "RandomCrop" and (t.padding or t.pad_if_needed))
    return (padding and family_of_class(type(t)) == "v1"
            and not isinstance(t.fill, (int, float)))
