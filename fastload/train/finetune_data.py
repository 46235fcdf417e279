"""Resumable sample order and reproducible augmentation for the fine-tuning loop.

:class:`ResumableSampler` is a ``torch.utils.data.Sampler`` (so both ``torch`` and
``fastload`` DataLoaders take it unchanged): the fastload loader's own epoch order
(:class:`fastload.loader.sampling.EpochSampler`: a permutation drawn from
``mix_seed(seed, epoch)``, sharded over ranks like ``DistributedSampler``, padded by wrapping
round to the start so every rank gets the same count), that can start part-way through an
epoch after a resume.

:class:`SeededDataset` makes each sample's random augmentation a pure function of
``mix_seed(seed, epoch, index)``, whatever the worker count or resume point, by running the
wrapped dataset's ``__getitem__`` under a forked torch RNG seeded for that sample.

Also the loop's transforms, datasets and loaders, shared with ``fastload export``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, Sampler

from fastload.loader.sampling import EpochSampler, mix_seed

__all__ = [
    "ResumableSampler", "SeededDataset", "make_loader", "open_dataset", "train_val_transforms",
]


class ResumableSampler(Sampler[int]):
    """This rank's indices of one epoch: :class:`EpochSampler`'s order (shuffled from
    ``mix_seed(seed, epoch)``, or in order), restartable part-way through.

    ``pad=True`` (training) wraps the order round to its start until it divides by
    ``world_size``, as ``DistributedSampler(drop_last=False)`` does; ``pad=False``
    (evaluation) gives rank ``r`` exactly ``order[r::world_size]``, so no sample counts twice.
    ``set_start(k)`` skips the first ``k`` indices of the current epoch's shard once resumed.
    """

    def __init__(self, size: int, *, shuffle: bool, seed: int = 0, rank: int = 0,
                 world_size: int = 1, pad: bool = True) -> None:
        if size < 1:
            raise ValueError(f"the dataset is empty (size={size}); nothing to train on")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank should be in [0, {world_size}), but got rank={rank}")
        self.size, self.shuffle, self.seed = size, shuffle, seed
        self.rank, self.world_size, self.pad = rank, world_size, pad
        self.epoch = 0
        self.start = 0
        # pad=False: the whole unpadded order, sharded below without padding
        self._order = EpochSampler(size, shuffle=shuffle, seed=seed,
                                   num_replicas=world_size if pad else 1, rank=rank if pad else 0)

    @property
    def shard_size(self) -> int:
        """Indices of a full epoch on this rank."""
        if self.pad:
            return len(self._order)
        return len(range(self.rank, self.size, self.world_size))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.start = 0

    def set_start(self, start: int) -> None:
        if not 0 <= start <= self.shard_size:
            raise ValueError(f"start should be in [0, {self.shard_size}], but got start={start}")
        self.start = start

    def indices(self) -> list[int]:
        """The full shard of the current epoch."""
        self._order.set_epoch(self.epoch)
        order = self._order.indices()
        if not self.pad:
            order = order[self.rank :: self.world_size]
        return order.tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices()[self.start :])

    def __len__(self) -> int:
        return self.shard_size - self.start

    def state_dict(self) -> dict[str, int]:
        return {"sampler_epoch": self.epoch, "sampler_start": self.start, "seed": self.seed}


class SeededDataset(Dataset):
    """Wraps a map-style dataset so sample ``i`` of epoch ``e`` draws its random transform
    from torch's CPU generator seeded with ``mix_seed(seed, e, i)``; the generator is
    restored afterwards, and no other device's is touched (``torch.manual_seed`` would seed
    every CUDA generator, or queue that seed for CUDA's start).

    Set ``epoch`` before each ``iter(loader)``; torch re-creates (non-persistent) workers
    per epoch, so they see the new value.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(mix_seed(self.seed, self.epoch,
                                                                int(index)))
            return self.dataset[index]


def train_val_transforms(img_size: int):
    """The loop's torchvision transforms, :mod:`fastload.loader.presets`' ImageNet presets:
    RandomResizedCrop + flip for training; Resize to ``floor(img_size / 0.875)`` + CenterCrop
    for validation; ImageNet normalisation for both."""
    from fastload.loader.presets import eval_transform, train_transform

    return train_transform(img_size), eval_transform(img_size)


def open_dataset(fmt: str, path: pathlib.Path, transform) -> Dataset:
    """``fmt`` "lmdb": a :class:`fastload.LMDBDataset`; "folder": torchvision's ImageFolder."""
    if fmt == "lmdb":
        from fastload.data.format.dataset import LMDBDataset

        return LMDBDataset(path, transform=transform)
    from torchvision.datasets import ImageFolder

    return ImageFolder(str(path), transform=transform)


def make_loader(kind: str, dataset, batch_size: int, sampler, workers: int,
                device: torch.device, seed: int = 0):
    """torch or fastload DataLoader with the same arguments; ``sampler=None`` means
    fastload's own shuffled order (``seed``)."""
    kwargs = dict(batch_size=batch_size, num_workers=workers,
                  pin_memory=device.type == "cuda", drop_last=False)
    if kind == "torch":
        return torch.utils.data.DataLoader(dataset, sampler=sampler, **kwargs)
    from fastload.loader.dataloader import DataLoader

    if sampler is None:
        return DataLoader(dataset, shuffle=True, seed=seed, device=device, **kwargs)
    return DataLoader(dataset, sampler=sampler, device=device, **kwargs)
