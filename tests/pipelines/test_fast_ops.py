"""fastload.pipelines.fast.ops_v1.apply_op returns torchvision's _apply_op values, bit for bit."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import (
    AugMix,
    AutoAugment,
    RandAugment,
    TrivialAugmentWide,
    _apply_op,
)

from fastload.pipelines.fast.ops_v1 import apply_op

OPS = [
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
]
AFFINE = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
NEAREST = InterpolationMode.NEAREST


def _magnitudes(op: str, height: int, width: int) -> list[float]:
    """Every (signed) magnitude RandAugment (31 bins), TrivialAugmentWide, AugMix and AutoAugment use."""
    spaces = [
        RandAugment(num_magnitude_bins=31)._augmentation_space(31, (height, width)),
        TrivialAugmentWide()._augmentation_space(31),
        AugMix(all_ops=True)._augmentation_space(10, (height, width)),
        AutoAugment()._augmentation_space(10, (height, width)),
    ]
    out: set[float] = {0.0}
    for space in spaces:
        if op not in space:
            continue
        values, signed = space[op]
        for m in values.reshape(-1).tolist():
            out.add(float(m))
            if signed:
                out.add(-float(m))
    return sorted(out)


def _image(shape: tuple[int, ...], content: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(repr((shape, content)).encode()))
    h, w = shape[-2:]
    if content == "random":
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    if content == "constant":
        return torch.full(shape, 77, dtype=torch.uint8)
    if content == "two_level":  # equalize: a histogram with two nonzero bins
        return (torch.rand(shape, generator=g) < 0.1).to(torch.uint8) * 200 + 20
    # smooth: a low-contrast gradient, so min/max and the histogram are far from 0..255
    y = torch.linspace(0, 1, h).view(-1, 1)
    x = torch.linspace(0, 1, w).view(1, -1)
    plane = 90 + 40 * torch.sin(5 * x) * torch.cos(3 * y) + 20 * x
    return plane.expand(shape).to(torch.uint8).contiguous()


SHAPES = [
    (1, 1, 1),
    (3, 1, 1),
    (3, 2, 3),
    (1, 3, 3),
    (3, 3, 3),
    (1, 7, 5),
    (3, 31, 17),
    (3, 40, 64),
    (2, 3, 9, 11),
    (3, 224, 224),
]
CASES = [(s, c) for s in SHAPES for c in ("random", "constant", "smooth")]
CASES += [(s, "two_level") for s in ((1, 7, 5), (3, 40, 64), (3, 224, 224))]


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "content"), CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_every_op_is_bit_identical_to_torchvision(op, shape, content):
    img = _image(shape, content)
    before = img.clone()
    magnitudes = _magnitudes(op, shape[-2], shape[-1])
    if op in AFFINE:  # delegated to torchvision: a sample of the magnitudes is enough
        magnitudes = magnitudes[::5]
    for magnitude in magnitudes:
        want = _apply_op(img, op, magnitude, interpolation=NEAREST, fill=None)
        got = apply_op(img, op, magnitude, NEAREST, None)
        assert got.dtype == want.dtype and got.shape == want.shape, (op, magnitude)
        assert torch.equal(got, want), (op, magnitude)
    assert torch.equal(img, before)


@pytest.mark.parametrize("op", ["Brightness", "Color", "Contrast", "Sharpness"])
def test_blend_ops_are_bit_identical_for_arbitrary_factors(op):
    g = torch.Generator().manual_seed(1)
    # every uint8 value in every channel, with neighbours of every kind for Sharpness
    img = torch.randperm(3 * 48 * 48, generator=g).remainder(256).to(torch.uint8).view(3, 48, 48)
    for magnitude in (torch.rand(150, generator=g, dtype=torch.float64) * 3 - 1).tolist():
        want = _apply_op(img, op, magnitude, interpolation=NEAREST, fill=None)
        assert torch.equal(apply_op(img, op, magnitude, NEAREST, None), want), magnitude


def test_solarize_is_bit_identical_for_every_threshold():
    img = torch.arange(256, dtype=torch.uint8).repeat(3, 4, 1)
    thresholds = [t / 4 for t in range(-8, 255 * 4 + 1)] + [254.99999999, 127.99999999]
    for t in thresholds:
        want = _apply_op(img, "Solarize", t, interpolation=NEAREST, fill=None)
        assert torch.equal(apply_op(img, "Solarize", t, NEAREST, None), want), t


def test_sharpness_degenerate_image_is_rounded_box_sum_for_every_neighbourhood_sum():
    # Magnitude -1 (factor 0) makes the output the degenerate image itself. One 3x3 image per
    # n = box sum + 4 * centre in 0..13*255, so every rounding case of n/13 is hit.
    n = torch.arange(13 * 255 + 1)
    centre = ((n - 8 * 255 + 4) // 5).clamp(0, 255)  # leaves 0 <= n - 5 * centre <= 8 * 255
    rest = n - 5 * centre  # the sum of the 8 neighbours, spread evenly over them
    neighbours = torch.stack([(rest + k) // 8 for k in range(8)], dim=1)
    assert bool((neighbours <= 255).all()) and torch.equal(neighbours.sum(1), rest)
    imgs = torch.empty(len(n), 1, 3, 3, dtype=torch.uint8)
    flat = imgs.view(len(n), 9)
    flat[:, [0, 1, 2, 3, 5, 6, 7, 8]] = neighbours.to(torch.uint8)
    flat[:, 4] = centre.to(torch.uint8)

    want = _apply_op(imgs, "Sharpness", -1.0, interpolation=NEAREST, fill=None)
    assert torch.equal(want[:, 0, 1, 1].long(), ((2 * n + 13) // 26))  # round(n / 13), no ties
    assert torch.equal(apply_op(imgs, "Sharpness", -1.0, NEAREST, None), want)


def test_grayscale_of_color_and_contrast_is_exact_for_every_rgb_triple():
    v = torch.arange(256, dtype=torch.uint8)
    r, g, b = torch.meshgrid(v, v, v, indexing="ij")
    img = torch.stack([r, g, b]).reshape(3, 4096, 4096)
    # Color at factor 0 is rgb_to_grayscale broadcast to 3 channels.
    want = _apply_op(img, "Color", -1.0, interpolation=NEAREST, fill=None)
    assert torch.equal(apply_op(img, "Color", -1.0, NEAREST, None), want)
    want = _apply_op(img, "Contrast", 0.3, interpolation=NEAREST, fill=None)
    assert torch.equal(apply_op(img, "Contrast", 0.3, NEAREST, None), want)


def test_equalize_of_a_large_batch_is_bit_identical():
    img = _image((7, 3, 12, 10), "random")  # 21 channel rows: the single-bincount path
    img[2] = 5
    img[4, 1] = (img[4, 1] > 128).to(torch.uint8) * 255
    want = _apply_op(img, "Equalize", 0.0, interpolation=NEAREST, fill=None)
    assert torch.equal(apply_op(img, "Equalize", 0.0, NEAREST, None), want)


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(AFFINE))
@pytest.mark.parametrize("interpolation", [InterpolationMode.NEAREST, InterpolationMode.BILINEAR])
@pytest.mark.parametrize("fill", [None, [0.0, 0.0, 0.0], [127.5, 10.0, 300.0]])
def test_affine_ops_with_fill_and_interpolation_are_torchvision_values(op, interpolation, fill):
    img = _image((3, 33, 40), "random")
    for magnitude in _magnitudes(op, 33, 40)[::7]:
        want = _apply_op(img, op, magnitude, interpolation=interpolation, fill=fill)
        assert torch.equal(apply_op(img, op, magnitude, interpolation, fill), want)


def _rand(shape, dtype=torch.uint8):
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g).to(dtype)


OTHER_TENSORS = {
    "float32": lambda: _rand((3, 16, 16), torch.float32) / 255,
    "int16": lambda: _rand((3, 16, 16), torch.int16),
    "non_contiguous": lambda: _rand((3, 16, 32))[..., ::2],
    "channels_last": lambda: _rand((1, 3, 16, 16)).contiguous(memory_format=torch.channels_last),
    "two_dim": lambda: _rand((16, 16)),
    "five_dim": lambda: _rand((2, 2, 3, 8, 8)),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", sorted(OTHER_TENSORS))
def test_inputs_outside_the_fast_paths_give_torchvision_result(op, kind):
    img = OTHER_TENSORS[kind]()
    magnitude = 0.4 if op != "Posterize" else 3
    try:
        want = _apply_op(img, op, magnitude, interpolation=NEAREST, fill=None)
    except Exception as exc:
        with pytest.raises(type(exc)):
            apply_op(img, op, magnitude, NEAREST, None)
        return
    assert torch.equal(apply_op(img, op, magnitude, NEAREST, None), want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_pil_images_give_torchvision_result(op, mode):
    array = _rand((20, 24, 3)).numpy()
    img = Image.fromarray(array[..., 0] if mode == "L" else array, mode=mode)
    magnitude = 0.4 if op != "Posterize" else 3
    want = _apply_op(img, op, magnitude, interpolation=NEAREST, fill=None)
    got = apply_op(img, op, magnitude, NEAREST, None)
    assert isinstance(got, Image.Image)
    assert np.array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize(
    ("op", "magnitude"),
    [
        ("Brightness", -1.5),
        ("Color", -2.0),
        ("Contrast", -1.01),
        ("Sharpness", -3.0),
        ("Solarize", 256.0),
        ("Solarize", 255.00000001),
        ("Posterize", 9),
        ("Brightness", float("nan")),
        ("Sharpness", float("inf")),
        ("NoSuchOp", 0.0),
    ],
)
def test_invalid_arguments_behave_as_in_torchvision(op, magnitude):
    img = _rand((3, 8, 8))
    try:
        want = _apply_op(img, op, magnitude, interpolation=NEAREST, fill=None)
    except Exception as exc:
        with pytest.raises(type(exc)) as info:
            apply_op(img, op, magnitude, NEAREST, None)
        assert str(info.value) == str(exc)
        return
    assert torch.equal(apply_op(img, op, magnitude, NEAREST, None), want)


def test_ops_torchvision_returns_unchanged_return_the_input_object():
    img = _rand((3, 2, 9))
    assert apply_op(img, "Identity", 0.0, NEAREST, None) is img
    assert apply_op(img, "Sharpness", 0.5, NEAREST, None) is img
    gray = _rand((1, 9, 9))
    assert apply_op(gray, "Color", 0.5, NEAREST, None) is gray


@pytest.mark.parametrize(
    "op", ["Brightness", "Color", "Contrast", "Sharpness", "AutoContrast", "Equalize", "Solarize"]
)
def test_fast_paths_return_a_new_tensor_and_leave_the_input_alone(op):
    img = _image((3, 16, 16), "constant")
    before = img.clone()
    out = apply_op(img, op, 0.0, NEAREST, None)
    out.fill_(1)
    assert torch.equal(img, before)


@pytest.mark.parametrize("name, key", [("adjust_brightness", "brightness_factor"),
                                       ("adjust_contrast", "contrast_factor"),
                                       ("adjust_saturation", "saturation_factor"),
                                       ("adjust_sharpness", "sharpness_factor")])
@pytest.mark.parametrize("factor", [0.0, 0.37, 1.0, 1.6, 2.9])
def test_adjust_functions_are_bit_identical_to_torchvision(name, key, factor):
    import torchvision.transforms.functional as F

    from fastload.pipelines.fast.ops_v1 import adjust

    img = torch.randint(0, 256, (3, 17, 23), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(2))
    fast = adjust(img, name, {key: factor})
    assert fast is not None and torch.equal(fast, getattr(F, name)(img, factor))


def test_adjust_leaves_what_it_has_no_fast_path_for_to_torchvision():
    from fastload.pipelines.fast.ops_v1 import adjust

    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    assert adjust(img, "adjust_hue", {"hue_factor": 0.1}) is None
    assert adjust(img.float(), "adjust_brightness", {"brightness_factor": 1.2}) is None
    assert adjust(img, "adjust_brightness", {"brightness_factor": -1.0}) is None


def test_affine_ops_sample_a_cached_grid_with_torchvisions_values():
    from torchvision.transforms.autoaugment import _apply_op

    from fastload.pipelines.fast import ops_v1 as fast_ops

    img = torch.randint(0, 256, (3, 40, 56), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(4))
    fast_ops._grid_and_mask.cache_clear()
    for _ in range(2):
        for op, magnitude in [("ShearX", 0.21), ("TranslateY", -13.0), ("Rotate", 27.5)]:
            for fill in (None, [0.0, 0.0, 0.0], [9.0, 99.0, 199.0]):
                expected = _apply_op(img, op, magnitude, InterpolationMode.BILINEAR, fill)
                got = apply_op(img, op, magnitude, InterpolationMode.BILINEAR, fill)
                assert torch.equal(got, expected)
    assert fast_ops._grid_and_mask.cache_info().misses == 3  # one grid per op and magnitude
