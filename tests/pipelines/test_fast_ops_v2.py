"""fastload.pipelines.fast.ops_v2 returns torchvision v2's values and types, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from fastload.pipelines.fast import kernels
from fastload.pipelines.fast import ops_v2 as fast_ops_v2
from fastload.pipelines.seams.torch_private import v2_apply_autoaugment_op

pytestmark = pytest.mark.skipif(not kernels.AVAILABLE, reason="the C extension is not built")

OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
       "Invert"]
FAST = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
        "Contrast", "Sharpness", "Solarize"}
NEAREST, BILINEAR = v2.InterpolationMode.NEAREST, v2.InterpolationMode.BILINEAR


def _magnitudes(op: str, height: int, width: int) -> list[float]:
    """Every (signed) magnitude v2's RandAugment (31 bins), TrivialAugmentWide, AugMix and
    AutoAugment draw for ``op``."""
    out: set[float] = {0.0}
    for t, bins in ((v2.RandAugment, 31), (v2.TrivialAugmentWide, 31), (v2.AugMix, 10),
                    (v2.AutoAugment, 10)):
        space = t._AUGMENTATION_SPACE
        if op not in space:
            continue
        fn, signed = space[op]
        values = fn(bins, height, width)
        if values is None:
            continue
        for m in values.reshape(-1).tolist():
            out.update({float(m), -float(m)} if signed else {float(m)})
    return sorted(out)


def _image(shape, seed: int, kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    h, w = shape[-2:]  # a smooth low-contrast picture
    y = torch.linspace(0, 1, h).view(-1, 1)
    x = torch.linspace(0, 1, w).view(1, -1)
    return (90 + 40 * torch.sin(5 * x) * torch.cos(3 * y) + 20 * x).expand(shape).to(
        torch.uint8).contiguous()


def _left_to_v2(op: str, magnitude: float, shape) -> bool:
    """Where v2 returns the input itself or makes no grid, the fast path steps aside."""
    return (op not in FAST or (op == "Sharpness" and min(shape[-2:]) <= 2)
            or (op == "Color" and shape[-3] == 1) or (op == "Rotate" and magnitude % 90 == 0))


SHAPES = [(3, 1, 1), (1, 3, 3), (3, 7, 5), (3, 31, 17), (1, 3, 40, 64)]


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_op_equals_v2_on_plain_tensors_and_images(op, shape):
    for kind in ("random", "smooth"):
        base = _image(shape, len(op), kind)
        magnitudes = _magnitudes(op, shape[-2], shape[-1])
        if shape[-1] * shape[-2] > 500:  # a sample of the bins: each kind takes every third
            magnitudes = magnitudes[(kind == "smooth")::3]
        for img in (base, tv_tensors.Image(base) if base.ndim == 3 else base):
            for k, magnitude in enumerate(magnitudes):
                interpolation = (NEAREST, BILINEAR)[k % 2]
                fill = {"others": None} if k % 3 else {"others": [10.0, 128.5, 300.0][:shape[-3]]}
                want = v2_apply_autoaugment_op(img, op, magnitude, interpolation, fill)
                got = fast_ops_v2.apply_op(img, op, magnitude, interpolation, fill)
                if got is None:
                    assert _left_to_v2(op, magnitude, shape), (op, magnitude)
                    continue
                assert type(got) is type(want), (op, magnitude)
                assert torch.equal(got, want), (op, magnitude, interpolation, fill)


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(FAST - {"Solarize"}))
@pytest.mark.parametrize("fill", [0, 77.5, (1, 2, 3)], ids=str)
def test_affine_and_colour_ops_take_every_fill_v2_takes(op, fill):
    img = _image((3, 33, 40), 3, "random")
    t = v2.RandAugment(fill=fill)
    for magnitude in _magnitudes(op, 33, 40)[::4]:
        for interpolation in (NEAREST, BILINEAR):
            want = v2_apply_autoaugment_op(img, op, magnitude, interpolation, t._fill)
            got = fast_ops_v2.apply_op(img, op, magnitude, interpolation, t._fill)
            if got is None:
                assert _left_to_v2(op, magnitude, img.shape), magnitude
                continue
            assert torch.equal(got, want), (magnitude, interpolation)


@pytest.mark.parametrize("name, key", [("adjust_brightness", "brightness_factor"),
                                       ("adjust_contrast", "contrast_factor"),
                                       ("adjust_saturation", "saturation_factor"),
                                       ("adjust_sharpness", "sharpness_factor")])
def test_adjust_functions_equal_v2_for_arbitrary_factors(name, key):
    g = torch.Generator().manual_seed(7)
    img = torch.randperm(3 * 48 * 49, generator=g).remainder(256).to(torch.uint8).view(3, 48, 49)
    for factor in (torch.rand(40, generator=g, dtype=torch.float64) * 3).tolist():
        for x in (img, tv_tensors.Image(img)):
            want = getattr(F, name)(x, **{key: factor})
            got = fast_ops_v2.adjust(x, name, {key: factor})
            assert type(got) is type(want) and torch.equal(got, want), factor


def test_inputs_outside_the_fast_paths_are_left_to_v2():
    img = _image((3, 16, 16), 1, "random")
    assert fast_ops_v2.apply_op(img.float(), "Brightness", 0.3, NEAREST, {"others": None}) is None
    assert fast_ops_v2.apply_op(img[..., ::2], "Contrast", 0.3, NEAREST, {"others": None}) is None
    assert fast_ops_v2.apply_op(img, "Brightness", -1.5, NEAREST, {"others": None}) is None
    assert fast_ops_v2.apply_op(img, "Rotate", 90.0, NEAREST, {"others": None}) is None
    batch = _image((2, 3, 16, 16), 1, "random")
    assert fast_ops_v2.apply_op(batch, "ShearX", 0.2, NEAREST, {"others": None}) is None
    assert fast_ops_v2.adjust(img, "adjust_hue", {"hue_factor": 0.1}) is None
