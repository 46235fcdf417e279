"""Value parity with torchvision (PIL loader) and train-time parameter distributions."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.functional import _compute_resized_output_size

from fastload.pipelines import draws
from fastload.pipelines.decode.batch_decoder import BatchDecoder
from fastload.pipelines.prefix import geometry as g
from fastload.pipelines.translate import translate

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
VAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])


@pytest.fixture(scope="module")
def photos(synth_photos):
    """(path, encoded bytes, (height, width)) of every generated photo."""
    out = []
    for path in sorted(synth_photos.glob("*/*/*.jpg")):
        with Image.open(path) as im:
            out.append((path, path.read_bytes(), (im.height, im.width)))
    return out


def _pil(path) -> Image.Image:
    """What ImageFolder's default_loader returns."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def _per_image_mad(transform, photos, seed_base=None, **decoder_kwargs) -> list[float]:
    """Mean absolute difference per image between fastload and torchvision.

    With ``seed_base``, image ``i`` is transformed by torchvision after
    ``torch.manual_seed(seed_base + i)`` and by fastload with a generator seeded the same.
    """
    mads = []
    with BatchDecoder(translate(transform), max_batch_size=len(photos), **decoder_kwargs) as dec:
        if seed_base is None:
            dec.submit([p[1] for p in photos], [p[2] for p in photos], torch.Generator())
            outs = list(dec.fetch())
        else:
            outs = []
            for i, p in enumerate(photos):
                dec.submit([p[1]], [p[2]], torch.Generator().manual_seed(seed_base + i))
                outs.append(dec.fetch()[0])
    for i, (p, out) in enumerate(zip(photos, outs, strict=True)):
        if seed_base is not None:
            torch.manual_seed(seed_base + i)
        ref = transform(_pil(p[0]))
        assert out.shape == ref.shape and out.dtype == ref.dtype
        mads.append(float((out.float() - ref.float()).abs().mean()))
    return mads


@pytest.mark.parametrize("resampler", ["dali", "torch"])
def test_val_transform_matches_torchvision_within_0_01_for_every_image(photos, resampler):
    mads = _per_image_mad(VAL, photos, resampler=resampler)
    assert len(mads) == 12
    assert max(mads) <= 0.01, f"per-image MAD max {max(mads):.5f}, median {np.median(mads):.5f}"


def test_v2_val_transform_with_normalize_matches_torchvision(photos):
    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(256),
            v2.CenterCrop(224),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    assert max(_per_image_mad(transform, photos[:4])) <= 0.01 / min(STD)


