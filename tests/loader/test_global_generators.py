"""The global generators belong to the caller: torch's, ``random``'s and NumPy's streams are
what they are with torch's DataLoader, whatever fastload's threads do meanwhile."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader as TorchDataLoader
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture(scope="module")
def train(synth_root):
    return ImageFolder(synth_root / "train", SMALL)


def _seed_all(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _draws() -> tuple:
    """The next values of the three global generators."""
    return torch.rand(3).tolist(), random.random(), np.random.rand(3).tolist()


def _loader(cls, dataset, shuffle, how, num_workers, **kwargs):
    """``cls`` (fastload's or torch's loader) over ``dataset``; ``how``: "global" (no
    generator), "generator" or "seed" (fastload's seed=; torch gets the generator it stands
    for)."""
    if how == "generator":
        kwargs["generator"] = torch.Generator().manual_seed(5)
    elif how == "seed":
        if cls is fastload.DataLoader:
            kwargs["seed"] = 5
        else:
            kwargs["generator"] = torch.Generator().manual_seed(5)
    return cls(dataset, batch_size=8, shuffle=shuffle, num_workers=num_workers, **kwargs)


def _after_iter(cls, dataset, shuffle, how, num_workers, whole_epoch, **kwargs):
    """The global generators' next values after the loader is made, after ``iter()`` and
    after a whole epoch (or one ``next()``), from the same seeds; with ``generator=``, that
    generator's next value too."""
    _seed_all()
    loader = _loader(cls, dataset, shuffle, how, num_workers, **kwargs)
    made = _draws()  # e.g. the model's init, between the loader and its first epoch
    it = iter(loader)
    first = _draws()
    if whole_epoch:
        for _ in it:
            pass
    else:
        next(it)
    second = _draws()
    own = loader.generator
    return made, first, second, None if own is None or how == "seed" else torch.rand(1, generator=own)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("how", ["global", "generator", "seed"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_draws_after_iter_and_after_an_epoch_are_those_after_torchs_loader(
        train, shuffle, how, num_workers):
    for whole_epoch in (False, True):
        theirs = _after_iter(TorchDataLoader, train, shuffle, how, num_workers, whole_epoch)
        ours = _after_iter(fastload.DataLoader, train, shuffle, how, num_workers, whole_epoch)
        assert ours == theirs


def test_persistent_workers_draw_their_base_seed_once_as_torchs_do(train):
    def run(cls):
        _seed_all()
        loader = cls(train, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True)
        per_epoch = []
        for _ in range(3):
            for _ in loader:
                pass
            per_epoch.append(_draws())
        return per_epoch

    assert run(fastload.DataLoader) == run(TorchDataLoader)


def test_a_samplers_own_draws_come_as_under_torch(train):
    class Drawing(torch.utils.data.Sampler):
        """Draws from the global generators when iterated, as a user's sampler may."""

        def __iter__(self):
            order = torch.randperm(48).tolist()
            random.shuffle(order)
            return iter(order)

        def __len__(self):
            return 48

    for num_workers in (0, 2):
        theirs = _after_iter(TorchDataLoader, train, False, "global", num_workers, False,
                             sampler=Drawing())
        ours = _after_iter(fastload.DataLoader, train, False, "global", num_workers, False,
                           sampler=Drawing())
        assert ours == theirs


def test_the_shuffled_order_still_follows_the_global_seed(train):
    def order(seed):
        _seed_all(seed)
        loader = fastload.DataLoader(train, batch_size=48, shuffle=True)
        return [next(iter(loader)) and list(loader.last_batch_indices) for _ in range(2)]

    assert order(0) == order(0)
    assert order(0) != order(1)
    assert order(0)[0] != order(0)[1]  # each epoch a new permutation


class DrawsFromAllThree:
    """A transform fastload cannot replay: it draws from the three global generators (and
    takes a while, so that the caller's step runs meanwhile)."""

    def __call__(self, img):
        from torchvision.transforms.functional import pil_to_tensor

        shift = torch.rand(1) + random.random() + float(np.random.rand())
        time.sleep(0.002)
        return pil_to_tensor(img).float() + shift


def _step() -> list:
    """A training step that draws from the three generators, over a few milliseconds."""
    out = []
    for _ in range(4):
        out.append(_draws())
        time.sleep(0.002)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [1, 2])
def test_the_steps_draws_are_unchanged_while_an_unreplayed_suffix_runs(synth_root, num_workers):
    dataset = ImageFolder(synth_root / "train", T.Compose([T.Resize(16), T.CenterCrop(16),
                                                           DrawsFromAllThree()]))

    def loader():
        return fastload.DataLoader(dataset, batch_size=8, seed=3, num_workers=num_workers)

    assert "seeded global RNG" in str(loader().plan)
    _seed_all()
    during, batches = [], []
    for images, _ in loader():
        during.append(_step())
        batches.append(images)
    _seed_all()
    alone = [images for images, _ in loader()]
    after = [_step() for _ in alone]
    assert during == after
    assert all(torch.equal(a, b) for a, b in zip(batches, alone, strict=True))


def test_a_collate_drawing_from_the_global_generators_draws_as_under_torchs_loader(train):
    def run(cls):
        drawn = []

        def collate(pairs):
            drawn.append(_draws())  # e.g. a MixUp/CutMix collate
            return torch.stack([image for image, _ in pairs]), [label for _, label in pairs]

        _seed_all()
        for _ in cls(train, batch_size=8, shuffle=True, collate_fn=collate):
            drawn.append(_step())
        return drawn

    assert run(fastload.DataLoader) == run(TorchDataLoader)


def _augmented(name):
    if name == "torchvision":
        return T.Compose([T.RandomResizedCrop(24), T.RandAugment(), T.TrivialAugmentWide(),
                          T.ToTensor(), T.RandomErasing(0.5)])
    from timm.data.auto_augment import rand_augment_transform

    return T.Compose([T.RandomResizedCrop(24), rand_augment_transform("rand-m9-mstd0.5", {}),
                      T.ToTensor()])


@pytest.mark.parametrize("name", ["torchvision", "timm"])
def test_an_epoch_of_replayed_augmentation_leaves_the_global_generators_as_torchs_workers_do(
        synth_root, name):
    # torch's workers draw the augmentation from generators of their own; so do fastload's
    # threads: the caller's streams see only what iter() takes
    dataset = ImageFolder(synth_root / "train", _augmented(name))
    theirs = _after_iter(TorchDataLoader, dataset, True, "global", 2, True)
    ours = _after_iter(fastload.DataLoader, dataset, True, "global", 2, True)
    assert "[replayed draws]" in str(fastload.DataLoader(dataset, batch_size=8).plan)
    assert ours == theirs
