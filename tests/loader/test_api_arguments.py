"""Bad arguments and odd call patterns get torch's behaviour or one clear sentence."""

from __future__ import annotations

import gc
import os
import threading
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import torchvision.transforms as T
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import TensorDataset
from torchvision.datasets import ImageFolder

import fastload
from fastload.loader.sampling import EpochSampler

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture(scope="module")
def val(synth_root):
    return ImageFolder(synth_root / "val", SMALL)


def _indices(loader, it) -> list[int]:
    out = []
    for _ in it:
        out += loader.last_batch_indices
    return out


def test_a_prefetch_factor_of_zero_with_workers_is_refused_at_construction(val):
    # torch's constructor takes it and its first iter() fails an assert (a negative one torch
    # refuses itself)
    with pytest.raises(ValueError, match=r"prefetch_factor should be a positive integer .*"
                                         r"got prefetch_factor=0"):
        fastload.DataLoader(val, batch_size=4, num_workers=2, prefetch_factor=0)


def test_a_transform_set_between_epochs_is_used_from_the_next_iter_as_in_torch(synth_root):
    dataset = ImageFolder(synth_root / "val", SMALL)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert next(iter(loader))[0].shape == (4, 3, 16, 16)
    for size in (8, 12):  # progressive resizing
        dataset.transform = T.Compose([T.RandomResizedCrop(size), T.ToTensor()])
        assert next(iter(loader))[0].shape == (4, 3, size, size)
    dataset.transform.transforms[0].size = (10, 10)  # a parameter changed in place
    assert next(iter(loader))[0].shape == (4, 3, 10, 10)
    dataset.target_transform = lambda label: label + 100
    dataset.transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.PILToTensor()])
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and labels.tolist() == [100] * 4


def test_a_dataset_changed_beyond_what_the_loader_can_follow_is_refused_at_iter(synth_root):
    dataset = ImageFolder(synth_root / "val", SMALL)
    loader = fastload.DataLoader(dataset, batch_size=4)
    dataset.samples = dataset.samples[:5]
    with pytest.raises(ValueError, match=r"the dataset holds 5 samples now, 16 when this "
                                         r"fastload.DataLoader was made"):
        iter(loader)
    dataset = ImageFolder(synth_root / "val", SMALL)
    loader = fastload.DataLoader(dataset, batch_size=4)
    dataset.transform = T.Compose([T.Lambda(lambda image: image.convert("L")), T.ToTensor()])
    with pytest.raises(ValueError, match=r"the dataset changed since this fastload.DataLoader "
                                         r"was made, and DALI cannot run it now: .*make a new "
                                         r"fastload.DataLoader"):
        iter(loader)


def test_a_loader_pickles_and_deep_copies_as_torchs_does_into_one_of_the_same_batches(val):
    import copy
    import pickle

    loader = fastload.DataLoader(val, batch_size=4, num_workers=2)
    first = [(images, labels) for images, labels in loader]  # used: a graph and threads
    for made in (pickle.loads(pickle.dumps(loader)), copy.deepcopy(loader)):
        assert type(made) is fastload.DataLoader and made.num_workers == 2
        again = list(made)
        assert len(again) == len(first)
        for (images, labels), (want_images, want_labels) in zip(again, first, strict=True):
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def test_two_iterators_of_one_loader_both_run_a_full_epoch_as_in_torch(val):
    loader = fastload.DataLoader(val, batch_size=4)
    it1, it2 = iter(loader), iter(loader)
    a = next(it1)
    b = next(it2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert len([a, *it1]) == len([b, *it2]) == len(loader) == 4
    torch_loader = TorchDataLoader(val, batch_size=4)
    t1, t2 = iter(torch_loader), iter(torch_loader)
    assert len(list(t1)) == len(list(t2)) == 4


def test_two_shuffled_iterators_run_two_epochs_each_with_its_own_order(val):
    loader = fastload.DataLoader(val, batch_size=4, shuffle=True, seed=9)
    it1, it2 = iter(loader), iter(loader)
    first, second = _indices(loader, it1), _indices(loader, it2)
    reference = fastload.DataLoader(val, batch_size=4, shuffle=True, seed=9)
    assert [first, second] == [_indices(reference, iter(reference)) for _ in range(2)]
    assert first != second and sorted(first) == sorted(second) == list(range(16))


def test_a_second_iterator_releases_its_own_graph_when_it_ends(val):
    loader = fastload.DataLoader(val, batch_size=8)
    it1 = iter(loader)
    next(it1)
    it2 = iter(loader)
    assert it2.decoder is not it1.decoder
    list(it2)
    assert it2.decoder._closed and not it1.decoder._closed
    assert len(list(it1)) == 1


@pytest.mark.parametrize("field, value, error, words", [
    ("batches_yielded", -3, ValueError, "batches_yielded should be a non-negative integer"),
    ("epoch", 2.5, TypeError, "epoch should be an integer, but got epoch=2.5"),
    ("batches_yielded", "3", TypeError, "batches_yielded should be an integer, but got batches_yielded='3'"),
    ("epoch", True, TypeError, "epoch should be an integer"),
    ("batches_yielded", 5, ValueError, "batches_yielded=5, but an epoch of this loader has 4 batches"),
])
def test_load_state_dict_rejects_bad_fields_with_one_sentence(val, field, value, error, words):
    loader = fastload.DataLoader(val, batch_size=4)
    state = loader.state_dict()
    state[field] = value
    with pytest.raises(error, match=words):
        loader.load_state_dict(state)


def test_load_state_dict_of_the_last_position_yields_an_empty_epoch_then_the_next(val):
    loader = fastload.DataLoader(val, batch_size=4)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = loader.state_dict()
    resumed = fastload.DataLoader(val, batch_size=4)
    resumed.load_state_dict(state)
    assert len(list(resumed)) == 0 and len(list(resumed)) == 4


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), batch_size=st.integers(1, 17), drop_last=st.booleans(),
       world_size=st.integers(1, 4), rank_seed=st.integers(0, 3))
