"""JPEG header parsing shared by the converter and the loader: no decode, no third-party code.

:func:`parse_jpeg` walks a JPEG's markers up to its first scan and returns the frame header
(marker, precision, height, width, components), so the converter can decide whether to keep
a file's bytes and the loader can size a sample without decoding it.
"""

from __future__ import annotations

__all__ = ["Unreadable", "parse_jpeg"]

# Every start-of-frame marker (C4 = DHT, C8 = JPG, CC = DAC are not frames).
SOF_ALL = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
STANDALONE = {0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7}


class Unreadable(Exception):
    """The file cannot be used; ``str(exc)`` is the reason written to errors.json."""


def parse_jpeg(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int, int]:
    """Walk the markers of a JPEG up to its first scan.

    Returns ``(sof_marker, precision, height, width, components)``. Raises
    :class:`Unreadable` when the marker structure is broken, the header is truncated or
    there is no end-of-image marker after the scan data (a truncated file).
    """
    size = len(data)
    pos = 2
    frame = None
    while True:
        if pos >= size:
            raise Unreadable("truncated JPEG: the file ends inside its header")
        if data[pos] != 0xFF:
            raise Unreadable(f"corrupt JPEG: expected a marker at byte {pos}")
        while pos < size and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= size:
            raise Unreadable("truncated JPEG: the file ends inside its header")
        marker = data[pos]
        pos += 1
        if marker in STANDALONE:
            continue
        if marker == 0xD8:
            raise Unreadable("corrupt JPEG: a second start-of-image marker in the header")
        if marker == 0xD9:
            raise Unreadable("corrupt JPEG: end-of-image marker before any image data")
        if pos + 2 > size:
            raise Unreadable("truncated JPEG: the file ends inside its header")
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2 or pos + length > size:
            raise Unreadable("truncated JPEG: a header segment runs past the end of the file")
        if marker in SOF_ALL:
            if length < 8:
                raise Unreadable("corrupt JPEG: start-of-frame segment too short")
            precision = data[pos + 2]
            height = (data[pos + 3] << 8) | data[pos + 4]
            width = (data[pos + 5] << 8) | data[pos + 6]
            components = data[pos + 7]
            frame = (marker, precision, height, width, components)
        elif marker == 0xDA:  # start of scan: the entropy-coded data follows
            if frame is None:
                raise Unreadable("corrupt JPEG: scan data before any start-of-frame marker")
            ends_with_eoi = data[size - 2] == 0xFF and data[size - 1] == 0xD9
            if not ends_with_eoi and bytes(data[pos + length:]).rfind(b"\xff\xd9") < 0:
                raise Unreadable("truncated JPEG: no end-of-image marker after the image data")
            return frame
        pos += length
