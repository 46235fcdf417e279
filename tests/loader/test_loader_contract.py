"""fastload.DataLoader side by side with torch's: arguments, len, order, samplers, batches."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    SequentialSampler,
    Subset,
    WeightedRandomSampler,
)
from torch.utils.data import DataLoader as TorchDataLoader
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture(scope="module")
def train(synth_root):
    return ImageFolder(synth_root / "train", SMALL)


def epoch_indices(loader) -> list[list[int]]:
    """Run one epoch of a fastload loader; the dataset indices of each batch."""
    batches = []
    for images, labels in loader:
        assert images.shape[0] == labels.shape[0] == len(loader.last_batch_indices)
        batches.append(list(loader.last_batch_indices))
    return batches


@pytest.mark.parametrize("kwargs", [
    dict(num_workers=-1),
    dict(timeout=-1),
    dict(prefetch_factor=2),
    dict(num_workers=1, prefetch_factor=-1),
    dict(persistent_workers=True),
    dict(shuffle=True, sampler=[0, 1]),
    dict(batch_sampler=[[0]], batch_size=2),
    dict(batch_sampler=[[0]], shuffle=True),
    dict(batch_sampler=[[0]], sampler=[0]),
    dict(batch_sampler=[[0]], drop_last=True),
    dict(batch_size=None, drop_last=True),
    dict(batch_size=0),
    dict(batch_size=2, drop_last="yes"),
    dict(multiprocessing_context="spawn"),
])
def test_invalid_arguments_raise_the_same_valueerror_as_torch(train, kwargs):
    with pytest.raises(ValueError) as theirs:
        TorchDataLoader(train, **kwargs)
    with pytest.raises(ValueError) as ours:
        fastload.DataLoader(train, **kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kwargs, words", [
    (dict(on_error="ignore"), "on_error"),
    (dict(device="tpu"), "device"),
    (dict(seed=1, generator=torch.Generator()), "generator"),
    (dict(transform=SMALL), "transform="),
    (dict(seed=1 << 70), r"seed should be in \[-2\*\*63, 2\*\*64\)"),
    (dict(hw_decoder_load="0.5"), "hw_decoder_load should be a number in \\[0, 1\\], but got "
                                  "hw_decoder_load='0.5'"),
    (dict(hw_decoder_load=None), "hw_decoder_load=None"),
])
def test_fastload_arguments_are_validated_with_a_message_naming_them(train, kwargs, words):
    with pytest.raises(ValueError, match=words):
        fastload.DataLoader(train, **kwargs)


def test_settings_are_frozen_after_init_like_torch(train):
    theirs, ours = TorchDataLoader(train), fastload.DataLoader(train)
    for attr in ("batch_size", "sampler", "batch_sampler", "drop_last", "dataset",
                 "persistent_workers"):
        with pytest.raises(ValueError) as t:
            setattr(theirs, attr, None)
        with pytest.raises(ValueError) as o:
            setattr(ours, attr, None)
        assert str(o.value) == str(t.value)


def test_attributes_mirror_torch(train):
    gen = torch.Generator()
    ours = fastload.DataLoader(train, 5, shuffle=True, num_workers=2, drop_last=True,
                               generator=gen, prefetch_factor=3)
    assert ours.fallback_reason is None
    assert (ours.dataset, ours.batch_size, ours.drop_last, ours.num_workers) == (train, 5, True, 2)
    assert ours.generator is gen and ours.prefetch_factor == 3
    assert isinstance(ours.batch_sampler, BatchSampler) and ours.batch_sampler.sampler is ours.sampler
    assert ours.device == torch.device("cuda" if torch.cuda.is_available() else "cpu",
                                       0 if torch.cuda.is_available() else None)


@pytest.mark.parametrize("n", [1, 7, 16, 48])
@pytest.mark.parametrize("batch_size", [1, 5, 16, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_torch_for_every_size_batch_and_drop_last(train, n, batch_size, drop_last):
    subset = Subset(train, list(range(n)))
    theirs = TorchDataLoader(subset, batch_size=batch_size, drop_last=drop_last)
    ours = fastload.DataLoader(subset, batch_size=batch_size, drop_last=drop_last, seed=0)
    assert ours.fallback_reason is None
    assert len(ours) == len(theirs)
    weighted = WeightedRandomSampler([1.0] * n, num_samples=30)
    assert len(fastload.DataLoader(subset, batch_size, sampler=weighted, drop_last=drop_last)) \
        == len(TorchDataLoader(subset, batch_size, sampler=weighted, drop_last=drop_last))


@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_epoch_has_torchs_order_labels_and_last_partial_batch(train, drop_last):
    theirs = TorchDataLoader(train, batch_size=10, drop_last=drop_last)
    ours = fastload.DataLoader(train, batch_size=10, drop_last=drop_last)
    torch_batches = list(theirs)
    ours_batches, indices = [], []
    for images, labels in ours:
        ours_batches.append((images, labels))
        indices.append(ours.last_batch_indices)
    assert indices == list(BatchSampler(SequentialSampler(train), 10, drop_last))
    assert [len(i) for i in indices] == ([10] * 4 if drop_last else [10] * 4 + [8])
    for (images, labels), (t_images, t_labels) in zip(ours_batches, torch_batches, strict=True):
        assert labels.dtype == torch.int64 and torch.equal(labels, t_labels)
        assert images.shape == t_images.shape and images.dtype == t_images.dtype
        assert (images - t_images).abs().mean() < 0.02


def _weighted(seed):
    gen = torch.Generator().manual_seed(seed)
    return WeightedRandomSampler(torch.linspace(0.1, 1.0, 48), num_samples=40, generator=gen)


@pytest.mark.parametrize("make_sampler", [
    lambda: [5, 3, 3, 47, 0, 12, 9, 9, 1],
    lambda: _weighted(4),
    lambda: DistributedSampler(range(48), num_replicas=3, rank=1, shuffle=True, seed=5),
], ids=["list", "weighted", "distributed"])
def test_sampler_order_matches_torch_over_two_epochs(train, make_sampler):
    ours_sampler, their_sampler = make_sampler(), make_sampler()
    ours = fastload.DataLoader(train, batch_size=4, sampler=ours_sampler)
    theirs = TorchDataLoader(train, batch_size=4, sampler=their_sampler)
    for epoch in range(2):
        ours.set_epoch(epoch)  # forwarded to a sampler that has set_epoch
        if hasattr(their_sampler, "set_epoch"):
            their_sampler.set_epoch(epoch)
        expected = list(theirs.batch_sampler)
        assert epoch_indices(ours) == expected


def test_batch_sampler_with_uneven_batches_is_honoured(train):
    batches = [[0, 1, 2], [47], [5, 5, 6, 7, 8, 9, 10], [20, 3]]
    ours = fastload.DataLoader(train, batch_sampler=batches)
    theirs = TorchDataLoader(train, batch_sampler=batches)
    assert len(ours) == len(theirs) == 4
    assert epoch_indices(ours) == batches
    assert [labels.tolist() for _, labels in ours] == [labels.tolist() for _, labels in theirs]


def test_shuffle_is_a_permutation_reproducible_from_generator_and_new_each_epoch(train):
    a = fastload.DataLoader(train, 16, shuffle=True, generator=torch.Generator().manual_seed(0))
    b = fastload.DataLoader(train, 16, shuffle=True, generator=torch.Generator().manual_seed(0))
    theirs = TorchDataLoader(train, 16, shuffle=True)
    epochs_a = [sum(epoch_indices(a), []) for _ in range(2)]
    epochs_b = [sum(epoch_indices(b), []) for _ in range(2)]
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1]
    for order in epochs_a:
        assert sorted(order) == list(range(48))
    torch_labels = Counter(torch.cat([labels for _, labels in theirs]).tolist())
    assert Counter(torch.cat([labels for _, labels in a]).tolist()) == torch_labels


def test_seed_fixes_the_order_without_touching_the_global_rng(train):
    state = torch.random.get_rng_state()
    first = fastload.DataLoader(train, 16, shuffle=True, seed=11)
    order = sum(epoch_indices(first), [])
    assert torch.equal(torch.random.get_rng_state(), state)
    again = fastload.DataLoader(train, 16, shuffle=True, seed=11)
    assert sum(epoch_indices(again), []) == order
    assert sum(epoch_indices(fastload.DataLoader(train, 16, shuffle=True, seed=12)), []) != order


def test_set_epoch_selects_that_epochs_order(train):
    walked = fastload.DataLoader(train, 24, shuffle=True, seed=3)
    orders = [epoch_indices(walked) for _ in range(3)]
    jumped = fastload.DataLoader(train, 24, shuffle=True, seed=3)
    jumped.set_epoch(2)
    assert epoch_indices(jumped) == orders[2]
    assert epoch_indices(jumped) != orders[2]  # and the next iter() is epoch 3


def test_cpu_device_gives_cpu_tensors(train):
    images, labels = next(iter(fastload.DataLoader(train, 4, device="cpu", pin_memory=True)))
    assert images.device.type == labels.device.type == "cpu"
    assert images.shape == (4, 3, 16, 16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_clear_error(train):
    with pytest.raises(ValueError, match="device='cuda' needs CUDA"):
        fastload.DataLoader(train, device="cuda")
