"""The torch suffix: the transforms after the DALI prefix, run per sample on decoded tensors.

Each sample enters as the prefix's output. When the prefix stops before the PIL-to-tensor
step (``state="pil"``) it enters as the uint8 CHW tensor of that PIL image, and the suffix
keeps torchvision's semantics: ``ToTensor``/timm's ``MaybeToTensor`` become a division by
255 into a float tensor, ``PILToTensor``/``ToImage`` pass it on, torchvision transforms that
accept tensors (``RandAugment``, ``TrivialAugmentWide``, ``AutoAugment``, ``AugMix``,
``RandomErasing``, ...) receive it, and any other callable (timm's PIL-only
auto-augmentations, a ``Lambda``) receives a PIL image made from it.

Random draws: each sample runs with torch's default generator, Python's ``random`` and
NumPy's global generator seeded from that sample's seed, so a sample's augmentation depends
only on its seed. Samples of transforms :mod:`~fastload.pipelines.augment` replays with an
explicit generator run in parallel threads (torch ops release the GIL); the rest run in
forked worker processes (:func:`process_pool`), or, without one, one at a time in the
calling thread, the global generators' states restored after each batch.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import augment

__all__ = ["Suffix", "process_pool", "tensor_capable"]

_GLOBAL_RNG = threading.Lock()
_CONTAINERS = ("Compose", "RandomApply", "RandomChoice", "RandomOrder")


def _tv_name(t) -> str | None:
    """torchvision's class name of ``t`` (v1 or v2), None for anything else."""
    module = type(t).__module__
    if module.startswith("torchvision.transforms"):
        return type(t).__name__
    return None


def _timm_name(t) -> str | None:
    return type(t).__name__ if type(t).__module__ == "timm.data.transforms" else None


def tensor_capable(t) -> bool:
    """``t`` is a torchvision transform that takes a uint8 CHW tensor where it would take a
    PIL image, with the same semantics (not ``Lambda``, whose code expects what it expects)."""
    name = _tv_name(t)
    if name is None or name in ("Lambda", "ToPILImage"):
        return False
    if name in _CONTAINERS:
        return all(tensor_capable(c) for c in t.transforms)
    return True


def _to_float(t) -> bool:
    return _tv_name(t) == "ToTensor" or _timm_name(t) == "MaybeToTensor"


def _to_uint8(t) -> bool:
    return _tv_name(t) in ("PILToTensor", "ToImage") or _timm_name(t) == "MaybePILToTensor"


class Suffix:
    """``transforms`` run per sample after the DALI prefix whose output state is ``state``."""

    def __init__(self, transforms: Sequence[Any], state: str) -> None:
        self.transforms = list(transforms)
        self.state = state
        self.steps = [augment.replay(t) for t in self.transforms]
        self.threaded = all(s is not None for s in self.steps)
        pil = state == "pil"
        for t in self.transforms:
            if pil and (_to_float(t) or _to_uint8(t) or not tensor_capable(t)):
                pil = False  # converted, or an unknown callable that may return a tensor
        self.final_state = "pil" if pil else "tensor"

    def __bool__(self) -> bool:
        return bool(self.transforms)

    def __len__(self) -> int:
        return len(self.transforms)

    def describe(self) -> str:
        """The suffix's transforms and how their random draws run."""
        names = []
        pil = self.state == "pil"
        for t in self.transforms:
            label = type(t).__name__
            if pil and not (_to_float(t) or _to_uint8(t) or tensor_capable(t)):
                label += " (on a PIL image)"
            if pil and (_to_float(t) or _to_uint8(t) or not tensor_capable(t)):
                pil = False
            names.append(label)
        how = "replayed draws" if self.threaded else "seeded global RNG"
        return " -> ".join(names) + f" [{how}]"

    def run(self, images: torch.Tensor, seeds: Sequence[int], pool: Any = None) -> list[Any]:
        """The suffix's output for each sample ``images[j]``, drawn from ``seeds[j]``.

        ``pool``: a thread pool (for a ``threaded`` suffix) or a process pool made by
        :func:`process_pool` for this suffix (each process has its own global generators)."""
        samples = [images[j] for j in range(len(seeds))]
        if pool is not None and len(seeds) > 1:
            fn = self._replayed if self.threaded else _in_worker
            chunk = max(1, len(seeds) // (4 * getattr(pool, "_max_workers", 1)))
            kwargs = {} if self.threaded else {"chunksize": chunk}
            return list(pool.map(fn, samples, seeds, **kwargs))
        if self.threaded:
            return [self._replayed(x, s) for x, s in zip(samples, seeds, strict=True)]
        with _GLOBAL_RNG:
            saved = torch.default_generator.get_state(), random.getstate(), np.random.get_state()
            try:
                return [self._global(images[j], s) for j, s in enumerate(seeds)]
            finally:
                torch.default_generator.set_state(saved[0])
                random.setstate(saved[1])
                np.random.set_state(saved[2])

    def _replayed(self, x: Any, seed: int) -> Any:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed)
        pil = self.state == "pil"
        for t, step in zip(self.transforms, self.steps, strict=True):
            x, pil, done = _enter(t, x, pil)
            if not done:
                x = step(x, gen)
        return x

    def _global(self, x: Any, seed: int) -> Any:
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)
        pil = self.state == "pil"
        for t in self.transforms:
            x, pil, done = _enter(t, x, pil)
            if not done:
                x = t(x)
        return x


_WORKER: list[Suffix] = []


def _init_worker(suffix: Suffix) -> None:
    _WORKER.append(suffix)
    torch.set_num_threads(1)  # one process per core, as torch's DataLoader workers


def _in_worker(x: Any, seed: int) -> Any:
    return _WORKER[0]._global(x, seed)


def process_pool(suffix: Suffix, processes: int) -> Any:
    """``processes`` forked worker processes that run ``suffix`` one sample per task, each
    with its own global generators (seeded per sample), for a suffix whose draws are not
    replayed. The suffix is inherited through fork, not pickled; inputs and outputs are."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                               initializer=_init_worker, initargs=(suffix,))


def _enter(t, x: Any, pil: bool) -> tuple[Any, bool, bool]:
    """``(x, pil, done)`` before ``t`` runs on ``x``; ``pil``: ``x`` is a uint8 CHW tensor
    standing for a PIL image; ``done``: the conversion *is* ``t``'s whole effect."""
    if not pil:
        return x, False, False
    if _to_float(t):
        return x.to(torch.get_default_dtype()).div(255), False, True
    if _to_uint8(t):
        if _tv_name(t) == "ToImage":
            from torchvision import tv_tensors

            x = tv_tensors.Image(x)
        return x, False, True
    if tensor_capable(t):
        return x, True, False
    from torchvision.transforms.functional import to_pil_image

    return to_pil_image(x.cpu()), False, False
