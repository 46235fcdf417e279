"""timm's auto-augmentations and RandomErasing, with their draws private to a thread.

timm's ``RandAugment``, ``AutoAugment`` and ``AugMixAugment`` (``timm.data.auto_augment``)
draw from Python's ``random`` module and NumPy's global generator. :func:`python_rng` gives
the calling thread its own ``random.Random(seed)`` and ``numpy.random.RandomState(seed)``:
``timm.data.auto_augment``'s module names ``random`` and ``np`` are replaced (once, by
:func:`install`) with stand-ins that forward to the thread's generators inside
``python_rng`` and to the real modules everywhere else, so other callers see no change.
Seeding those two per sample is exactly what the suffix's seeded-global path does, so a
sample gets the same draws, and the same image, in any thread (Pillow's operations release
the GIL, so samples run in parallel).

timm's ``RandomErasing`` also draws its noise from torch's default generator; its replay
makes the same calls with the thread's ``random.Random`` and the sample's explicit
generator.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

__all__ = ["install", "python_rng", "replay"]

_LOCAL = threading.local()
_AUTO_AUGMENT = frozenset({"RandAugment", "AutoAugment", "AugMixAugment"})


class _ThreadRandom:
    """Stands in for the ``random`` module: the thread's ``random.Random`` inside
    :func:`python_rng`, the module itself outside it."""

    def __getattr__(self, name: str) -> Any:
        own = getattr(_LOCAL, "random", None)
        if own is not None and hasattr(own, name):
            return getattr(own, name)
        return getattr(random, name)


class _ThreadNumpyRandom:
    def __getattr__(self, name: str) -> Any:
        own = getattr(_LOCAL, "numpy", None)
        if own is not None and hasattr(own, name):
            return getattr(own, name)
        return getattr(np.random, name)


class _ThreadNumpy:
    """Stands in for ``numpy``: ``np.random`` is the thread's ``RandomState`` inside
    :func:`python_rng` (NumPy's global generator outside it); everything else is numpy's."""

    random = _ThreadNumpyRandom()

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


_RANDOM, _NUMPY = _ThreadRandom(), _ThreadNumpy()
_INSTALL = threading.Lock()


def install() -> bool:
    """Point ``timm.data.auto_augment``'s ``random`` and ``np`` at the stand-ins (idempotent);
    False where that module does not use them as expected (the caller then leaves its
    transforms on the seeded global generators)."""
    # Seam: timm's module globals, read at call time by its op and level functions
    # (timm 0.9 - 1.x). Outside python_rng the stand-ins forward to the real modules.
    import timm.data.auto_augment as module

    with _INSTALL:
        if getattr(module, "random", None) is random:
            module.random = _RANDOM
        if getattr(module, "np", None) is np:
            module.np = _NUMPY
        return module.random is _RANDOM and module.np is _NUMPY


@contextmanager
def python_rng(seed: int) -> Iterator[None]:
    """Within the block, this thread's Python and NumPy draws (through the stand-ins) come
    from generators seeded as ``random.seed(seed)`` and ``np.random.seed(seed & 0xFFFFFFFF)``."""
    saved = getattr(_LOCAL, "random", None), getattr(_LOCAL, "numpy", None)
    own = getattr(_LOCAL, "own", None)
    if own is None or saved[0] is not None:  # first use in this thread, or nested
        own = random.Random(), np.random.RandomState()
        if saved[0] is None:
            _LOCAL.own = own  # reseeding is ~1 us, making a RandomState ~80 us
    own[0].seed(seed)
    own[1].seed(seed & 0xFFFFFFFF)
    _LOCAL.random, _LOCAL.numpy = own
    try:
        yield
    finally:
        _LOCAL.random, _LOCAL.numpy = saved


def replay(t: Any) -> Callable[[Any, torch.Generator], Any] | None:
    """The thread-safe form of a timm transform ``t`` (marked ``python_rng``: it must run
    inside :func:`python_rng`), or None."""
    cls = type(t)
    if cls.__module__ == "timm.data.auto_augment" and cls.__name__ in _AUTO_AUGMENT:
        if not install():
            return None

        def run(x: Any, gen: torch.Generator) -> Any:
            return t(x)
    elif cls.__module__ == "timm.data.random_erasing" and cls.__name__ == "RandomErasing":
        def run(x: Any, gen: torch.Generator) -> Any:
            if not isinstance(x, torch.Tensor) or x.ndim != 3:
                raise TypeError(f"timm's RandomErasing in the suffix expects a C x H x W tensor, "
                                f"but got {type(x).__name__} of shape {getattr(x, 'shape', '?')}")
            _erase(t, x, _LOCAL.random, gen)
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
