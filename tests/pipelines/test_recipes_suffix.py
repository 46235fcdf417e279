"""The split plan: what DALI runs, what the torch suffix runs, and the suffix's draws."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2
from torchvision.transforms.functional import to_pil_image

import fastload
from fastload.loader.sampling import mix_seed
from fastload.pipelines.split import reads_through, split
from fastload.pipelines.suffix.replay import replay
from fastload.pipelines.suffix.run import Suffix
from fastload.pipelines.translate import UnsupportedTransform

IMAGE = torch.randint(0, 256, (3, 40, 52), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("transform, image", [
    (T.RandAugment(), IMAGE),
    (T.RandAugment(num_ops=3, magnitude=14, num_magnitude_bins=21), IMAGE),
    (T.TrivialAugmentWide(), IMAGE),
    (T.AutoAugment(T.AutoAugmentPolicy.IMAGENET), IMAGE),
    (T.AutoAugment(T.AutoAugmentPolicy.CIFAR10), IMAGE),
    (T.AutoAugment(T.AutoAugmentPolicy.SVHN), IMAGE),
    (T.RandomErasing(p=0.8), IMAGE.float() / 255),
    (T.RandomErasing(p=0.8, value="random"), IMAGE.float() / 255),
    (T.RandomErasing(p=0.8, value=(0.1, 0.2, 0.3)), IMAGE.float() / 255),
    (T.RandomHorizontalFlip(), IMAGE),
    (T.RandomVerticalFlip(), IMAGE),
], ids=lambda v: type(v).__name__ if not isinstance(v, torch.Tensor) else str(v.dtype))
def test_replayed_draws_give_exactly_torchvisions_values(transform, image):
    step = replay(transform)
    for seed in range(40):
        torch.manual_seed(seed)
        expected = transform(image)
        assert torch.equal(step(image, torch.Generator().manual_seed(seed)), expected)


def test_split_runs_the_longest_translatable_prefix_on_dali():
    plan = split(T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.RandAugment(),
                            T.ToTensor(), T.Normalize((0.5,) * 3, (0.2,) * 3)]))
    assert plan.prefix.source == "RandomResizedCrop -> RandomHorizontalFlip"
    assert plan.prefix.output_dtype == torch.uint8 and plan.state == "pil"
    assert [type(t).__name__ for t in plan.suffix.transforms] == ["RandAugment", "ToTensor",
                                                                 "Normalize"]


def test_a_fully_translatable_transform_has_no_suffix():
    plan = split(T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]))
    assert not plan.suffix and plan.state == "float"


def test_to_tensor_in_the_suffix_gives_what_it_gives_on_the_pil_image():
    suffix = Suffix([T.ToTensor()], "pil")
    expected = T.ToTensor()(to_pil_image(IMAGE))
    assert torch.equal(suffix.run(IMAGE[None], [0])[0][0], expected)


def test_an_unknown_callable_on_the_pil_side_receives_a_pil_image():
    seen = []

    class Record:
        def __call__(self, img):
            seen.append(type(img))
            return img

    suffix = Suffix([Record(), T.PILToTensor()], "pil")
    out = suffix.run(IMAGE[None], [0])[0][0]
    assert seen == [Image.Image] and torch.equal(out, IMAGE)


@pytest.mark.parametrize("transform", [
    T.Pad(3, fill=(10, 200, 30)),
    T.Pad([1, 2], fill=[5]),
    T.RandomCrop(36, padding=4, fill=(10, 200, 30)),
    T.Resize((17, 23), interpolation=T.InterpolationMode.NEAREST),
    v2.Resize((17, 23), interpolation=v2.InterpolationMode.NEAREST),
    T.RandomResizedCrop(20, interpolation=T.InterpolationMode.NEAREST),
    T.RandAugment(interpolation=T.InterpolationMode.BICUBIC),
    T.TrivialAugmentWide(interpolation=T.InterpolationMode.BICUBIC),
    T.AutoAugment(T.AutoAugmentPolicy.IMAGENET, interpolation=T.InterpolationMode.BICUBIC),
    T.RandomRotation(15, interpolation=T.InterpolationMode.BICUBIC),
    T.RandomAffine(10, translate=(0.1, 0.1), interpolation=T.InterpolationMode.BICUBIC),
    T.RandomPerspective(p=1.0, interpolation=T.InterpolationMode.BICUBIC),
    v2.RandAugment(interpolation=v2.InterpolationMode.BICUBIC),
    v2.RandomRotation(15, interpolation=v2.InterpolationMode.BICUBIC),
], ids=lambda t: repr(t)[:60])
def test_a_transform_whose_tensor_path_differs_receives_the_pil_image_torch_gives_it(transform):
    # v1's tensor padding refuses a fill per channel; NEAREST on a tensor takes another pixel
    # grid (floor(i * scale)) than Pillow's pixel centres; a warp's tensor path refuses BICUBIC
    suffix = Suffix([transform, T.PILToTensor()], "pil")
    for seed in range(5):
        torch.manual_seed(seed)
        expected = T.PILToTensor()(transform(to_pil_image(IMAGE)))
        assert torch.equal(suffix.run(IMAGE[None], [seed])[0][0], expected)


def test_unknown_callables_draw_from_the_global_rng_seeded_per_sample_and_restore_it():
    class Noise:
        def __call__(self, x):
            return x + torch.rand(1)

    suffix = Suffix([T.ToTensor(), Noise()], "pil")
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first, _ = suffix.run(IMAGE[None].expand(2, -1, -1, -1), [7, 8])
    assert torch.equal(torch.rand(1), before)  # the caller's stream is untouched
    again, _ = suffix.run(IMAGE[None], [7])
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], first[1])


def test_variable_size_before_the_suffix_is_refused_with_the_fix():
    with pytest.raises(UnsupportedTransform, match="varying size.*CenterCrop"):
        split(T.Compose([T.Resize(40), T.RandAugment(), T.CenterCrop(32), T.ToTensor()]))


def test_only_a_call_that_returns_self_transforms_of_its_argument_reads_through():
    class Delegate:
        transforms = T.Compose([T.ToTensor()])

        def __call__(self, img):
            return self.transforms(img)

    class Other(Delegate):
        def __call__(self, img):
            return self.transforms(img.convert("L"))

    class Global(Delegate):
        def __call__(self, img):
            return T.ToTensor()(img)

    assert reads_through(Delegate())
    assert not reads_through(Other()) and not reads_through(Global())


def test_loader_suffix_applies_torchvision_with_the_per_sample_seed_rule(synth_root):
    """Sample j of batch b: seed mix_seed(mix_seed(seed, epoch, rank, b), j)."""
    geometry = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    plain = ImageFolder(synth_root / "train", T.Compose([*geometry, T.PILToTensor()]))
    augment = T.RandAugment()
    augmented = ImageFolder(synth_root / "train", T.Compose([*geometry, augment,
                                                             T.PILToTensor()]))
    base, _ = next(iter(fastload.DataLoader(plain, batch_size=8, seed=5, num_workers=2)))
    ours, _ = next(iter(fastload.DataLoader(augmented, batch_size=8, seed=5, num_workers=2)))
    batch_seed = mix_seed(5, 0, 0, 0)
    for j in range(8):
        torch.manual_seed(mix_seed(batch_seed, j))
        assert torch.equal(ours[j], augment(base[j]))


def test_v2_suffix_is_reproducible_from_the_seed(synth_root):
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandAugment(), v2.PILToTensor()])
    dataset = ImageFolder(synth_root / "train", transform)
    runs = [next(iter(fastload.DataLoader(dataset, batch_size=8, seed=9)))[0] for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.slow
def test_unreplayed_suffix_runs_where_measured_faster_with_the_same_batches(synth_root):
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.ElasticTransform(), v2.PILToTensor()])
    dataset = ImageFolder(synth_root / "train", transform)
    loader = fastload.DataLoader(dataset, batch_size=6, seed=4, num_workers=2)
    assert "measuring" in str(loader.plan)
    measured = torch.cat([images for images, _ in loader])
    assert loader._stage.choice in ("here", "processes")
    assert "ms/sample here" in str(loader.plan)
    alone = torch.cat([images for images, _ in fastload.DataLoader(dataset, batch_size=6, seed=4)])
    assert torch.equal(measured, alone)


def test_color_jitter_runs_in_the_suffix_on_cpu_in_torchvisions_random_order():
    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    transform = T.Compose([T.RandomResizedCrop(32), jitter, T.ToTensor()])
    plan = split(transform, "cpu")
    assert plan.prefix.source == "RandomResizedCrop"
    assert type(plan.suffix.transforms[0]) is T.ColorJitter and plan.suffix.threaded
    assert split(transform, "gpu").prefix.jitter is not None  # one DALI graph on a GPU


def test_color_jitter_after_a_varying_size_stays_in_the_graph():
    plan = split(T.Compose([T.Resize(40), T.ColorJitter(0.4), T.CenterCrop(32), T.ToTensor()]))
    assert plan.prefix.jitter is not None and not plan.suffix


def test_a_keep_ratio_resize_before_the_suffix_is_refused_with_the_fix():
    from timm.data.transforms import ResizeKeepRatio

    with pytest.raises(UnsupportedTransform, match="varying size"):
        split(T.Compose([ResizeKeepRatio(40), T.RandAugment(), T.ToTensor()]))
