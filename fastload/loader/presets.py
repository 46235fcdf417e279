"""The standard ImageNet transforms, written once: constants, the train and the eval preset.

Every part of fastload that needs "the usual ImageNet input" (the fine-tuning loop, the bench
rows, the hand-written DALI graph) takes it from here, so the presets cannot drift apart.

Eval resize rule: ``crop_pct`` has timm's meaning, the share of the resized short side that
the centre crop keeps, and the resize is ``floor(img_size / crop_pct)`` exactly as timm's
``transforms_imagenet_eval`` computes it. With the default ``crop_pct = 0.875`` that is
torchvision's reference ``ClassificationPresetEval`` at 224 (resize 256, crop 224), and at
384 it is 438 px. (torchvision's reference preset takes the resize as a separate number
rather than a ratio, so it has no rounding rule of its own to follow.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastload.utils.checks import check_positive_int

__all__ = [
    "DEFAULT_CROP_PCT",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "PRESETS",
    "eval_resize_size",
    "eval_transform",
    "imagenet_transform",
    "train_transform",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # per-channel mean of ImageNet, RGB, on [0, 1]
IMAGENET_STD = (0.229, 0.224, 0.225)  # per-channel standard deviation, RGB, on [0, 1]
DEFAULT_CROP_PCT = 0.875  # timm's default: 224 of 256
PRESETS = ("train", "val")


def eval_resize_size(img_size: int, crop_pct: float = DEFAULT_CROP_PCT) -> int:
    """The eval preset's short-side resize for a centre crop of ``img_size``:
    ``floor(img_size / crop_pct)`` (timm's rule); 256 for 224."""
    check_positive_int("img_size", img_size)
    if not 0.0 < crop_pct <= 1.0:
        raise ValueError(f"crop_pct should be in (0, 1], but got crop_pct={crop_pct!r}")
    return math.floor(img_size / crop_pct)


def train_transform(img_size: int, *, mean: Sequence[float] = IMAGENET_MEAN,
                    std: Sequence[float] = IMAGENET_STD):
    """RandomResizedCrop(img_size) + RandomHorizontalFlip + ToTensor + Normalize(mean, std)."""
    from torchvision import transforms as T

    check_positive_int("img_size", img_size)
    return T.Compose([T.RandomResizedCrop(img_size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(mean, std)])


def eval_transform(img_size: int, *, crop_pct: float = DEFAULT_CROP_PCT,
                   mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD):
    """Resize(:func:`eval_resize_size`) + CenterCrop(img_size) + ToTensor + Normalize(mean, std)."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(eval_resize_size(img_size, crop_pct)), T.CenterCrop(img_size),
                      T.ToTensor(), T.Normalize(mean, std)])


def imagenet_transform(kind: str, img_size: int = 224):
    """``kind`` "train": :func:`train_transform`; "val": :func:`eval_transform` (defaults)."""
    if kind == "train":
        return train_transform(img_size)
    if kind == "val":
        return eval_transform(img_size)
    raise ValueError(f"kind should be one of {PRESETS}, but got kind={kind!r}")
