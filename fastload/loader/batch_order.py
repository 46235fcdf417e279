"""The loader's position in its epochs (epoch, batches yielded, seed), saved and resumed.

Elastic resume: after ``k`` batches of ``batch_size`` on each of ``W`` ranks, the ranks
together have consumed exactly the first ``k * batch_size * W`` positions of the epoch's
order (rank ``r``'s ``j``-th sample sits at position ``r + W * j``). A state records that
count (``samples_consumed``) with the seed, so a job of ``W' != W`` ranks resumes the epoch
from the remaining suffix of the same order, padded or cut by the rule above for ``W'`` and
sharded ``suffix[r::W']``: over both runs every sample is seen once, plus at most each run's
padding. The next epoch is the plain ``W'`` order. This assumes the ranks stopped after
the same number of batches (as DDP's lock-step does).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from fastload.loader.sampling import EpochSampler, distributed_settings
from fastload.loader.state_fields import check_state_fields

__all__ = ["BatchOrder", "STATE_VERSION"]

STATE_VERSION = 1


class _Epoch:
    """The batches of one epoch still to yield: ``next()`` pulls ``(position, indices)``."""

    def __init__(self, epoch: int, batches: Iterator[list[int]], start: int) -> None:
        self.epoch = epoch
        self._batches = batches
        self.position = start  # next position to pull
        self.yielded = start  # batches handed to the caller
        self._materialized: list[list[int]] | None = None
        self._pulled: deque[list[int]] = deque()  # pulled, not yet yielded
        # the sampler's iterator is pulled by the epoch's thread and read to its end by a
        # state_dict() from another (a checkpointing thread): one at a time
        self._lock = threading.Lock()

    def next(self) -> tuple[int, list[int]] | None:
        with self._lock:
            batch = next(self._batches, None)
            if batch is None:
                return None
            batch = list(batch)  # as the sampler gave them: the loader checks each index
            self._pulled.append(batch)
            self.position += 1
            return self.position - 1, batch

    def mark_yielded(self) -> None:
        """The oldest pulled batch reached the caller (or was consumed by an error)."""
        self._pulled.popleft()
        self.yielded += 1

    def pull_ahead(self, count: int) -> None:
        """Take the next ``count`` batches from the sampler now (as torch's loader with workers
        does at ``iter()``); ``next()`` still returns them in order."""
        with self._lock:
            ahead = list(itertools.islice(self._batches, count))
            self._batches = itertools.chain(ahead, self._batches)

    def at_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a pull finds the batches run out."""
        def batches(rest: Iterator[list[int]]) -> Iterator[list[int]]:
            yield from rest
            callback()

        self._batches = batches(self._batches)

    def remaining(self) -> list[list[int]]:
        """Every batch not yet yielded, in order. Consumes the underlying sampler iterator."""
        with self._lock:
            rest = list(self._batches)
            self._batches = iter(rest)
            return [*self._pulled, *rest]


