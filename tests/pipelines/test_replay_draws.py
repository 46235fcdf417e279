"""Replays make exactly the draws of torchvision's transforms, from their own generator."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from torchvision import tv_tensors
from torchvision.transforms import v2

from fastload.pipelines.replays import v1 as augment_v1
from fastload.pipelines.replays import v2 as augment_v2
from fastload.pipelines.suffix.replay import replay

SEEDS = range(30)
IMAGE = torch.randint(0, 256, (3, 40, 52), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(3))
FLOAT = IMAGE.float() / 255
NORMALIZED = (FLOAT - 0.45) / 0.25
DULL = IMAGE // 3 + 60  # autocontrast changes it
P = T.AutoAugmentPolicy


def _name(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"{type(v).__name__}-{v.dtype}".replace("torch.", "")
    return repr(v).replace("\n", "").replace(" ", "")[:80]


def assert_replays_exactly(transform, image) -> None:
    step = replay(transform)
    assert step is not None, f"{transform} is not replayed"
    for seed in SEEDS:
        torch.manual_seed(seed)
        expected = transform(image)
        got = step(image, torch.Generator().manual_seed(seed))
        assert type(got) is type(expected), seed
        assert torch.equal(got, expected), seed


V1 = [
    (T.RandAugment(), IMAGE),
    (T.RandAugment(num_ops=4, magnitude=20, num_magnitude_bins=25, fill=[10, 20, 30]), IMAGE),
    (T.RandAugment(interpolation=T.InterpolationMode.BILINEAR, fill=128), IMAGE),
    (T.TrivialAugmentWide(fill=7), IMAGE),
    (T.TrivialAugmentWide(num_magnitude_bins=11), IMAGE),
    (T.AutoAugment(P.IMAGENET), IMAGE),
    (T.AutoAugment(P.CIFAR10, fill=(1, 2, 3)), IMAGE),
    (T.AutoAugment(P.SVHN), IMAGE),
    (T.AugMix(), IMAGE),
    (T.AugMix(severity=7, mixture_width=2, chain_depth=2, alpha=0.5), IMAGE),
    (T.AugMix(all_ops=False, chain_depth=1, fill=200), IMAGE),
    (T.ColorJitter(0.4, 0.4, 0.4, 0.1), IMAGE),
    (T.ColorJitter(brightness=(0.5, 1.5), hue=0.3), FLOAT),
    (T.ColorJitter(contrast=0.8), IMAGE),
    (T.RandomGrayscale(0.5), IMAGE),
    (T.RandomHorizontalFlip(0.3), IMAGE),
    (T.RandomVerticalFlip(), FLOAT),
    (T.RandomApply([T.ColorJitter(0.4, 0.4), T.RandomRotation(20)], p=0.6), IMAGE),
    (T.RandomApply(torch.nn.ModuleList([T.GaussianBlur(5)]), p=0.5), FLOAT),
    (T.Compose([T.RandomHorizontalFlip(), T.RandAugment()]), IMAGE),
    (T.RandomRotation(30), IMAGE),
    (T.RandomRotation((-10, 40), T.InterpolationMode.BILINEAR, expand=True, fill=(9, 8, 7)), IMAGE),
    (T.RandomRotation(15, center=(3, 5), fill=0.5), FLOAT),
    (T.RandomAffine(20), IMAGE),
    (T.RandomAffine(15, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10, fill=64), IMAGE),
    (T.RandomAffine(0, shear=(-5, 5, -10, 10), interpolation=T.InterpolationMode.BILINEAR), FLOAT),
    (T.RandomPerspective(), IMAGE),
    (T.RandomPerspective(0.3, p=0.8, fill=[50, 60, 70]), IMAGE),
    (T.RandomAutocontrast(), DULL),
    (T.RandomEqualize(0.7), IMAGE),
    (T.RandomPosterize(3), IMAGE),
    (T.RandomSolarize(128), IMAGE),
    (T.RandomSolarize(0.5, p=0.8), FLOAT),
    (T.RandomAdjustSharpness(2.0), IMAGE),
    (T.RandomInvert(), IMAGE),
    (T.RandomInvert(), FLOAT),
    (T.GaussianBlur(3), IMAGE),
    (T.GaussianBlur((5, 3), sigma=(0.5, 3.0)), FLOAT),
    (T.RandomCrop(24), IMAGE),
    (T.RandomCrop((40, 30), padding=4, fill=9), IMAGE),
    (T.RandomCrop(60, pad_if_needed=True, padding_mode="reflect"), IMAGE),
    (T.RandomResizedCrop(24), IMAGE),
    (T.RandomResizedCrop((20, 30), scale=(0.5, 1.0), ratio=(2.0, 3.0)), FLOAT),
    (T.RandomErasing(p=0.8), NORMALIZED),
    (T.RandomErasing(p=0.8, value="random"), NORMALIZED),
    (T.RandomErasing(p=0.8, value=(0.1, 0.2, 0.3), scale=(0.1, 0.5)), FLOAT),
    (T.RandomErasing(p=1.0, scale=(0.9, 1.0), ratio=(5.0, 6.0)), FLOAT),  # no fit: the fallback
]


@pytest.mark.slow
@pytest.mark.parametrize("transform, image", V1, ids=_name)
def test_v1_replays_equal_the_transform_on_the_seeded_global_generator(transform, image):
    assert_replays_exactly(transform, image)


V2 = [
    (v2.RandAugment(), IMAGE),
    (v2.RandAugment(num_ops=4, magnitude=20, num_magnitude_bins=25, fill=[10, 20, 30]), IMAGE),
    (v2.RandAugment(interpolation=v2.InterpolationMode.BILINEAR, fill=128), IMAGE),
    (v2.TrivialAugmentWide(fill=7), IMAGE),
    (v2.TrivialAugmentWide(num_magnitude_bins=11), IMAGE),
    (v2.AutoAugment(P.IMAGENET), IMAGE),
    (v2.AutoAugment(P.CIFAR10, fill=(1, 2, 3)), IMAGE),
    (v2.AutoAugment(P.SVHN), IMAGE),
    (v2.AugMix(), IMAGE),
    (v2.AugMix(severity=7, mixture_width=2, chain_depth=2, alpha=0.5), IMAGE),
    (v2.AugMix(all_ops=False, chain_depth=1, fill=200), IMAGE),
    (v2.RandomErasing(p=0.8), NORMALIZED),
    (v2.RandomErasing(p=0.8, value="random"), NORMALIZED),
    (v2.RandomErasing(p=0.8, value=(0.1, 0.2, 0.3), scale=(0.1, 0.5)), FLOAT),
    (v2.RandomErasing(p=0.8, value=(10, 20, 30)), IMAGE),
    (v2.RandomErasing(p=1.0, scale=(0.9, 1.0), ratio=(5.0, 6.0)), FLOAT),  # no fit: unchanged
    (v2.RandomHorizontalFlip(0.3), IMAGE),
    (v2.RandomVerticalFlip(), FLOAT),
    (v2.ColorJitter(0.4, 0.4, 0.4, 0.1), IMAGE),
    (v2.ColorJitter(brightness=(0.5, 1.5), hue=0.3), FLOAT),
    (v2.RandomGrayscale(0.5), IMAGE),
    (v2.RandomChannelPermutation(), IMAGE),
    (v2.RandomPhotometricDistort(p=0.6), IMAGE),
    (v2.Compose([v2.RandomHorizontalFlip(), v2.RandAugment()]), IMAGE),
    (v2.RandomApply([v2.ColorJitter(0.4, 0.4), v2.RandomRotation(20)], p=0.6), IMAGE),
    (v2.RandomChoice([v2.RandomInvert(1.0), v2.GaussianBlur(3), v2.RandomEqualize(1.0)],
                     p=[0.2, 0.5, 0.3]), IMAGE),
    (v2.RandomOrder([v2.ColorJitter(0.5), v2.RandomPosterize(2, p=1.0), v2.RandomInvert(1.0)]),
     IMAGE),
    (v2.RandomRotation(30), IMAGE),
    (v2.RandomRotation((-10, 40), v2.InterpolationMode.BILINEAR, expand=True, fill=(9, 8, 7)),
     IMAGE),
    (v2.RandomAffine(15, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10, fill=64), IMAGE),
    (v2.RandomAffine(0, shear=(-5, 5, -10, 10), interpolation=v2.InterpolationMode.BILINEAR),
     FLOAT),
    (v2.RandomPerspective(), IMAGE),
    (v2.RandomPerspective(0.3, p=0.8, fill=[50, 60, 70]), IMAGE),
    (v2.RandomAutocontrast(), DULL),
    (v2.RandomEqualize(0.7), IMAGE),
    (v2.RandomPosterize(3), IMAGE),
    (v2.RandomSolarize(128), IMAGE),
    (v2.RandomAdjustSharpness(2.0), IMAGE),
    (v2.RandomInvert(), FLOAT),
    (v2.GaussianBlur((5, 3), sigma=(0.5, 3.0)), IMAGE),
    (v2.RandomCrop(24), IMAGE),
    (v2.RandomCrop((40, 30), padding=4, fill=9), IMAGE),
    (v2.RandomCrop(60, pad_if_needed=True, padding_mode="reflect"), IMAGE),
    (v2.RandomResizedCrop(24), IMAGE),
    (v2.RandomResizedCrop((20, 30), scale=(0.5, 1.0), ratio=(2.0, 3.0)), FLOAT),
]


@pytest.mark.slow
@pytest.mark.parametrize("transform, image", V2, ids=_name)
def test_v2_replays_equal_the_transform_on_a_plain_tensor(transform, image):
    assert_replays_exactly(transform, image)


@pytest.mark.slow
@pytest.mark.parametrize("transform, image", V2, ids=_name)
def test_v2_replays_equal_the_transform_on_a_tv_tensors_image_and_keep_it_an_image(transform,
                                                                                    image):
    assert_replays_exactly(transform, tv_tensors.Image(image))


def test_a_replay_leaves_the_global_generator_untouched():
    torch.manual_seed(11)
    before = torch.default_generator.get_state()
    for transform in (T.AugMix(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.TrivialAugmentWide(),
                      v2.RandomErasing(p=1.0, value="random"), v2.RandomOrder([v2.RandAugment()])):
        replay(transform)(FLOAT if isinstance(transform, v2.RandomErasing) else IMAGE,
                          torch.Generator().manual_seed(1))
    assert torch.equal(torch.default_generator.get_state(), before)


def test_user_subclasses_are_not_replayed():
    class MyAugment(T.RandAugment):
        pass

    class MyFlip(v2.RandomHorizontalFlip):
        pass

    class MyJitter(v2.ColorJitter):
        pass

    assert replay(MyAugment()) is None and replay(MyFlip()) is None
    assert replay(MyJitter(0.4)) is None
    assert replay(v2.RandomApply([MyFlip()])) is None


@pytest.mark.parametrize("transform", [
    T.RandomChoice([T.RandomInvert(1.0), T.GaussianBlur(3), T.RandomEqualize(1.0)]),
    T.RandomChoice([T.RandomInvert(1.0), T.RandomPosterize(2, p=1.0)], p=[0.2, 0.8]),
    T.RandomOrder([T.ColorJitter(0.5), T.RandomPosterize(2, p=1.0), T.RandomInvert(1.0)]),
    T.RandomApply([T.RandomOrder([T.RandomInvert(), T.RandomSolarize(90)])], p=0.7),
], ids=lambda t: type(t).__name__)
def test_v1_choice_and_order_replay_pythons_random_from_the_thread_generator(transform):
    import random

    from fastload.pipelines.replays.thread_rng import python_rng

    step = replay(transform)
    assert step is not None and step.python_rng
    for seed in range(30):
        torch.manual_seed(seed)
        random.seed(seed)
        expected = transform(IMAGE)
        with python_rng(seed):
            assert torch.equal(step(IMAGE, torch.Generator().manual_seed(seed)), expected)


def test_every_op_goes_through_the_one_seam_of_its_version(monkeypatch):
    seen: list[tuple[str, str]] = []

    def spy(version, real):
        def apply(img, op_name, magnitude, interpolation=None, fill=None):
            seen.append((version, op_name))
            return real(img, op_name, magnitude, interpolation, fill)
        return apply

    monkeypatch.setattr(augment_v1, "apply_op", spy("v1", augment_v1.apply_op))
    monkeypatch.setattr(augment_v2, "apply_op_v2", spy("v2", augment_v2.apply_op_v2))
    gen = torch.Generator().manual_seed(0)
    replay(T.Compose([T.RandomHorizontalFlip(1.0), T.RandAugment(num_ops=1),
                      T.ColorJitter(brightness=0.5)]))(IMAGE, gen)
    replay(v2.Compose([v2.RandomVerticalFlip(1.0), v2.TrivialAugmentWide()]))(IMAGE, gen)
    assert [version for version, _ in seen] == ["v1"] * 3 + ["v2"] * 2
    assert seen[0] == ("v1", "hflip") and seen[2] == ("v1", "adjust_brightness")
    assert seen[3] == ("v2", "vertical_flip")
