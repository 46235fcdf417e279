"""The suffix's deterministic tail as a table lookup: the transforms' own values, in the batch."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2
from torchvision.transforms.functional import to_pil_image

import fastload
from fastload.loader.sampling import mix_seed
from fastload.pipelines.suffix import tail as tail_module
from fastload.pipelines.suffix.run import Suffix
from fastload.pipelines.suffix.tail import LookupTail, is_pointwise

IMAGES = torch.randint(0, 256, (4, 3, 24, 30), dtype=torch.uint8,
                       generator=torch.Generator().manual_seed(11))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _reference(transforms, image, seed):
    """What the transforms give the PIL image the prefix's output stands for."""
    torch.manual_seed(seed)
    x = to_pil_image(image)
    for t in transforms:
        x = t(x)
    return x


@pytest.mark.parametrize("transforms", [
    [T.ToTensor(), T.Normalize(MEAN, STD)],
    [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)],
    [T.PILToTensor(), T.ConvertImageDtype(torch.float64)],
    [T.PILToTensor(), T.ConvertImageDtype(torch.float16), T.Normalize(MEAN, STD)],
    [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
     v2.ToPureTensor()],
    [v2.ToImage(), v2.ToDtype(torch.bfloat16, scale=True)],
], ids=lambda ts: "-".join(type(t).__name__ for t in ts))
def test_tail_gives_exactly_the_transforms_values(transforms):
    suffix = Suffix(transforms, "pil")
    assert suffix.tail is not None
    outputs, _ = suffix.run(IMAGES, [0, 1, 2, 3])
    for j in range(4):
        expected = _reference(transforms, IMAGES[j], 0)
        assert outputs[j].dtype == expected.dtype and torch.equal(outputs[j], expected)


def test_tail_writes_each_sample_into_the_batch():
    suffix = Suffix([T.RandAugment(), T.PILToTensor(), T.ConvertImageDtype(torch.float),
                     T.Normalize(MEAN, STD)], "pil")
    dtype, kind = suffix.tail.layout(IMAGES, suffix.tail_pil)
    out = torch.empty(IMAGES.shape, dtype=dtype)
    seeds = [5, 6, 7, 8]
    outputs, written = suffix.run(IMAGES, seeds, out=out)
    assert all(written) and kind is torch.Tensor
    for j, seed in enumerate(seeds):
        assert outputs[j].data_ptr() == out[j].data_ptr()
        assert torch.equal(out[j], _reference(suffix.transforms, IMAGES[j], seed))


def test_random_erasing_after_the_tail_erases_the_batch_slot():
    transforms = [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
                  T.RandomErasing(p=1.0)]
    suffix = Suffix(transforms, "pil")
    out = torch.empty(IMAGES.shape, dtype=torch.float32)
    _, written = suffix.run(IMAGES, [1, 2, 3, 4], out=out)
    assert all(written)
    for j, seed in enumerate([1, 2, 3, 4]):
        expected = _reference(transforms, IMAGES[j], seed)
        assert torch.equal(out[j], expected) and (expected == 0).any()


def test_a_sample_no_table_fits_runs_the_transforms_themselves():
    class ToFloat:  # the head now yields float: the tail's table is for uint8 input only
        def __call__(self, x):
            return x.float() / 255

    transforms = [T.PILToTensor(), ToFloat(), T.Normalize(MEAN, STD)]
    suffix = Suffix(transforms, "pil")
    out = torch.empty(IMAGES.shape, dtype=torch.float32)
    outputs, written = suffix.run(IMAGES, [0, 1, 2, 3], out=out)
    assert not any(written)
    assert torch.equal(outputs[0], T.Normalize(MEAN, STD)(IMAGES[0].float() / 255))


def test_the_torch_form_of_the_lookup_matches_the_kernel(monkeypatch):
    suffix = Suffix([T.ToTensor(), T.Normalize(MEAN, STD)], "pil")
    kernel = suffix.tail.write(IMAGES[0], True)
    monkeypatch.setattr(tail_module, "_lookup_planes", None)
    assert torch.equal(LookupTail(suffix._run_tail).write(IMAGES[0], True), kernel)


def test_only_per_channel_value_maps_count_as_pointwise():
    assert is_pointwise(T.Normalize(MEAN, STD)) and is_pointwise(v2.ToDtype(torch.float32))
    assert not is_pointwise(T.RandomErasing()) and not is_pointwise(T.Grayscale())
    assert not is_pointwise(v2.ToDtype({torch.Tensor: torch.float32}))


def test_plan_names_the_table_lookup():
    suffix = Suffix([T.RandAugment(), T.PILToTensor(), T.ConvertImageDtype(torch.float),
                     T.Normalize(MEAN, STD)], "pil")
    assert "RandAugment -> [PILToTensor -> ConvertImageDtype -> Normalize: one table lookup" \
        in suffix.describe()


def test_loader_batches_with_a_tail_equal_torchvisions_per_sample_values(synth_root):
    geometry = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    augment = T.TrivialAugmentWide()
    tail = [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
    plain = ImageFolder(synth_root / "train", T.Compose([*geometry, T.PILToTensor()]))
    full = ImageFolder(synth_root / "train", T.Compose([*geometry, augment, *tail]))
    base, _ = next(iter(fastload.DataLoader(plain, batch_size=8, seed=5, num_workers=2)))
    ours, labels = next(iter(fastload.DataLoader(full, batch_size=8, seed=5, num_workers=2)))
    assert ours.shape == (8, 3, 32, 32) and ours.dtype == torch.float32 and len(labels) == 8
    batch_seed = mix_seed(5, 0, 0, 0)
    for j in range(8):
        torch.manual_seed(mix_seed(batch_seed, j))
        expected = T.Normalize(MEAN, STD)(T.ConvertImageDtype(torch.float)(augment(base[j])))
        assert torch.equal(ours[j], expected)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_pil_image_from_the_head_goes_through_the_table_as_to_tensor_would(mode):
    class Convert:  # a PIL-only callable: the suffix hands it a PIL image, it returns one
        def __call__(self, img):
            return img.convert(mode)

    transforms = [Convert(), T.ToTensor(), T.Normalize((0.5,), (0.25,))]
    suffix = Suffix(transforms, "pil")
    outputs, _ = suffix.run(IMAGES, [0, 1, 2, 3])
    for j in range(4):
        expected = _reference(transforms, IMAGES[j], 0)
        assert torch.equal(outputs[j], expected)
