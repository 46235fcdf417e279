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
only on its seed. Samples of transforms :mod:`~fastload.pipelines.suffix.replay` replays with an
explicit generator run in parallel threads (torch ops release the GIL), each drawing from
generators of its own; the rest run in worker processes (:func:`process_pool`, started by
``forkserver``), or, without one, one at a time in the calling thread, the global generators'
states restored after the batch. That calling thread must be the one whose code owns those
generators, while that code waits (the loader's ``next()``): never a background thread while
the caller's code runs, which would see its draws mixed with the samples' and rolled back.
Threads whose names start with ``fastload`` are refused that path.

The suffix's last per-channel steps (dtype conversion, ``Normalize``; :mod:`.tail`) run as one
table lookup per channel that writes each sample into the batch tensor (their exact values),
so the per-sample work is the augmentation alone and no ``default_collate`` copy follows.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..ops import State, family
from ..registry import lookup, named, pil_semantics
from . import replay as augment
from .tail import LookupTail, is_pointwise

__all__ = ["Suffix", "process_pool", "tensor_capable"]

_GLOBAL_RNG = threading.Lock()


def tensor_capable(t) -> bool:
    """``t`` is a torchvision transform that takes a uint8 CHW tensor where it would take a
    PIL image, with the same semantics (not ``Lambda``, whose code expects what it expects):
    any of torchvision's classes but those the registry marks otherwise, and those whose
    arguments make their tensor path differ (:func:`~fastload.pipelines.registry.pil_semantics`)."""
    if family(t) not in ("v1", "v2"):
        return False
    if pil_semantics(t):
        return False
    op = lookup(t)
    if op is None:
        return True
    if op.container:
        return all(tensor_capable(c) for c in t.transforms)
    return op.tensor_ok


def _to_float(t) -> bool:
    op = lookup(t)
    return op is not None and op.converts and op.leaves is State.FLOAT


def _to_uint8(t) -> bool:
    op = lookup(t)
    return op is not None and op.converts and op.leaves is State.UINT8


def _converts(t) -> bool:
    """``t`` turns a PIL image into a tensor (what the suffix does itself on its uint8 form)."""
    op = lookup(t)
    return op is not None and op.converts


def _needs_pil(t) -> bool:
    """``t``, met on the PIL side, must receive a real PIL image (timm's PIL-only ops, a
    ``Lambda``, your own class)."""
    return not (_converts(t) or tensor_capable(t))


class Suffix:
    """``transforms`` run per sample after the DALI prefix whose output state is ``state``.

    A trailing run of per-channel transforms (``ToDtype``/``ConvertImageDtype``/``Normalize``
    ..., see :mod:`~fastload.pipelines.suffix.tail`), followed by nothing or by ``RandomErasing``/
    ``ToPureTensor`` (torchvision's or timm's erasing) only, runs as one table lookup written
    into the batch (``tail``)."""

    def __init__(self, transforms: Sequence[Any], state: str) -> None:
        self.transforms = list(transforms)
        self.state = state
        self.steps = [augment.replay(t) for t in self.transforms]
        self.threaded = all(s is not None for s in self.steps)
        # timm's auto-augmentations draw from Python's and NumPy's generators: thread-local ones
        self._python_rng = any(getattr(s, "python_rng", False) for s in self.steps)
        pil = state == State.PIL
        self._pil_at = []
        for t in self.transforms:
            self._pil_at.append(pil)
            if pil and (_converts(t) or _needs_pil(t)):
                pil = False  # converted, or an unknown callable that may return a tensor
        self._pil_at.append(pil)
        self.final_state = "pil" if pil else "tensor"
        self._post_start = len(self.transforms)
        while self._post_start and _post_step(self.transforms[self._post_start - 1]):
            self._post_start -= 1
        self._tail_start = self._post_start
        while self._tail_start and is_pointwise(self.transforms[self._tail_start - 1]):
            self._tail_start -= 1
        self.tail: LookupTail | None = None
        # Whether the tail's input is (or stands for) a PIL image: the suffix's own uint8 form
        # of one, or a real one that a PIL-only callable (timm's RandAugment, say) returned.
        self.tail_pil = self._pil_at[self._tail_start]
        for k in range(self._tail_start):
            t = self.transforms[k]
            if self._pil_at[k] and _needs_pil(t):
                self.tail_pil = True
            elif _converts(t):
                self.tail_pil = self._pil_at[k + 1]
        if self._tail_start < self._post_start and self.final_state != "pil":
            self.tail = LookupTail(self._run_tail)
        if self.tail is not None and self.tail.table(3, torch.Tensor, self.tail_pil) is None:
            self.tail = None  # e.g. PILToTensor alone (uint8 stays uint8): nothing to gain
        if self.tail is None:
            self._tail_start = self._post_start = len(self.transforms)

    def __bool__(self) -> bool:
        return bool(self.transforms)

    def __len__(self) -> int:
        return len(self.transforms)

    def describe(self) -> str:
        """The suffix's transforms and how their random draws run."""
        names = []
        for k, t in enumerate(self.transforms):
            label = type(t).__name__
            if self._pil_at[k] and _needs_pil(t):
                label += " (on a PIL image)"
            names.append(label)
        if self.tail is not None:
            tail = " -> ".join(names[self._tail_start:self._post_start])
            names[self._tail_start:self._post_start] = [f"[{tail}: one table lookup per channel]"]
        how = "replayed draws" if self.threaded else "seeded global RNG"
        return " -> ".join(names) + f" [{how}]"

    def run(self, images: torch.Tensor, seeds: Sequence[int], pool: Any = None,
            out: torch.Tensor | None = None) -> tuple[list[Any], list[bool]]:
        """``(outputs, written)``: the suffix's output for each sample ``images[j]``, drawn
        from ``seeds[j]``; with ``out`` (the batch, shaped and typed as :meth:`LookupTail.layout`
        says), a sample whose output fits is written into ``out[j]`` (``written[j]``).

        ``pool``: a thread pool (for a ``threaded`` suffix) or a process pool made by
        :func:`process_pool` for this suffix (each process has its own global generators;
        their outputs are not written into ``out``)."""
        n = len(seeds)
        slots = [None] * n if out is None else list(out.unbind(0))
        if pool is not None and (n > 1 or not self.threaded):
            if self.threaded:
                done = list(pool.map(lambda j: self._sample(images[j], seeds[j], slots[j], True),
                                     range(n)))
            else:
                chunk = max(1, n // (4 * getattr(pool, "_max_workers", 1)))
                done = list(pool.map(_in_worker, [images[j] for j in range(n)], seeds,
                                     chunksize=chunk))
        elif self.threaded:
            done = [self._sample(images[j], seeds[j], slots[j], True) for j in range(n)]
        else:
            if threading.current_thread().name.startswith("fastload"):
                raise RuntimeError(
                    "fastload bug: a suffix on the seeded global generators was run in the "
                    f"background thread {threading.current_thread().name!r}; it must run on "
                    "the caller's thread, in next(), or in worker processes")
            with _GLOBAL_RNG:
                saved = (torch.default_generator.get_state(), random.getstate(),
                         np.random.get_state())
                try:
                    done = [self._sample(images[j], seeds[j], slots[j], False) for j in range(n)]
                finally:
                    torch.default_generator.set_state(saved[0])
                    random.setstate(saved[1])
                    np.random.set_state(saved[2])
        return [d[0] for d in done], [d[1] for d in done]

    def _sample(self, x: Any, seed: int, dst: torch.Tensor | None,
                replayed: bool) -> tuple[Any, bool]:
        """One sample's output and whether it was written into ``dst``."""
        if replayed and self._python_rng:
            from ..replays.thread_rng import python_rng

            with python_rng(seed):
                return self._sample_in(x, seed, dst, True)
        return self._sample_in(x, seed, dst, replayed)

    def _sample_in(self, x: Any, seed: int, dst: torch.Tensor | None,
                   replayed: bool) -> tuple[Any, bool]:
        if replayed:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(seed)
            steps = self.steps

            def call(k: int, x: Any) -> Any:
                return steps[k](x, gen)
        else:
            torch.default_generator.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed & 0xFFFFFFFF)
            transforms = self.transforms

            def call(k: int, x: Any) -> Any:
                return transforms[k](x)
        x = self._apply(0, self._tail_start, x, call)
        written = False
        if self.tail is not None:
            pil = self._pil_at[self._tail_start]
            y = self.tail.write(x, pil, dst) if dst is not None else None
            written = y is not None
            if y is None:
                y = self.tail.write(x, pil)
            x = y if y is not None else self._apply(self._tail_start, self._post_start, x, call)
        for k in range(self._post_start, len(self.transforms)):
            y = call(k, x)
            if written and y is not x and y.data_ptr() != x.data_ptr():
                x.copy_(y)  # erasing (not in place) made a new tensor: keep the batch's slot
            elif not written:
                x = y
        return x, written

    def _apply(self, start: int, stop: int, x: Any, call: Callable[[int, Any], Any],
               pil: bool | None = None) -> Any:
        """``transforms[start:stop]`` on ``x`` through ``call``; ``pil``: whether ``x`` stands
        for a PIL image (default: what the suffix tracks at ``start``)."""
        pil = self._pil_at[start] if pil is None else pil
        for k in range(start, stop):
            x, pil, done = _enter(self.transforms[k], x, pil)
            if not done:
                x = call(k, x)
        return x

    def _run_tail(self, x: torch.Tensor, pil: bool) -> Any:
        """The tail's transforms on ``x`` (deterministic: no generator involved)."""
        return self._apply(self._tail_start, self._post_start, x,
                           lambda k, x: self.transforms[k](x), pil)


def _post_step(t) -> bool:
    """``t`` may follow the table-lookup tail: it keeps the sample's shape and dtype."""
    op = lookup(t)
    return op is not None and op.after_tail


_WORKER: list[Suffix] = []


def _init_worker(payload: bytes) -> None:
    import pickle

    transforms, state = pickle.loads(payload)
    _WORKER.append(Suffix(transforms, state))
    torch.set_num_threads(1)  # one process per core, as torch's DataLoader workers


def _in_worker(x: Any, seed: int) -> tuple[Any, bool]:
    return _WORKER[0]._sample(x, seed, None, False)


def process_pool(suffix: Suffix, processes: int) -> Any:
    """``processes`` worker processes that run ``suffix`` one sample per task, each with its
    own global generators (seeded per sample), for a suffix whose draws are not replayed;
    None when its transforms cannot be pickled (a lambda, say: run them in this process).

    The workers are started by multiprocessing's ``forkserver``, never by forking this
    process: it runs fastload's and DALI's threads, whose locks a fork would copy mid-use.
    So the transforms are pickled to them (and, as under ``spawn``, the main script is
    imported there: its work belongs under ``if __name__ == "__main__":``)."""
    import multiprocessing
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    try:
        payload = pickle.dumps((suffix.transforms, suffix.state))
    except Exception:  # noqa: BLE001 - any pickling failure: the suffix stays here
        return None
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("forkserver"),
                               initializer=_init_worker, initargs=(payload,))


