"""Elastic resume of the loader's own order (fastload.loader.sampling), ranks simulated
in-process with explicit num_replicas/rank: a state saved by any rank of a W-rank job
finishes the epoch in a W'-rank job with every sample once (plus W'-run padding)."""

from __future__ import annotations

from collections import Counter

import pytest
from batch_orders import take

from fastload.loader.batch_order import BatchOrder
from fastload.loader.sampling import EpochSampler

N, BATCH, SEED = 103, 4, 11


def rank_order(world: int, rank: int, *, drop_last: bool = False, shuffle: bool = True,
               batch: int = BATCH) -> BatchOrder:
    own = EpochSampler(N, shuffle=shuffle, seed=SEED, num_replicas=world, rank=rank,
                       drop_last=drop_last)
    return BatchOrder(None, own, batch, drop_last, SEED, N)


def stop_and_resume(first: int, second: int, stop_after: int, saver: int = 0, **kw):
    """``first`` ranks run ``stop_after`` batches; rank ``saver``'s state resumes ``second``
    ranks to the end of the epoch. Returns (samples before, samples after, resumed ranks)."""
    ranks = [rank_order(first, r, **kw) for r in range(first)]
    before = [i for order in ranks for i in take(order, stop_after)]
    state = ranks[saver].state_dict()
    resumed = [rank_order(second, r, **kw) for r in range(second)]
    for order in resumed:
        order.load_state_dict(state)
    after = [i for order in resumed for i in take(order, None)]
    return before, after, resumed


@pytest.mark.parametrize(("first", "second"), [(3, 2), (2, 3)])
def test_a_mid_epoch_state_resumes_at_another_world_size_with_every_sample_once(first, second):
    before, after, _ = stop_and_resume(first, second, stop_after=5, saver=first - 1)
    assert len(before) == 5 * BATCH * first == len(set(before))
    assert not set(before) & set(after)  # the resumed run reads only the unseen suffix
    assert set(before) | set(after) == set(range(N))
    assert len(after) - len(set(after)) <= second - 1  # repeats: the resumed run's padding


def test_the_epoch_after_an_elastic_resume_equals_an_uninterrupted_run_at_the_new_size():
    _, _, resumed = stop_and_resume(3, 2, stop_after=3)
    fresh = [rank_order(2, r) for r in range(2)]
    for order in fresh:
        order.set_epoch(1)
    assert [take(o, None) for o in resumed] == [take(o, None) for o in fresh]


def test_resume_at_the_same_world_size_replays_the_saved_cut_exactly():
    ranks = [rank_order(3, r) for r in range(3)]
    for order in ranks:
        take(order, 2)
    state = ranks[0].state_dict()
    rest = [take(o, None) for o in ranks]
    again = [rank_order(3, r) for r in range(3)]
    for order in again:
        order.load_state_dict(state)
    assert [take(o, None) for o in again] == rest


def test_two_elastic_resumes_in_one_epoch_still_see_every_sample_once():
    ranks = [rank_order(3, r) for r in range(3)]
    seen = [i for o in ranks for i in take(o, 2)]
    middle = [rank_order(2, r) for r in range(2)]
    for order in middle:
        order.load_state_dict(ranks[1].state_dict())
    seen += [i for o in middle for i in take(o, 3)]
    last = [rank_order(4, r) for r in range(4)]
    for order in last:
        order.load_state_dict(middle[0].state_dict())
    seen += [i for o in last for i in take(o, None)]
    counts = Counter(seen)
    assert set(counts) == set(range(N)) and sum(counts.values()) - N <= 3


def test_elastic_resume_may_change_the_batch_size():
    ranks = [rank_order(2, r) for r in range(2)]
    before = [i for o in ranks for i in take(o, 4)]
    resumed = [rank_order(3, r, batch=7) for r in range(3)]
    for order in resumed:
        order.load_state_dict(ranks[0].state_dict())
    after = [i for o in resumed for i in take(o, None)]
    assert set(before) | set(after) == set(range(N)) and not set(before) & set(after)


def test_with_drop_last_an_elastic_resume_sees_no_sample_twice():
    before, after, _ = stop_and_resume(3, 2, stop_after=4, drop_last=True)
    assert len(before + after) == len(set(before + after))


def test_a_state_saved_with_shuffle_is_refused_by_a_loader_without_it():
    order = rank_order(3, 0)
    take(order, 1)
    with pytest.raises(ValueError, match="shuffle=True, but this loader has shuffle=False"):
        rank_order(2, 0, shuffle=False).load_state_dict(order.state_dict())
