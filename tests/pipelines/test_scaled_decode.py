"""Scaled JPEG decode of high-resolution photos: torchvision's crops, torchvision's values."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from fastload.pipelines.decode import resample as torch_resample
from fastload.pipelines.decode import scaled as sd
from fastload.pipelines.decode.batch_decoder import BatchDecodeError, BatchDecoder
from fastload.pipelines.prefix import geometry as g
from fastload.pipelines.translate import translate

VAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])


def _photos(root) -> list[tuple[bytes, tuple[int, int], Image.Image]]:
    out = []
    for path in sorted(root.rglob("*.jpg")):
        with Image.open(path) as im:
            out.append((path.read_bytes(), (im.height, im.width), im.convert("RGB")))
    return out


@pytest.fixture(scope="module")
def highres(tmp_path_factory):
    """Four generated 1600x1280 camera-like photos: (bytes, (h, w), PIL image)."""
    from fastload.data.pictures.synth import synthesize

    root = synthesize(tmp_path_factory.mktemp("highres"), train=4, val=0, classes=2,
                      workers=1, size=(1280, 1600))
    return _photos(root)


def _decode(transform, photos, seeds=None, **kwargs) -> tuple[torch.Tensor, int]:
    """The batch fastload makes of ``photos`` (one sample per submit when ``seeds``) and
    how many batches took the scaled path."""
    with BatchDecoder(translate(transform), max_batch_size=len(photos), **kwargs) as dec:
        if seeds is None:
            dec.submit([p[0] for p in photos], [p[1] for p in photos], torch.Generator())
            out = dec.fetch()
        else:
            outs = []
            for seed, p in zip(seeds, photos, strict=True):
                dec.submit([p[0]], [p[1]], torch.Generator().manual_seed(seed))
                outs.append(dec.fetch()[0])
            out = torch.stack(outs)
        return out, dec.scaled_batches


def _worst_mad(out: torch.Tensor, refs: list[torch.Tensor]) -> float:
    return max(float((o - r).abs().mean()) for o, r in zip(out, refs, strict=True))


def test_val_transform_on_highres_photos_is_within_0_01_of_torchvisions_full_decode(highres):
    out, scaled = _decode(VAL, highres)
    assert scaled == 1
    assert _worst_mad(out, [VAL(p[2]) for p in highres]) <= 0.01


def _scaled(transform, photos, seeds) -> torch.Tensor:
    """The scaled path alone (whatever worth_it would pick): sample ``i`` drawn from a
    generator seeded ``seeds[i]``."""
    plan = translate(transform)
    params = [g.draw_sample(plan.steps, *p[1], torch.Generator().manual_seed(seed))
              for seed, p in zip(seeds, photos, strict=True)]
    out = torch.empty((len(photos), 3, 224, 224))
    encoded = [np.frombuffer(p[0], np.uint8) for p in photos]
    sd.decode_batch(plan, encoded, params, out, range(len(photos)))
    return out


def test_train_crops_and_flips_are_torchvisions_draws_on_the_full_image(highres):
    seeds = [11, 12, 13, 14]
    out = _scaled(TRAIN, highres, seeds)
    refs = []
    for seed, p in zip(seeds, highres, strict=True):
        torch.manual_seed(seed)
        refs.append(TRAIN(p[2]))
    # A different crop box or a missed flip differs by about 0.1; the DCT scaling by ~0.005.
    assert _worst_mad(out, refs) <= 0.02


def test_a_draw_mirrored_from_torchvisions_would_fail_the_train_bound(highres):
    """The bound above tells crops apart: the same photo unflipped is far from flipped."""
    flip = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(p=1.0), T.ToTensor()])
    out = _scaled(flip, highres[:1], [5])
    torch.manual_seed(5)
    ref = T.Compose([T.RandomResizedCrop(224), T.ToTensor()])(highres[0][2])
    assert float((out[0] - ref).abs().mean()) > 0.02


def test_imagenet_sized_photos_take_the_dali_path_unchanged(synth_photos):
    photos = _photos(synth_photos)
    auto, scaled = _decode(VAL, photos)
    off, _ = _decode(VAL, photos, scaled_decode="off")
    assert scaled == 0
    assert torch.equal(auto, off)


def test_progressive_jpeg_falls_back_to_dali_and_still_matches(highres):
    data, size, image = highres[0]
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, progressive=True)
    progressive = buffer.getvalue()
    assert not sd.jpeg_is_sequential(progressive)
    out, scaled = _decode(VAL, [(progressive, size, image)])
    assert scaled == 0
    assert _worst_mad(out, [VAL(Image.open(io.BytesIO(progressive)).convert("RGB"))]) <= 0.01


def test_only_sequential_jpegs_are_recognised(highres):
    png = io.BytesIO()
    highres[0][2].resize((64, 48)).save(png, format="PNG")
    assert sd.jpeg_is_sequential(highres[0][0])
    assert sd.jpeg_is_sequential(np.frombuffer(highres[0][0], np.uint8))
    assert not sd.jpeg_is_sequential(png.getvalue())
    assert not sd.jpeg_is_sequential(highres[0][0][:100])


def _with_luma_factors(jpeg: bytes, factors: int) -> bytes:
    """``jpeg`` (3 components) with its frame header's luma sampling byte set to ``factors``
    (0xHV): the header a file of that layout has (its scan is not re-encoded)."""
    sof = jpeg.index(b"\xff\xc0")
    return jpeg[:sof + 11] + bytes([factors]) + jpeg[sof + 12:]


@pytest.mark.parametrize("factors, scaled, least", [
    (0x11, True, 1), (0x22, True, 1), (0x12, True, 1),  # 4:4:4, 4:2:0, 4:4:0
    (0x21, True, 4), (0x41, True, 4),  # 4:2:2, 4:1:1: chroma subsampled across only
    (0x42, False, 1), (0x14, False, 1), (0x31, False, 1),  # 4:1:0, 4:4:1, 3x1: TurboJPEG refuses
])
def test_sampling_layouts_take_the_scaled_path_where_turbojpeg_decodes_them(
        highres, factors, scaled, least):
    # a 4:1:0 file failed every epoch with "Could not determine subsampling level"
    header = _with_luma_factors(highres[0][0], factors)
    assert sd.jpeg_is_sequential(header) == scaled
    assert sd.least_eighths(header) == least


def test_scale_is_the_smallest_eighth_that_keeps_the_resized_pixels():
    steps = translate(VAL).steps
    params = g.draw_sample(steps, 1680, 2100, torch.Generator())
    assert sd.eighths(params) == 2  # 1680 * 2/8 = 420 >= 256; 1/8 would give 210
    params = g.draw_sample(steps, 300, 400, torch.Generator())
    assert sd.eighths(params) == 7  # ceil(8 * 256 / 300)


def test_train_batches_of_large_photos_take_the_scaled_path_when_it_decodes_fewer_pixels(
        highres):
    _, scaled = _decode(TRAIN, highres)
    assert scaled == 1  # 1600x1280, RRC-224: about a fifth of the region decode's pixels


def test_a_corrupt_highres_jpeg_names_its_sample(highres):
    data = bytearray(highres[1][0])
    data[len(data) // 3 : len(data) // 3 + 4000] = b"\xff" * 4000
    photos = [highres[0], (bytes(data), highres[1][1], highres[1][2])]
    with BatchDecoder(translate(VAL), max_batch_size=2) as dec:
        dec.submit([p[0] for p in photos], [p[1] for p in photos], torch.Generator())
        with pytest.raises(BatchDecodeError) as info:
            dec.fetch()
        assert info.value.sample_indices == [1]
        dec.submit([highres[0][0]], [highres[0][1]], torch.Generator())
        assert dec.fetch().shape == (1, 3, 224, 224)  # still usable


def test_loader_on_a_highres_folder_matches_torchvisions_loader_and_says_so(tmp_path):
    from torch.utils.data import DataLoader as TorchDataLoader
    from torchvision.datasets import ImageFolder

    import fastload
    from fastload.data.pictures.synth import synthesize

    root = synthesize(tmp_path, train=2, val=0, classes=2, workers=1, size=(1100, 1400))
    dataset = ImageFolder(root / "train", VAL)
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, device="cpu")
    assert "DCT scale" in str(loader.plan)
    (images, labels), = list(loader)
    (t_images, t_labels), = list(TorchDataLoader(dataset, batch_size=2))
    assert torch.equal(labels, t_labels)
    assert (images - t_images).abs().flatten(1).mean(1).max() <= 0.01
    assert loader._decoder.scaled_batches == 1


def test_a_grey_highres_jpeg_comes_out_as_pils_rgb_conversion(highres):
    grey = highres[0][2].convert("L")
    buffer = io.BytesIO()
    grey.save(buffer, format="JPEG", quality=90)
    out, scaled = _decode(VAL, [(buffer.getvalue(), highres[0][1], grey)])
    assert scaled == 1
    assert _worst_mad(out, [VAL(grey.convert("RGB"))]) <= 0.01


def test_loader_names_a_corrupt_highres_file_or_skips_it(tmp_path):
    from torchvision.datasets import ImageFolder

    import fastload
    from fastload.data.pictures.synth import synthesize

    root = synthesize(tmp_path, train=2, val=0, classes=1, workers=1, size=(1100, 1400))
    bad = sorted((root / "train").rglob("*.jpg"))[1]
    data = bytearray(bad.read_bytes())
    data[len(data) // 3 : len(data) // 3 + 4000] = b"\xff" * 4000
    bad.write_bytes(bytes(data))
    dataset = ImageFolder(root / "train", VAL)
    with pytest.raises(fastload.SampleError, match=bad.name):
        list(fastload.DataLoader(dataset, batch_size=2, device="cpu"))
    with pytest.warns(RuntimeWarning, match=bad.name):
        batches = list(fastload.DataLoader(dataset, batch_size=2, device="cpu", on_error="skip"))
    assert batches[0][0].shape == (1, 3, 224, 224)


def test_a_batch_holding_a_png_runs_dali_for_the_whole_batch(highres):
    buffer = io.BytesIO()
    highres[1][2].save(buffer, format="PNG", compress_level=1)
    photos = [highres[0], (buffer.getvalue(), highres[1][1], highres[1][2])]
    out, scaled = _decode(VAL, photos)
    assert scaled == 0
    assert _worst_mad(out, [VAL(p[2]) for p in photos]) <= 0.01


def test_the_plan_names_the_decode_per_device():
    plan = translate(VAL)
    assert "DCT scale" in sd.describe(plan, "cpu")
    assert sd.describe(plan, "cuda") == "decode: DALI's decoder (full size or region)"


needs_region = pytest.mark.skipif(not sd.region_decoder(),
                                  reason="the _jpegroi extension is not built")


@needs_region
def test_region_decode_gives_a_whole_decodes_pixels_at_every_scale(highres):
    import simplejpeg

    from fastload.pipelines._jpegroi import decode_region

    data = highres[0][0]
    rng = np.random.default_rng(0)
    for m in range(1, 9):
        full = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=-(-1280 * m // 8),
                                      min_width=-(-1600 * m // 8))
        h, w = full.shape[:2]
        canvas = np.zeros((h, w, 3), np.uint8)
        for _ in range(3):
            rh, rw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
            top, left = int(rng.integers(0, h - rh + 1)), int(rng.integers(0, w - rw + 1))
            decode_region(data, m, top, left, rh, rw, canvas.reshape(-1))
            assert np.array_equal(canvas[top:top + rh, left:left + rw],
                                  full[top:top + rh, left:left + rw]), (m, top, left, rh, rw)


def _jpeg_of(image, options: dict) -> bytes:
    """``image`` saved as a JPEG with Pillow's ``options`` (``grey``: converted to L first;
    ``quality`` 90 unless given)."""
    options = dict(options)
    if options.pop("grey", False):
        image = image.convert("L")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=options.pop("quality", 90), **options)
    return buffer.getvalue()


_LAYOUTS = {"420": {"subsampling": 2}, "422": {"subsampling": 1}, "444": {"subsampling": 0},
            "grey": {"grey": True}, "420-restarts": {"subsampling": 2, "restart_marker_rows": 1}}


@needs_region
@pytest.mark.parametrize("layout", list(_LAYOUTS), ids=list(_LAYOUTS))
def test_region_decode_of_cropped_columns_gives_a_whole_decodes_pixels_for_each_layout(
        highres, layout):
    """The MCUs left and right of the region are entropy-decoded and discarded (not stored):
    the region's pixels stay a whole decode's for every chroma layout, a grey JPEG and
    restart markers, at every vectorised scale."""
    import simplejpeg

    from fastload.pipelines._jpegroi import decode_region

    image = highres[0][2].crop((200, 100, 200 + 472, 100 + 360))  # not whole MCUs wide
    data = _jpeg_of(image, _LAYOUTS[layout])
    rng = np.random.default_rng(1)
    for m in (1, 2, 4, 8):
        full = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=-(-360 * m // 8),
                                      min_width=-(-472 * m // 8))
        h, w = full.shape[:2]
        canvas = np.zeros((h, w, 3), np.uint8)
        for _ in range(4):
            rw = int(rng.integers(1, w // 2 + 1))  # narrower than the image: cropped columns
            rh = int(rng.integers(1, h + 1))
            top, left = int(rng.integers(0, h - rh + 1)), int(rng.integers(0, w - rw + 1))
            decode_region(data, m, top, left, rh, rw, canvas.reshape(-1))
            assert np.array_equal(canvas[top:top + rh, left:left + rw],
                                  full[top:top + rh, left:left + rw]), (m, top, left, rh, rw)


_ENCODINGS = {"420": {"subsampling": 2}, "444-q100": {"subsampling": 0, "quality": 100},
              "422-optimized-q30": {"subsampling": 1, "quality": 30, "optimize": True},
              "420-restart-every-7-mcus": {"subsampling": 2, "restart_marker_blocks": 7},
              "444-restart-every-mcu": {"subsampling": 0, "restart_marker_blocks": 1},
              "grey": {"grey": True}}


@needs_region
@pytest.mark.parametrize("encoding", list(_ENCODINGS), ids=list(_ENCODINGS))
def test_fastloads_huffman_decoder_gives_libjpeg_turbos_pixels(highres, encoding):
    """Mode 2 (fastload's Huffman decoder) against mode 1 (libjpeg-turbo's) on the same
    regions: long codes (quality 100), optimised tables, restart markers at any interval."""
    from fastload.pipelines._jpegroi import decode_region

    data = _jpeg_of(highres[1][2].crop((0, 0, 700, 530)), _ENCODINGS[encoding])
    rng = np.random.default_rng(2)
    for m in (1, 2, 4, 8):
        h, w = -(-530 * m // 8), -(-700 * m // 8)
        for _ in range(3):
            rh, rw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
            top, left = int(rng.integers(0, h - rh + 1)), int(rng.integers(0, w - rw + 1))
            canvases = [np.zeros(h * w * 3, np.uint8) for _ in range(2)]
            for mode, canvas in zip((2, 1), canvases, strict=True):
                decode_region(data, m, top, left, rh, rw, canvas, mode)
            assert np.array_equal(*canvases), (m, top, left, rh, rw)


@needs_region
def test_fastloads_huffman_decoder_on_blocks_that_end_without_an_end_of_block_code():
    """Noise at quality 100: most blocks code all 63 AC terms (no end-of-block code), so a
    look-up that holds two symbols often ends a block with its first and must leave the
    second, the next block's DC code, unread."""
    from PIL import Image

    from fastload.pipelines._jpegroi import decode_region

    noise = np.random.default_rng(4).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    data = _jpeg_of(Image.fromarray(noise), {"subsampling": 0, "quality": 100})
    assert len(data) > 120 * 160 * 3 // 2  # the coefficients are nearly all non-zero
    for m in (2, 4, 8):
        h, w = 120 * m // 8, 160 * m // 8
        canvases = [np.zeros(h * w * 3, np.uint8) for _ in range(2)]
        for mode, canvas in zip((2, 1), canvases, strict=True):
            decode_region(data, m, 1, 2, h - 3, w - 5, canvas, mode)
        assert np.array_equal(*canvases), m


