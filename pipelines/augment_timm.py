"""timm's auto-augmentations and RandomErasing, with their draws private to a thread.

timm's ``RandAugment``, ``AutoAugment`` and ``AugMixAugment`` (``timm.data.auto_augment``)
draw from Python's ``random`` module and NumPy's global generator. ``timm.data.auto_augment``'s
module names ``random`` and ``np`` are replaced (once, by :func:`install`) with the stand-ins
of :mod:`~fastload.pipelines.thread_rng`, which forward to the thread's own generators inside
``python_rng(seed)`` and to the real modules everywhere else, so other callers see no change.
Seeding those per sample is exactly what the suffix's seeded-global path does, so a sample
gets the same draws, and the same image, in any thread (Pillow's operations release the GIL,
so samples run in parallel).

timm's ``RandomErasing`` also draws its noise from torch's default generator; its replay
makes the same calls with the thread's ``random.Random`` and the sample's explicit
generator.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .ops import family
from .thread_rng import NUMPY, RANDOM, thread_random
from .torch_seams import timm_auto_augment

__all__ = ["install", "replay"]

_AUTO_AUGMENT = frozenset({"RandAugment", "AutoAugment", "AugMixAugment"})

_INSTALL = threading.Lock()


def install() -> bool:
    """Point ``timm.data.auto_augment``'s ``random`` and ``np`` at the stand-ins (idempotent);
    False where that module does not use them as expected (the caller then leaves its
    transforms on the seeded global generators)."""
    # Seam (torch_seams): timm's module globals, read at call time by its op and level
    # functions. Outside python_rng the stand-ins forward to the real modules.
    module = timm_auto_augment()
    if module is None:  # a timm release the seam was not checked on (warned)
        return False
    with _INSTALL:
        if getattr(module, "random", None) is random:
            module.random = RANDOM
        if getattr(module, "np", None) is np:
            module.np = NUMPY
        return module.random is RANDOM and module.np is NUMPY


def replay(t: Any) -> Callable[[Any, torch.Generator], Any] | None:
    """The thread-safe form of a timm transform ``t`` (marked ``python_rng``: it must run inside
    :func:`~fastload.pipelines.thread_rng.python_rng`), or None."""
    kind, name = family(t), type(t).__name__
    if kind == "timm.auto_augment" and name in _AUTO_AUGMENT:
        if not install():
            return None

        def run(x: Any, gen: torch.Generator) -> Any:
            return t(x)
    elif kind == "timm.random_erasing" and name == "RandomErasing":
        def run(x: Any, gen: torch.Generator) -> Any:
            if not isinstance(x, torch.Tensor) or x.ndim != 3:
                raise TypeError(f"timm's RandomErasing in the suffix expects a C x H x W tensor, "
                                f"but got {type(x).__name__} of shape {getattr(x, 'shape', '?')}")
            _erase(t, x, thread_random(), gen)
            return x
    else:
        return None
    run.python_rng = True  # type: ignore[attr-defined]
    return run


def _erase(t: Any, img: torch.Tensor, rnd: random.Random, gen: torch.Generator) -> None:
    """timm's ``RandomErasing._erase`` on ``img`` (in place), drawing from ``rnd`` and ``gen``
    in the order timm draws from ``random`` and torch's default generator."""
    chan, img_h, img_w = img.shape
    if rnd.random() > t.probability:
        return
    area = img_h * img_w
    count = t.min_count if t.min_count == t.max_count else rnd.randint(t.min_count, t.max_count)
    for _ in range(count):
        for _attempt in range(10):
            target_area = rnd.uniform(t.min_area, t.max_area) * area / count
            aspect_ratio = math.exp(rnd.uniform(*t.log_aspect_ratio))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < img_w and h < img_h:
                top = rnd.randint(0, img_h - h)
                left = rnd.randint(0, img_w - w)
                if t.per_pixel or t.rand_color:  # drawn on the CPU generator, then moved
                    shape = (chan, h, w) if t.per_pixel else (chan, 1, 1)
                    pixels = torch.empty(shape, dtype=img.dtype).normal_(generator=gen)
                else:
                    pixels = torch.zeros((chan, 1, 1), dtype=img.dtype)
                img[:, top:top + h, left:left + w] = pixels.to(img.device)
                break
