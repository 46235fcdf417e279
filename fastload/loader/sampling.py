"""Which samples each rank reads in an epoch: the loader's own sampler and its seeds.

Random order is a pure function of ``(seed, epoch)``: the loader's own sampler draws
``torch.randperm`` from a generator seeded by mixing the two (numpy ``SeedSequence``), so a
run, a rerun and a resumed run see the same order. Sets of
:data:`~fastload.loader.keyed_order.KEYED_ORDER_MIN_ITEMS` records or more use a keyed
permutation of the same key instead (:mod:`fastload.loader.keyed_order`): each rank
computes the indices at its own positions only, never the whole order. Under
``torch.distributed`` the loader shards that order exactly like
``torch.utils.data.DistributedSampler``:

* ``drop_last=False``: the epoch's order is padded by wrapping round to its start until its
  length divides evenly by ``world_size`` (so up to ``world_size - 1`` indices appear twice
  in an epoch); with ``N=10``, 4 ranks: order ``[0..9, 0, 1]``.
* ``drop_last=True``: the order is cut to the largest multiple of ``world_size`` (up to
  ``world_size - 1`` indices are skipped this epoch).
* rank ``r`` takes every ``world_size``-th index starting at ``r`` (``order[r::world_size]``).

How the loader resumes mid-epoch, elastically too: :mod:`fastload.loader.batch_order`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from fastload.loader import keyed_order

__all__ = ["EpochSampler", "mix_seed", "distributed_settings", "rank_zero_seed",
           "samples_per_rank"]

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """A well-mixed 64-bit seed from integers (any sign), e.g. ``(base, epoch, rank, batch)``."""
    seq = np.random.SeedSequence([int(p) & _MASK64 for p in parts])
    return int(seq.generate_state(1, dtype=np.uint64)[0])


def distributed_settings() -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group, ``(1, 0)`` when there is none."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def rank_zero_seed(value: int) -> int:
    """``value`` as rank 0 of the default process group has it (broadcast), so that every
    rank draws the same order; ``value`` itself without torch.distributed."""
    world_size, _ = distributed_settings()
    if world_size > 1:
        import torch.distributed as dist

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        tensor = torch.tensor([value], dtype=torch.int64, device=device)
        dist.broadcast(tensor, src=0)
        value = int(tensor.item())
    return value


class EpochSampler(Sampler[int]):
    """The loader's own order: ``range(N)`` or a permutation from ``(seed, epoch)``, sharded
    like DistributedSampler when ``num_replicas > 1`` (padding rule in the module docstring).
    ``fastload.loader.shard_order.ShardShuffleSampler`` is the shard-aware variant.
    """

    order_name = "global"  # the loader's ``order=`` this sampler makes

    def __init__(self, num_items: int, *, shuffle: bool, seed: int | None, num_replicas: int = 1,
                 rank: int = 0, drop_last: bool = False) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank should be in [0, {num_replicas}), but got rank={rank}")
        self.num_items = num_items
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self.num_samples = samples_per_rank(num_items, num_replicas, drop_last)
        self.total_size = self.num_samples * num_replicas
        # a set this large draws its order with the keyed permutation (module docstring)
        self.keyed = shuffle and num_items >= keyed_order.KEYED_ORDER_MIN_ITEMS
        self._randperm_epoch: int | None = None  # resumed from a state of torch.randperm's

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order on the next iteration."""
        self.epoch = epoch

    def permutation(self, epoch: int) -> str | None:
        """How ``epoch``'s order is drawn: ``"keyed"``, ``"randperm"``, or None without
        shuffling."""
        if not self.shuffle:
            return None
        return "keyed" if self.keyed and epoch != self._randperm_epoch else "randperm"

    def _key(self) -> int:
        seed = self.seed
        if seed is None:  # iterated before the loader's first iter() drew the base seed:
            # a permutation of its own, its seed drawn as torch's RandomSampler draws one
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        return mix_seed(seed, self.epoch)

    def epoch_order(self) -> np.ndarray:
        """The current epoch's global order of all ``num_items`` indices, unsharded.

        Returns:
            The order as int32 when ``num_items < 2**31`` (int64 otherwise): 4 bytes per
                record. torch draws the same permutation for either dtype from one seed
                (``randperm``'s swaps do not depend on it), so the order is the int64
                draw's, as saved states expect.
        """
        dtype = _order_dtype(self.num_items)
        how = self.permutation(self.epoch)
        if how == "keyed":  # every position, one rank of one: no array of positions
            return keyed_order.rank_indices(self.num_items, self._key(), 0, 0, 1,
                                            self.num_items, dtype)
        if how == "randperm":
            gen = torch.Generator()
            gen.manual_seed(self._key())
            torch_dtype = torch.int32 if dtype == np.int32 else torch.int64
            return torch.randperm(self.num_items, generator=gen, dtype=torch_dtype).numpy()
        return np.arange(self.num_items, dtype=dtype)

    def indices(self, offset: int = 0) -> np.ndarray:
        """This rank's indices for the current epoch.

        Args:
            offset: the position in :meth:`epoch_order` to start from: the suffix
                ``epoch_order()[offset:]`` only, padded or cut and sharded by the same rule.

        Returns:
            A contiguous array of this rank's indices (``epoch_order``'s dtype): the whole
                order is not kept, so a rank holds ``num_items / num_replicas`` indices
                between epochs (the padding, at most ``num_replicas - 1`` indices, wraps
                round to the order's start as DistributedSampler's does).
        """
        if self.permutation(self.epoch) == "keyed":
            return self._keyed_indices(offset)
        order = self.epoch_order()[offset:]
        total_size = samples_per_rank(len(order), self.num_replicas, self.drop_last) * self.num_replicas
        if total_size > len(order):
            if len(order) == 0:
                return order
            pad = total_size - len(order)
            reps, rest = divmod(pad, len(order))  # rest: a prefix; reps: whole copies, only
            # when the padding is longer than the order (fewer items than ranks)
            order = np.concatenate([order, *[order] * reps, order[:rest]])
        else:
            order = order[:total_size]
        return np.ascontiguousarray(order[self.rank :: self.num_replicas])

    def _keyed_indices(self, offset: int) -> np.ndarray:
        """:meth:`indices` of a keyed order: the same positions, padded or cut alike."""
        length = self.num_items - offset
        count = samples_per_rank(length, self.num_replicas, self.drop_last) if length else 0
        return keyed_order.rank_indices(self.num_items, self._key(), offset, self.rank,
                                        self.num_replicas, count, _order_dtype(self.num_items))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

    def state_fields(self, epoch: int) -> dict[str, Any]:
        """What a state saved in ``epoch`` stores of this order besides the seed: for a set
        of the keyed permutation's size, how that epoch's order is drawn (a subclass's
        own)."""
        return {"permutation": self.permutation(epoch)} if self.keyed else {}

    def load_state_fields(self, state: dict[str, Any], resumable: bool) -> None:
        """Refuse a state saved with another ``order`` (its positions mean other samples);
        a resumed epoch of a state without ``permutation`` (saved before large sets drew
        the keyed permutation) keeps ``torch.randperm``'s order, later epochs do not."""
        saved = state.get("order") or "global"
        if saved != self.order_name:
            raise ValueError(f"state was saved with order={saved!r}, but this loader has "
                             f"order={self.order_name!r}; resume with the same setting")
        self._randperm_epoch = None
        if self.keyed and resumable and state.get("permutation") != "keyed":
            self._randperm_epoch = int(state["epoch"])


def _order_dtype(num_items: int) -> type:
    """int32 when every index of ``num_items`` fits it, int64 otherwise."""
    return np.int32 if num_items < 2**31 else np.int64


def samples_per_rank(num_items: int, num_replicas: int, drop_last: bool) -> int:
    """Samples per rank for an order of ``num_items`` (DistributedSampler's arithmetic: with
    ``drop_last`` the tail that does not divide evenly is dropped, otherwise it is padded)."""
    if drop_last and num_items % num_replicas:
        return math.ceil((num_items - num_replicas) / num_replicas)
    return math.ceil(num_items / num_replicas)