@pytest.mark.parametrize("resampler", ["dali", "torch"])
def test_train_transform_with_same_seed_reproduces_torchvision(photos, resampler):
    transform = T.Compose(
        [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )
    mads = _per_image_mad(transform, photos, seed_base=100, resampler=resampler)
    assert max(mads) <= 0.01 / min(STD)


@pytest.mark.parametrize(
    "transform",
    [
        T.Compose(
            [
                T.RandomResizedCrop(96, interpolation=T.InterpolationMode.BICUBIC),
                T.RandomVerticalFlip(),
                T.ToTensor(),
            ]
        ),
        T.Compose([T.Resize((100, 150)), T.RandomHorizontalFlip(), T.PILToTensor()]),
        v2.Compose(
            [
                v2.ToImage(),
                v2.RandomResizedCrop(96, antialias=False),
                v2.ToDtype(torch.float16, scale=True),
            ]
        ),
        T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
        T.Compose(
            [T.RandomHorizontalFlip(), T.Resize(90), T.RandomCrop(80), T.RandomHorizontalFlip(),
             T.PILToTensor()]
        ),
    ],
    ids=["bicubic-vflip", "fixed-size-uint8", "v2-no-antialias-float16", "val",
         "resize-randomcrop-hflip"],
)
def test_torch_resampler_reproduces_torchvision_to_a_grey_level(photos, transform):
    scale = 1.0 if translate(transform).output_dtype == torch.uint8 else 255.0
    mads = _per_image_mad(transform, photos[:6], seed_base=11, resampler="torch")
    assert max(mads) * scale <= 0.5


@pytest.mark.parametrize(
    "steps",
    [
        [
            T.RandomVerticalFlip(),
            T.Resize(64),
            T.RandomCrop(60, padding=(3, 5), fill=(10, 200, 30)),
            T.RandomHorizontalFlip(),
            T.CenterCrop((50, 40)),
        ],
        [T.Resize(64), T.RandomHorizontalFlip(), T.CenterCrop((70, 51))],
        [T.RandomCrop(250), T.RandomVerticalFlip(), T.CenterCrop(200)],
        [T.CenterCrop(600)],
    ],
    ids=["padded-random-crop", "padded-center-crop", "crops-no-resize", "center-crop-pads-source"],
)
def test_crops_padding_and_flips_reproduce_torchvision(photos, steps):
    transform = T.Compose([*steps, T.PILToTensor()])
    # uint8 output: a mean difference below one grey level per pixel
    assert max(_per_image_mad(transform, photos[:6], seed_base=7)) <= 0.5


def test_color_jitter_matches_torchvision_closely(photos):
    transform = T.Compose(
        [T.RandomResizedCrop(96), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToTensor()]
    )
    # torchvision applies the three in a random order, fastload in a fixed one: close, not equal
    assert max(_per_image_mad(transform, photos[:6], seed_base=3)) <= 0.02


@pytest.mark.parametrize("steps", [
    [T.Resize(64), T.ColorJitter(contrast=(0.5, 0.5)), T.CenterCrop(32)],
    [T.Resize(64), T.ColorJitter(contrast=(0.2, 0.2)), T.RandomHorizontalFlip(1.0),
     T.RandomCrop(40, padding=4, fill=(10, 200, 30))],
], ids=["center-crop", "flip-and-padded-random-crop"])
def test_contrast_before_a_crop_blends_with_the_mean_grey_of_the_uncropped_image(photos, steps):
    # the crop's own mean grey moved whole images by up to 0.06
    transform = T.Compose([*steps, T.ToTensor()])
    assert max(_per_image_mad(transform, photos[:6], seed_base=5)) <= 0.01


def test_hue_jitter_reproduces_torchvisions_hsv_shift(photos):
    transform = T.Compose([T.Resize(64), T.CenterCrop(64), T.ColorJitter(hue=0.2), T.ToTensor()])
    # within PIL's own rounding of H, S and V to 8 bits
    assert max(_per_image_mad(transform, photos[:4], seed_base=0)) <= 0.01


def test_normalize_output_is_to_tensor_output_shifted_and_scaled(photos):
    plain = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
    normed = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    batch = ([p[1] for p in photos[:3]], [p[2] for p in photos[:3]])
    with (
        BatchDecoder(translate(plain), max_batch_size=3) as a,
        BatchDecoder(translate(normed), max_batch_size=3) as b,
    ):
        a.submit(*batch, torch.Generator())
        b.submit(*batch, torch.Generator())
        x, y = a.fetch(), b.fetch()
    expected = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    torch.testing.assert_close(y, expected, atol=1e-4, rtol=1e-4)


def _asymmetric_jpeg() -> tuple[bytes, tuple[int, int]]:
    """A 120x160 JPEG: left half black, right half white, top rows red."""
    arr = np.zeros((120, 160, 3), np.uint8)
    arr[:, 80:] = 255
    arr[:20, :, 0] = 255
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=95)
    return buf.getvalue(), (120, 160)


@pytest.mark.parametrize(("vertical", "p"), [(False, 1.0), (False, 0.0), (True, 1.0)])
def test_flips_mirror_an_asymmetric_image(vertical, p):
    data, size = _asymmetric_jpeg()
    flip = T.RandomVerticalFlip(p) if vertical else T.RandomHorizontalFlip(p)
    with BatchDecoder(translate(T.Compose([flip, T.ToTensor()])), max_batch_size=1) as dec:
        dec.submit([data], [size], torch.Generator())
        out = dec.fetch()[0]
    left, right = float(out[1, 40:, :40].mean()), float(out[1, 40:, -40:].mean())
    top_red, bottom_red = float(out[0, :10, :40].mean()), float(out[0, -10:, :40].mean())
    if vertical:
        assert bottom_red > 0.9 and top_red < 0.1
    elif p == 1.0:
        assert left > 0.9 and right < 0.1
    else:
        assert left < 0.1 and right > 0.9


