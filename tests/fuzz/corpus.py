"""The fuzz harness's seed corpus: valid JPEGs of every layout the region decoder meets.

Written by Pillow (baseline, progressive, optimised tables, restart intervals, grey, CMYK,
RGB without colour transform, 4:4:4 / 4:2:2 / 4:2:0, quality 1 to 100) and by simplejpeg
(libjpeg-turbo's TurboJPEG: 4:1:1 and 4:4:0, which Pillow cannot write, grey and CMYK), plus
hand-made scans Pillow never writes (:func:`dc_overflow_jpeg`, :func:`no_end_of_block_jpeg`).
The content is smooth shading, edges and noise, as in photographs. :func:`build` is
deterministic: the same files from the same Pillow and simplejpeg.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np

# (height, width): odd sizes, one-pixel sides and more than one MCU row of each layout
SIZES = [(1, 1), (8, 8), (13, 17), (16, 300), (48, 64), (75, 100), (130, 257), (240, 320),
         (500, 31)]


def _content(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    shade = 128 + 90 * np.sin(x / (3 + seed % 7) + y / 11.0)[..., None] * [1.0, 0.7, -0.5]
    edges = ((x // 9 + y // 7) % 2)[..., None] * 40
    noise = rng.normal(0, 12 + 8 * (seed % 3), (height, width, 3))
    return np.clip(shade + edges + noise, 0, 255).astype(np.uint8)


def _pillow(img: np.ndarray, mode: str, **options) -> bytes:
    from PIL import Image

    picture = Image.fromarray(img)
    if mode != "RGB":
        picture = picture.convert(mode)
    out = io.BytesIO()
    picture.save(out, "JPEG", **options)
    return out.getvalue()


def _simplejpeg(img: np.ndarray, colorspace: str, subsampling: str, quality: int) -> bytes:
    import simplejpeg

    if colorspace == "GRAY":
        img = np.ascontiguousarray(img[..., :1])
    elif colorspace == "CMYK":
        img = np.ascontiguousarray(np.concatenate([img, 255 - img[..., :1]], axis=2))
    return simplejpeg.encode_jpeg(img, quality=quality, colorspace=colorspace,
                                  colorsubsampling=subsampling)


def _variants() -> list[tuple[str, dict]]:
    """(name, how): Pillow's save options or simplejpeg's, one layout each."""
    return [
        ("baseline-420", {"pil": "RGB", "quality": 75}),
        ("baseline-444", {"pil": "RGB", "quality": 90, "subsampling": 0}),
        ("baseline-422", {"pil": "RGB", "quality": 60, "subsampling": 1}),
        ("optimised-420", {"pil": "RGB", "quality": 80, "optimize": True}),
        ("progressive-420", {"pil": "RGB", "quality": 75, "progressive": True}),
        ("progressive-444", {"pil": "RGB", "quality": 95, "progressive": True, "subsampling": 0}),
        ("restart-blocks-420", {"pil": "RGB", "quality": 70, "restart_marker_blocks": 3}),
        ("restart-rows-444", {"pil": "RGB", "quality": 85, "subsampling": 0,
                              "restart_marker_rows": 1}),
        ("grey", {"pil": "L", "quality": 75}),
        ("grey-progressive", {"pil": "L", "quality": 50, "progressive": True}),
        ("grey-restart", {"pil": "L", "quality": 75, "restart_marker_blocks": 5}),
        ("cmyk", {"pil": "CMYK", "quality": 75}),
        ("rgb-no-transform", {"pil": "RGB", "quality": 75, "keep_rgb": True, "subsampling": 0}),
        ("quality-1", {"pil": "RGB", "quality": 1}),
        ("quality-100-444", {"pil": "RGB", "quality": 100, "subsampling": 0}),
        ("sj-411", {"sj": ("RGB", "411"), "quality": 80}),
        ("sj-440", {"sj": ("RGB", "440"), "quality": 80}),
        ("sj-444", {"sj": ("RGB", "444"), "quality": 95}),
        ("sj-grey", {"sj": ("GRAY", "Gray"), "quality": 70}),
        ("sj-cmyk", {"sj": ("CMYK", "444"), "quality": 70}),
    ]


def build(folder: Path) -> list[Path]:
    """Writes the corpus into ``folder`` (once: an existing file is kept) and lists it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for v, (name, how) in enumerate(_variants()):
        for s, (height, width) in enumerate(SIZES):
            if (v + s) % 3 and height * width > 64 * 64:  # the large sizes for a third of them
                continue
            path = folder / f"{name}-{height}x{width}.jpg"
            if not path.exists():
                img = _content(height, width, 31 * v + s)
                options = {k: val for k, val in how.items() if k not in ("pil", "sj")}
                if "pil" in how:
                    data = _pillow(img, how["pil"], **options)
                else:
                    data = _simplejpeg(img, *how["sj"], options["quality"])
                path.write_bytes(data)
            paths.append(path)
    for name, make in (("dc-overflow-grey-2056x2048.jpg", dc_overflow_jpeg),
                       ("no-end-of-block-64x64.jpg", no_end_of_block_jpeg)):
        path = folder / name
        if not path.exists():
            path.write_bytes(make())
        paths.append(path)
    return paths


