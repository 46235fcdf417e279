"""fastload's one copy of torchvision's draws gives torchvision's own parameters, seed for seed.

Each draw is checked against the transform's ``get_params`` (v1) or ``make_params`` (v2) run on
torch's default generator seeded alike; both the DALI prefix and the suffix's replays use them.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from torchvision.transforms import v2

from fastload.pipelines import draws

SEEDS = range(40)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_primitive_draws_consume_the_generator_as_torchs_own_calls():
    for seed in SEEDS:
        torch.manual_seed(seed)
        expected = (torch.empty(1).uniform_(0.2, 3.5).item(), int(torch.randint(3, 90, (1,))),
                    torch.exp(torch.empty(1).uniform_(-0.3, 0.4)).item(),
                    bool(torch.rand(1) < 0.7))
        gen = _gen(seed)
        got = (draws.uniform(0.2, 3.5, gen), draws.randint(3, 90, gen),
               draws.exp_uniform(-0.3, 0.4, gen), draws.coin(0.7, gen))
        assert got == expected, seed


def test_coin_compares_in_float32_as_a_tensor_comparison_does():
    # 0.7 rounds down to float32: a draw equal to float32(0.7) is not below it in float32
    below = torch.tensor([0.7], dtype=torch.float32)
    assert not bool(below < 0.7)
    assert draws._float32(0.7) == below.item()


@pytest.mark.parametrize("version", [T, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("scale, ratio, size", [
    ((0.08, 1.0), (3 / 4, 4 / 3), (333, 500)),
    ((0.2, 0.9), (0.6, 1.8), (500, 333)),
    ((0.9, 1.0), (5.0, 6.0), (300, 290)),  # ten misses: the central fallback crop
])
def test_resized_crop_box_is_random_resized_crops_params(version, scale, ratio, size):
    transform = version.RandomResizedCrop(8, scale=scale, ratio=ratio)
    image = torch.zeros(3, *size)
    for seed in SEEDS:
        torch.manual_seed(seed)
        if version is T:
            expected = tuple(transform.get_params(image, transform.scale, transform.ratio))
        else:
            p = transform.make_params([image])
            expected = (p["top"], p["left"], p["height"], p["width"])
        assert draws.resized_crop_box(*size, scale, ratio, _gen(seed)) == expected, seed


@pytest.mark.parametrize("size", [(40, 52), (24, 52), (40, 24), (24, 24)])
def test_crop_offsets_are_v1_random_crops_params(size):
    image = torch.zeros(3, *size)
    for seed in SEEDS:
        torch.manual_seed(seed)
        top, left, _, _ = T.RandomCrop.get_params(image, (24, 24))
        assert draws.crop_offsets(*size, 24, 24, _gen(seed)) == (top, left), seed


@pytest.mark.parametrize("size", [(40, 52), (24, 52), (40, 24), (24, 24)])
def test_crop_offsets_v2_are_v2_random_crops_params(size):
    transform = v2.RandomCrop(24)
    image = torch.zeros(3, *size)
    for seed in SEEDS:
        torch.manual_seed(seed)
        p = transform.make_params([image])
        assert draws.crop_offsets_v2(*size, 24, 24, _gen(seed)) == (p["top"], p["left"]), seed


def test_crop_offsets_refuse_a_crop_larger_than_the_image_naming_the_fix():
    with pytest.raises(ValueError, match=r"RandomCrop size \(24, 24\) is larger than the 20x30 "
                                         r"image; pass pad_if_needed=True"):
        draws.crop_offsets(20, 30, 24, 24, _gen(0))


@pytest.mark.parametrize("version", [T, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("args", [(0.4, 0.4, 0.4, 0.1), (0.0, 0.3, 0.0, 0.0), (0.2,)])
def test_color_jitter_is_color_jitters_params(version, args):
    transform = version.ColorJitter(*args)
    ranges = (transform.brightness, transform.contrast, transform.saturation, transform.hue)
    for seed in SEEDS:
        torch.manual_seed(seed)
        if version is T:
            order, *factors = T.ColorJitter.get_params(*ranges)
        else:
            p = transform.make_params([torch.zeros(3, 4, 4)])
            order = p["fn_idx"]
            factors = [p[f"{n}_factor"] for n in ("brightness", "contrast", "saturation", "hue")]
        got_order, got = draws.color_jitter(ranges, _gen(seed))
        assert (got_order, got) == (order.tolist(), list(factors)), seed


@pytest.mark.parametrize("version", [T, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("kwargs", [{}, {"value": 0.5}, {"scale": (0.5, 0.9), "ratio": (0.2, 5)},
                                    {"scale": (0.98, 0.99)}])  # the last finds no box
def test_erase_box_is_random_erasings_params(version, kwargs):
    transform = version.RandomErasing(p=1.0, **kwargs)
    image = torch.zeros(3, 30, 44)
    value = None if transform.value in (None, "random") else (
        [float(transform.value)] if isinstance(transform.value, (int, float))
        else [float(v) for v in transform.value])
    for seed in SEEDS:
        torch.manual_seed(seed)
        if version is T:
            i, j, h, w, v = T.RandomErasing.get_params(image, transform.scale, transform.ratio,
                                                        value)
            expected = None if v is image else (i, j, h, w, v)
        else:
            p = transform.make_params([image])
            expected = None if p["v"] is None else (p["i"], p["j"], p["h"], p["w"], p["v"])
        got = draws.erase_box(3, 30, 44, transform.scale, transform.ratio, value, _gen(seed))
        if expected is None:
            assert got is None, seed
        else:
            assert got[:4] == expected[:4] and torch.equal(got[4], expected[4]), seed


@pytest.mark.parametrize("version", [T, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("kwargs", [{"degrees": 20},
                                    {"degrees": 15, "translate": (0.1, 0.2), "scale": (0.8, 1.2),
                                     "shear": 10},
                                    {"degrees": 0, "shear": (-5, 5, -10, 10)}])
def test_affine_params_are_random_affines_params(version, kwargs):
    transform = version.RandomAffine(**kwargs)
    height, width = 30, 44
    for seed in SEEDS:
        torch.manual_seed(seed)
        if version is T:
            angle, shift, scale, shear = T.RandomAffine.get_params(
                transform.degrees, transform.translate, transform.scale, transform.shear,
                [width, height])
        else:
            p = transform.make_params([torch.zeros(3, height, width)])
            angle, shift, scale, shear = p["angle"], p["translate"], p["scale"], p["shear"]
        got = draws.affine_params(transform.degrees, transform.translate, transform.scale,
                                  transform.shear, height, width, _gen(seed))
        assert (got["angle"], got["translate"], got["scale"], got["shear"]) == (
            angle, tuple(shift), scale, tuple(shear)), seed


@pytest.mark.parametrize("distortion", [0.5, 0.2, 1.0])
def test_perspective_points_are_random_perspectives_params(distortion):
    for seed in SEEDS:
        torch.manual_seed(seed)
        expected = T.RandomPerspective.get_params(44, 30, distortion)
        assert draws.perspective_points(44, 30, distortion, _gen(seed)) == tuple(expected), seed
