"""A shard-aware order for sharded sets: shuffle the shards, then samples within a window.

A global permutation touches every shard of a set at random, which for a set streamed from
object storage means fetching the whole set at once. ``order="shards"`` reads it a window
at a time instead (Mosaic Streaming's fixed-block shuffle, ``py1b``, with blocks of whole
shards). For epoch ``e`` with base seed ``s``:

1. the shards are permuted (``torch.randperm`` from a generator seeded
   ``mix_seed(s, e, TAG)``);
2. consecutive runs of ``shard_window`` shards of that permutation form the windows;
3. within window ``k`` the samples of its shards are permuted (seeded
   ``mix_seed(s, e, TAG, k)``); the epoch's order is the windows one after the other.

With shards ``A=[0, 1, 2]``, ``B=[3, 4]``, ``C=[5, 6, 7]``, ``D=[8]`` and ``shard_window=2``,
a shard order ``C, A, D, B`` gives windows ``{5, 6, 7, 0, 1, 2}`` and ``{8, 3, 4}``, e.g.
the order ``[1, 7, 0, 5, 2, 6, 4, 8, 3]``. A sample is shuffled among the
``shard_window`` shards of its window (a larger window: a better shuffle, more shards
resident at once). Without shuffle the order is ``range(N)``, read shard after shard.

The order is a pure function of ``(seed, epoch, shard sizes, shard_window)`` (or of a
stored shard order), computed a window at a time: a rank holds one or two windows' samples,
never a permutation of the whole set. Everything above it is the loader's own order
(:mod:`fastload.loader.sampling`): the same seed rule and draws, the same DistributedSampler
split of the epoch's order over ranks (rank ``r`` takes positions ``r, r + W, ...``, padded
or cut), and the same elastic resume (a state counts the positions all ranks consumed,
and stores this epoch's shard order and window so a resumed run continues exactly, at any
world size). All ranks read the same window at a time: each node needs the shards of the
current window and, prefetched, of the next one (``2 * shard_window`` shards of cache).

A set's reader may take part: ``streaming = True`` (a set read from object storage) makes
``order="shards"`` the loader's default, and a ``prefetch(shard_indices)`` method is called
with the shards the order reaches next (:meth:`ShardOrder.shards_ahead`) each time a rank
enters a window, so a cache can fetch them while the current ones are read; it must return
at once (fetch in the background). Local sets have neither: their default stays the global
order, and nothing is called.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from fastload.loader.sampling import EpochSampler, distributed_settings, mix_seed, samples_per_rank
from fastload.utils.checks import check_positive_int

__all__ = ["DEFAULT_SHARD_WINDOW", "ORDERS", "ShardOrder", "ShardShuffleSampler",
           "resolve_order", "shard_ranges", "warn_if_class_sorted"]

ORDERS = ("global", "shards")
DEFAULT_SHARD_WINDOW = 8  # shards read at once: 8 x 64-256 MB streaming shards, 0.5-2 GB
_TAG = -0x5348415244  # "SHARD": keeps these seeds apart from (seed, epoch[, rank, batch])
_CACHED_WINDOWS = 3  # the current window, the next, and the first (the padding wraps to it)


def shard_ranges(dataset: Any) -> np.ndarray | None:
    """The ``[start, stop)`` global ranges of a sharded set's shards (an ``(S, 2)`` int64
    array) when ``dataset`` is one (a ``fastload.LMDBDataset`` of a sharded set, or its
    reader; or those ranges themselves, contiguous from 0), else None."""
    if isinstance(dataset, np.ndarray | list | tuple):
        ranges = np.asarray(dataset, dtype=np.int64).reshape(-1, 2)
        if len(ranges) and (ranges[0, 0] != 0 or np.any(ranges[1:, 0] != ranges[:-1, 1])
                            or np.any(ranges[:, 1] < ranges[:, 0])):
            raise ValueError("shard ranges should be contiguous [start, stop) pairs from 0, "
                             f"but got {dataset!r}")
        return ranges
    reader = getattr(dataset, "reader", dataset)
    entries = getattr(reader, "entries", None)
    if entries is None:
        return None
    if hasattr(entries, "ranges"):  # a ShardedReader's: no entry built
        return np.asarray(entries.ranges(), dtype=np.int64).reshape(-1, 2)
    return np.array([(e.start, e.stop) for e in entries], dtype=np.int64).reshape(-1, 2)


class ShardOrder:
    """One epoch's shard-aware order (module docstring) over shards ``ranges``; positions
    ``0 .. len(self) - 1``. ``shard_order`` given: that permutation of the shards instead
    of the one drawn from ``(seed, epoch)`` (a resumed epoch's)."""

    def __init__(self, ranges: np.ndarray, *, window: int, shuffle: bool, seed: int | None,
                 epoch: int, shard_order: np.ndarray | None = None) -> None:
        self.ranges = ranges
        self.window = window
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        count = len(ranges)
        if shard_order is None:
            if shuffle and count > 1:
                shard_order = torch.randperm(count, generator=_generator(seed, epoch)).numpy()
            else:
                shard_order = np.arange(count, dtype=np.int64)
        self.shard_order = np.asarray(shard_order, dtype=np.int64)
        sizes = (ranges[:, 1] - ranges[:, 0])[self.shard_order]
        groups = np.add.reduceat(sizes, np.arange(0, count, window)) if count else sizes
        self.starts = np.concatenate([[0], np.cumsum(groups)]).astype(np.int64)
        self._windows: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def num_windows(self) -> int:
        return len(self.starts) - 1

    def window_of(self, position: int | np.ndarray) -> Any:
        """The window (index) holding ``position`` (an int or an array of them)."""
        return np.searchsorted(self.starts, position, side="right") - 1

    def window_shards(self, k: int) -> np.ndarray:
        """The shards of window ``k``, in shard order."""
        return self.shard_order[k * self.window:(k + 1) * self.window]

    def window_samples(self, k: int) -> np.ndarray:
        """The sample indices at positions ``starts[k] .. starts[k + 1] - 1``, in order."""
        samples = self._windows.get(k)
        if samples is not None:
            self._windows.move_to_end(k)
            return samples
        parts = [np.arange(a, b, dtype=np.int64) for a, b in self.ranges[self.window_shards(k)]]
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if self.shuffle and len(samples) > 1:
            perm = torch.randperm(len(samples), generator=_generator(self.seed, self.epoch, k))
            samples = samples[perm.numpy()]
        self._windows[k] = samples
        while len(self._windows) > _CACHED_WINDOWS:
            self._windows.popitem(last=False)
        return samples

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The sample indices at ``positions`` (int64 array, each in ``[0, len(self))``)."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        windows = self.window_of(positions)
        for k in np.unique(windows).tolist():
            where = windows == k
            out[where] = self.window_samples(k)[positions[where] - self.starts[k]]
        return out

    def shards_ahead(self, position: int, n: int) -> list[int]:
        """The next ``n`` shards this order reads from ``position`` on: the shards of the
        window holding ``position`` that still have samples there, in the order of their
        next sample, then the following windows' shards in shard order."""
        if n <= 0 or position >= len(self):
            return []
        k = int(self.window_of(position))
        rest = self.window_samples(k)[position - self.starts[k]:]
        shard = np.searchsorted(self.ranges[:, 0], rest, side="right") - 1
        _, first = np.unique(shard, return_index=True)
        ahead = shard[np.sort(first)].tolist()
        ahead += self.shard_order[(k + 1) * self.window:(k + 1) * self.window + n].tolist()
        return ahead[:n]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        order = np.concatenate([self.window_samples(k) for k in range(self.num_windows)]
                               or [np.zeros(0, dtype=np.int64)])
        return order if dtype is None else order.astype(dtype)


def _generator(seed: int | None, epoch: int, *parts: int) -> torch.Generator:
    gen = torch.Generator()
    gen.manual_seed(mix_seed(seed, epoch, _TAG, *parts))
    return gen


class _RankIndices:
    """One rank's indices of an epoch (``EpochSampler.indices``' array, computed a batch at
    a time): position ``j`` is the sample at global position ``offset + (rank + W * j) % L``
    of the order, ``L`` the positions left after ``offset`` (the DistributedSampler padding
    wraps round to the suffix's start). ``announce(position)`` is called with the first
    position of each window this rank enters."""

    def __init__(self, order: ShardOrder, offset: int, num_replicas: int, rank: int,
                 drop_last: bool, announce: Callable[[ShardOrder, int], None] | None) -> None:
        self.order = order
        self.offset = offset
        self.left = len(order) - offset
        self.num_replicas = num_replicas
        self.rank = rank
        self._len = samples_per_rank(self.left, num_replicas, drop_last) if self.left > 0 else 0
        self._announce = announce
        self._entered: set[int] = set()

    def __len__(self) -> int:
        return self._len

    def positions(self, js: np.ndarray) -> np.ndarray:
        """The global positions of this rank's positions ``js``."""
        return self.offset + (self.rank + self.num_replicas * js) % max(1, self.left)

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            js = np.arange(*item.indices(self._len), dtype=np.int64)
        else:
            j = int(item) + (self._len if int(item) < 0 else 0)
            if not 0 <= j < self._len:
                raise IndexError(f"index {item} is out of range for {self._len} indices")
            js = np.array([j], dtype=np.int64)
        positions = self.positions(js)
        if self._announce is not None and len(positions):
            windows = self.order.window_of(positions)
            for k in np.unique(windows).tolist():
                if k not in self._entered:
                    self._entered.add(k)
                    self._announce(self.order, int(positions[windows == k].min()))
        samples = self.order.take(positions)
        return samples if isinstance(item, slice) else int(samples[0])

    def tolist(self) -> list[int]:
        return self[:].tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)

    def __iter__(self) -> Iterator[int]:
        step = 4096
        for begin in range(0, self._len, step):
            yield from self[begin:begin + step].tolist()