def test_exif_orientation_is_ignored_like_pil_loader(photos):
    # ImageFolder's loader (PIL open + convert) does not rotate by EXIF; neither may fastload
    with Image.open(photos[0][0]) as im:
        exif = Image.Exif()
        exif[0x0112] = 6  # "rotate 90 CW to display"
        buf = io.BytesIO()
        im.convert("RGB").save(buf, format="JPEG", quality=92, exif=exif)
        size = (im.height, im.width)
    data = buf.getvalue()
    with BatchDecoder(translate(VAL), max_batch_size=1) as dec:
        dec.submit([data], [size], torch.Generator())
        out = dec.fetch()[0]
    ref = VAL(Image.open(io.BytesIO(data)).convert("RGB"))
    assert float((out - ref).abs().mean()) <= 0.01


# ------------------------------------------------------------------ geometry, drawn directly
def test_resized_output_size_is_torchvisions_arithmetic():
    for h, w in [(300, 800), (801, 299), (256, 256), (375, 500), (500, 333), (17, 1000)]:
        for size, max_size in [((256,), None), ((224,), 300), ((100, 50), None), (None, 300)]:
            expected = _compute_resized_output_size(
                (h, w), None if size is None else list(size), max_size, allow_size_none=True
            )
            assert list(g.resized_output_size(h, w, size, max_size)) == expected


def test_center_crop_offsets_pick_torchvisions_pixels():
    image = torch.arange(37 * 50).view(1, 37, 50)
    for ch, cw in [(20, 20), (36, 49), (37, 50), (10, 33)]:
        top, left = g.center_crop_offsets(37, 50, ch, cw)
        assert torch.equal(
            F.center_crop(image, [ch, cw]), image[:, top : top + ch, left : left + cw]
        )


