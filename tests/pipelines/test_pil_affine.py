"""Pillow's affine transform and rotate of RGB images by fastload's C kernel: bit for bit."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from fastload.pipelines.fast import pil_affine
from fastload.pipelines.replays import timm_aug as augment_timm
from fastload.pipelines.seams import torch_private as torch_seams
from fastload.pipelines.split import split

pytestmark = pytest.mark.skipif(not pil_affine.available(),
                                reason="the _affine extension is not built")

RESAMPLES = [Image.Resampling.NEAREST, Image.Resampling.BILINEAR, Image.Resampling.BICUBIC]
FILLS = [None, (124, 116, 104), (9, 9, 9)]
AFFINE_OPS = ["Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel",
              "TranslateYRel"]


def _image(rng: np.random.Generator, w: int, h: int) -> Image.Image:
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _matrices(rng: np.random.Generator, count: int) -> list[tuple[float, ...]]:
    """Random general matrices, shears, translations (whole and fractional) and scales."""
    out = []
    for k in range(count):
        kind = k % 5
        if kind == 0:
            m = rng.normal(0, 1, 6) * [1, 1, 12, 1, 1, 12]
        elif kind == 1:
            m = [1, rng.uniform(-0.6, 0.6), rng.uniform(-5, 5), 0, 1, 0]
        elif kind == 2:
            m = [1, 0, 0, rng.uniform(-0.6, 0.6), 1, rng.uniform(-5, 5)]
        elif kind == 3:
            m = [1, 0, rng.choice([rng.uniform(-20, 20), float(rng.integers(-9, 9))]), 0, 1,
                 rng.choice([rng.uniform(-20, 20), 0.0])]
        else:
            m = [rng.uniform(0.3, 3), 0, rng.uniform(-9, 9), 0, rng.uniform(0.3, 3), 0]
        out.append(tuple(float(v) for v in m))
    return out


@pytest.mark.parametrize("resample", RESAMPLES, ids=lambda r: r.name)
def test_affine_kernel_gives_pillows_transform_bit_for_bit(resample):
    rng = np.random.default_rng(int(resample))
    for k, matrix in enumerate(_matrices(rng, 120)):
        image = _image(rng, int(rng.integers(1, 34)), int(rng.integers(1, 34)))
        size = image.size if k % 3 else (int(rng.integers(1, 34)), int(rng.integers(1, 34)))
        fill = FILLS[k % 3]
        expected = image.transform(size, Image.Transform.AFFINE, matrix, resample,
                                   fillcolor=fill)
        got = pil_affine._kernel(image, size, matrix, resample, fill)  # nearest included
        assert got.size == expected.size and got.mode == "RGB"
        assert np.array_equal(np.asarray(got), np.asarray(expected)), (matrix, size, fill)


@pytest.mark.parametrize("resample", RESAMPLES, ids=lambda r: r.name)
def test_rotate_gives_pillows_rotate_bit_for_bit(resample):
    rng = np.random.default_rng(10 + int(resample))
    angles = [0.0, 90.0, 180.0, 270.0, -90.0, 360.0, 30.0, -27.0, 405.5, 1e-9]
    angles += [float(a) for a in rng.uniform(-180, 180, 50)]
    for k, angle in enumerate(angles):
        w = int(rng.integers(1, 34))
        image = _image(rng, w, w if k % 4 == 0 else int(rng.integers(1, 34)))
        fill = FILLS[k % 3]
        expected = image.rotate(angle, resample, fillcolor=fill)
        got = pil_affine.rotate(image, angle, resample, fill)
        assert np.array_equal(np.asarray(got), np.asarray(expected)), (angle, image.size, fill)


@pytest.mark.parametrize("image, resample, fill", [
    (Image.new("L", (9, 7), 40), Image.Resampling.BICUBIC, None),
    (Image.new("RGBA", (9, 7), (1, 2, 3, 4)), Image.Resampling.BILINEAR, (5, 6, 7, 8)),
    (Image.new("RGB", (9, 7), (1, 2, 3)), Image.Resampling.BICUBIC, "red"),
    (Image.new("RGB", (9, 7), (1, 2, 3)), Image.Resampling.BICUBIC, 7),
    (Image.new("RGB", (9, 7), (1, 2, 3)), Image.Resampling.NEAREST, (4, 5, 6)),
], ids=["L", "RGBA", "named-fill", "int-fill", "nearest"])
def test_what_the_kernel_does_not_take_goes_to_pillow_with_pillows_values(image, resample, fill):
    image.putpixel((3, 3), 200 if image.mode == "L" else (200,) * len(image.mode))
    matrix = (0.9, 0.2, 0.5, -0.2, 0.9, 1.5)
    expected = image.transform(image.size, Image.Transform.AFFINE, matrix, resample,
                               fillcolor=fill)
    got = pil_affine.transform(image, image.size, matrix, resample, fill)
    assert got.mode == image.mode and got.tobytes() == expected.tobytes()
    assert np.array_equal(np.asarray(pil_affine.rotate(image, 33.0, resample, fill)),
                          np.asarray(image.rotate(33.0, resample, fillcolor=fill)))


def test_the_kernel_is_used_only_on_the_pillow_releases_it_was_checked_on():
    assert torch_seams.pillow_affine_checked("13.0.0")
    assert not torch_seams.pillow_affine_checked("12.2.0")
    assert not torch_seams.pillow_affine_checked("13.1.0")


def test_pillow_outside_the_checked_range_leaves_timms_ops_to_pillow(monkeypatch):
    monkeypatch.setattr(torch_seams, "PILLOW_AFFINE", ((99, 0), (99, 0)))
    pil_affine.available.cache_clear()
    augment_timm._private_module.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning, no error: Pillow's own ops
            private = augment_timm._private_module()
        assert all(private.NAME_TO_OP[name].__module__ == private.__name__
                   for name in AFFINE_OPS)  # timm's own functions, in the copy
        image = Image.new("RGB", (9, 7), (1, 2, 3))
        assert pil_affine._kernel(image, image.size, (1, 0.3, 0, 0, 1, 0), 3, None) is None
    finally:
        pil_affine.available.cache_clear()
        augment_timm._private_module.cache_clear()


@pytest.mark.parametrize("name", AFFINE_OPS)
def test_the_private_copys_affine_ops_give_timms_images(name):
    import timm.data.auto_augment as real

    private = augment_timm._private_module()
    assert private.NAME_TO_OP[name].__module__ == augment_timm.__name__  # the kernel's
    rng = np.random.default_rng(len(name))
    for k in range(24):
        image = _image(rng, int(rng.integers(5, 40)), int(rng.integers(5, 40)))
        level = real.LEVEL_TO_ARG[name](float(rng.uniform(0, 10)),
                                        {"translate_const": 12, "translate_pct": 0.45})
        kwargs = {"fillcolor": FILLS[1 + k % 2],
                  "resample": (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)}
        random.seed(k)  # outside python_rng both draw the filter from the global random
        expected = real.NAME_TO_OP[name](image, *level, **dict(kwargs))
        random.seed(k)
        got = private.NAME_TO_OP[name](image, *level, **dict(kwargs))
        assert np.array_equal(np.asarray(got), np.asarray(expected)), (name, level)


def test_timm_deit_recipe_through_the_twin_gives_timms_own_samples():
    from fastload.bench.recipes import recipe

    transform, _ = recipe("timm_deit", 40, 10)
    suffix = split(transform).suffix
    assert suffix.threaded
    images = torch.randint(0, 256, (4, 3, 40, 40), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(2))
    smooth = torch.nn.functional.avg_pool2d(images.float(), 3, 1, 1).to(torch.uint8)
    for seed in range(40):
        expected, _ = suffix._sample(smooth[seed % 4], seed, None, replayed=False)
        got, _ = suffix._sample(smooth[seed % 4], seed, None, replayed=True)
        assert torch.equal(got, expected), seed


def test_a_pillow_build_giving_other_values_than_the_kernel_keeps_pillow(monkeypatch):
    run = pil_affine._run

    def off_by_one(img, size, a, resample, fill):
        out = np.asarray(run(img, size, a, resample, fill)).copy()
        out[0, 0, 0] ^= 1
        return Image.fromarray(out)

    monkeypatch.setattr(pil_affine, "_run", off_by_one)
    pil_affine.available.cache_clear()
    try:
        assert not pil_affine.available()
        image = _image(np.random.default_rng(1), 12, 9)
        assert pil_affine._kernel(image, image.size, (1, 0.3, 0, 0, 1, 0), 3, None) is None
    finally:
        monkeypatch.undo()
        pil_affine.available.cache_clear()
    assert pil_affine.available()
