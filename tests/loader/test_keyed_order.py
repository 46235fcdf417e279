"""Sets of ten million records or more draw their epoch order as a keyed permutation: a
rank computes its own positions only (issue 41, scale-curve fix 1 (c)), with the padding,
cut, resume and elastic-resume rules of the randperm order."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fastload.loader import keyed_order
from fastload.loader.batch_order import BatchOrder
from fastload.loader.keyed_order import KEYED_ORDER_MIN_ITEMS, keyed_indices
from fastload.loader.sampling import EpochSampler, mix_seed, samples_per_rank


@pytest.fixture
def small_threshold(monkeypatch):
    """Sets of 100 records or more take the keyed order, so whole orders stay small."""
    monkeypatch.setattr(keyed_order, "KEYED_ORDER_MIN_ITEMS", 100)


def _padded_share(order: np.ndarray, world: int, rank: int, drop_last: bool) -> list[int]:
    """DistributedSampler's share of ``order`` for ``rank``: wrapped round, or cut."""
    total = samples_per_rank(len(order), world, drop_last) * world
    if len(order) == 0:
        return []
    positions = np.arange(total) % len(order)
    return order[positions][rank::world].tolist()


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 1024, 1025, 65_537])
def test_the_keyed_order_is_a_permutation_of_every_size(n):
    order = keyed_indices(np.arange(n), n, key=12345)
    assert sorted(order.tolist()) == list(range(n))


def test_an_index_depends_on_its_position_and_the_key_only():
    n = 10_007
    whole = keyed_indices(np.arange(n), n, key=7)
    positions = np.array([n - 1, 0, 5000, 5000, 17])
    assert keyed_indices(positions, n, key=7).tolist() == whole[positions].tolist()
    assert keyed_indices(np.arange(n), n, key=8).tolist() != whole.tolist()


def test_positions_outside_the_set_are_refused():
    with pytest.raises(ValueError, match=r"positions should be in \[0, 10\)"):
        keyed_indices(np.array([3, 10]), 10, key=0)


def test_every_index_lands_at_every_position_about_equally_often():
    n, keys = 8, 8000
    counts = np.zeros((n, n))
    for key in range(keys):
        counts[np.arange(n), keyed_indices(np.arange(n), n, key)] += 1
    expected = keys / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 100, chi2  # 49 degrees of freedom: p < 1e-9 above 100


def test_sets_from_ten_million_records_take_the_keyed_order():
    assert KEYED_ORDER_MIN_ITEMS == 10_000_000
    assert EpochSampler(10_000_000, shuffle=True, seed=0).permutation(0) == "keyed"
    assert EpochSampler(9_999_999, shuffle=True, seed=0).permutation(0) == "randperm"
    assert EpochSampler(10_000_000, shuffle=False, seed=0).permutation(0) is None


def test_a_rank_of_a_ten_million_set_computes_its_share_only():
    n, world = 10_000_019, 512
    sampler = EpochSampler(n, shuffle=True, seed=3, num_replicas=world, rank=511)
    tracemalloc.start()
    try:
        mine = sampler.indices()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert mine.dtype == np.int32 and len(mine) == sampler.num_samples == -(-n // world)
    assert peak < 2 * 2**20, peak  # the whole int32 order would be 40 MB
    positions = (np.arange(len(mine), dtype=np.int64) * world + 511) % n
    assert mine.tolist() == keyed_indices(positions, n, mix_seed(3, 0), np.int32).tolist()


@pytest.mark.parametrize(("n", "world", "drop_last"), [(100, 1, False), (101, 4, False),
                                                       (101, 4, True), (250, 7, False),
                                                       (103, 130, False)])
def test_ranks_share_the_keyed_order_as_distributed_sampler_does(small_threshold, n, world,
                                                                 drop_last):
    for epoch, offset in [(0, 0), (2, 0), (2, n // 3)]:
        whole = None
        for rank in range(world):
            sampler = EpochSampler(n, shuffle=True, seed=11, num_replicas=world, rank=rank,
                                   drop_last=drop_last)
            sampler.set_epoch(epoch)
            assert sampler.permutation(epoch) == "keyed"
            if whole is None:
                whole = sampler.epoch_order()
                assert sorted(whole.tolist()) == list(range(n))
            assert sampler.indices(offset).tolist() == _padded_share(whole[offset:], world,
                                                                     rank, drop_last)


def _consume(n: int, world: int, batch: int, batches: int, state=None) -> tuple[list, dict]:
    """``batches`` batches on each of ``world`` ranks (after ``state``): the indices they
    took and rank 0's state."""
    seen, state_out = [], None
    for rank in range(world):
        own = EpochSampler(n, shuffle=True, seed=None, num_replicas=world, rank=rank)
        order = BatchOrder(None, own, batch_size=batch, drop_last=False, seed=5, num_items=n)
        order.set_seed(5)
        if state is not None:
            order.load_state_dict(state)
        epoch = order.start_epoch()
        for _ in range(batches):
            pulled = epoch.next()
            if pulled is None:
                break
            seen += pulled[1]
            epoch.mark_yielded()
        if rank == 0:
            state_out = order.state_dict()
    return seen, state_out


def test_an_elastic_resume_of_a_keyed_epoch_sees_every_sample_once(small_threshold):
    n = 1000
    first, state = _consume(n, world=4, batch=10, batches=12)
    assert state["permutation"] == "keyed" and state["samples_consumed"] == 480
    rest, _ = _consume(n, world=3, batch=8, batches=10**6, state=state)
    assert sorted(set(first) | set(rest)) == list(range(n))
    assert len(first) + len(rest) - n <= 2  # the second run's padding only


def test_a_state_saved_by_the_randperm_order_resumes_that_epoch_with_it(small_threshold):
    n = 1000
    _, state = _consume(n, world=2, batch=10, batches=5)
    old = {k: v for k, v in state.items() if k != "permutation"}  # as older versions saved
    sampler = EpochSampler(n, shuffle=True, seed=5)
    order = BatchOrder(None, sampler, batch_size=10, drop_last=False, seed=5, num_items=n)
    order.load_state_dict(old)
    epoch = order.start_epoch()
    assert sampler.permutation(epoch.epoch) == "randperm"
    resumed = [i for _, batch in iter(epoch.next, None) for i in batch]
    first_half = EpochSampler(n, shuffle=True, seed=5, num_replicas=2)
    first_half.keyed = False  # the order the older version drew
    assert resumed == first_half.epoch_order()[100:].tolist()
    assert order.state_dict()["permutation"] == "randperm"
    assert sampler.permutation(epoch.epoch + 1) == "keyed"


def test_the_shard_aware_order_keeps_its_own_draw_at_any_size(small_threshold):
    from fastload.loader.shard_order import ShardShuffleSampler

    ranges = [[0, 60], [60, 130], [130, 200]]  # 200 records: above the test's line
    sampler = ShardShuffleSampler(ranges, shuffle=True, seed=1, num_replicas=1, rank=0)
    assert not sampler.keyed and "permutation" not in sampler.state_fields(0)