def test_random_resized_crop_area_and_aspect_stay_within_scale_and_ratio():
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    transform = T.RandomResizedCrop(224, scale=scale, ratio=ratio)
    image = torch.zeros(1, 375, 500)
    gen = torch.Generator().manual_seed(0)
    ours = [draws.resized_crop_box(375, 500, scale, ratio, gen) for _ in range(2000)]
    torch.manual_seed(12345)  # an independent torchvision sample of the same distribution
    theirs = [transform.get_params(image, scale, ratio) for _ in range(2000)]
    areas = np.array([h * w / (375 * 500) for _, _, h, w in ours])
    aspects = np.array([w / h for _, _, h, w in ours])
    # rounding h and w to whole pixels moves both a little past the bounds
    assert areas.min() >= scale[0] * 0.97 and areas.max() <= scale[1]
    assert aspects.min() >= ratio[0] * 0.97 and aspects.max() <= ratio[1] * 1.03
    their_areas = np.array([h * w / (375 * 500) for _, _, h, w in theirs])
    their_aspects = np.array([w / h for _, _, h, w in theirs])
    for q in (0.1, 0.5, 0.9):
        assert abs(np.quantile(areas, q) - np.quantile(their_areas, q)) < 0.04
        assert abs(np.quantile(aspects, q) - np.quantile(their_aspects, q)) < 0.04
    # crop positions cover the image: mean centre near the middle
    centres = np.array([(i + h / 2) / 375 for i, _, h, _ in ours])
    assert abs(centres.mean() - 0.5) < 0.02


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_flip_rate_is_p(p):
    steps = (g.Flip(p, vertical=False),)
    gen = torch.Generator().manual_seed(1)
    n = 4000
    flips = sum(g.draw_sample(steps, 100, 100, gen).hflip for _ in range(n))
    assert abs(flips / n - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_color_jitter_factors_are_torchvisions_draws():
    transform = T.ColorJitter(0.4, 0.3, 0.2, 0.1)
    step = g.ColorJitter(
        transform.brightness, transform.contrast, transform.saturation, transform.hue
    )
    for seed in range(20):
        torch.manual_seed(seed)
        _, b, c, s, h = transform.get_params(
            transform.brightness, transform.contrast, transform.saturation, transform.hue
        )
        got = g.color_jitter_params(step, torch.Generator().manual_seed(seed))
        assert got == pytest.approx((b, c, s, h))
        assert (
            0.6 <= got[0] <= 1.4
            and 0.7 <= got[1] <= 1.3
            and 0.8 <= got[2] <= 1.2
            and -0.1 <= got[3] <= 0.1
        )


def test_flip_before_crop_moves_the_crop_not_the_image():
    steps = (
        g.Flip(1.0, vertical=False),
        g.CenterCrop((10, 10)),
        g.RandomCrop((4, 4), (0, 0, 0, 0), False, (0,)),
    )
    params = g.draw_sample(steps, 20, 31, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    image = torch.arange(20 * 31).view(1, 20, 31)
    expected = T.Compose([T.RandomHorizontalFlip(1.0), T.CenterCrop(10), T.RandomCrop(4)])(image)
    top, left, h, w = params.decode
    got = image[:, top : top + h, left : left + w].flip(-1) if params.hflip else None
    assert got is not None and torch.equal(got, expected)


@pytest.mark.parametrize("transform", [
    T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]),
    T.Compose([T.Resize(80), T.CenterCrop(64), T.RandomVerticalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]),
])
def test_c_normalise_kernel_gives_the_torch_fallbacks_exact_values(photos, transform, monkeypatch):
    from fastload.pipelines.decode import resample as torch_resample

    if torch_resample._hwc_to_chw is None:
        pytest.skip("the C kernel was not built (no compiler at install time)")
    plan = translate(transform)
    gen = torch.Generator().manual_seed(3)
    params = [g.draw_sample(plan.steps, *size, gen) for _, _, size in photos[:16]]
    decoded = []
    for (path, _, _), p in zip(photos[:16], params, strict=True):
        top, left, h, w = p.decode
        decoded.append(np.asarray(_pil(path))[top:top + h, left:left + w].copy())
    assert any(p.hflip or p.vflip for p in params) and not all(p.hflip for p in params)
    with_kernel = torch_resample.resample_batch(plan, decoded, params)
    monkeypatch.setattr(torch_resample, "_hwc_to_chw", None)
    without = torch_resample.resample_batch(plan, decoded, params)
    assert torch.equal(with_kernel, without)


@pytest.mark.parametrize("width", [1, 7, 255, 256, 257, 600])
@pytest.mark.parametrize("hflip", [False, True])
def test_c_normalise_kernel_matches_torch_at_any_width_mirrored_or_not(width, hflip):
    from fastload.pipelines.decode import resample as torch_resample

    if torch_resample._hwc_to_chw is None:
        pytest.skip("the C kernel was not built (no compiler at install time)")
    gen = torch.Generator().manual_seed(width)
    image = torch.randint(0, 256, (5, width + 9, 3), dtype=torch.uint8, generator=gen)
    src = image[:, 4:4 + width]  # strided rows, as a crop of a decoded image is
    mean = torch.tensor([v * 255 for v in MEAN]).view(3, 1, 1)
    inv_std = (1.0 / torch.tensor([v * 255 for v in STD])).view(3, 1, 1)
    planar = src.permute(2, 0, 1).flip(-1) if hflip else src.permute(2, 0, 1)
    expected = torch.empty(3, 5, width).copy_(planar).sub_(mean).mul_(inv_std)
    got = torch.empty(3, 5, width)
    torch_resample._hwc_to_chw(src.numpy(), got.numpy(), mean.flatten().tolist(),
                               inv_std.flatten().tolist(), hflip)
    assert torch.equal(got, expected)


