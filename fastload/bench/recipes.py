"""The transform recipes people train with, as ``fastload bench --recipe NAME`` measures them.

Each recipe is a transform (and, for ``mixup_cutmix``, a ``collate_fn``) at a given image
size: torchvision's reference classification presets (``references/classification``, whose
shape :class:`TrainPreset`/:class:`EvalPreset` follow: an object whose ``transforms`` is a
``Compose`` and whose ``__call__`` only delegates to it), the reference script's MixUp/CutMix
collate, and timm's ``create_transform``. :func:`fastload.bench.harness.run_recipes` runs
rows (a) torch's tuned DataLoader and (c) fastload.DataLoader side by side for each recipe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import default_collate

from fastload.loader.presets import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["RECIPE_NAMES", "EvalPreset", "MixupCutmixCollate", "TrainPreset", "recipe",
           "recipe_parts"]


class TrainPreset:
    """A training preset shaped like torchvision's reference ``ClassificationPresetTrain``:
    RandomResizedCrop, flip, an optional auto-augmentation (``"ra"``, ``"ta_wide"``,
    ``"augmix"`` or an ``AutoAugmentPolicy`` value), float conversion, Normalize, optional
    RandomErasing; ``backend="tensor"`` converts to a tensor first; ``use_v2`` picks v2."""

    def __init__(self, *, crop_size: int = 224, hflip_prob: float = 0.5,
                 auto_augment_policy: str | None = None, random_erase_prob: float = 0.0,
                 backend: str = "pil", use_v2: bool = False) -> None:
        import torch
        import torchvision.transforms as v1
        import torchvision.transforms.v2 as v2

        T = v2 if use_v2 else v1
        interpolation = v1.InterpolationMode.BILINEAR
        steps: list[Any] = [T.PILToTensor()] if backend == "tensor" else []
        steps.append(T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
        if hflip_prob > 0:
            steps.append(T.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy == "ra":
            steps.append(T.RandAugment(interpolation=interpolation, magnitude=9))
        elif auto_augment_policy == "ta_wide":
            steps.append(T.TrivialAugmentWide(interpolation=interpolation))
        elif auto_augment_policy == "augmix":
            steps.append(T.AugMix(interpolation=interpolation, severity=3))
        elif auto_augment_policy is not None:
            policy = v1.AutoAugmentPolicy(auto_augment_policy)
            steps.append(T.AutoAugment(policy=policy, interpolation=interpolation))
        if backend == "pil":
            steps.append(T.PILToTensor())
        steps.append(T.ToDtype(torch.float, scale=True) if use_v2
                     else T.ConvertImageDtype(torch.float))
        steps.append(T.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD))
        if random_erase_prob > 0:
            steps.append(T.RandomErasing(p=random_erase_prob))
        if use_v2:
            steps.append(T.ToPureTensor())
        self.transforms = T.Compose(steps)

    def __call__(self, img):
        return self.transforms(img)


class EvalPreset:
    """An eval preset shaped like torchvision's reference ``ClassificationPresetEval``:
    Resize(resize_size), CenterCrop(crop_size), float conversion, Normalize."""

    def __init__(self, *, crop_size: int = 224, resize_size: int = 256,
                 use_v2: bool = False) -> None:
        import torch
        import torchvision.transforms as v1
        import torchvision.transforms.v2 as v2

        T = v2 if use_v2 else v1
        self.transforms = T.Compose([
            T.Resize(resize_size, antialias=True), T.CenterCrop(crop_size), T.PILToTensor(),
            T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
            T.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD)])

    def __call__(self, img):
        return self.transforms(img)


class MixupCutmixCollate:
    """The reference script's collate: ``default_collate``, then MixUp or CutMix (v2), in
    the shape ``fastload.pipelines.replays.batch_mix`` recognises (``return self.mix(*default_collate(
    batch))``), as the script's own ``collate_fn`` closure is."""

    def __init__(self, num_classes: int, mixup_alpha: float = 0.2, cutmix_alpha: float = 1.0):
        from torchvision.transforms import v2

        self.num_classes, self.mixup_alpha, self.cutmix_alpha = num_classes, mixup_alpha, cutmix_alpha
        self.mix = v2.RandomChoice([v2.MixUp(alpha=mixup_alpha, num_classes=num_classes),
                                    v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)])

    def __call__(self, batch: list) -> Any:
        return self.mix(*default_collate(batch))


def _timm(size: int, **kwargs: Any) -> Any:
    from timm.data import create_transform

    return create_transform(size, **kwargs)


_RECIPES: dict[str, Callable[[int], Any]] = {
    "default": lambda s: TrainPreset(crop_size=s),
    "ra": lambda s: TrainPreset(crop_size=s, auto_augment_policy="ra"),
    "ta_wide": lambda s: TrainPreset(crop_size=s, auto_augment_policy="ta_wide"),
    "augmix": lambda s: TrainPreset(crop_size=s, auto_augment_policy="augmix"),
    "autoaugment": lambda s: TrainPreset(crop_size=s, auto_augment_policy="imagenet"),
    "random_erasing": lambda s: TrainPreset(crop_size=s, auto_augment_policy="ta_wide",
                                            random_erase_prob=0.1),
    "backend_tensor": lambda s: TrainPreset(crop_size=s, backend="tensor"),
    "use_v2": lambda s: TrainPreset(crop_size=s, use_v2=True, auto_augment_policy="ta_wide"),
    "mixup_cutmix": lambda s: TrainPreset(crop_size=s, auto_augment_policy="ta_wide"),
    "eval": lambda s: EvalPreset(crop_size=s, resize_size=s * 256 // 224),
    "timm_train": lambda s: _timm(s, is_training=True),
    "timm_deit": lambda s: _timm(s, is_training=True, auto_augment="rand-m9-mstd0.5",
                                 re_prob=0.25, re_mode="pixel", interpolation="bicubic"),
    "timm_eval": lambda s: _timm(s, is_training=False, crop_pct=0.9),
}
RECIPE_NAMES = tuple(_RECIPES)


def recipe(name: str, image_size: int, num_classes: int) -> tuple[Any, Any]:
    """``(transform, collate_fn or None)`` of recipe ``name`` at ``image_size``."""
    if name not in _RECIPES:
        raise ValueError(f"recipe should be one of {', '.join(RECIPE_NAMES)}, but got "
                         f"recipe={name!r}")
    collate = MixupCutmixCollate(num_classes) if name == "mixup_cutmix" else None
    return _RECIPES[name](image_size), collate


def recipe_parts(spec: Any) -> tuple[Any, Any]:
    """``(transform, collate_fn)`` for a bench ``RowSpec`` whose ``recipe`` is set."""
    from torchvision.datasets.folder import find_classes

    return recipe(spec.recipe, spec.image_size, len(find_classes(spec.folder)[0]))