class BatchOrder:
    """The loader's position: epoch, batches yielded and base seed, with save and resume.

    With the loader's own sampler a state is ``(epoch, batches yielded, seed)`` plus the
    global samples consumed; a loader with the same world size (and batch size and
    ``drop_last``) replays the epoch and skips to the position, one with another world size
    resumes elastically from the remaining suffix of the epoch's order (module docstring).
    With a user's ``sampler`` or
    ``batch_sampler`` (which fastload cannot replay), ``state_dict`` runs that sampler to the
    end of the epoch and stores the remaining batches' indices; the resumed epoch yields
    exactly those. A user sampler's own random state is not saved (as with torch).
    """

    def __init__(self, batch_sampler: Iterable[list[int]], own: EpochSampler | None,
                 batch_size: int | None, drop_last: bool, seed: int | None,
                 num_items: int) -> None:
        self.batch_sampler = batch_sampler
        self.own = own
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed  # None until the first iter() draws it (fastload.loader.iter_draws)
        self.num_items = num_items
        self.next_epoch = 0
        self.current: _Epoch | None = None
        self._resume: dict[str, Any] | None = None
        self._offset = 0  # global positions of the current epoch consumed before this run

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch``; a pending resume of another epoch is
        dropped (a resume of this very epoch is kept)."""
        if self._resume is not None and self._resume["epoch"] != epoch:
            self._resume = None
        self.next_epoch = epoch

    def set_seed(self, seed: int) -> None:
        """Fix the base seed of the order and the augmentation (and the own sampler's)."""
        self.seed = int(seed)
        if self.own is not None:
            self.own.seed = self.seed

    def start_epoch(self, sampler_iters: int = 1) -> _Epoch:
        """Begin the next epoch (or the resumed one) and return its batch stream;
        ``sampler_iters``: how many times a user's batch sampler is ``iter()``-ed (the last
        iterator is used), as torch's loader calls it twice when it has workers."""
        resume, self._resume = self._resume, None
        epoch = resume["epoch"] if resume else self.next_epoch
        self.next_epoch = epoch + 1
        start = resume["batches_yielded"] if resume else 0
        self._offset = 0
        if resume and self.own is not None and resume["remaining"] is None:
            self._offset, start = resume["_offset"], resume["_start"]
        if resume and resume["remaining"] is not None:
            sizes = resume["remaining"]["batch_sizes"].tolist()
            flat = resume["remaining"]["indices"].tolist()
            bounds = np.cumsum([0, *sizes]).tolist()
            batches: Iterator[list[int]] = iter(
                [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
        elif self.own is not None:
            self.own.set_epoch(epoch)
            batches = self._own_batches(start, self._offset)
        else:
            for _ in range(sampler_iters - 1):
                iter(self.batch_sampler)
            batches = iter(self.batch_sampler)
            if start:  # a resume without stored batches: replay and skip
                for _ in range(start):
                    next(batches, None)
        self.current = _Epoch(epoch, batches, start)
        return self.current

    def _own_batches(self, start: int, offset: int = 0) -> Iterator[list[int]]:
        # The order is drawn now, not at the first next(): a second iterator's epoch may
        # set the sampler's epoch meanwhile.
        order = self.own.indices(offset)
        size = self.batch_size
        stop = len(order) - len(order) % size if self.drop_last else len(order)
        return (order[begin : begin + size].tolist() for begin in range(start * size, stop, size))

    def finish_epoch(self) -> None:
        """The current epoch ran to its end."""
        self.current = None

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands; see the class docstring."""
        if self._resume is not None:
            return {k: v for k, v in self._resume.items() if not k.startswith("_")}
        cur = self.current
        own = self.own
        world_size, rank = (own.num_replicas, own.rank) if own is not None else self._user_place()
        state: dict[str, Any] = {
            "version": STATE_VERSION, "seed": self.seed, "num_items": self.num_items,
            "epoch": self.next_epoch, "batches_yielded": 0, "remaining": None,
            "batch_size": self.batch_size, "drop_last": self.drop_last,
            "world_size": world_size,
            "shuffle": own.shuffle if own is not None else None,
            "epoch_offset": 0, "samples_consumed": 0,
        }
        if cur is not None:
            state["epoch"] = cur.epoch
            state["batches_yielded"] = cur.yielded
            if own is not None:
                consumed = self._offset + cur.yielded * self.batch_size * own.num_replicas
                state["epoch_offset"] = self._offset
                state["samples_consumed"] = min(self.num_items, consumed)
            else:
                rest = cur.remaining()
                state["remaining"] = {
                    "indices": torch.tensor([int(i) for b in rest for i in b],
                                            dtype=torch.int64),
                    "batch_sizes": torch.tensor([len(b) for b in rest], dtype=torch.int64),
                }
                state["rank"] = rank  # whose indices these are
        if own is not None:
            state.update(own.state_fields(state["epoch"]))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` at the next ``iter()``."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("state is not a fastload DataLoader state_dict (version "
                             f"{STATE_VERSION}); pass what DataLoader.state_dict() returned")
        state = dict(state)  # validation may normalise fields; the caller's dict is kept
        check_state_fields(state)
        if state["num_items"] != self.num_items:
            raise ValueError(f"state was saved for a dataset of {state['num_items']} samples, "
                             f"but this loader's dataset has {self.num_items}")
        own = self.own
        if own is not None and state.get("world_size") == own.num_replicas:
            per_epoch = len(own) // self.batch_size if self.drop_last \
                else math.ceil(len(own) / self.batch_size)  # what the BatchSampler over own gives
            if state["batches_yielded"] > per_epoch:
                raise ValueError(
                    f"state has batches_yielded={state['batches_yielded']}, but an epoch of this "
                    f"loader has {per_epoch} batches; pass a state_dict() saved by a loader "
                    "with the same dataset, batch_size and world size")
        state = dict(state)
        resumable = (state["batches_yielded"] > 0 or state["remaining"] is not None
                     or (state.get("epoch_offset") or 0) > 0)
        if own is not None and state["remaining"] is None:
            own.load_state_fields(state, resumable)
            self._plan_own_resume(state)
        elif own is None and state["remaining"] is not None:
            world_size, rank = self._user_place()
            if state.get("world_size", 1) != world_size:
                raise ValueError(
                    f"state was saved by one rank of a world_size={state.get('world_size')} "
                    f"job, but this job has world_size={world_size}: with your own sampler= "
                    "(e.g. DistributedSampler) the state holds that rank's remaining indices, "
                    "which torch's sampler cannot re-shard; resume with world_size="
                    f"{state.get('world_size')}, or pass no sampler so that fastload shards "
                    "and resumes at any world size")
            if state.get("rank") is not None and state["rank"] != rank:
                raise ValueError(
                    f"state was saved by rank {state['rank']}, but this loader is rank {rank}: "
                    "with your own sampler= (e.g. DistributedSampler) the state holds the "
                    "remaining indices of the rank that saved it; load each rank's own "
                    "state_dict() (save one file per rank), or pass no sampler so that any "
                    "rank's state resumes every rank")
        if state["seed"] is not None:  # None: saved before the first iter() drew it
            self.set_seed(state["seed"])
        self.current = None
        self.next_epoch = int(state["epoch"])
        self._resume = state if resumable or state.get("_offset", 0) > 0 else None

    def _user_place(self) -> tuple[int, int]:
        """``(world_size, rank)`` of a user's sampler that names them (``num_replicas`` and
        ``rank``, as DistributedSampler's), else of the default process group."""
        for sampler in (self.batch_sampler, getattr(self.batch_sampler, "sampler", None)):
            replicas, rank = getattr(sampler, "num_replicas", None), getattr(sampler, "rank", None)
            if isinstance(replicas, int) and isinstance(rank, int):
                return replicas, rank
        return distributed_settings()

    def _plan_own_resume(self, state: dict[str, Any]) -> None:
        """Set ``state["_offset"]``/``["_start"]``: a replay of the saved cut at the same
        world size (batch size and drop_last must match), else an elastic resume from the
        suffix (any batch size)."""
        own = self.own
        saved_shuffle = state.get("shuffle")
        if saved_shuffle is not None and bool(saved_shuffle) != own.shuffle:
            raise ValueError(f"state was saved with shuffle={saved_shuffle!r}, but this loader "
                             f"has shuffle={own.shuffle!r}; resume with the same setting")
        offset = int(state.get("epoch_offset", 0))
        if state.get("world_size") == own.num_replicas:  # a replay needs the same cut
            for key, value in (("batch_size", self.batch_size), ("drop_last", self.drop_last)):
                if state.get(key) != value:
                    raise ValueError(f"state was saved with {key}={state.get(key)!r}, but this "
                                     f"loader has {key}={value!r}; resume with the same setting")
            state["_offset"], state["_start"] = offset, int(state["batches_yielded"])
            return
        consumed = state.get("samples_consumed")
        if consumed is None:  # a state written before elastic resume existed
            consumed = offset + state["batches_yielded"] * state["batch_size"] * state["world_size"]
        state["_offset"], state["_start"] = min(int(consumed), self.num_items), 0