@needs_region
def test_fastloads_huffman_decoder_reports_damage_and_never_reads_past_the_data(highres):
    from fastload.pipelines._jpegroi import decode_region

    data = highres[2][0]
    canvas = np.zeros(320 * 400 * 3, np.uint8)
    for cut in np.linspace(len(data) // 10, len(data) * 9 // 10, 8).astype(int):
        with pytest.raises(ValueError, match="Premature end of JPEG file"):
            decode_region(data[:cut], 2, 0, 0, 320, 400, canvas)
    rng = np.random.default_rng(3)
    for _ in range(50):  # flipped bits: an error or some pixels, never a crash
        damaged = bytearray(data)
        damaged[int(rng.integers(1000, len(data)))] ^= 1 << int(rng.integers(0, 8))
        try:
            decode_region(bytes(damaged), 2, 0, 0, 320, 400, canvas)
        except ValueError as error:
            assert "JPEG" in str(error)


@needs_region
@pytest.mark.parametrize("transform", [VAL, TRAIN], ids=["val", "train"])
def test_region_path_batches_equal_whole_decode_batches(highres, transform):
    plan = translate(transform)
    encoded = [np.frombuffer(p[0], np.uint8) for p in highres]
    gen = torch.Generator().manual_seed(5)
    params = [g.draw_sample(plan.steps, *p[1], gen) for p in highres]
    outs = []
    for strict in (False, True):  # the region alone / the whole image (simplejpeg)
        out = torch.empty((len(highres), 3, 224, 224), dtype=plan.output_dtype)
        sd.decode_batch(plan, encoded, params, out, range(len(highres)), strict=strict)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])


