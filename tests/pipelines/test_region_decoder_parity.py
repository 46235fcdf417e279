"""The region decoder with fastload's Huffman decoder (mode 2) gives libjpeg-turbo's answer
(mode 1) on damaged files too: the same pixels where libjpeg decodes, its error where it
does not; and regions are checked without overflowing int."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

_jpegroi = pytest.importorskip("fastload.pipelines._jpegroi")
INT_MAX = 2**31 - 1


def _jpeg(height: int, width: int, **options) -> bytes:
    rng = np.random.default_rng(height * width)
    y, x = np.mgrid[0:height, 0:width]
    img = (128 + 60 * np.sin(x / 5 + y / 9))[..., None] + rng.normal(0, 25, (height, width, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, "JPEG", **options)
    return out.getvalue()


def _outcome(data: bytes, m: int, shape: tuple[int, int], mode: int):
    """The whole canvas at scale m/8, or the error's text."""
    canvas = np.zeros((*shape, 3), np.uint8)
    try:
        _jpegroi.decode_region(data, m, 0, 0, shape[0], shape[1], canvas, mode)
    except ValueError as error:
        return str(error)
    return canvas.tobytes()


def _disagreements(variants: list[bytes], m: int, shape: tuple[int, int]) -> list[int]:
    return [i for i, data in enumerate(variants)
            if _outcome(data, m, shape, 2) != _outcome(data, m, shape, 1)]


def _flipped(data: bytes, count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        damaged = bytearray(data)
        damaged[int(rng.integers(len(data) // 4, len(data)))] ^= 1 << int(rng.integers(0, 8))
        out.append(bytes(damaged))
    return out


def test_a_bad_huffman_code_libjpeg_decodes_gives_its_pixels():
    # libjpeg-turbo's fast path (512 bytes a block left, no restart interval) decodes a
    # code no table holds as zero, silently; fastload's decoder raised "bad Huffman code"
    # there before issue 35 (found by tests/fuzz)
    data = _jpeg(240, 320, quality=100, subsampling=0)
    assert _disagreements(_flipped(data, 120, 0), 8, (240, 320)) == []


def test_a_file_cut_at_its_end_gives_libjpegs_error():
    # libjpeg's bit reader reads ahead and warns that the file ends ("Premature end of JPEG
    # file") where fastload's decoder never needed those bytes: it returned pixels before
    # issue 35 (found by tests/fuzz)
    variants = []
    for options in ({"quality": 75}, {"quality": 90, "subsampling": 0}):
        data = _jpeg(8, 16, **options)
        variants += [data[:len(data) - cut] for cut in range(1, 24)]
    assert _disagreements(variants, 8, (8, 16)) == []


def test_damaged_restart_intervals_give_libjpegs_answer():
    data = _jpeg(64, 96, quality=85, restart_marker_blocks=2)
    assert _disagreements(_flipped(data, 200, 1), 4, (32, 48)) == []


def test_fill_bytes_inside_the_data_give_libjpegs_pixels():
    # 0xFF 0xFF 0x00 is a fill byte and a stuffed 0xFF. libjpeg-turbo's fast path takes it
    # for a marker, decodes the MCU from zero bits, then again with its slow path into the
    # same blocks, where the first attempt's coefficients stay: its pixels, which fastload's
    # decoder (reading the fill byte as the standard says) did not give before issue 35
    # (found by tests/fuzz)
    data = _jpeg(120, 160, quality=95, subsampling=0)
    scan = data.index(b"\xff\xda")
    stuffed = [i for i in range(scan + 2, len(data) - 1) if data[i:i + 2] == b"\xff\x00"]
    assert len(stuffed) > 40
    variants = [data[:i] + b"\xff" + data[i:] for i in stuffed[::len(stuffed) // 40]]
    assert _disagreements(variants, 8, (120, 160)) == []


@pytest.mark.parametrize("region", [(INT_MAX, 0, 2, 1), (0, 1, 1, INT_MAX),
                                    (INT_MAX, INT_MAX, INT_MAX, INT_MAX)])
def test_a_region_whose_end_passes_int_max_is_refused(region):
    # top + height (left + width) overflowed int in the bounds check before issue 35:
    # undefined, refused only because the wrapped sum happened to be out of range
    data = _jpeg(16, 24, quality=75)
    with pytest.raises(ValueError, match="is not inside the 16x24 image at scale 8/8"):
        _jpegroi.decode_region(data, 8, *region, np.zeros((16, 24, 3), np.uint8))