# ------------------------------------------------------------------ real photos, 0.3-12 MP
# Native-resolution mosaics of the real photographs packages ship (never resampled: every
# pixel's detail is a camera's), one per size; the 800x719 one tiles the astronaut with
# scikit-image's fine CC0 textures (grass, gravel, brick): the most detailed content at
# hand, which a 1/2-scale decode resized by 1.4x put 0.015 off torchvision.
REAL_SIZES = [((480, 640), False), ((719, 800), True), ((1200, 1600), False),
              ((1680, 2100), False), ((3000, 4000), False)]


@pytest.fixture(scope="module")
def real_photos():
    """(bytes, (height, width), PIL image as ImageFolder loads it) per :data:`REAL_SIZES`."""
    from fastload.data.pictures.photos import SOURCES, TEXTURES, native_mosaic

    out = []
    for seed, ((h, w), detailed) in enumerate(REAL_SIZES):
        sources = SOURCES[:1] + TEXTURES if detailed else SOURCES
        buffer = io.BytesIO()
        native_mosaic(np.random.default_rng(seed), h, w, sources).save(buffer, format="JPEG",
                                                                       quality=90)
        data = buffer.getvalue()
        out.append((data, (h, w), Image.open(io.BytesIO(data)).convert("RGB")))
    return out


def _val_presets():
    from timm.data import create_transform

    return {
        "torchvision": VAL,
        "timm": create_transform(224, is_training=False),
        "timm-bicubic-0.9": create_transform(224, is_training=False, interpolation="bicubic",
                                             crop_pct=0.9),
        "resize-224x224": T.Compose([T.Resize((224, 224)), T.ToTensor()]),
        "resize-384-bicubic": T.Compose([T.Resize(384, interpolation=T.InterpolationMode.BICUBIC),
                                         T.CenterCrop(384), T.ToTensor()]),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_val_presets()))
def test_val_transforms_on_real_photos_stay_within_0_01_per_image_and_0_003_median(
        real_photos, name):
    transform = _val_presets()[name]
    plan = translate(transform)
    # on 0..1 values (a Normalize divides differences by its std): the plan's output is
    # (pixel - mean) / std on 0..255 pixels
    std = torch.tensor(plan.std).view(3, 1, 1) / 255
    mads = []
    with BatchDecoder(plan, max_batch_size=1) as dec:
        for data, size, image in real_photos:  # one a batch: each takes its own path
            dec.submit([data], [size], torch.Generator())
            mads.append(float(((dec.fetch()[0] - transform(image)) * std).abs().mean()))
        assert dec.scaled_batches >= 2  # the 3.5 and 12 MP photos are DCT-scaled
    assert max(mads) <= 0.01, f"per-image MADs {[round(m, 4) for m in mads]}"
    assert float(np.median(mads)) <= 0.003, f"per-image MADs {[round(m, 4) for m in mads]}"


@pytest.mark.slow
@pytest.mark.parametrize("subsampling", ["422", "411"])
def test_chroma_subsampled_across_only_stays_within_the_val_bounds(subsampling):
    # 4:2:2 and 4:1:1 chroma decoded at 2/8 drifted from a full decode resampled: on these
    # photos medians 0.0054 and 0.0087, the worst 4:1:1 image 0.0106
    import simplejpeg

    from fastload.data.pictures.photos import SOURCES, native_mosaic

    sources = tuple(s for s in SOURCES if s.name != "hubble")
    mads = []
    with BatchDecoder(translate(VAL), max_batch_size=1) as dec:
        for seed in range(6):
            size = [(1680, 2100), (2000, 3000), (1536, 2048)][seed % 3]
            image = native_mosaic(np.random.default_rng(1300 + seed), *size, sources)
            data = simplejpeg.encode_jpeg(np.asarray(image.convert("RGB")), quality=90,
                                          colorsubsampling=subsampling)
            reference = VAL(Image.open(io.BytesIO(data)).convert("RGB"))
            dec.submit([data], [size], torch.Generator())
            mads.append(float((dec.fetch()[0] - reference).abs().mean()))
        assert dec.scaled_batches == 6
    assert max(mads) <= 0.01, f"per-image MADs {[round(m, 4) for m in mads]}"
    assert float(np.median(mads)) <= 0.003, f"per-image MADs {[round(m, 4) for m in mads]}"