def small_jpeg() -> bytes:
    """A 4:2:0 baseline JPEG of 24 x 16 pixels (the regression cases' region checks)."""
    return _pillow(_content(16, 24, 0), "RGB", quality=75)


class _Bits:
    """An entropy-coded segment: bits MSB first, a 0x00 stuffed after each 0xFF byte."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, bits: int) -> None:
        self.acc = (self.acc << bits) | (value & ((1 << bits) - 1))
        self.n += bits
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def done(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)  # padded with ones
        return bytes(self.out)


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">HH", 0xFF00 | marker, len(body) + 2) + body


def _grey_jpeg(width: int, height: int, dc: tuple[list[int], int], ac: tuple[list[int], int],
               scan: bytes) -> bytes:
    """A one-component baseline JPEG with the given Huffman tables (``(symbols, length)``:
    all codes of that one length, canonical) and entropy-coded ``scan``."""
    dqt = _segment(0xDB, bytes([0]) + bytes([1] * 64))
    sof = _segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + bytes([1, 0x11, 0]))

    def dht(cls_id: int, symbols: list[int], length: int) -> bytes:
        counts = [0] * 16
        counts[length - 1] = len(symbols)
        return _segment(0xC4, bytes([cls_id]) + bytes(counts) + bytes(symbols))
    tables = dht(0x00, *dc) + dht(0x10, *ac)
    sos = _segment(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    return b"\xff\xd8" + dqt + sof + tables + sos + scan + b"\xff\xd9"


def dc_overflow_jpeg() -> bytes:
    """A grey 2056 x 2048 JPEG of 65,792 blocks whose DC differences are all +32767 (the
    largest a size-15 code holds), so the DC prediction passes INT_MAX after 65,538 blocks:
    libjpeg-turbo's int sum wraps, and the region decoder's must wrap the same way (a signed
    overflow, undefined in C, before issue 35)."""
    bits = _Bits()
    for _ in range(257 * 256):
        bits.put(0, 1)  # DC code '0': size 15
        bits.put(0x7FFF, 15)  # +32767
        bits.put(0, 1)  # AC code '0': end of block
    return _grey_jpeg(2056, 2048, ([15], 1), ([0x00], 1), bits.done())


def no_end_of_block_jpeg() -> bytes:
    """A grey 64 x 64 JPEG whose blocks hold 63 AC coefficients each (no end-of-block code):
    the decoders' last-coefficient paths."""
    bits = _Bits()
    rng = np.random.default_rng(7)
    for _ in range(64):
        for _ in range(64):  # DC '01' (size 1), then 63 times AC '01' (run 0, size 1)
            bits.put(1, 2)
            bits.put(int(rng.integers(0, 2)), 1)
    # DC: '00' size 0, '01' size 1; AC: '00' end of block, '01' run 0 size 1
    return _grey_jpeg(64, 64, ([0, 1], 2), ([0x00, 0x01], 2), bits.done())
