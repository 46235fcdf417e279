"""timm's auto-augmentations and erasing in threads: the seeded-global draws, exactly."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from timm.data.auto_augment import (
    augment_and_mix_transform,
    auto_augment_transform,
    rand_augment_transform,
)
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import MaybeToTensor

from fastload.pipelines.replays.thread_rng import python_rng
from fastload.pipelines.suffix.replay import replay
from fastload.pipelines.suffix.run import Suffix

HPARAMS = {"translate_const": 10, "img_mean": (124, 116, 104)}
IMAGES = torch.randint(0, 256, (6, 3, 28, 36), dtype=torch.uint8,
                       generator=torch.Generator().manual_seed(8))
NORMALIZE = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def _augmentations():
    return [rand_augment_transform("rand-m9-mstd0.5", HPARAMS),
            rand_augment_transform("rand-m9-mstd0.5-inc1", HPARAMS),
            rand_augment_transform("rand-m7-n3-p0.7-mstd101", HPARAMS),
            auto_augment_transform("original", HPARAMS),
            auto_augment_transform("v0r", HPARAMS),
            augment_and_mix_transform("augmix-m5-w4-d2", HPARAMS)]


def _suffix(augmentation, erasing=None):
    steps = [augmentation, MaybeToTensor(), NORMALIZE]
    return Suffix(steps + ([erasing] if erasing is not None else []), "pil")


def _posterize_zero_bits(err: Exception) -> bool:
    # timm's PosterizeIncreasing at its top level asks Pillow for 0 bits, which Pillow >= 12
    # refuses: torch's own loader fails alike on that sample
    return isinstance(err, ValueError) and "bits must be" in str(err)


@pytest.mark.parametrize("augmentation", _augmentations(), ids=lambda t: repr(t)[:40])
def test_threaded_timm_augmentation_gives_the_seeded_global_values(augmentation):
    suffix = _suffix(augmentation)
    assert suffix.threaded
    for seed in range(12):
        try:
            expected, _ = suffix._sample(IMAGES[seed % 6], seed, None, replayed=False)
        except ValueError as err:
            assert _posterize_zero_bits(err)
            continue
        got, _ = suffix._sample(IMAGES[seed % 6], seed, None, replayed=True)
        assert torch.equal(got, expected)


@pytest.mark.parametrize("mode, count", [("pixel", 1), ("rand", 1), ("const", 3)])
def test_timm_random_erasing_replay_gives_the_seeded_global_values(mode, count):
    erasing = RandomErasing(0.9, mode=mode, max_count=count, device="cpu")
    suffix = _suffix(rand_augment_transform("rand-m9-mstd0.5", HPARAMS), erasing)
    assert suffix.threaded
    for seed in range(12):
        expected, _ = suffix._sample(IMAGES[seed % 6], seed, None, replayed=False)
        got, _ = suffix._sample(IMAGES[seed % 6], seed, None, replayed=True)
        assert torch.equal(got, expected)


def test_samples_in_parallel_threads_match_one_at_a_time():
    suffix = _suffix(rand_augment_transform("rand-m9-mstd0.5", HPARAMS),
                     RandomErasing(0.5, mode="pixel", device="cpu"))
    seeds = list(range(100, 148))
    images = IMAGES[torch.arange(48) % 6]
    alone, _ = suffix.run(images, seeds)
    with ThreadPoolExecutor(4) as pool:
        threaded, _ = suffix.run(images, seeds, pool)
    assert all(torch.equal(a, b) for a, b in zip(alone, threaded, strict=True))


def test_python_rng_leaves_the_global_generators_alone():
    augmentation = rand_augment_transform("rand-m9-mstd0.5", HPARAMS)
    step = replay(augmentation)
    random.seed(1)
    np.random.seed(1)
    before = random.random(), np.random.rand()
    random.seed(1)
    np.random.seed(1)
    with python_rng(5):
        step(T.ToPILImage()(IMAGES[0]), torch.Generator())
    assert (random.random(), np.random.rand()) == before


def test_timm_outside_python_rng_still_draws_from_the_global_generators():
    augmentation = rand_augment_transform("rand-m9-mstd0.5", HPARAMS)
    replay(augmentation)  # makes its thread-private twin
    image = T.ToPILImage()(IMAGES[1])
    outs = []
    for _ in range(2):
        random.seed(3)
        np.random.seed(3)
        outs.append(np.asarray(augmentation(image)))
    assert np.array_equal(outs[0], outs[1])


def test_another_thread_sees_timms_own_module_while_a_loader_runs_timms_augmentation(synth_root):
    import gc

    import timm.data.auto_augment as module
    from torchvision.datasets import ImageFolder

    import fastload

    augmentation = rand_augment_transform("rand-m9-mstd0.5", HPARAMS)
    image = T.ToPILImage()(IMAGES[1])

    def outside():  # someone else's timm call: timm's own module, the global generators
        random.seed(3)
        np.random.seed(3)
        return module.random is random and module.np is np, np.asarray(augmentation(image))

    reference = outside()[1]
    dataset = ImageFolder(synth_root / "train",
                          T.Compose([T.RandomResizedCrop(32), augmentation, MaybeToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=8, seed=1, num_workers=2)
    assert "[replayed draws]" in str(loader.plan)  # timm's augmentation still runs in threads
    seen = []
    with ThreadPoolExecutor(1) as other:
        for _ in loader:
            seen.append(other.submit(outside).result())
    assert len(seen) == 6
    assert all(untouched and np.array_equal(out, reference) for untouched, out in seen)
    del loader
    gc.collect()
    assert module.random is random and module.np is np


def test_an_unchecked_timm_release_runs_on_the_seeded_generators_with_a_warning(monkeypatch):
    import timm

    from fastload.pipelines.replays import timm_aug as augment_timm
    from fastload.pipelines.seams import torch_private as torch_seams

    monkeypatch.setattr(timm, "__version__", "9.1.0")
    augment_timm._private_module.cache_clear()
    torch_seams.timm_auto_augment.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="timm 9.1.0 is installed"):
            suffix = _suffix(rand_augment_transform("rand-m9-mstd0.5", HPARAMS))
        assert not suffix.threaded and "seeded global RNG" in suffix.describe()
    finally:
        augment_timm._private_module.cache_clear()
        torch_seams.timm_auto_augment.cache_clear()
