"""What ``iter(loader)`` takes from the global generators: exactly what torch's loader takes.

A script's own random stream (its init, dropout on the CPU, its MixUp) must be the one it
has with ``torch.utils.data.DataLoader``. torch's loader (2.x), at each ``iter()``:

1. calls ``iter()`` on its batch sampler — twice with workers (in its iterator's
   ``__init__`` and again in ``_reset``);
2. draws one int64, its base seed, from ``generator`` (torch's default generator when
   None) — except a ``persistent_workers`` iterator, which draws it only at its first epoch;
3. with workers, takes ``prefetch_factor * num_workers`` batches of indices at once;
   without, one batch per ``next()``.

Its ``RandomSampler`` (``shuffle=True``, no ``sampler``) draws at its first index: one int64
from the default generator without a generator, else ``randperm(len(dataset))`` from it, and
once more from that generator when its indices run out. Nothing is taken from ``random`` or
NumPy.

fastload makes those draws, at those moments, on the caller's thread. ``seed=`` stands for a
generator of the loader's own (torch's loader given ``generator=torch.Generator().manual_seed(
seed)`` takes nothing from the global generators either). The seed rule stays fastload's:
the base seed of the order and of the augmentation is ``seed=``, else the base seed its
first ``iter()`` draws (rank 0's under torch.distributed when the order is shuffled, so
that the ranks agree); the order of epoch ``e`` is a function of ``(base seed, e)``, so a
rerun, a resumed run and ``set_epoch`` see the same order. The later ``iter()``s draw as
torch's do and let the values go, and so does the stand-in for ``RandomSampler``'s draw.
A user's ``sampler``/``batch_sampler`` is iterated by fastload as torch iterates it, on the
caller's thread, up to ``prefetch_factor`` batches ahead of the caller (a sampler that draws
at its first index, as torch's samplers do, draws at the same moment as under torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fastload.loader.batch_order import BatchOrder
from fastload.loader.sampling import rank_zero_seed

__all__ = ["begin_epoch"]


def _base_seed_draw(generator: torch.Generator | None) -> int:
    """torch's ``_BaseDataLoaderIter`` base seed: one int64 from ``generator``."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def _random_sampler_draw(num_items: int, generator: torch.Generator | None) -> None:
    """What ``RandomSampler(range(num_items), generator=generator)`` takes from ``generator``
    (the default one when None) at its first index; the values are let go."""
    if num_items <= 0:
        return
    if generator is None:
        _base_seed_draw(None)  # its own generator's seed; the permutations come from that
    else:
        torch.randperm(num_items, generator=generator)


def begin_epoch(order: BatchOrder, *, generator: torch.Generator | None, seed_given: bool,
                num_workers: int, prefetch_factor: int | None, reused_workers: bool,
                num_items: int) -> tuple[Any, Callable[[], None] | None]:
    """Start ``order``'s next epoch as torch's ``iter()`` would, drawing what it draws.

    ``generator``: the loader's ``generator=``; ``seed_given``: ``seed=`` was given (the
    loader's own generator, which takes nothing from the global ones); ``reused_workers``:
    a ``persistent_workers`` loader that has been iterated before (torch reuses its
    iterator and draws no new base seed); ``num_items``: ``len(dataset)``, what torch's
    ``RandomSampler`` permutes. Returns ``(epoch, at_first_next)``: the epoch's batch stream,
    and the draw left for the first ``next()`` (``RandomSampler``'s, without workers), or
    None."""
    workers = num_workers > 0
    private = seed_given
    reused = workers and reused_workers

    def base_seed() -> None:
        if private or reused:
            return
        value = _base_seed_draw(generator)
        if order.seed is None:
            own = order.own
            if own is not None and own.shuffle and own.num_replicas > 1:
                value = rank_zero_seed(value)
            order.set_seed(value)

    at_first_next = None
    if order.own is not None:  # the order draws nothing of its own; it needs the seed
        base_seed()
        epoch = order.start_epoch()
        if order.own.shuffle and not private:

            def at_first_next() -> None:
                _random_sampler_draw(num_items, generator)

            if generator is not None and num_items > 0:  # its last randperm, at its end
                epoch.at_end(lambda: torch.randperm(num_items, generator=generator))
    else:
        epoch = order.start_epoch(sampler_iters=2 if workers and not reused else 1)
        base_seed()
        if workers:
            epoch.pull_ahead(max(1, prefetch_factor or 2) * num_workers)
    if workers and at_first_next is not None:
        at_first_next()
        at_first_next = None
    return epoch, at_first_next
