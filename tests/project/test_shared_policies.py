"""One owner per policy: the loop, the bench and the loader share one rule for each of these."""

from __future__ import annotations

import os

import pytest
import torch
from PIL import Image

from fastload.data.convert.ensure import ensure_lmdb
from fastload.data.format.dataset import LMDBDataset
from fastload.loader.presets import eval_resize_size
from fastload.loader.sampling import EpochSampler, mix_seed
from fastload.train.finetune_data import ResumableSampler, SeededDataset, train_val_transforms
from fastload.utils.checks import check_positive_int
from fastload.utils.process import FreshProcessError, call_in_fresh_process


def _resize_size(transform) -> int:
    from torchvision import transforms as T

    (resize,) = [t for t in transform.transforms if isinstance(t, T.Resize)]
    return resize.size


def test_eval_resize_is_timms_floor_of_img_size_over_crop_pct():
    assert eval_resize_size(224) == 256  # the README figures' case
    assert eval_resize_size(384) == 438  # floor(438.857), as timm computes it
    assert eval_resize_size(224, crop_pct=0.9) == 248


def test_finetune_and_bench_eval_transforms_are_the_same_preset():
    from fastload.bench.rows import build_transform

    for size in (224, 384):
        assert _resize_size(train_val_transforms(size)[1]) == _resize_size(build_transform("val", size))


def test_finetune_sampler_shards_the_epoch_order_of_mix_seed_as_distributed_sampler_does():
    """The loop's sampler and the loader's order (EpochSampler, which it wraps) follow one rule:
    torch's DistributedSampler sharding of the permutation drawn from mix_seed(seed, epoch)."""
    from torch.utils.data import DistributedSampler

    ours = ResumableSampler(10, shuffle=True, seed=3, rank=1, world_size=4)
    ours.set_epoch(2)
    torchs = DistributedSampler(range(10), num_replicas=4, rank=1, shuffle=True,
                                seed=mix_seed(3, 2))  # epoch 0: its generator seeds seed + 0
    loaders = EpochSampler(10, shuffle=True, seed=3, num_replicas=4, rank=1)
    loaders.set_epoch(2)
    assert list(ours) == list(torchs) == loaders.indices().tolist()
    unpadded = ResumableSampler(10, shuffle=True, seed=3, rank=1, world_size=4, pad=False)
    unpadded.set_epoch(2)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(mix_seed(3, 2)))
    assert list(unpadded) == order[1::4].tolist()


def test_seeded_dataset_draws_each_sample_from_mix_seed_of_seed_epoch_index():
    dataset = SeededDataset(_RandomItems(), seed=5)
    dataset.epoch = 2
    expected = torch.rand(1, generator=torch.Generator().manual_seed(mix_seed(5, 2, 7)))
    assert torch.equal(dataset[7], expected)


def test_seeded_dataset_leaves_every_generator_as_it_found_it():
    before = torch.random.get_rng_state()
    # torch.manual_seed would seed CUDA's generators too: on a machine without CUDA (or
    # before it starts) it queues the seed, applied when CUDA starts
    cuda_seeds = torch.cuda._lazy_seed_tracker.get_calls()
    SeededDataset(_RandomItems(), seed=5)[7]
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.cuda._lazy_seed_tracker.get_calls() == cuda_seeds


class _RandomItems:
    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.rand(1)

    def __len__(self) -> int:
        return 8


def _tiny_folder(root, per_class: int = 2) -> None:
    for label in ("a", "b"):
        os.makedirs(root / label, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (24, 16), (40 * i, 90, 200)).save(root / label / f"{i}.jpg")


def test_ensure_lmdb_converts_when_missing_or_stale_and_reuses_a_fresh_one(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "src.lmdb"
    _tiny_folder(src)
    assert ensure_lmdb(src, dst) is True
    assert ensure_lmdb(src, dst) is False
    Image.new("RGB", (24, 16)).save(src / "a" / "new.jpg")
    lines: list[str] = []
    assert ensure_lmdb(src, dst, log=lines.append) is True
    assert len(LMDBDataset(dst)) == 5 and "stale" in lines[0]
    assert ensure_lmdb(src, dst, max_side=8) is True  # other options: stale too


def test_positive_int_validator_names_the_argument():
    check_positive_int("limit", None, allow_none=True)
    check_positive_int("limit", 3)
    for bad in (0, -1, True, 2.0, None):
        with pytest.raises(ValueError, match=f"limit should be a positive integer, but got limit={bad!r}"):
            check_positive_int("limit", bad)


def test_fresh_process_runner_returns_the_result_or_raises_the_childs_error():
    assert call_in_fresh_process(os.getpid) != os.getpid()
    with pytest.raises(FreshProcessError, match="ValueError: invalid literal"):
        call_in_fresh_process(int, "x")
