"""torchvision's random transforms with their draws made from an explicit generator.

:func:`replay` gives, for a transform, a function ``(x, generator) -> x`` that makes the
same random calls as the transform's ``forward`` does on torch's default generator, in the
same order, then applies torchvision's own op (``_apply_op``, ``F.erase``, ``F.hflip``).
So seeding the default generator with ``s`` and calling the transform gives exactly what
the replay gives with a generator seeded ``s`` — and replays can run in parallel threads.
Deterministic transforms replay as themselves; others give None (the suffix then runs
them on the seeded global generator, one sample at a time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["replay"]

Replay = Callable[[Any, torch.Generator], Any]

_DETERMINISTIC = frozenset({
    "ToTensor", "PILToTensor", "ToImage", "ToPureTensor", "ConvertImageDtype", "ToDtype",
    "Normalize", "CenterCrop", "Resize", "Grayscale", "Pad", "MaybeToTensor",
    "MaybePILToTensor",
})


def replay(t) -> Replay | None:
    """The explicit-generator form of ``t``, or None when its draws are not replayed."""
    cls = type(t)
    module, name = cls.__module__, cls.__name__
    if module == "timm.data.transforms" and name in _DETERMINISTIC:
        return lambda x, gen: t(x)
    if not module.startswith("torchvision.transforms"):
        return None
    if name in _DETERMINISTIC:
        return lambda x, gen: t(x)
    if module.startswith("torchvision.transforms.v2"):
        return None
    return {
        "RandAugment": _rand_augment,
        "TrivialAugmentWide": _trivial_augment,
        "AutoAugment": _auto_augment,
        "RandomErasing": _random_erasing,
        "RandomHorizontalFlip": _flip,
        "RandomVerticalFlip": _flip,
    }.get(name, lambda t: None)(t)


def _fill(t, img) -> Any:
    from torchvision.transforms import functional as F

    fill = t.fill
    if isinstance(img, torch.Tensor):
        channels = F.get_dimensions(img)[0]
        if isinstance(fill, (int, float)):
            return [float(fill)] * channels
        if fill is not None:
            return [float(f) for f in fill]
    return fill


def _randint(high: int, gen: torch.Generator) -> int:
    return int(torch.randint(high, (1,), generator=gen).item())


def _rand_augment(t) -> Replay:
    from torchvision.transforms.autoaugment import _apply_op
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        space = t._augmentation_space(t.num_magnitude_bins, (height, width))
        names = list(space)
        for _ in range(t.num_ops):
            op = names[_randint(len(space), gen)]
            magnitudes, signed = space[op]
            magnitude = float(magnitudes[t.magnitude].item()) if magnitudes.ndim > 0 else 0.0
            if signed and _randint(2, gen):
                magnitude = -magnitude
            img = _apply_op(img, op, magnitude, interpolation=t.interpolation, fill=fill)
        return img

    return run


def _trivial_augment(t) -> Replay:
    from torchvision.transforms.autoaugment import _apply_op

    def run(img, gen):
        fill = _fill(t, img)
        space = t._augmentation_space(t.num_magnitude_bins)
        op = list(space)[_randint(len(space), gen)]
        magnitudes, signed = space[op]
        magnitude = 0.0
        if magnitudes.ndim > 0:
            pick = torch.randint(len(magnitudes), (1,), dtype=torch.long, generator=gen)
            magnitude = float(magnitudes[pick].item())
        if signed and _randint(2, gen):
            magnitude = -magnitude
        return _apply_op(img, op, magnitude, interpolation=t.interpolation, fill=fill)

    return run


def _auto_augment(t) -> Replay:
    from torchvision.transforms.autoaugment import _apply_op
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        policy = _randint(len(t.policies), gen)
        probs = torch.rand((2,), generator=gen)
        signs = torch.randint(2, (2,), generator=gen)
        space = t._augmentation_space(10, (height, width))
        for i, (op, p, magnitude_id) in enumerate(t.policies[policy]):
            if probs[i] <= p:
                magnitudes, signed = space[op]
                magnitude = float(magnitudes[magnitude_id].item()) if magnitude_id is not None else 0.0
                if signed and signs[i] == 0:
                    magnitude = -magnitude
                img = _apply_op(img, op, magnitude, interpolation=t.interpolation, fill=fill)
        return img

    return run


def _flip(t) -> Replay:
    from torchvision.transforms import functional as F

    op = F.hflip if type(t).__name__ == "RandomHorizontalFlip" else F.vflip

    def run(img, gen):
        return op(img) if torch.rand(1, generator=gen) < t.p else img

    return run


def _erase_params(img, scale, ratio, value, gen):
    """torchvision's ``RandomErasing.get_params`` with draws from ``gen``."""
    channels, height, width = img.shape[-3], img.shape[-2], img.shape[-1]
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        erase_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=gen).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1],
                                                   generator=gen)).item()
        h = int(round(math.sqrt(erase_area * aspect)))
        w = int(round(math.sqrt(erase_area / aspect)))
        if not (h < height and w < width):
            continue
        if value is None:
            v = torch.empty([channels, h, w], dtype=torch.float32).normal_(generator=gen)
        else:
            v = torch.tensor(value)[:, None, None]
        i = torch.randint(0, height - h + 1, size=(1,), generator=gen).item()
        j = torch.randint(0, width - w + 1, size=(1,), generator=gen).item()
        return i, j, h, w, v
    return 0, 0, height, width, img


def _random_erasing(t) -> Replay:
    from torchvision.transforms import functional as F

    if isinstance(t.value, (int, float)):
        value = [float(t.value)]
    elif isinstance(t.value, str):
        value = None
    else:
        value = [float(v) for v in t.value]

    def run(img, gen):
        if torch.rand(1, generator=gen) < t.p:
            if value is not None and len(value) not in (1, img.shape[-3]):
                raise ValueError(f"RandomErasing value={t.value!r} should have 1 or "
                                 f"{img.shape[-3]} values (one per channel)")
            i, j, h, w, v = _erase_params(img, t.scale, t.ratio, value, gen)
            return F.erase(img, i, j, h, w, v.to(img.device), t.inplace)
        return img

    return run
