"""The C kernels of fastload.pipelines.fast.kernels give torch's and torchvision's own values."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F1
import torchvision.transforms.v2.functional as F2
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import _apply_op

from fastload.pipelines.fast import kernels
from fastload.pipelines.fast import ops_v1 as fast_ops
from fastload.pipelines.replays import common as augment_common

pytestmark = pytest.mark.skipif(not kernels.AVAILABLE, reason="the C extension is not built")


def _random(shape, seed):
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _affine_grid(seed: int, height: int, width: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    angle, shear = (float(v) for v in torch.rand(2, generator=g) * 0.8 - 0.4)
    tx, ty = (float(v) for v in torch.rand(2, generator=g) * 0.6 - 0.3)
    theta = torch.tensor([[[math.cos(angle), -math.sin(angle) + shear, tx],
                           [math.sin(angle), math.cos(angle), ty]]], dtype=torch.float32)
    return torch.nn.functional.affine_grid(theta, [1, 3, height, width], align_corners=False)


def test_this_torch_is_one_the_kernels_replay():
    # The CI machine's torch: if this fails the fast paths are off (values stay torch's).
    assert kernels.grid_sample_ok() and kernels.fused_ok()


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_equals_torchs_on_random_affine_grids(mode):
    for seed in range(60):
        height, width = 3 + seed % 17 * 7, 5 + seed * 13 % 101  # odd sizes: chunk remainders
        img = _random((3, height, width), seed)
        grid = _affine_grid(seed, height, width)
        want = torch.nn.functional.grid_sample(img[None].float(), grid, mode=mode,
                                               padding_mode="zeros", align_corners=False)[0]
        assert torch.equal(kernels.grid_sample(img, grid, mode == "nearest", False), want), seed
        rounded = kernels.grid_sample(img, grid, mode == "nearest", True)
        assert torch.equal(rounded, want.round().to(torch.uint8)), seed


@pytest.mark.parametrize("op", ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"])
def test_affine_ops_on_augmixs_batch_of_one_equal_torchvision(op):
    img = _random((1, 3, 37, 45), 1)
    for magnitude in (-0.29, 0.13, 7.0, -14.0, 23.5):
        for fill in (None, [10.0, 20.0, 30.0]):
            want = _apply_op(img, op, magnitude, InterpolationMode.BILINEAR, fill)
            assert torch.equal(fast_ops.apply_op(img, op, magnitude, InterpolationMode.BILINEAR,
                                                 fill), want), (magnitude, fill)


def test_augmix_mix_rounds_as_torchvisions_mixing():
    g = torch.Generator().manual_seed(2)
    batch = _random((1, 3, 29, 31), 3)
    for seed in range(20):
        chains = [_random((1, 3, 29, 31), 10 * seed + k) for k in range(3)]
        share = torch.rand(1, generator=g)
        weights = torch.rand(1, 3, generator=g).softmax(1) * (1 - share)
        first = share.reshape(1, 1, 1, 1)
        want = first * batch  # AugMix's mixing, as torchvision writes it
        for i, chain in enumerate(chains):
            want.add_(weights[:, i].reshape(1, 1, 1, 1) * chain)
        got = augment_common.augmix_combine(batch, [1, 1, 1, 1], first, weights, chains)
        assert torch.equal(got, want.to(torch.uint8)), seed


@pytest.mark.parametrize("name, key", [("adjust_brightness", "brightness_factor"),
                                       ("adjust_contrast", "contrast_factor"),
                                       ("adjust_saturation", "saturation_factor"),
                                       ("adjust_sharpness", "sharpness_factor")])
def test_v1_and_v2_blends_equal_each_versions_kernel(name, key):
    ops = {"adjust_brightness": "zero", "adjust_contrast": "mean", "adjust_saturation": "gray"}
    g = torch.Generator().manual_seed(4)
    for seed in range(12):
        img = _random((3, 5 + seed, 41 - seed), seed)  # sizes off the vector width
        for factor in (torch.rand(4, generator=g, dtype=torch.float64) * 2.5).tolist():
            for fused, fn in ((False, getattr(F1, name)), (True, getattr(F2, name))):
                want = fn(img, **{key: factor})
                if name == "adjust_sharpness":
                    got = kernels.sharpen(img, factor, fused)
                else:
                    got = kernels.blend(img, factor, ops[name], fused)
                assert torch.equal(got, want), (seed, factor, fused)


def test_interleave_is_a_pil_images_pixel_layout():
    img = _random((3, 7, 9), 5)
    assert torch.equal(torch.from_numpy(kernels.interleave(img)), img.permute(1, 2, 0))


def test_without_the_extension_the_fast_paths_keep_torchvisions_values(monkeypatch):
    from fastload.pipelines.fast import ops_v2 as fast_ops_v2

    monkeypatch.setattr(kernels, "AVAILABLE", False)
    img = _random((3, 19, 26), 6)
    for op, magnitude in [("Brightness", 0.4), ("Color", -0.3), ("Contrast", 0.7),
                          ("Sharpness", 0.5), ("ShearX", 0.2), ("Rotate", -17.0)]:
        for interpolation in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR):
            want = _apply_op(img, op, magnitude, interpolation, None)
            assert torch.equal(fast_ops.apply_op(img, op, magnitude, interpolation, None), want)
            # v2 has no torch-ops form of its own fast paths: torchvision runs
            assert fast_ops_v2.apply_op(img, op, magnitude, interpolation, {"others": None}) is None
    batch, chains = _random((1, 3, 9, 8), 7), [_random((1, 3, 9, 8), 8)]
    first, weights = torch.tensor([0.25]).reshape(1, 1, 1, 1), torch.tensor([[0.75]])
    want = (first * batch).add_(weights[:, 0].reshape(1, 1, 1, 1) * chains[0]).to(torch.uint8)
    assert torch.equal(augment_common.augmix_combine(batch, [1, 1, 1, 1], first, weights,
                                                     chains), want)


def _outcome(fn, *args, **kwargs):
    """A call's tensor, or its exception's type and message."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - compared with torchvision's own
        return type(e).__name__, str(e)


