"""Where a loader's torch suffix and custom collate run on decoded batches (``SampleStage``).

The DALI prefix decodes a batch; the stage runs the rest per sample: the torch suffix, in
``num_workers`` threads when its draws are replayed (``fastload.pipelines.suffix.replay``), else
on the caller's thread or, where measured faster, in worker processes; then the pairs go to
a custom ``collate_fn`` or into the batch as ``default_collate`` makes it. ``loader.plan``
(``fastload.loader.plan``) describes what it chose.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import default_collate

from fastload.loader.sampling import mix_seed

__all__ = ["SampleStage", "collate_with_mix"]


def collate_with_mix(collate_fn: Any, batch_mix: Any) -> Any:
    """The collate a loader runs for its ``collate_fn`` and ``batch_mix`` arguments:
    ``collate_fn`` itself without ``batch_mix``, else ``MixCollate(batch_mix)``
    (``default_collate``, then the mix on the batch: the reference script's collate, said
    explicitly, so no bytecode is read to recognise it)."""
    if batch_mix is None:
        return collate_fn
    if collate_fn is not None and collate_fn is not default_collate:
        raise ValueError("batch_mix option is mutually exclusive with collate_fn; pass batch_mix "
                         "alone (batches are collated with default_collate, then mixed), or "
                         "call the mix inside your collate_fn")
    from fastload.pipelines import MixCollate

    return MixCollate(batch_mix)


class _Collated:
    """A batch ``default_collate`` would make, waiting for ``SampleStage.batch_mix``."""

    def __init__(self, batch: list[Any]) -> None:
        self.batch = batch


class SampleStage:
    """Runs a loader's torch suffix and custom collate on decoded batches."""

    def __init__(self, suffix: Any, collate_fn: Any, threads: int) -> None:
        self.suffix = suffix
        self.collate_fn = None if collate_fn is default_collate else collate_fn
        # torchvision's reference MixUp/CutMix collate (batch_mix=, or recognised in a
        # collate_fn), run in place on the batch tensor
        self.batch_mix = None
        if self.collate_fn is not None:
            try:
                from fastload.pipelines import fused_collate
            except ImportError:  # an unchecked torch/torchvision: the loader falls back anyway
                pass
            else:
                self.batch_mix = fused_collate(self.collate_fn)
        self._threads = max(1, threads)
        self._pool: Any = None
        self._helpers: Any = None  # multiprocessing helpers its process pool started
        self._buffers: Any = None  # BatchBuffers for the batches a lookup tail writes
        self._lock = threading.Lock()
        # A suffix whose draws are not replayed runs in worker processes only where they
        # are measured faster than this thread: batches 1 and 3 run here, 2 and 4 in the
        # processes (2 includes their start), then the faster per-sample time decides.
        self._times: dict[str, list[float]] = {"here": [], "processes": []}
        self.choice: str | None = None  # "here" or "processes", once measured

    def describe(self) -> str:
        """Where the suffix runs, for ``loader.plan``."""
        if not self.suffix:
            return "torch suffix runs: nowhere (none)"
        if self.suffix.threaded:
            return f"torch suffix runs: {self._threads} thread(s)"
        if self._threads <= 1:
            return "torch suffix runs: on your thread, in next() (num_workers <= 1)"
        if self.choice is None:
            return (f"torch suffix runs: measuring (on your thread, in next(), vs "
                    f"{self._threads} processes, the faster after 4 batches)")
        if not self._times["processes"]:
            return ("torch suffix runs: in the loader's thread (its transforms cannot be "
                    "pickled to worker processes)")
        here, procs = (min(self._times[k]) * 1e3 for k in ("here", "processes"))
        where = f"{self._threads} processes" if self.choice == "processes" else \
            "on your thread, in next()"
        return (f"torch suffix runs: {where} (measured {here:.2f} ms/sample here, "
                f"{procs:.2f} in processes)")

    @property
    def active(self) -> bool:
        """Whether batches need per-sample work (else the DALI batch is returned as is)."""
        return bool(self.suffix) or self.collate_fn is not None

    @property
    def beside_caller(self) -> bool:
        """Whether :meth:`prepare` may run in a fastload thread while the caller's code runs:
        yes unless the suffix would run on this process's global generators (seeded per
        sample, then restored), which only the caller's thread may do, while it waits in
        ``next()``: a suffix whose draws are not replayed, unless measured faster in worker
        processes (each with generators of its own)."""
        return not self.suffix or self.suffix.threaded or self.choice == "processes"

    def describe_ahead(self) -> str:
        """Where the stages run relative to the caller's step, for ``loader.plan``."""
        if self.suffix and not self.suffix.threaded:
            where = ("runs one batch ahead, in a stage thread, sending samples to worker "
                     "processes" if self.choice == "processes" else
                     "runs in next(), on your thread (the global generators seeded per sample "
                     "and restored while your code waits)")
            ahead = f"suffix {where}"
        elif self.suffix:
            ahead = "suffix runs one batch ahead, in a stage thread (beside your step)"
        else:
            ahead = ""
        if self.collate_fn is not None:
            collate = "collate_fn runs in next(), on your thread, as torch's loader runs it"
            ahead = f"{ahead}; {collate}" if ahead else collate
        return ahead

    def prepare(self, images: torch.Tensor, labels: list[Any], seed: int) -> Any:
        """All but a custom collate for decoded ``images`` (one per sample) and per-sample
        ``labels``: the batch, or with ``collate_fn`` the ``(sample, label)`` pairs for it."""
        with self._lock:  # one suffix at a time (iterators of one loader, stage threads)
            samples, written, out = self._run_suffix(images, labels, seed)
        if self.collate_fn is None:
            return self._default_batch(samples, written, out, labels)
        if self.batch_mix is not None and images.device.type == "cpu":
            return _Collated(self._default_batch(samples, written, out, labels))
        return list(zip(samples, labels, strict=True))

    def finish(self, prepared: Any) -> Any:
        """The batch from what :meth:`prepare` made, on the caller's thread as the batch is
        handed out: ``collate_fn`` (the caller's code, drawing from the caller's generators
        where torch's loader would call it) on the pairs, its result returned as it comes;
        a recognised MixUp/CutMix collate (``batch_mix``) on the batch already collated."""
        if isinstance(prepared, _Collated):
            return self.batch_mix(*prepared.batch)
        return prepared if self.collate_fn is None else self.collate_fn(prepared)

    def _run_suffix(self, images: torch.Tensor, labels: list[Any],
                    seed: int) -> tuple[list[Any], list[bool], torch.Tensor | None]:
        written = [False] * len(labels)
        out = None
        if self.suffix:
            seeds = [mix_seed(seed, j) for j in range(len(labels))]
            out, kind = self._batch_for(images)
            measuring = (not self.suffix.threaded and self.choice is None and len(labels) > 1
                         and self._threads > 1 and images.device.type == "cpu")
            if measuring:
                measured = len(self._times["here"]) + len(self._times["processes"])
                where = "here" if measured % 2 == 0 else "processes"
                pool = self._pool_for(images) if where == "processes" else None
                where = "processes" if pool is not None else "here"
                start = time.perf_counter()
                samples, written = self.suffix.run(images, seeds, pool, out)
                self._times[where].append((time.perf_counter() - start) / len(seeds))
                if measured == 3:
                    self.choice = min(self._times, key=lambda k: min(self._times[k]))
                    if self.choice == "here":
                        self.close()  # the processes lost: stop them
            else:
                # a suffix on the seeded global generators goes to its processes even for one
                # sample, once they were measured faster (it then runs beside the caller)
                many = len(labels) > 1 or self.choice == "processes"
                pool = self._pool_for(images) if many else None
                samples, written = self.suffix.run(images, seeds, pool, out)
            if kind is not torch.Tensor:  # e.g. a v2 tail that yields tv_tensors.Image
                samples = [s.as_subclass(kind) if w else s
                           for s, w in zip(samples, written, strict=True)]
        else:
            samples = list(images.unbind(0))
        return samples, written, out

    def _default_batch(self, samples: list[Any], written: list[bool], out: torch.Tensor | None,
                       labels: list[Any]) -> Any:
        if out is not None and all(written):  # the batch is already in place: only labels
            # a tuple, as default_collate sees the labels of its (image, label) pairs
            batch = [out, default_collate(tuple(labels))]
        else:
            batch = default_collate(list(zip(samples, labels, strict=True)))
        if batch[0].device.type == "cuda":
            batch[1] = batch[1].to(batch[0].device, non_blocking=True)
        return batch

    def _batch_for(self, images: torch.Tensor) -> tuple[torch.Tensor | None, type]:
        """The batch tensor the suffix's table-lookup tail writes into (None without one)."""
        tail = self.suffix.tail
        if tail is None or images.device.type != "cpu" or images.ndim != 4:
            return None, torch.Tensor
        layout = tail.layout(images, self.suffix.tail_pil)
        if layout is None:
            return None, torch.Tensor
        dtype, kind = layout
        if self._buffers is None:
            from fastload.pipelines import BatchBuffers

            self._buffers = BatchBuffers()
        return self._buffers.empty(tuple(images.shape), dtype), kind

    def _pool_for(self, images: torch.Tensor) -> Any:
        """``num_workers`` threads for a replayed suffix, else as many processes (CPU
        batches only: a CUDA batch stays in this process); None for ``num_workers`` <= 1."""
        if self._threads <= 1 or not (self.suffix.threaded or images.device.type == "cpu"):
            return None
        if self.choice == "here":
            return None
        if self._pool is None:
            if self.suffix.threaded:
                from fastload.utils.threads import one_omp_thread

                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="fastload-suffix",
                                                initializer=one_omp_thread)
            else:
                from fastload.pipelines import process_pool
                from fastload.utils.mp_helpers import StartedHelpers

                self._helpers = StartedHelpers()  # stopped with the pool, if it starts them
                self._pool = process_pool(self.suffix, self._threads)
                if self._pool is None:  # transforms that cannot be pickled: run them here
                    self.choice = "here"
        return self._pool

    def after_fork(self) -> None:
        """In a forked child: forget the parent's pool (its threads or its processes' pipes
        are not this process's) and locks (a parent thread may have held one at the fork)."""
        self._pool = self._helpers = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the suffix's threads or processes (idempotent), and multiprocessing's helpers
        its processes started (:mod:`fastload.utils.mp_helpers`) once they have exited."""
        pool, self._pool = self._pool, None
        helpers, self._helpers = self._helpers, None
        if pool is not None:
            pool.shutdown(wait=helpers is not None, cancel_futures=True)
        if helpers is not None:
            helpers.stop()

    # No __del__: an unreferenced ProcessPoolExecutor stops its workers itself (its weakref
    # callback wakes the management thread); shutting it down from a finalizer run by the
    # garbage collector at an arbitrary point could wait on a lock its own thread holds.