class ShardShuffleSampler(EpochSampler):
    """The shard-aware order (module docstring) of a sharded set, split over ranks as
    ``DistributedSampler`` splits (``num_replicas``/``rank`` default to the process group's).

    What ``fastload.DataLoader(..., order="shards")`` uses as its own sampler, with the
    loader's seed and elastic resume. Given as ``sampler=`` to torch's DataLoader it works
    as DistributedSampler does there (call ``set_epoch``; ``seed`` 0 unless given).
    ``dataset``: a ``fastload.LMDBDataset`` of a sharded set, its reader, or the shards'
    ``[start, stop)`` ranges.
    ``prefetch_shards``: how many shards to announce to the set's ``prefetch`` hook on
    entering a window (default ``2 * shard_window``: the window and the next).
    """

    order_name = "shards"

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int | None = 0, drop_last: bool = False, *,
                 shard_window: int = DEFAULT_SHARD_WINDOW,
                 prefetch_shards: int | None = None) -> None:
        check_positive_int("shard_window", shard_window)
        check_positive_int("prefetch_shards", prefetch_shards, allow_none=True)
        ranges = shard_ranges(dataset)
        if ranges is None:
            raise ValueError(_not_sharded(dataset))
        world_size, own_rank = distributed_settings()
        super().__init__(int(ranges[-1, 1]) if len(ranges) else 0, shuffle=shuffle, seed=seed,
                         num_replicas=world_size if num_replicas is None else num_replicas,
                         rank=own_rank if rank is None else rank, drop_last=drop_last)
        self.ranges = ranges
        self.keyed = False  # windows of shards (ShardOrder), whatever the set's size
        self.shard_window = shard_window
        self.prefetch_shards = 2 * shard_window if prefetch_shards is None else prefetch_shards
        hook = getattr(getattr(dataset, "reader", dataset), "prefetch", None)
        self._prefetch = hook if callable(hook) else None
        self._pinned: tuple[int, np.ndarray, int] | None = None  # a resumed epoch's order

    def shard_order(self, epoch: int | None = None) -> ShardOrder:
        """Epoch ``epoch``'s order (the current epoch's by default). Without a seed yet (the
        loader draws it at its first ``iter()``) a seed is drawn as ``EpochSampler`` does."""
        epoch = self.epoch if epoch is None else epoch
        seed = self.seed
        if self.shuffle and seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        pinned = self._pinned
        if pinned is not None and pinned[0] == epoch:
            return ShardOrder(self.ranges, window=pinned[2], shuffle=self.shuffle, seed=seed,
                              epoch=epoch, shard_order=pinned[1])
        return ShardOrder(self.ranges, window=self.shard_window, shuffle=self.shuffle,
                          seed=seed, epoch=epoch)

    def epoch_order(self) -> np.ndarray:
        return np.asarray(self.shard_order())

    def indices(self, offset: int = 0) -> _RankIndices:  # type: ignore[override]
        """This rank's indices of the current epoch (from position ``offset`` on), computed
        a batch at a time; an array-like (``len``, slices give int64 arrays)."""
        announce = self._announce if self._prefetch is not None else None
        return _RankIndices(self.shard_order(), offset, self.num_replicas, self.rank,
                            self.drop_last, announce)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())

    def _announce(self, order: ShardOrder, position: int) -> None:
        shards = order.shards_ahead(position, self.prefetch_shards)
        if len(shards) < self.prefetch_shards and order.epoch == self.epoch:
            # the end of the epoch is near: the next epoch's first shards follow
            following = self.shard_order(order.epoch + 1) if self.seed is not None \
                or not self.shuffle else None
            if following is not None:
                more = following.shards_ahead(0, self.prefetch_shards - len(shards))
                shards += [s for s in more if s not in shards]
        if shards:
            self._prefetch(shards)

    def state_fields(self, epoch: int) -> dict[str, Any]:
        """The order's part of a state saved in ``epoch``: its shard order and window."""
        fields: dict[str, Any] = {"order": self.order_name, "shard_window": self.shard_window,
                                  "shard_order": None}
        pinned = self._pinned
        if pinned is not None and pinned[0] == epoch:
            fields["shard_window"] = pinned[2]
            fields["shard_order"] = torch.from_numpy(pinned[1].copy())
        elif self.seed is not None or not self.shuffle:
            order = ShardOrder(self.ranges, window=self.shard_window, shuffle=self.shuffle,
                               seed=self.seed, epoch=epoch)
            fields["shard_order"] = torch.from_numpy(order.shard_order.copy())
        return fields

    def load_state_fields(self, state: dict[str, Any], resumable: bool) -> None:
        """Check ``state``'s order fields against this sampler; a resumable state pins its
        epoch to the stored shard order and window (later epochs use this sampler's)."""
        super().load_state_fields(state, resumable)
        self._pinned = None
        stored = state.get("shard_order")
        if stored is None or not resumable:
            return
        stored = np.asarray(stored, dtype=np.int64)
        if len(stored) != len(self.ranges) or not np.array_equal(
                np.sort(stored), np.arange(len(self.ranges))):
            raise ValueError(f"state field shard_order should be a permutation of the set's "
                             f"{len(self.ranges)} shards, but it holds {len(stored)} values "
                             f"that are not; pass a state_dict() saved over this set")
        window = state.get("shard_window") or self.shard_window
        self._pinned = (int(state["epoch"]), stored, int(window))