def _same(a, b) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
        else a == b


@pytest.mark.parametrize("factor", [1e39, 3e38, 1e37, 1.3e36])
def test_blend_factors_float32_cannot_hold_give_torchvisions_values(factor):
    # Before issue 35 a factor of 1e39 reached the C loops as inf (v1 brightness: 255 where
    # torchvision gives 0; v2 contrast returned pixels where torchvision raises), and 1e37
    # overflowed torch's float32 products in ways the loops do not replay.
    from fastload.pipelines.fast import ops_v2 as fast_ops_v2

    img = _random((3, 23, 31), 9)
    img[:, :3] = 0
    for name, key in [("adjust_brightness", "brightness_factor"),
                      ("adjust_contrast", "contrast_factor"),
                      ("adjust_saturation", "saturation_factor"),
                      ("adjust_sharpness", "sharpness_factor")]:
        for tv, fast in ((F1, fast_ops), (F2, fast_ops_v2)):
            want = _outcome(getattr(tv, name), img, **{key: factor})
            got = fast.adjust(img, name, {key: factor})
            got = want if got is None else got  # None: the caller runs torchvision
            assert _same(got, want), (name, tv.__name__)
    for op in ("Brightness", "Color", "Contrast", "Sharpness"):
        want = _outcome(_apply_op, img, op, factor, InterpolationMode.NEAREST, None)
        got = _outcome(fast_ops.apply_op, img, op, factor, InterpolationMode.NEAREST, None)
        assert _same(got, want), op


def test_kernels_refuse_a_negative_factor_in_torchvisions_words():
    img = _random((3, 8, 8), 10)
    with pytest.raises(ValueError, match=re.escape("brightness_factor (-1.0) is not non-negative.")):
        kernels.blend(img, -1.0, "zero", False)
    with pytest.raises(ValueError, match=re.escape("sharpness_factor (-0.5) is not non-negative.")):
        kernels.sharpen(img, -0.5, True)


@pytest.mark.parametrize("factor", [math.nan, math.inf, 1e39, 1e37])
def test_kernels_refuse_factors_their_float32_loops_cannot_blend(factor):
    img = _random((3, 8, 8), 11)
    with pytest.raises(ValueError, match="contrast_factor should be"):
        kernels.blend(img, factor, "mean", True)
    with pytest.raises(ValueError, match="sharpness_factor should be"):
        kernels.sharpen(img, factor, False)
    if abs(factor) <= kernels.FLOAT32_MAX:  # a float32 weight is AugMix's own to use
        return
    with pytest.raises(ValueError, match="AugMix's weight should be a finite number"):
        kernels.augmix_mix(img[None], torch.tensor(factor), [])


def test_sharpen_refuses_plane_sizes_whose_product_overflows():
    # 5 * 3689348814741910325 = 2**64 + 9: wrapped to 9, a divisor of the 27 bytes, the loop
    # read far past them before issue 35 (a heap-buffer-overflow)
    src = np.zeros(27, np.uint8)
    with pytest.raises(ValueError, match="uint8 planes of h x w"):
        kernels._c.sharpen(src, np.zeros(27, np.uint8), 5, 3689348814741910325, 0.5, 0.5, False)


@pytest.mark.parametrize("nearest", [False, True])
def test_grid_sample_reads_nothing_at_far_or_nan_locations(nearest):
    img = _random((3, 6, 7), 12)
    grid = torch.tensor([[[[1e10, 0.1], [-1e10, 0.2], [0.3, 3e38], [math.inf, 0.0],
                           [math.nan, 0.0], [0.1, -math.inf], [0.0, 0.0]]]], dtype=torch.float32)
    got = kernels.grid_sample(img, grid, nearest, False)
    assert torch.equal(got[:, :, :6], torch.zeros(3, 1, 6))
    # the far finite ones read nothing in torch's own grid_sample too (3e38 * w/2 is inf there)
    want = torch.nn.functional.grid_sample(img[None].float(), grid[:, :, [0, 1, 6]],
                                           mode="nearest" if nearest else "bilinear",
                                           padding_mode="zeros", align_corners=False)[0]
    assert torch.equal(got[:, :, [0, 1, 6]], want)