def test_len_matches_torch_for_any_size_batch_and_world(n, batch_size, drop_last, world_size,
                                                        rank_seed):
    from torch.utils.data import BatchSampler, DistributedSampler

    rank = rank_seed % world_size
    data = TensorDataset(torch.arange(n))
    theirs = TorchDataLoader(data, batch_size=batch_size, drop_last=drop_last,
                             sampler=DistributedSampler(data, world_size, rank, shuffle=False,
                                                        drop_last=drop_last))
    ours = EpochSampler(n, shuffle=False, seed=0, num_replicas=world_size, rank=rank,
                        drop_last=drop_last)
    assert len(BatchSampler(ours, batch_size, drop_last)) == len(theirs)
    assert list(ours) == list(theirs.sampler)


def test_fifty_open_close_cycles_leak_no_fds_or_threads(synth_lmdb):
    def cycle():
        loader = fastload.DataLoader(fastload.LMDBDataset(synth_lmdb, transform=SMALL),
                                     batch_size=16)
        next(iter(loader))
        loader.close()

    for _ in range(3):  # process-wide DALI/torch threads start on first use
        cycle()
    gc.collect()
    fds, threads = _open_fds(), threading.active_count()
    for _ in range(50):
        cycle()
    gc.collect()
    now = _open_fds()
    assert len(now) <= len(fds), sorted(Counter(v for k, v in now.items() if k not in fds)
                                        .items(), key=lambda item: -item[1])[:10]
    assert threading.active_count() <= threads


def _open_fds() -> dict[str, str]:
    """This process's open file descriptors -> what each is (its link in /proc/self/fd)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own)
            pass
    return found


@pytest.mark.parametrize("content, words", [
    (b"hello, this is text\n", "is not a torch checkpoint"),
    (b"", "is empty"),
])
def test_export_of_a_file_that_is_not_a_checkpoint_says_so(tmp_path, content, words):
    from fastload.train.checkpoint import load_checkpoint

    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=words):
        load_checkpoint(path)


def test_export_of_a_folder_says_it_is_a_folder(tmp_path, capsys):
    from fastload.tools.cli import main

    assert main(["export", str(tmp_path), "--quantize", "dynamic"]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_finetune_table_says_why_val_top1_is_missing(capsys):
    from fastload.tools.finetune import _print_epochs

    epoch = SimpleNamespace(epoch=0, epoch_time_s=1.0, images_per_s=2.0, data_stall_share=0.1,
                            peak_mem_mb=3.0, train_loss=0.5, val_top1=None)
    _print_epochs(SimpleNamespace(epochs=[epoch], trainable_params=1, total_params=2, steps=1,
                                  skipped_steps=0))
    assert "n/a (no val/ folder in DATA)" in capsys.readouterr().out
