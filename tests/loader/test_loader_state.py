"""Resume mid-epoch (in a new process), reproducible augmentation, and iterator lifetimes."""

from __future__ import annotations

import gc
import pathlib
import subprocess
import sys
import weakref

import psutil
import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import DistributedSampler, WeightedRandomSampler
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
TRAIN = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "loader_resume.py"


@pytest.fixture(scope="module")
def train(synth_root):
    return ImageFolder(synth_root / "train", SMALL)


def run(loader, batches=None, it=None):
    """Indices and images of the next ``batches`` batches (all of the epoch when None) of
    iterator ``it``, or of a new epoch of ``loader``."""
    indices, images = [], []
    for k, (batch, _labels) in enumerate(loader if it is None else it):
        indices.append(list(loader.last_batch_indices))
        images.append(batch)
        if batches is not None and k + 1 == batches:
            break
    return indices, images


@pytest.mark.slow
def test_resume_in_a_new_process_yields_the_same_remaining_batches_and_crops(synth_root,
                                                                             tmp_path):
    folder = synth_root / "train"
    loader = fastload.DataLoader(ImageFolder(folder, TRAIN), batch_size=5, shuffle=True, seed=7)
    run(loader)  # epoch 0
    it = iter(loader)  # epoch 1: 3 of its 10 batches, then save
    for _ in range(3):
        next(it)
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    del it, loader
    # The uninterrupted run: a fresh loader walks epochs 0-2 without stopping.
    reference = fastload.DataLoader(ImageFolder(folder, TRAIN), batch_size=5, shuffle=True,
                                    seed=7)
    run(reference)
    first = run(reference)
    second = run(reference)
    expected_indices = first[0][3:] + second[0]
    expected_images = first[1][3:] + second[1]
    subprocess.run([sys.executable, str(SCRIPT), str(folder), str(tmp_path / "state.pt"),
                    str(tmp_path / "out.pt")], check=True, timeout=120)
    resumed = torch.load(tmp_path / "out.pt", weights_only=True)
    assert [t.tolist() for t in resumed["indices"]] == expected_indices
    assert len(resumed["images"]) == len(expected_images) == 17
    for got, want in zip(resumed["images"], expected_images, strict=True):
        assert torch.equal(got, want)


def test_augmentation_is_a_function_of_seed_epoch_and_batch(synth_root):
    def images(seed):
        loader = fastload.DataLoader(ImageFolder(synth_root / "val", TRAIN), batch_size=8,
                                     seed=seed)
        return run(loader)[1] + run(loader)[1]

    a, b, c = images(1), images(1), images(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], a[2])  # same samples, next epoch: new crops
    assert not torch.equal(a[0], c[0])


def test_a_users_sampler_resumes_from_its_stored_remaining_indices(train):
    def sampler(seed):
        gen = torch.Generator().manual_seed(seed)
        return WeightedRandomSampler(torch.ones(48), num_samples=30, generator=gen)

    loader = fastload.DataLoader(train, batch_size=4, sampler=sampler(0))
    it = iter(loader)
    done, _ = run(loader, batches=2, it=it)
    state = loader.state_dict()
    rest, _ = run(loader, it=it)
    assert len(done) + len(rest) == 8
    resumed = fastload.DataLoader(train, batch_size=4, sampler=sampler(99))
    resumed.load_state_dict(state)
    assert run(resumed)[0] == rest
    assert state["remaining"]["indices"].tolist() == sum(rest, [])


def test_a_distributed_sampler_state_resumes_its_own_rank_and_is_refused_by_another(train):
    def loader(rank):
        sampler = DistributedSampler(train, num_replicas=2, rank=rank, shuffle=True, seed=3)
        return fastload.DataLoader(train, batch_size=4, sampler=sampler)

    saving = loader(1)
    it = iter(saving)
    run(saving, batches=2, it=it)
    state = saving.state_dict()
    rest, _ = run(saving, it=it)
    assert state["rank"] == 1
    with pytest.raises(ValueError, match="saved by rank 1, but this loader is rank 0"):
        loader(0).load_state_dict(state)
    resumed = loader(1)
    resumed.load_state_dict(state)
    assert run(resumed)[0] == rest


def test_state_between_epochs_resumes_at_the_next_epoch(train):
    loader = fastload.DataLoader(train, batch_size=16, shuffle=True, seed=5)
    run(loader)
    state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (1, 0)
    expected = run(loader)[0]
    other = fastload.DataLoader(train, batch_size=16, shuffle=True, seed=123)
    other.load_state_dict(state)
    assert run(other)[0] == expected


