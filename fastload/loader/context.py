"""What one epoch's iterator receives from its loader (``EpochContext``), and nothing more."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fastload.loader.damage import DamageCheck
from fastload.loader.sampling import BatchOrder
from fastload.loader.stage import SampleStage

__all__ = ["EpochContext"]


@dataclass(frozen=True)
class EpochContext:
    """What one epoch needs from its loader, handed over when ``iter()`` starts it.

    ``epoch``: the epoch's batch stream (``BatchOrder.start_epoch``), started on the
    caller's thread with torch's draws (``fastload.loader.iter_draws``); ``at_first_next``:
    the draw left for the first ``next()``, or None. ``order``: the loader's order (its seed
    is read per batch, as ``load_state_dict`` may set it; the epoch is finished on it).
    ``decoder``: the ``BatchDecoder`` to use, closed by the iterator when ``owns_decoder``
    (a private one, beside the iterator that holds the loader's). ``note_skip(names, why)``,
    ``show_indices(indices)`` and ``length()`` are the loader's: the skip list, its
    ``last_batch_indices``, its ``len()`` (they also keep the loader, whose finaliser closes
    its decoder, alive while its epoch runs). ``eager_batches``: batches to pull and start making at
    ``iter()``, as many as torch's loader hands its workers there (``prefetch_factor *
    num_workers``, taken from the sampler at ``iter()``); 0 (no workers): from the first
    ``next()``, as torch's single-process loader."""

    source: Any
    order: BatchOrder
    epoch: Any
    at_first_next: Callable[[], None] | None
    decoder: Any
    owns_decoder: bool
    stage: SampleStage
    damage: DamageCheck
    rank: int
    device: torch.device
    pin_memory: bool
    on_error: str
    collate_fn: Callable[[list[Any]], Any] | None
    prefetch: int
    note_skip: Callable[[list[str], str], None]
    show_indices: Callable[[list[int]], None]
    length: Callable[[], int]
    eager_batches: int = 0
