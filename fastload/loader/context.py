"""What one epoch's iterator receives from its loader (``EpochContext``), and the loader's
``SkipLog``, which its epochs write and the loader reads back as ``loader.skipped``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fastload.loader.batch_order import BatchOrder
from fastload.loader.damage import DamageCheck
from fastload.loader.stage import SampleStage

__all__ = ["EpochContext", "SkipLog"]


class SkipLog:
    """The samples a loader skipped (``on_error="skip"``) over all its epochs: ``names``, in
    the order its epochs skipped them (the loader's ``skipped``). The first skip of the
    loader warns, naming it and why; later ones are only listed."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def note(self, names: list[str], why: str) -> None:
        """Record that ``names`` were skipped because of ``why`` (warning if they are the
        loader's first)."""
        if not self.names:
            warnings.warn(f"fastload.DataLoader skipped {', '.join(names)} ({why}); further "
                          "unreadable samples are skipped silently and listed in "
                          "loader.skipped", RuntimeWarning, stacklevel=4)
        self.names.extend(names)


@dataclass(frozen=True)
class EpochContext:
    """What one epoch needs from its loader, handed over when ``iter()`` starts it.

    ``epoch``: the epoch's batch stream (``BatchOrder.start_epoch``), started on the
    caller's thread with torch's draws (``fastload.loader.iter_draws``); ``at_first_next``:
    the draw left for the first ``next()``, or None. ``order``: the loader's order (its seed
    is read per batch, as ``load_state_dict`` may set it; the epoch is finished on it).
    ``decoder``: the ``BatchDecoder`` to use, closed by the iterator when ``owns_decoder``
    (a private one, beside the iterator that holds the loader's). ``skips``: the loader's
    ``SkipLog``, where the epoch notes what it skipped. ``length()`` is the loader's
    ``len()`` (it also keeps the loader, whose finaliser closes its decoder, alive while its
    epoch runs). What the loader reads back from the epoch (the indices of its last batch)
    the iterator holds (``EpochIterator.record``). ``eager_batches``: batches to pull and
    start making at ``iter()``, as many as torch's loader hands its workers there
    (``prefetch_factor * num_workers``, taken from the sampler at ``iter()``); 0 (no
    workers): from the first ``next()``, as torch's single-process loader."""

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
    skips: SkipLog
    length: Callable[[], int]
    eager_batches: int = 0