@needs_region
def test_region_decoder_reports_damage_in_what_it_reads_without_writing_to_stderr(
        highres, capfd):
    from fastload.pipelines._jpegroi import decode_region

    data = highres[0][0]
    canvas = np.zeros(320 * 400 * 3, np.uint8)
    with pytest.raises(ValueError, match="Premature end of JPEG file"):
        decode_region(data[: len(data) // 2], 2, 0, 0, 320, 400, canvas)
    with pytest.raises(ValueError, match="Not a JPEG file"):
        decode_region(b"not a jpeg", 2, 0, 0, 1, 1, canvas)
    with pytest.raises(ValueError, match="is not inside the 320x400 image at scale 2/8"):
        decode_region(data, 2, 0, 0, 321, 400, canvas)
    with pytest.raises(ValueError, match="the 320x400 canvas 384000"):
        decode_region(data, 2, 0, 0, 1, 1, canvas[:-3])
    assert capfd.readouterr().err == ""


def test_decode_scale_rounds_up_to_a_vectorised_eighth():
    steps = translate(VAL).steps
    scales = {}
    for short in (1680, 1400, 1000, 800, 600, 300):  # eighths 2, 2, 3, 3, 4, 7
        params = g.draw_sample(steps, short, short * 5 // 4, torch.Generator())
        scales[sd.eighths(params)] = sd.decode_scale(params, parity=False)
    assert scales == {2: 2, 3: 4, 4: 4, 7: 8}


@pytest.mark.parametrize(("size", "scale"), [
    ((1680, 2100), 2),  # 420 rows at 2/8: the resample still shrinks 1.64x
    ((1536, 2048), 4),  # 384 rows at 2/8 shrink only 1.5x: 4/8
    ((3000, 4000), 2),  # 1/8 leaves 1.46x
    ((4096, 5464), 1),  # 2x at 1/8
    ((719, 800), 8),  # 4/8 would end mid-pixel (359.5 rows) and shrink 1.4x
    ((1000, 1333), 8),  # 1333 columns are not on the 4/8 grid
    ((1002, 1336), 4),
])
def test_parity_rule_keeps_the_region_on_the_scaled_grid_and_the_resample_shrinking(
        size, scale):
    params = g.draw_sample(translate(VAL).steps, *size, torch.Generator())
    assert sd.decode_scale(params) == scale


def test_only_random_regions_are_exempt_from_the_parity_rule():
    assert not sd.fixed_region(translate(TRAIN).steps)
    assert not sd.fixed_region(translate(T.Compose([T.RandomCrop(900), T.Resize(224),
                                                    T.ToTensor()])).steps)
    assert sd.fixed_region(translate(T.Compose([T.Resize(256), T.RandomCrop(224),
                                                T.RandomHorizontalFlip(), T.ToTensor()])).steps)
    assert sd.fixed_region(translate(VAL).steps)


def test_random_crops_decode_at_the_smallest_scale_that_holds_the_output(highres):
    """RandomResizedCrop keeps its speed: a crop the parity rule would decode at 4/8 is
    decoded at 2/8 (its promise is torchvision's crop boxes and flips)."""
    plan = translate(TRAIN)
    gen = torch.Generator().manual_seed(0)
    while True:
        params = g.draw_sample(plan.steps, *highres[0][1], gen)
        if sd.decode_scale(params, parity=False) < sd.decode_scale(params, parity=True):
            break
    encoded = [np.frombuffer(highres[0][0], np.uint8)]
    out = torch.empty((1, 3, 224, 224))
    sd.decode_batch(plan, encoded, [params], out, [0])
    writer = torch_resample.SampleWriter(plan, expected := torch.empty_like(out))
    writer.write(0, *sd.decode_sample(encoded[0], params, parity=False))
    assert torch.equal(out, expected)


def test_claims_hand_each_sample_to_exactly_one_thread():
    from concurrent.futures import ThreadPoolExecutor

    claims = sd.Claims(1000)
    with ThreadPoolExecutor(4) as pool:
        taken = list(pool.map(lambda _: list(claims), range(4)))
    flat = sorted(i for share in taken for i in share)
    assert flat == list(range(1000))
    assert list(claims) == []  # spent: a late thread finds nothing left


def test_scaled_decode_off_gives_torchvisions_values_for_random_crops_of_real_photos():
    """The exact mode: full-size decodes, so RandomResizedCrop's values are torchvision's
    to a grey level (the scaled path's random edges fall between scaled pixels)."""
    from fastload.data.pictures.photos import native_mosaic

    buffer = io.BytesIO()
    native_mosaic(np.random.default_rng(0), 1200, 1600).save(buffer, format="JPEG", quality=90)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    photos = [(buffer.getvalue(), (1200, 1600), image)] * 4
    seeds = [21, 22, 23, 24]
    out, scaled = _decode(TRAIN, photos, seeds, scaled_decode="off")
    refs = []
    for seed in seeds:
        torch.manual_seed(seed)
        refs.append(TRAIN(image))
    assert scaled == 0 and _worst_mad(out, refs) <= 0.002


def test_loader_scaled_decode_keyword_reaches_the_decoder(tmp_path):
    from torchvision.datasets import ImageFolder

    import fastload
    from fastload.data.pictures.synth import synthesize

    root = synthesize(tmp_path, train=2, val=0, classes=2, workers=1, size=(1100, 1400))
    with pytest.raises(ValueError, match="scaled_decode should be 'auto' or 'off'"):
        fastload.DataLoader(ImageFolder(root / "train", TRAIN), scaled_decode="fast")
    for mode, scaled in (("auto", 1), ("off", 0)):
        loader = fastload.DataLoader(ImageFolder(root / "train", TRAIN), batch_size=2,
                                     device="cpu", seed=0, scaled_decode=mode)
        list(loader)
        assert loader._decoder.scaled_batches == scaled


@pytest.mark.parametrize("transform", [VAL, TRAIN], ids=["val", "train"])
def test_a_strict_decode_gives_the_pixels_of_the_path_the_batch_takes_unchecked(
        highres, synth_photos, transform):
    """Checking files never changes a batch's pixels: a batch of large photos and a small
    one goes DALI's way, and its strict decode (whole files, simplejpeg) matches it bit for
    bit; so does a batch of large photos alone on the scaled path."""
    small = _photos(synth_photos)[:1]
    for photos in (highres[:2] + small + highres[2:], highres):
        batch = ([p[0] for p in photos], [p[1] for p in photos])
        with BatchDecoder(translate(transform), max_batch_size=len(photos)) as dec:
            outs = []
            for strict in (False, True):
                dec.submit(*batch, torch.Generator().manual_seed(4), strict=strict)
                outs.append(dec.fetch())
            assert torch.equal(*outs)
            assert dec.scaled_batches == (2 if photos is highres else 0)