def resolve_order(order: str | None, shard_window: Any, dataset: Any, *, sampler: Any,
                  batch_sampler: Any) -> str:
    """The loader's order: ``order`` checked, or (None) ``"shards"`` for a set whose reader
    says ``streaming = True`` (a set read from object storage) and ``"global"`` otherwise.
    ``"shards"`` needs a sharded set and excludes ``sampler``/``batch_sampler``."""
    if order is not None and order not in ORDERS:
        raise ValueError(f"order should be 'global', 'shards' or None, but got order={order!r}")
    check_positive_int("shard_window", shard_window)
    if order is not None and (sampler is not None or batch_sampler is not None):
        other = "sampler" if sampler is not None else "batch_sampler"
        raise ValueError(f"order option is mutually exclusive with {other}; the {other} "
                         "decides the order")
    reader = getattr(dataset, "reader", None)
    if order is None:
        streaming = bool(getattr(reader, "streaming", False))
        order = "shards" if streaming and sampler is None and batch_sampler is None \
            else "global"
    if order == "shards" and shard_ranges(dataset) is None:
        raise ValueError(_not_sharded(dataset))
    return order


def _not_sharded(dataset: Any) -> str:
    return (f"order='shards' needs a sharded set (a fastload.LMDBDataset, or the path, of a "
            f"set made by `fastload convert SRC DST --shards N`), but the dataset is a "
            f"{type(dataset).__name__} without shards; pass order='global' or convert it "
            "with --shards")


def warn_if_class_sorted(dataset: Any, shard_window: int, stacklevel: int = 3) -> None:
    """Warn when a sharded set's labels run in class order across its shards (a set
    converted from an ImageFolder tree): a window of a few shards then holds a few classes.
    Looks at the labels at each shard's first and last record only."""
    ranges = shard_ranges(dataset)
    targets = getattr(getattr(dataset, "reader", dataset), "targets", None)
    if ranges is None or targets is None or len(ranges) <= shard_window:
        return
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    if len(ranges) <= shard_window:
        return
    labels = np.asarray(targets)[np.stack([ranges[:, 0], ranges[:, 1] - 1], axis=1).ravel()]
    if labels[0] < labels[-1] and bool(np.all(np.diff(labels) >= 0)):
        warnings.warn(
            f"the labels of {str(getattr(dataset, 'root', dataset))!r} run in class order "
            f"across its {len(ranges)} shards (a conversion from an ImageFolder tree?), so "
            f"order='shards' with shard_window={shard_window} reads only a few classes at a "
            "time; convert it from a list in random order (a CSV of path,label rows), or pass "
            "a larger shard_window", UserWarning, stacklevel=stacklevel)

