"""torchvision transforms -> TransformPlan: every supported transform, every refusal named."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from torchvision.transforms import v2

from fastload.pipelines.prefix import geometry as g
from fastload.pipelines.translate import TransformPlan, UnsupportedTransform, translate

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def test_val_transform_becomes_resize_then_center_crop_with_float_output():
    plan = translate(T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()]))
    assert isinstance(plan, TransformPlan)
    assert plan.steps == (g.Resize((256,), None, "linear", True), g.CenterCrop((224, 224)))
    assert plan.output_dtype == torch.float32
    assert plan.mean == (0.0, 0.0, 0.0) and plan.std == pytest.approx((255.0,) * 3)
    assert not plan.decode_roi and not plan.pad_crop
    assert "Resize -> CenterCrop -> ToTensor" in plan.describe()


def test_train_transform_keeps_scale_ratio_p_and_folds_normalize():
    plan = translate(
        T.Compose(
            [
                T.RandomResizedCrop(176, scale=(0.35, 1.0), ratio=(0.5, 2.0)),
                T.RandomHorizontalFlip(0.25),
                T.RandomVerticalFlip(0.75),
                T.ToTensor(),
                T.Normalize(MEAN, STD),
            ]
        )
    )
    assert plan.steps == (
        g.RandomResizedCrop((176, 176), (0.35, 1.0), (0.5, 2.0), "linear", True),
        g.Flip(0.25, vertical=False),
        g.Flip(0.75, vertical=True),
    )
    assert plan.decode_roi and plan.has_vflip
    assert plan.mean == pytest.approx(tuple(255 * m for m in MEAN))
    assert plan.std == pytest.approx(tuple(255 * s for s in STD))


@pytest.mark.parametrize(
    ("transform", "dtype", "mean", "std"),
    [
        (T.PILToTensor(), torch.uint8, 0.0, 1.0),
        (
            T.Compose([T.PILToTensor(), T.ConvertImageDtype(torch.float32)]),
            torch.float32,
            0.0,
            255.0,
        ),
        (
            v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]),
            torch.float32,
            0.0,
            255.0,
        ),
        (
            v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=False)]),
            torch.float32,
            0.0,
            1.0,
        ),
        (
            v2.Compose([v2.PILToTensor(), v2.ToDtype(torch.float16, scale=True)]),
            torch.float16,
            0.0,
            255.0,
        ),
        (v2.Compose([v2.ToImage(), v2.ToPureTensor()]), torch.uint8, 0.0, 1.0),
        (T.Compose([T.ToTensor(), T.Normalize([0.5], [0.25])]), torch.float32, 127.5, 63.75),
    ],
)
def test_tensor_conversions_give_torchvision_dtype_and_scale(transform, dtype, mean, std):
    plan = translate(transform)
    assert plan.output_dtype == dtype
    assert plan.mean == pytest.approx((mean,) * 3) and plan.std == pytest.approx((std,) * 3)


def test_resize_variants_keep_size_max_size_and_interpolation():
    plan = translate(
        T.Compose(
            [
                T.Resize((300, 200), interpolation=T.InterpolationMode.BICUBIC),
                T.ToTensor(),
            ]
        )
    )
    assert plan.steps == (g.Resize((300, 200), None, "cubic", True),)
    plan = translate(
        T.Compose(
            [T.Resize(128, max_size=160, interpolation=T.InterpolationMode.NEAREST), T.ToTensor()]
        )
    )
    assert plan.steps == (g.Resize((128,), 160, "nearest", True),)


def test_random_crop_padding_and_fill_are_kept():
    plan = translate(T.Compose([T.RandomCrop(32, padding=(1, 2), fill=7), T.ToTensor()]))
    assert plan.steps == (g.RandomCrop((32, 32), (1, 2, 1, 2), False, (7,)),)
    assert plan.pad_crop and plan.decode_roi and plan.fill == (7,)
    plan = translate(T.Compose([T.RandomCrop(32, pad_if_needed=True), T.ToTensor()]))
    assert plan.steps[0].pad_if_needed


def test_color_jitter_ranges_are_torchvisions():
    plan = translate(T.Compose([T.ColorJitter(0.4, (0.5, 1.5), 0.2, 0.1), T.ToTensor()]))
    assert plan.jitter == g.ColorJitter((0.6, 1.4), (0.5, 1.5), (0.8, 1.2), (-0.1, 0.1))
    plan = translate(T.Compose([T.ColorJitter(brightness=0.3), T.ToTensor()]))
    assert plan.jitter.contrast is None and plan.jitter.hue is None


def test_v2_transforms_translate_like_v1():
    v1_plan = translate(
        T.Compose(
            [
                T.RandomResizedCrop(224),
                T.RandomHorizontalFlip(),
                T.ToTensor(),
                T.Normalize(MEAN, STD),
            ]
        )
    )
    v2_plan = translate(
        v2.Compose(
            [
                v2.RandomResizedCrop(224),
                v2.RandomHorizontalFlip(),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN, STD),
            ]
        )
    )
    assert v1_plan.steps == v2_plan.steps
    assert v1_plan.mean == pytest.approx(v2_plan.mean) and v1_plan.std == pytest.approx(v2_plan.std)


def test_antialias_false_applies_only_to_tensor_inputs():
    on_pil = translate(T.Compose([T.Resize(64, antialias=False), T.ToTensor()]))
    on_tensor = translate(v2.Compose([v2.ToImage(), v2.Resize(64, antialias=False)]))
    assert on_pil.antialias is True and on_tensor.antialias is False


class _MyCrop(T.CenterCrop):
    pass


@pytest.mark.parametrize("transform", [
    T.Compose([T.ToTensor(), T.Resize((48, 40), interpolation=T.InterpolationMode.NEAREST)]),
    v2.Compose([v2.ToImage(), v2.Resize(40, interpolation=v2.InterpolationMode.NEAREST)]),
    v2.Compose([v2.ToImage(), v2.RandomResizedCrop(32, interpolation=0)]),
], ids=["v1-resize", "v2-resize", "v2-random-resized-crop"])
def test_nearest_on_a_tensor_is_refused_where_dali_samples_other_pixels(transform):
    # torch's tensor NEAREST takes floor(i * scale); DALI, Pillow and NEAREST_EXACT the centres
    with pytest.raises(UnsupportedTransform, match="NEAREST_EXACT"):
        translate(transform)


@pytest.mark.parametrize("steps", [
    [T.ColorJitter(contrast=0.4), T.CenterCrop(32)],
    [T.Resize(64), T.CenterCrop(48), T.ColorJitter(contrast=0.4), T.RandomCrop(32)],
], ids=["no-resize-before", "a-crop-between"])
def test_a_crop_after_a_contrast_jitter_that_the_graph_cannot_cut_after_it_is_refused(steps):
    with pytest.raises(UnsupportedTransform, match="crops after ColorJitter"):
        translate(T.Compose([*steps, T.ToTensor()]))


def test_only_a_contrast_jitter_is_applied_before_the_crop_after_it():
    plan = translate(T.Compose([T.ColorJitter(brightness=0.4, saturation=0.4),
                                T.CenterCrop(32), T.ToTensor()]))
    assert not plan.jitter_before_crop
    plan = translate(T.Compose([T.Resize(64), T.ColorJitter(contrast=0.4), T.CenterCrop(32),
                                T.ToTensor()]))
    assert plan.jitter_before_crop and plan.pad_crop


def test_nearest_on_a_pil_image_and_nearest_exact_on_a_tensor_translate():
    for transform in (
            T.Compose([T.Resize(40, interpolation=T.InterpolationMode.NEAREST), T.ToTensor()]),
            v2.Compose([v2.ToImage(),
                        v2.Resize(40, interpolation=v2.InterpolationMode.NEAREST_EXACT)])):
        assert translate(transform).interpolation == "nearest"


@pytest.mark.parametrize(
    ("transform", "name"),
    [
        (None, "transform=None"),
        (T.Compose([T.Lambda(lambda x: x), T.ToTensor()]), "Lambda"),
        (T.Compose([T.RandomRotation(10), T.ToTensor()]), "RandomRotation"),
        (T.Compose([_MyCrop(10), T.ToTensor()]), "_MyCrop"),
        (T.Compose([T.Grayscale(), T.ToTensor()]), "Grayscale"),
        (
            T.Compose([T.RandomCrop(8, padding=2, padding_mode="reflect"), T.ToTensor()]),
            "RandomCrop",
        ),
        (T.Compose([T.Resize(8, interpolation=T.InterpolationMode.BOX), T.ToTensor()]), "Resize"),
        (T.Compose([T.Resize(64), T.RandomResizedCrop(32), T.ToTensor()]), "RandomResizedCrop"),
        (T.Compose([T.RandomCrop(8, padding=2), T.Resize(16), T.ToTensor()]), "Resize"),
        (T.Compose([T.ColorJitter(0.1), T.ColorJitter(0.2), T.ToTensor()]), "ColorJitter"),
        (
            T.Compose([T.Resize(64), T.RandomCrop(60, padding=4), T.CenterCrop(70), T.ToTensor()]),
            "CenterCrop",
        ),
        (T.Compose([T.CenterCrop(60), T.RandomCrop(50, padding=4), T.ToTensor()]), "RandomCrop"),
        (T.Compose([T.ToTensor(), T.ColorJitter(0.1)]), "ColorJitter"),
        (T.Compose([T.ToTensor(), T.Normalize(MEAN, STD), T.CenterCrop(8)]), "CenterCrop"),
        (T.Compose([T.ToTensor(), T.ToTensor()]), "ToTensor"),
        (T.Compose([T.Normalize(MEAN, STD)]), "Normalize"),
        (T.Compose([T.Resize(64), T.CenterCrop(32)]), "Resize -> CenterCrop"),
        (T.Compose([T.ToTensor(), T.ConvertImageDtype(torch.uint8)]), "ConvertImageDtype"),
        (T.Compose([T.PILToTensor(), T.ConvertImageDtype(torch.int32)]), "ConvertImageDtype"),
        (v2.Compose([v2.ToDtype(torch.float32, scale=True)]), "ToDtype"),
        (v2.Compose([v2.ToImage(), v2.ToDtype({torch.Tensor: torch.float32})]), "ToDtype"),
        (
            v2.Compose([v2.RandomCrop(8, padding=1, fill={torch.Tensor: 1}), v2.ToImage()]),
            "RandomCrop",
        ),
        (v2.Compose([v2.RandomErasing(), v2.ToImage()]), "RandomErasing"),
    ],
)
def test_unsupported_transforms_raise_naming_the_transform(transform, name):
    with pytest.raises(UnsupportedTransform) as info:
        translate(transform)
    assert info.value.transform_name == name
    assert name in str(info.value)
    assert isinstance(info.value, ValueError)
