"""What an encoded image's header says, read without decoding it: its ``(height, width)``
(:func:`jpeg_size` from a JPEG's start-of-frame, :func:`image_size` for any format Pillow
parses) and Pillow's decompression-bomb rule for that size (:func:`check_pixel_limit`)."""

from __future__ import annotations

import io
import warnings

import numpy as np

from fastload.data.format.jpeg import Unreadable, parse_jpeg

__all__ = ["check_pixel_limit", "image_size", "jpeg_frame", "jpeg_size"]


def jpeg_frame(data: bytes | memoryview | np.ndarray) -> tuple[int, int, int] | None:
    """``(height, width, components)`` from a JPEG's start-of-frame header, or None if
    ``data`` is not a JPEG, its header is broken or cut short, or it gives no size (a
    DNL-marker height)."""
    buf = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else memoryview(data)
    if len(buf) < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        return None
    try:
        _, _, height, width, components = parse_jpeg(buf)
    except Unreadable:
        return None
    return (height, width, components) if height and width else None


def jpeg_size(data: bytes | memoryview | np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of :func:`jpeg_frame`, or None where it gives none."""
    frame = jpeg_frame(data)
    return frame[:2] if frame is not None else None


def image_size(data: bytes | memoryview | np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of an encoded image: the JPEG header when it is one, else Pillow's
    header parse (PNG, BMP, ...); None when neither can read it."""
    size = jpeg_size(data)
    if size is not None:
        return size
    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            width, height = img.size
    except Exception:  # noqa: BLE001 - any parse failure means "unreadable"
        return None
    return (height, width)


def check_pixel_limit(size: tuple[int, int], name: str) -> None:
    """Pillow's decompression-bomb rule, as ``Image.open`` applies it, for an image of
    ``size`` (height, width): over twice ``PIL.Image.MAX_IMAGE_PIXELS`` raise
    ``DecompressionBombError`` naming ``name``, over it warn ``DecompressionBombWarning``. The limit is read
    at each call, so the user's own setting applies from the next read on."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    pixels = size[0] * size[1]
    if limit is None or pixels <= limit:
        return
    if pixels > 2 * limit:
        raise Image.DecompressionBombError(
            f"{name} is {size[1]}x{size[0]} = {pixels} pixels, more than twice "
            f"PIL.Image.MAX_IMAGE_PIXELS ({limit}), Pillow's decompression-bomb limit; if the "
            "file is trusted, raise PIL.Image.MAX_IMAGE_PIXELS or set it to None")
    # Pillow's own words, so the warnings filter shows them as often as with torch's loader
    warnings.warn(f"Image size ({pixels} pixels) exceeds limit of {limit} pixels, could be "
                  "decompression bomb DOS attack.", Image.DecompressionBombWarning, stacklevel=2)