def test_load_state_dict_rejects_a_state_for_another_dataset(train, synth_root):
    state = fastload.DataLoader(train, batch_size=4).state_dict()
    val = fastload.DataLoader(ImageFolder(synth_root / "val", SMALL), batch_size=4)
    with pytest.raises(ValueError, match="48 samples"):
        val.load_state_dict(state)
    with pytest.raises(ValueError, match="state_dict"):
        val.load_state_dict({"epoch": 3})
    with pytest.raises(ValueError, match="batch_size=4.*batch_size=8"):
        fastload.DataLoader(train, batch_size=8).load_state_dict(state)


def test_two_loaders_iterate_at_once(train):
    a = fastload.DataLoader(train, batch_size=6)
    b = fastload.DataLoader(train, batch_size=6, shuffle=True, seed=1)
    pairs = []
    for (xa, _), (xb, _) in zip(a, b, strict=True):
        assert xa.shape == xb.shape == (6, 3, 16, 16)
        pairs.append((list(a.last_batch_indices), list(b.last_batch_indices)))
    assert [p[0] for p in pairs] == [list(range(k, k + 6)) for k in range(0, 48, 6)]
    assert sorted(sum((p[1] for p in pairs), [])) == list(range(48))


def test_breaking_out_early_leaves_the_next_epoch_complete(train):
    loader = fastload.DataLoader(train, batch_size=4, shuffle=True, seed=2)
    run(loader, batches=1)
    full = run(loader)[0]
    assert len(full) == 12 and sorted(sum(full, [])) == list(range(48))


def test_a_new_iter_beside_an_unfinished_one_iterates_both_as_torch_does(train):
    loader = fastload.DataLoader(train, batch_size=4)
    old = iter(loader)
    first = next(old)
    assert len(run(loader)[0]) == 12
    assert len([first, *old]) == 12  # the older iterator runs on to the end of its epoch
    finished = iter(loader)
    assert len(list(finished)) == 12
    with pytest.raises(StopIteration):  # an exhausted iterator stays exhausted, as in torch
        next(finished)


def test_deleting_loaders_mid_epoch_leaks_no_threads_or_decoders(train):
    process = psutil.Process()

    def cycle():
        loader = fastload.DataLoader(train, batch_size=4, num_workers=2)
        it = iter(loader)
        next(it)
        decoder = weakref.ref(loader._decoder)
        del loader, it
        gc.collect()
        return decoder

    cycle()  # first use may start process-wide DALI/torch threads
    baseline = process.num_threads()
    decoders = [cycle() for _ in range(3)]
    gc.collect()
    assert all(ref() is None for ref in decoders)
    assert process.num_threads() <= baseline


def test_close_releases_the_graph_and_a_later_epoch_rebuilds_it(train):
    loader = fastload.DataLoader(train, batch_size=8)
    it = iter(loader)
    next(it)
    decoder = weakref.ref(loader._decoder)
    loader.close()
    loader.close()
    gc.collect()
    assert decoder() is None
    with pytest.raises(RuntimeError, match=r"closed by loader\.close\(\)"):
        next(it)
    assert len(run(loader)[0]) == 6


def test_closing_an_iterator_ends_its_epoch_and_leaves_the_other_iterator_running(train):
    loader = fastload.DataLoader(train, batch_size=8)
    first = iter(loader)
    next(first)
    second = iter(loader)  # beside an unfinished one: a graph of its own
    next(second)
    second.close()
    second.close()
    with pytest.raises(RuntimeError, match=r"closed by its close\(\)"):
        next(second)
    assert len(run(loader, it=first)[0]) == 5


def test_a_forked_child_that_collects_garbage_loaders_does_not_hang(train):
    """torch DataLoader workers are forked; a loader that is garbage in a reference cycle
    is finalized in the child, where destroying its DALI pipeline would wait forever."""
    import os
    import time

    for workers in (0, 2, 2):
        loader = fastload.DataLoader(train, batch_size=4, num_workers=workers)
        it = iter(loader)
        next(it)  # batches in flight
        cycle = [loader, it]
        cycle.append(cycle)
    del loader, it, cycle
    pid = os.fork()
    if pid == 0:  # the child: what a torch worker's first garbage collection does
        gc.collect()
        os._exit(0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung finalizing an inherited DataLoader")
    assert os.waitstatus_to_exitcode(status) == 0
    gc.collect()
