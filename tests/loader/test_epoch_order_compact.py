"""The loader's own epoch order keeps only the rank's share, 4 bytes per index (issue 41:
every rank kept the whole int64 order, 16 B/record with padding), and is exactly the
order it was: the same seed, the same indices, for resume and elastic resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fastload.loader.sampling import EpochSampler, mix_seed, samples_per_rank


def _before(n: int, seed: int, epoch: int, world: int, rank: int, drop_last: bool,
            offset: int = 0, shuffle: bool = True) -> list[int]:
    """The order as the loader drew it before (int64 randperm, whole copies for padding)."""
    if shuffle:
        gen = torch.Generator()
        gen.manual_seed(mix_seed(seed, epoch))
        order = torch.randperm(n, generator=gen).numpy()[offset:]
    else:
        order = np.arange(n, dtype=np.int64)[offset:]
    total = samples_per_rank(len(order), world, drop_last) * world
    if total > len(order):
        if len(order) == 0:
            return []
        reps = math.ceil((total - len(order)) / len(order))
        order = np.concatenate([order, *[order] * reps])[:total]
    else:
        order = order[:total]
    return order[rank::world].tolist()


@pytest.mark.parametrize("n", [0, 1, 3, 10, 97, 1000, 65_537])
@pytest.mark.parametrize(("world", "drop_last"), [(1, False), (4, False), (4, True),
                                                  (7, False), (7, True), (130, False)])
def test_the_same_seed_gives_the_same_indices_as_before(n, world, drop_last):
    for seed, epoch, offset, shuffle in [(0, 0, 0, True), (5, 3, 0, True), (5, 3, n // 3, True),
                                         (1, 0, n // 2, False)]:
        for rank in sorted({0, 1 % world, world // 2, world - 1}):
            sampler = EpochSampler(n, shuffle=shuffle, seed=seed, num_replicas=world,
                                   rank=rank, drop_last=drop_last)
            sampler.set_epoch(epoch)
            got = sampler.indices(offset)
            assert got.tolist() == _before(n, seed, epoch, world, rank, drop_last, offset,
                                           shuffle)


def test_a_rank_keeps_only_its_share_in_four_bytes_per_index():
    n, world = 100_003, 512  # padding: 100,003 does not divide by 512
    sampler = EpochSampler(n, shuffle=True, seed=0, num_replicas=world, rank=3)
    mine = sampler.indices()
    assert mine.dtype == np.int32 and mine.flags.c_contiguous and mine.base is None
    assert mine.nbytes == sampler.num_samples * 4 == math.ceil(n / world) * 4
    assert sampler.epoch_order().dtype == np.int32


def test_randperm_draws_the_same_permutation_as_int32_and_int64():
    for n in (2, 1000, 300_007):
        a, b = torch.Generator(), torch.Generator()
        a.manual_seed(mix_seed(7, n))
        b.manual_seed(mix_seed(7, n))
        assert torch.equal(torch.randperm(n, generator=a),
                           torch.randperm(n, generator=b, dtype=torch.int32).long())
