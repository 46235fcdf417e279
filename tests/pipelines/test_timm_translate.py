"""timm's RandomResizedCropAndInterpolation(interpolation='random'), ResizeKeepRatio and
CenterCropOrPad: translated plans, per-sample interpolation, and timm's create_transform
recipes on one DALI graph giving what torch's DataLoader gives."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image
from torch.utils.data import DataLoader as TorchDataLoader
from torchvision.datasets import ImageFolder

import fastload
from fastload import FallbackWarning
from fastload.pipelines import draws
from fastload.pipelines.decode.batch_decoder import BatchDecoder
from fastload.pipelines.prefix import geometry as g
from fastload.pipelines.translate import UnsupportedTransform, translate

timm_transforms = pytest.importorskip("timm.data.transforms")
timm_factory = pytest.importorskip("timm.data.transforms_factory")

CROP = 48
MODES = {"linear": T.InterpolationMode.BILINEAR, "cubic": T.InterpolationMode.BICUBIC}


@pytest.fixture(scope="module")
def images(synth_root):
    """(path, encoded bytes, (height, width)) of the generated train images."""
    out = []
    for path in sorted((synth_root / "train").glob("*/*.jpg")):
        with Image.open(path) as im:
            out.append((path, path.read_bytes(), (im.height, im.width)))
    return out


def _pil(path) -> Image.Image:
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def _no_fallback(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        loader = fastload.DataLoader(dataset, **kwargs)
    assert "torch suffix: none" in str(loader.plan)
    return loader


# ---------------------------------------------------------------- plans
def test_random_interpolation_becomes_a_per_sample_choice_of_timms_modes():
    t = timm_transforms.RandomResizedCropAndInterpolation(CROP, interpolation="random")
    plan = translate(T.Compose([t, T.ToTensor()]))
    assert plan.steps == (
        g.RandomResizedCrop((CROP, CROP), (0.08, 1.0), (3 / 4, 4 / 3), ("linear", "cubic"), True),
    )
    assert plan.interpolations == ("linear", "cubic")
    assert [m.value for m in t.interpolation] == ["bilinear", "bicubic"]  # timm's tuple


def test_fixed_interpolation_of_timms_crop_is_one_mode():
    t = timm_transforms.RandomResizedCropAndInterpolation(CROP, interpolation="bicubic")
    plan = translate(T.Compose([t, T.ToTensor()]))
    assert plan.steps[0].interpolation == "cubic" and plan.interpolations == ("cubic",)


def test_resize_keep_ratio_and_center_crop_or_pad_keep_their_parameters():
    fill = (124, 116, 104)
    plan = translate(
        T.Compose(
            [
                timm_transforms.ResizeKeepRatio((56, 50), longest=1.0, interpolation="bicubic"),
                timm_transforms.CenterCropOrPad(CROP, fill=list(fill)),
                T.ToTensor(),
            ]
        )
    )
    assert plan.steps == (
        g.ResizeKeepRatio((56, 50), 1.0, "cubic", True),
        g.CenterCrop((CROP, CROP), fill),
    )
    assert plan.has_resize and plan.pad_crop and plan.fill == fill and not plan.decode_roi


def test_keep_ratio_with_the_shorter_side_fitting_never_pads():
    plan = translate(
        T.Compose(
            [timm_transforms.ResizeKeepRatio((56, 50)), T.CenterCrop((CROP, CROP)), T.ToTensor()]
        )
    )
    assert not plan.pad_crop


@pytest.mark.parametrize(
    ("transform", "name", "why"),
    [
        (timm_transforms.ResizeKeepRatio(CROP, random_scale_prob=0.5), "ResizeKeepRatio",
         "random_scale_prob"),
        (timm_transforms.ResizeKeepRatio(CROP, random_aspect_prob=0.5), "ResizeKeepRatio",
         "random_aspect_prob"),
        (timm_transforms.CenterCropOrPad(CROP, padding_mode="reflect"), "CenterCropOrPad",
         "padding_mode='reflect'"),
        (timm_transforms.RandomCropOrPad(CROP), "RandomCropOrPad", "no DALI translation"),
    ],
)
def test_untranslated_timm_variants_raise_naming_the_argument(transform, name, why):
    with pytest.raises(UnsupportedTransform, match=why) as info:
        translate(T.Compose([transform, T.ToTensor()]))
    assert info.value.transform_name == name


@pytest.mark.parametrize("mode", ["rkrc", "rkrr"])
def test_timm_keep_ratio_train_crop_modes_still_raise(mode):
    transform = timm_factory.create_transform(CROP, is_training=True, train_crop_mode=mode)
    with pytest.raises(UnsupportedTransform, match="random_scale_prob"):
        translate(transform)


# ---------------------------------------------------------------- arithmetic
def test_keep_ratio_output_size_is_timms_arithmetic():
    sizes = [(64, 160), (160, 64), (97, 101), (1, 300), (333, 500), (224, 224), (1080, 1920)]
    for target in [(256, 256), (224, 192), (37, 61)]:
        for longest in (0.0, 0.25, 1.0):
            t = timm_transforms.ResizeKeepRatio(target, longest=longest)
            for h, w in sizes:
                img = Image.new("RGB", (w, h))
                expected = t.get_params(img, t.size, t.longest)
                if min(expected) <= 0:
                    continue
                assert list(g.keep_ratio_output_size(h, w, target, longest)) == expected


def test_center_crop_or_pad_boxes_are_timms():
    """The padded crop geometry places every pixel where timm's center_crop_or_pad does."""
    fill = (9, 99, 199)
    step = g.CenterCrop((7, 10), fill)
    rng = np.random.default_rng(0)
    for h, w in [(4, 4), (5, 12), (12, 5), (7, 10), (9, 13), (3, 20)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        ref = np.asarray(
            timm_transforms.center_crop_or_pad(Image.fromarray(img), [7, 10], fill=list(fill))
        )
        p = g.draw_sample((step,), h, w, torch.Generator())
        dy, dx, dh, dw = p.decode  # decoded region; the crop is relative to it, may pad
        top, left, ch, cw = p.crop or (0, 0, dh, dw)
        ours = np.empty((ch, cw, 3), np.uint8)
        ours[:] = fill
        ys, xs = slice(max(top, 0), min(top + ch, dh)), slice(max(left, 0), min(left + cw, dw))
        region = img[dy : dy + dh, dx : dx + dw]
        ours[ys.start - top : ys.stop - top, xs.start - left : xs.stop - left] = region[ys, xs]
        assert np.array_equal(ours, ref), (h, w)


# ---------------------------------------------------------------- per-sample interpolation
def test_random_interpolation_frequencies_are_timms():
    """Each mode of timm's tuple with probability 1/len (random.choice), within 4.5 sigma."""
    t = timm_transforms.RandomResizedCropAndInterpolation(CROP, interpolation="random")
    plan = translate(T.Compose([t, T.ToTensor()]))
    n, gen = 4000, torch.Generator().manual_seed(0)
    counts: dict[str, int] = {}
    for _ in range(n):
        mode = g.draw_sample(plan.steps, 120, 90, gen).interpolation
        counts[mode] = counts.get(mode, 0) + 1
    assert set(counts) == {"linear", "cubic"}
    p = 1 / len(t.interpolation)
    bound = 4.5 * math.sqrt(n * p * (1 - p))
    for mode in counts:
        assert abs(counts[mode] - n * p) <= bound, counts
    # timm's own draw, for reference: the same 1/2 split
    rng = random.Random(0)
    timm_cubic = sum(rng.choice(t.interpolation) == T.InterpolationMode.BICUBIC for _ in range(n))
    assert abs(timm_cubic - n * p) <= bound


def test_fixed_modes_draw_nothing_extra():
    """A fixed interpolation leaves the generator stream as torchvision's crop leaves it."""
    steps = translate(T.Compose([T.RandomResizedCrop(CROP), T.ToTensor()])).steps
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert g.draw_sample(steps, 100, 80, a).interpolation == "linear"
    draws.resized_crop_box(100, 80, (0.08, 1.0), (3 / 4, 4 / 3), b)
    assert torch.equal(a.get_state(), b.get_state())


def _decode(plan, images, seed: int, resampler: str) -> torch.Tensor:
    with BatchDecoder(plan, max_batch_size=len(images), resampler=resampler) as dec:
        dec.submit([p[1] for p in images], [p[2] for p in images],
                   torch.Generator().manual_seed(seed))
        return dec.fetch()


@pytest.mark.parametrize("resampler", ["dali", "torch"])
def test_each_sample_is_resampled_with_its_drawn_mode(images, resampler):
    """ResizeKeepRatio draws nothing but the mode: each sample equals, exactly, the same
    sample from the plan fixed to its mode."""
    def plan(interpolation):
        return translate(T.Compose([
            timm_transforms.ResizeKeepRatio((40, 40), interpolation=interpolation),
            T.CenterCrop(36), T.ToTensor()]))

    images = images[:16]
    random_plan = plan("random")
    drawn = [
        g.draw_sample(random_plan.steps, *p[2], gen).interpolation
        for gen in [torch.Generator().manual_seed(5)] for p in images
    ]
    assert set(drawn) == {"linear", "cubic"}
    out = _decode(random_plan, images, 5, resampler)
    fixed = {m: _decode(plan(name), images, 5, resampler)
             for m, name in (("linear", "bilinear"), ("cubic", "bicubic"))}
    assert not torch.equal(fixed["linear"], fixed["cubic"])
    for i, mode in enumerate(drawn):
        assert torch.equal(out[i], fixed[mode][i]), (i, mode)


@pytest.mark.parametrize("resampler", ["dali", "torch"])
def test_random_interpolation_crop_matches_pil_per_sample(images, resampler):
    """Each sample: torchvision's resized_crop of the drawn box with the drawn mode."""
    t = timm_transforms.RandomResizedCropAndInterpolation(CROP, interpolation="random")
    plan = translate(T.Compose([t, T.ToTensor()]))
    images = images[:12]
    gen = torch.Generator().manual_seed(11)
    params = [g.draw_sample(plan.steps, *p[2], gen) for p in images]
    out = _decode(plan, images, 11, resampler)
    for (path, _, _), p, got in zip(images, params, out, strict=True):
        top, left, h, w = p.decode
        ref = F.to_tensor(F.resized_crop(_pil(path), top, left, h, w, [CROP, CROP],
                                         MODES[p.interpolation]))
        assert float((got - ref).abs().mean()) <= 0.01, p


# ---------------------------------------------------------------- create_transform, end to end
@pytest.mark.parametrize("crop_pct", [0.875, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("crop_mode", ["center", "squash", "border"])
def test_timm_eval_crop_modes_are_one_dali_graph_with_torchs_values(synth_root, crop_mode,
                                                                      crop_pct):
    transform = timm_factory.create_transform(CROP, is_training=False, crop_mode=crop_mode,
                                              crop_pct=crop_pct)
    dataset = ImageFolder(synth_root / "val", transform)
    ours = list(_no_fallback(dataset, batch_size=8, num_workers=2))
    ref = list(TorchDataLoader(dataset, batch_size=8))
    assert len(ours) == len(ref)
    for (images, labels), (r_images, r_labels) in zip(ours, ref, strict=True):
        assert torch.equal(labels, r_labels)
        assert images.shape == r_images.shape and images.dtype == r_images.dtype
        # per image, in ToTensor units (Normalize divides by std ~0.225)
        mad = (images - r_images).abs().flatten(1).mean(1) * 0.225
        assert float(mad.max()) <= 0.01, mad


def test_timm_border_mode_pads_with_its_fill(synth_root):
    """'border' mode: the rows timm fills with the mean colour are that colour here too."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    transform = timm_factory.create_transform(CROP, is_training=False, crop_mode="border",
                                              crop_pct=1.0)
    plan = translate(transform)
    assert plan.fill == tuple(round(255 * v) for v in mean)
    dataset = ImageFolder(synth_root / "val", transform)
    ours = torch.cat([x for x, _ in _no_fallback(dataset, batch_size=16)])
    ref = torch.cat([x for x, _ in TorchDataLoader(dataset, batch_size=16)])
    value = torch.tensor([(f / 255 - m) / s for f, m, s in zip(plan.fill, mean, std, strict=True)])
    filled = lambda x: (x - value.view(1, 3, 1, 1)).abs().amax(dim=(1, 3)) < 1e-4  # noqa: E731
    rows = filled(ref)  # (N, H): rows entirely of the fill colour
    assert rows.any()
    assert torch.equal(filled(ours)[rows], rows[rows])


def test_timm_train_random_interpolation_keeps_the_fast_path_like_torch(synth_root):
    transform = timm_factory.create_transform(CROP, is_training=True, interpolation="random")
    dataset = ImageFolder(synth_root / "train", transform)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        loader = fastload.DataLoader(dataset, batch_size=16, num_workers=2, seed=0)
    # on the CPU the jitter runs in the torch suffix (faster there than DALI's CPU operators)
    assert ("DALI graph: decode -> RandomResizedCropAndInterpolation -> RandomHorizontalFlip -> "
            "uint8 CHW\ntorch suffix (per sample): ColorJitter") in str(loader.plan)
    ours, ref = [], []
    random.seed(0)
    torch.manual_seed(0)
    np.random.seed(0)
    for epoch in range(3):
        loader.set_epoch(epoch)
        ours.extend(x for x, _ in loader)
        ref.extend(x for x, _ in TorchDataLoader(dataset, batch_size=16, shuffle=False))
    ours, ref = torch.cat(ours), torch.cat(ref)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    for stat in (lambda x: x.mean(dim=(0, 2, 3)), lambda x: x.std(dim=(0, 2, 3))):
        assert torch.allclose(stat(ours), stat(ref), atol=0.15), (stat(ours), stat(ref))
