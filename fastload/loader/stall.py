"""A data-stall meter for any training loop: how long the loop waits for its input.

Wrap the loader once; iterate the wrapper as you iterated the loader::

    loader = fastload.StallMeter(loader)
    for epoch in range(epochs):
        for images, labels in loader:
            ...
        print(loader.stats[-1])  # epoch 0: waited 1.2 s of 10.0 s (12.0%), 950 img/s

Per epoch it records the time spent inside ``next()`` (waiting for a batch) and the time
between batches (the loop's own work), their share, and images per second. It works with
any iterable of batches (``fastload.DataLoader``, ``torch.utils.data.DataLoader``, a
list), costs two clock reads per batch, and passes every other attribute (``set_epoch``,
``state_dict``, ``dataset`` ...) through to the wrapped loader.

On a GPU the loop's work is asynchronous: pass ``sync=torch.cuda.synchronize`` so the
device's queued work is counted as the loop's, not as waiting for data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["EpochStall", "StallMeter"]


@dataclass(frozen=True)
class EpochStall:
    """What one epoch of a wrapped loader cost the loop that consumed it."""

    epoch: int
    batches: int
    images: int
    wait_s: float  # inside next(): the loop waited for input
    busy_s: float  # between batches: the loop's own work (forward, backward, logging ...)

    @property
    def total_s(self) -> float:
        return self.wait_s + self.busy_s

    @property
    def stall_share(self) -> float:
        """Share of the epoch spent waiting for input, in [0, 1]."""
        return self.wait_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def images_per_s(self) -> float:
        return self.images / self.total_s if self.total_s > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "stall_share": self.stall_share,
                "images_per_s": self.images_per_s}

    def __str__(self) -> str:
        return (f"epoch {self.epoch}: waited {self.wait_s:.2f} s of {self.total_s:.2f} s "
                f"({100 * self.stall_share:.1f}%), {self.images_per_s:.0f} img/s")


def _batch_images(batch: Any) -> int:
    """Images in a batch: the length of its first tensor-like element (0 if it has none)."""
    first = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
    if isinstance(first, dict):
        first = next(iter(first.values()), None)
    shape = getattr(first, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    try:
        return len(first)
    except TypeError:
        return 0


class StallMeter:
    """Iterate ``loader`` as before and keep, per epoch, an :class:`EpochStall` in ``stats``.

    An epoch is one ``iter()`` of the wrapper; its figures are recorded when it ends (or is
    abandoned: a ``break`` out of the loop records the batches seen so far when the
    iterator is closed). ``last_epoch`` is the most recent record or None. ``len()`` and
    every attribute the wrapper lacks (``set_epoch``, ``state_dict``, ``dataset`` ...) pass
    through to the wrapped loader.

    Args:
        loader: any iterable of batches (``fastload.DataLoader``,
            ``torch.utils.data.DataLoader``, a list); a batch's images are counted as the
            length of its first tensor-like element.
        sync: when given, called before each clock read that ends the loop's work (e.g.
            ``torch.cuda.synchronize``, so a GPU's queued work counts as the loop's, not as
            waiting for data); None: no call.

    Attributes:
        loader (Iterable): the wrapped loader.
        sync (Callable | None): as given.
        stats (list[EpochStall]): one record per epoch ended so far, oldest first.
    """

    def __init__(self, loader: Iterable[Any], sync: Callable[[], Any] | None = None) -> None:
        self.loader = loader
        self.sync = sync
        self.stats: list[EpochStall] = []

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the wrapper lacks: forward them to the wrapped loader.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    @property
    def last_epoch(self) -> EpochStall | None:
        """The most recent epoch's record (``stats[-1]``), None before the first ends."""
        return self.stats[-1] if self.stats else None

    def __iter__(self) -> Iterator[Any]:
        return self._epoch(len(self.stats))

    def _epoch(self, epoch: int) -> Iterator[Any]:
        clock = time.perf_counter
        wait = busy = 0.0
        batches = images = 0
        iterator = iter(self.loader)
        mark = clock()
        try:
            while True:
                try:
                    batch = next(iterator)
                except StopIteration:
                    wait += clock() - mark
                    return
                now = clock()
                wait += now - mark
                batches += 1
                images += _batch_images(batch)
                yield batch
                if self.sync is not None:
                    self.sync()
                mark = clock()
                busy += mark - now
        finally:
            self.stats.append(EpochStall(epoch, batches, images, wait, busy))