def _enter(t, x: Any, pil: bool) -> tuple[Any, bool, bool]:
    """``(x, pil, done)`` before ``t`` runs on ``x``; ``pil``: ``x`` is a uint8 CHW tensor
    standing for a PIL image; ``done``: the conversion *is* ``t``'s whole effect."""
    if not pil:
        return x, False, False
    if _to_float(t):
        return x.to(torch.get_default_dtype()).div(255), False, True
    if _to_uint8(t):
        if named(t, "ToImage"):
            from torchvision import tv_tensors

            x = tv_tensors.Image(x)
        return x, False, True
    if tensor_capable(t):
        return x, True, False
    return _pil_image(x), False, False


def _pil_image(x: torch.Tensor) -> Any:
    """torchvision's ``to_pil_image`` of a uint8 C x H x W tensor (one copy for RGB)."""
    from PIL import Image

    if x.dtype == torch.uint8 and x.ndim == 3 and x.shape[0] == 3 and type(x) is torch.Tensor:
        from ..fast import kernels

        x = x.cpu()
        if kernels.AVAILABLE and x.is_contiguous():
            hwc = kernels.interleave(x)  # one pass; torch's strided permute copy is ~10x slower
        else:
            hwc = x.permute(1, 2, 0).contiguous().numpy()
        return Image.frombuffer("RGB", (hwc.shape[1], hwc.shape[0]), hwc, "raw", "RGB", 0, 1)
    from torchvision.transforms.functional import to_pil_image

    return to_pil_image(x.cpu())
