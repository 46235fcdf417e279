"""Damaged JPEGs for the loader's hardening and fault tests (not a test module)."""

from __future__ import annotations

import io
import random
import shutil
from pathlib import Path

import simplejpeg
from PIL import Image


def scramble_scan(data: bytes, count: int = 40) -> bytes:
    """``data`` with ``count`` bytes of its entropy-coded scan overwritten, markers intact,
    chosen so that Pillow still opens it and libjpeg only warns (the silent case)."""
    sos = data.find(b"\xff\xda")
    for seed in range(200):
        rng = random.Random(seed)
        damaged = bytearray(data)
        offset = rng.randrange(sos + 20, len(data) - count - 4)
        damaged[offset:offset + count] = bytes(rng.randrange(255) for _ in range(count))
        damaged = bytes(damaged)
        try:
            with Image.open(io.BytesIO(damaged)) as image:
                image.load()
        except OSError:
            continue
        try:
            simplejpeg.decode_jpeg(damaged, strict=True)
        except ValueError:
            return damaged
    raise AssertionError("no silent corruption found")


def scrambled_copy(root: Path, dst: Path, index: int) -> Path:
    """A copy of the ImageFolder tree ``root`` at ``dst`` with the scan of its ``index``-th
    sample (in ``ImageFolder`` order) scrambled by :func:`scramble_scan`."""
    from torchvision.datasets import ImageFolder

    shutil.copytree(root, dst)
    bad = ImageFolder(dst).samples[index][0]
    with open(bad, "rb") as f:
        data = scramble_scan(f.read())
    with open(bad, "wb") as f:
        f.write(data)
    return dst
