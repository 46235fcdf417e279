"""The shard-aware order (``order="shards"``, fastload.loader.shard_order): windows of
shards, shuffled per epoch, split over ranks and resumed as the global order is; and the
set's ``prefetch`` hook. Ranks simulated in-process with explicit num_replicas/rank, as in
test_elastic; loader tests on a real sharded set converted from a CSV in random order."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from batch_orders import take

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.shards import ShardedReader
from fastload.loader.batch_order import BatchOrder
from fastload.loader.sampling import EpochSampler
from fastload.loader.shard_order import ShardOrder, ShardShuffleSampler

# 9 shards of uneven sizes (one empty), 103 samples
SIZES = [14, 9, 17, 0, 12, 11, 15, 13, 12]
RANGES = np.stack([np.cumsum([0, *SIZES[:-1]]), np.cumsum(SIZES)], axis=1)
N, BATCH, SEED, WINDOW = int(sum(SIZES)), 4, 11, 3
SMALL = T.Compose([T.Resize((8, 8)), T.ToTensor()])


def shard_of(samples) -> np.ndarray:
    return np.searchsorted(RANGES[:, 0], np.asarray(samples), side="right") - 1


def rank_order(world: int, rank: int, *, window: int = WINDOW, drop_last: bool = False,
               batch: int = BATCH) -> BatchOrder:
    own = ShardShuffleSampler(RANGES, world, rank, True, SEED, drop_last, shard_window=window)
    return BatchOrder(None, own, batch, drop_last, SEED, N)


def test_each_window_holds_exactly_the_samples_of_its_shards():
    order = ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED, epoch=0)
    full = np.asarray(order)
    assert sorted(full.tolist()) == list(range(N))
    for k in range(order.num_windows):
        shards = order.window_shards(k)
        window = full[order.starts[k]:order.starts[k + 1]]
        assert set(shard_of(window).tolist()) == set(shards.tolist()) - {3}  # shard 3 is empty
        assert len(window) == sum(SIZES[s] for s in shards)


def test_the_order_is_new_each_epoch_and_the_same_for_the_same_seed():
    def order(epoch, seed=SEED):
        return np.asarray(ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=seed,
                                     epoch=epoch)).tolist()

    assert order(0) == order(0)
    assert order(0) != order(1)
    assert order(0) != order(0, seed=SEED + 1)
    firsts = {tuple(ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED,
                               epoch=e).window_shards(0).tolist()) for e in range(6)}
    assert len(firsts) > 1  # the shards themselves are reshuffled, not only their samples


def test_samples_of_a_window_are_interleaved_across_its_shards():
    order = ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED, epoch=0)
    window = order.window_samples(0)
    shards = shard_of(window)
    runs = 1 + int(np.count_nonzero(np.diff(shards)))
    assert runs > 2 * len(set(shards.tolist()))  # not shard after shard
    assert window.tolist() != sorted(window.tolist())


def test_without_shuffle_the_order_is_the_sets_order():
    order = ShardOrder(RANGES, window=WINDOW, shuffle=False, seed=None, epoch=4)
    assert np.asarray(order).tolist() == list(range(N))


def test_shards_ahead_lists_the_windows_unread_shards_then_the_next_windows():
    order = ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED, epoch=0)
    full = np.asarray(order)
    end = int(order.starts[1])
    last_shard = int(shard_of([full[end - 1]])[0])
    assert order.shards_ahead(end - 1, 10)[0] == last_shard  # only it is left in window 0
    assert order.shards_ahead(end - 1, 4)[1:] == order.window_shards(1).tolist()
    first = order.shards_ahead(0, WINDOW)
    assert first[0] == shard_of([full[0]])[0] and sorted(first) == sorted(
        s for s in order.window_shards(0).tolist() if SIZES[s])


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_split_the_shard_order_as_distributed_sampler_splits_every_sample_once(
        world, drop_last):
    order = np.asarray(ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED, epoch=0))
    per_rank = [list(ShardShuffleSampler(RANGES, world, r, True, SEED, drop_last,
                                         shard_window=WINDOW)) for r in range(world)]
    total = (N // world if drop_last else -(-N // world)) * world
    padded = np.resize(order, total)  # wraps round to the start, as DistributedSampler pads
    assert per_rank == [padded[r::world].tolist() for r in range(world)]
    counts = Counter(i for rank in per_rank for i in rank)
    assert sum(counts.values()) == total
    if drop_last:
        assert max(counts.values()) == 1
    else:
        assert set(counts) == set(range(N))


@pytest.mark.parametrize(("first", "second"), [(3, 2), (2, 4)])
def test_a_mid_epoch_state_resumes_at_another_world_size_with_every_sample_once(first, second):
    ranks = [rank_order(first, r) for r in range(first)]
    before = [i for order in ranks for i in take(order, 5)]
    state = ranks[-1].state_dict()
    assert state["order"] == "shards" and state["shard_window"] == WINDOW
    resumed = [rank_order(second, r) for r in range(second)]
    for order in resumed:
        order.load_state_dict(state)
    after = [i for order in resumed for i in take(order, None)]
    assert len(before) == len(set(before)) and not set(before) & set(after)
    assert set(before) | set(after) == set(range(N))
    assert len(after) - len(set(after)) <= second - 1  # the resumed run's padding


def test_resume_at_the_same_world_size_replays_the_rest_of_the_epoch_exactly():
    ranks = [rank_order(3, r) for r in range(3)]
    for order in ranks:
        take(order, 2)
    state = ranks[0].state_dict()
    rest = [take(o, None) for o in ranks]
    again = [rank_order(3, r) for r in range(3)]
    for order in again:
        order.load_state_dict(state)
    assert [take(o, None) for o in again] == rest


def test_a_resumed_epoch_keeps_the_stored_shard_order_and_window():
    ranks = [rank_order(2, r) for r in range(2)]
    before = [i for o in ranks for i in take(o, 3)]
    state = ranks[0].state_dict()
    # a job of another size whose loaders have another window continues the saved epoch's
    # order (window 3); its next epoch uses its own window
    resumed = [rank_order(3, r, window=1) for r in range(3)]
    for order in resumed:
        order.load_state_dict(state)
    saved = np.asarray(ShardOrder(RANGES, window=WINDOW, shuffle=True, seed=SEED, epoch=0))
    suffix = saved[len(before):]
    padded = np.resize(suffix, -(-len(suffix) // 3) * 3)
    assert [take(o, None) for o in resumed] == [padded[r::3].tolist() for r in range(3)]
    assert resumed[0].own.shard_order(1).window == 1


def test_a_state_of_the_global_order_is_refused_by_a_shard_ordered_loader_and_back():
    shards = rank_order(2, 0)
    glob = BatchOrder(None, EpochSampler(N, shuffle=True, seed=SEED, num_replicas=2, rank=0),
                      BATCH, False, SEED, N)
    take(shards, 1)
    take(glob, 1)
    with pytest.raises(ValueError, match="order='global', but this loader has order='shards'"):
        rank_order(2, 0).load_state_dict(glob.state_dict())
    with pytest.raises(ValueError, match="order='shards', but this loader has order='global'"):
        BatchOrder(None, EpochSampler(N, shuffle=True, seed=SEED, num_replicas=2, rank=0),
                   BATCH, False, SEED, N).load_state_dict(shards.state_dict())


@pytest.mark.parametrize("value, error, words", [
    (torch.tensor([0, 1, 2]), ValueError, "shard_order should be a permutation of the set's 9"),
    (torch.tensor([0, 0, 1, 2, 3, 4, 5, 6, 7]), ValueError, "should be a permutation"),
    ("abc", TypeError, "shard_order should be None or a 1-D integer tensor"),
])
def test_a_state_with_a_bad_shard_order_is_refused_naming_the_field(value, error, words):
    order = rank_order(2, 0)
    take(order, 1)
    state = {**order.state_dict(), "shard_order": value}
    with pytest.raises(error, match=words):
        rank_order(2, 0).load_state_dict(state)


# --- the loader, on a real set ------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_set(tmp_path_factory):
    """40 tiny JPEGs listed in random order with random labels (0-3), as a 5-shard set."""
    from PIL import Image

    base = tmp_path_factory.mktemp("mixed_set")
    rng = np.random.default_rng(3)
    (base / "img").mkdir()
    rows = []
    for i in range(40):
        Image.fromarray(rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)).save(
            base / "img" / f"{i:03d}.jpg", quality=85)
        rows.append(f"img/{i:03d}.jpg,{i % 4}")
    rng.shuffle(rows)
    (base / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    convert_folder(base / "list.csv", base / "set", workers=1, progress=False, shards=5)
    return base / "set"


class StreamingReader(ShardedReader):
    """A sharded set that says it is streamed and records what the loader tells it."""

    streaming = True

    def __init__(self, path, events: list) -> None:
        super().__init__(path)
        self.events = events

    def prefetch(self, shard_indices) -> None:
        self.events.append(("prefetch", list(shard_indices)))

    def shard_reader(self, shard: int):
        self.events.append(("read", shard))
        return super().shard_reader(shard)


def streamed(path, events: list) -> LMDBDataset:
    dataset = LMDBDataset(path, transform=SMALL)
    dataset.reader = StreamingReader(path, events)
    return dataset


def epoch_indices(loader) -> list[list[int]]:
    batches = []
    for _ in loader:
        batches.append(list(loader.last_batch_indices))
    return batches


def test_a_loader_with_order_shards_reads_one_window_of_shards_at_a_time(mixed_set):
    loader = fastload.DataLoader(str(mixed_set), batch_size=4, shuffle=True, seed=2,
                                 order="shards", shard_window=1, transform=SMALL, device="cpu")
    reader = loader.dataset.reader
    batches = epoch_indices(loader)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(reader)))
    shards = [reader.locate(i)[0] for i in flat]
    assert 1 + int(np.count_nonzero(np.diff(shards))) == reader.num_shards  # one at a time
    assert [i for b in epoch_indices(loader) for i in b] != flat  # the next epoch: anew


def test_local_sets_keep_the_global_order_and_streaming_sets_default_to_shards(mixed_set):
    local = fastload.DataLoader(str(mixed_set), batch_size=4, shuffle=True, seed=2,
                                transform=SMALL, device="cpu")
    remote = fastload.DataLoader(streamed(mixed_set, []), batch_size=4, shuffle=True, seed=2,
                                 device="cpu")
    assert (local.order, remote.order) == ("global", "shards")
    assert type(local.sampler) is EpochSampler and isinstance(remote.sampler, ShardShuffleSampler)
    assert remote.shard_window == 8
    opted_out = fastload.DataLoader(streamed(mixed_set, []), batch_size=4, order="global",
                                    device="cpu")
    assert type(opted_out.sampler) is EpochSampler


def test_the_sets_prefetch_hook_hears_of_each_shard_before_it_is_read(mixed_set):
    events: list = []
    loader = fastload.DataLoader(streamed(mixed_set, events), batch_size=4, shuffle=True,
                                 seed=5, shard_window=2, device="cpu")
    epoch_indices(loader)
    announced: set[int] = set()
    for kind, value in events:
        if kind == "prefetch":
            announced.update(value)
        else:
            assert value in announced
    calls = [v for k, v in events if k == "prefetch"]
    assert 1 < len(calls) <= 3 + 1  # once per window (3 windows of 2 shards), not per batch
    assert len(calls[0]) == 4  # the window and the next: 2 * shard_window


def test_a_local_set_is_not_streaming_and_reads_as_before(mixed_set):
    loader = fastload.DataLoader(str(mixed_set), batch_size=4, order="shards", shard_window=2,
                                 transform=SMALL, device="cpu")
    assert not loader.dataset.reader.streaming  # its prefetch() has nothing to fetch
    assert fastload.DataLoader(str(mixed_set), batch_size=4, transform=SMALL).order == "global"
    assert [i for b in epoch_indices(loader) for i in b] == list(range(40))  # no shuffle


def test_a_loader_state_resumes_the_shard_order_through_torch_save(mixed_set, tmp_path):
    def make():
        return fastload.DataLoader(str(mixed_set), batch_size=4, shuffle=True, seed=3,
                                   order="shards", shard_window=2, transform=SMALL,
                                   device="cpu")

    loader = make()
    it = iter(loader)
    for _ in range(3):
        next(it)
    torch.save(loader.state_dict(), tmp_path / "loader.pt")
    rest = [list(loader.last_batch_indices) for _ in it]
    again = make()
    again.load_state_dict(torch.load(tmp_path / "loader.pt", weights_only=True))
    assert epoch_indices(again) == rest


def test_iter_takes_from_the_global_generators_what_torchs_shuffled_loader_takes(mixed_set):
    from torch.utils.data import DataLoader as TorchDataLoader

    def after(make):
        torch.manual_seed(0)
        it = iter(make())
        next(it)
        return torch.rand(3).tolist()

    dataset = LMDBDataset(mixed_set, transform=SMALL)
    ours = after(lambda: fastload.DataLoader(dataset, batch_size=4, shuffle=True,
                                             order="shards", shard_window=2, device="cpu"))
    assert ours == after(lambda: TorchDataLoader(dataset, batch_size=4, shuffle=True))


def test_order_shards_is_refused_for_a_single_database_and_beside_a_sampler(
        mixed_set, synth_lmdb):
    with pytest.raises(ValueError, match="order='shards' needs a sharded set"):
        fastload.DataLoader(str(synth_lmdb), batch_size=4, order="shards", device="cpu")
    with pytest.raises(ValueError, match="order option is mutually exclusive with sampler"):
        fastload.DataLoader(str(mixed_set), batch_size=4, order="shards", sampler=[0, 1],
                            transform=SMALL, device="cpu")
    with pytest.raises(ValueError, match="order should be 'global', 'shards' or None"):
        fastload.DataLoader(str(mixed_set), batch_size=4, order="blocks", transform=SMALL)
    with pytest.raises(ValueError, match="shard_window should be a positive integer"):
        fastload.DataLoader(str(mixed_set), batch_size=4, shard_window=0, transform=SMALL)


def test_a_set_whose_labels_run_in_class_order_warns_that_windows_hold_few_classes(
        sharded_set, mixed_set):
    with pytest.warns(UserWarning, match="run in class order across its 3 shards"):
        fastload.DataLoader(str(sharded_set), batch_size=4, shuffle=True, order="shards",
                            shard_window=1, transform=SMALL, device="cpu")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fastload.DataLoader(str(mixed_set), batch_size=4, shuffle=True, order="shards",
                            shard_window=1, transform=SMALL, device="cpu")
    assert not [w for w in caught if "class order" in str(w.message)]


def test_the_torch_fallback_reads_the_shard_order_too(mixed_set):
    transform = T.Compose([T.Lambda(lambda image: image), T.Resize((8, 8)), T.ToTensor()])
    with pytest.warns(fastload.FallbackWarning):
        loader = fastload.DataLoader(str(mixed_set), batch_size=4, shuffle=True, seed=3,
                                     order="shards", shard_window=1, transform=transform)
    assert isinstance(loader.sampler, ShardShuffleSampler)
    assert loader.batch_sampler.sampler is loader.sampler
    order = list(loader.sampler)
    assert order != sorted(order)
    labels = [label for _, batch in loader for label in batch.tolist()]
    assert labels == [loader.dataset.targets[i] for i in order]
    loader.set_epoch(1)
    assert loader.sampler.epoch == 1 and list(loader.sampler) != order
