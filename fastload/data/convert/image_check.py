"""Per-file work of ``fastload convert``: validate one image, keep or re-encode its bytes.

Runs in the converter's main process (the cheap keep-bytes check) and in its worker
processes (everything that needs Pillow), so it imports nothing heavy and returns tuples.

Keep-bytes rule: a file is stored byte for byte when its JPEG markers show a baseline,
extended-sequential or progressive Huffman JPEG (SOF0/1/2) with 8-bit samples and three
components, a plausible size, no more pixels than Pillow's ``MAX_IMAGE_PIXELS``, an
end-of-image marker after the scan data, and (with ``max_side``) no side longer than
``max_side``. That is decided from the markers (about 5 us per file). ``check="decode"``
(the default) also decodes every JPEG strictly at 1/8 scale
(:func:`fastload.data.format.jpeg_damage.strict_decode_error`: its entropy-only check, about
0.24-0.30 ms for an 85 KB photo, the entropy decoding being the work): a JPEG whose
entropy-coded data is damaged, which libjpeg, Pillow and DALI decode with only a warning,
is refused with the decoder's report, kept or re-encoded alike. A kept JPEG that the
strict decode refuses for another reason (a harmless
warning made an error) is decoded by Pillow at reduced scale instead, as before.
``check="markers"`` skips that decode (the loader then checks such records at their first
read, see ``fastload.loader.damage``).

Everything else that Pillow can open (PNG, grayscale/CMYK/12-bit/arithmetic JPEG,
palette, 16-bit, alpha, ...) is converted to an 8-bit RGB JPEG at ``quality``, resized so
its long side is ``max_side`` when it is longer (Lanczos, after a DCT-domain reduction for
JPEGs). The pixels are those torchvision's ImageFolder loader gives,
``Image.open(p).convert("RGB")`` (alpha dropped, 16-bit values clipped at 255), so training
from the folder and from the database sees the same image; ``composite=True`` instead
composites transparent pixels on white and scales 16-bit values by 1/257.
"""

from __future__ import annotations

import io
import os
import stat
import sys

from fastload.data.format.constants import crc32
from fastload.data.format.datum import datum_parts, encode_datum
from fastload.data.format.jpeg import Unreadable, parse_jpeg
from fastload.data.format.jpeg_damage import (
    CORRUPT_PREFIXES,
    damage_reason,
    strict_decode_error,
    strict_decode_errors,
)
from fastload.utils.buffers import unfilled_bytearray

# Start-of-frame markers a DALI decoder (libjpeg-turbo / nvJPEG) takes as they are.
_SOF_KEEP = {0xC0, 0xC1, 0xC2}

KEPT = "kept"
CONVERTED = "converted"
RESIZED = "resized"
CHECKS = ("markers", "decode")


# Pillow's default Image.MAX_IMAGE_PIXELS (tests/convert check it against Pillow's own)
PILLOW_MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)


def max_image_pixels() -> int | None:
    """Pillow's ``Image.MAX_IMAGE_PIXELS`` as it stands in this process, without importing
    Pillow (about 12 ms) where it is not imported yet: then no one has changed it, and a
    conversion that keeps every JPEG as it is never needs it."""
    # a module another thread is importing may not have the name yet: its default then
    return getattr(sys.modules.get("PIL.Image"), "MAX_IMAGE_PIXELS", PILLOW_MAX_IMAGE_PIXELS)


def _keepable(frame: tuple[int, int, int, int, int], max_side: int | None, max_pixels: int | None) -> bool:
    marker, precision, height, width, components = frame
    if marker not in _SOF_KEEP or precision != 8 or components != 3:
        return False
    if height == 0 or width == 0:  # height given later by a DNL marker: let Pillow decide
        return False
    if max_pixels is not None and height * width > max_pixels:
        raise Unreadable(
            f"decompression bomb: {width}x{height} = {width * height} pixels is more than "
            f"Pillow's limit of {max_pixels}"
        )
    return max_side is None or max(height, width) <= max_side


def _open_image(data: bytes):
    from PIL import Image

    max_pixels = Image.MAX_IMAGE_PIXELS
    # Pillow warns above its limit; the size is refused below either way. No warnings filter
    # is swapped for the call: catch_warnings changes the process's filters, and the check
    # threads would interleave their swaps (one could leave "error" in place for good).
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise Unreadable(f"decompression bomb: {exc}") from None
    except Image.UnidentifiedImageError:
        raise Unreadable("not an image Pillow can identify") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise Unreadable(f"cannot open image: {exc}") from None
    if max_pixels is not None and width * height > max_pixels:
        raise Unreadable(
            f"decompression bomb: {width}x{height} = {width * height} pixels is more than "
            f"Pillow's limit of {max_pixels}"
        )
    return image


def _to_rgb(image, composite: bool = False):
    """Any Pillow image as 8-bit RGB: ``image.convert("RGB")`` as torchvision's loader does,
    or with ``composite`` alpha composited on white and 16-bit scaled down."""
    from PIL import Image

    mode = image.mode
    if not composite:
        return image if mode == "RGB" else image.convert("RGB")
    if mode.startswith("I") or mode == "F":
        import numpy as np

        array = np.asarray(image)
        if mode.startswith("I;16") or (mode == "I" and array.max(initial=0) > 255):
            array = array.astype(np.float32) / 257.0  # 16-bit range -> 8-bit range
        image = Image.fromarray(np.clip(np.rint(array), 0, 255).astype(np.uint8), "L")
        mode = "L"
    has_alpha = mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        mode == "P" and "transparency" in image.info
    )
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode != "RGB":
        return image.convert("RGB")
    return image


def _reencode(data: bytes, max_side: int | None, quality: int,
              composite: bool = False) -> tuple[bytes, int, int, str]:
    from PIL import Image, JpegImagePlugin

    image = _open_image(data)
    how = CONVERTED
    try:
        # a JPEG keeps its own chroma sampling (the colour detail it has); any other source
        # (lossless: PNG, ...) is stored at 4:4:4, as 4:2:0 halves saturated colour edges
        sampling = JpegImagePlugin.get_sampling(image) if image.format == "JPEG" else 0
        width, height = image.size
        if max_side is not None and max(width, height) > max_side:
            scale = max_side / max(width, height)
            target = (max(1, round(width * scale)), max(1, round(height * scale)))
            if image.format == "JPEG":
                image.draft(image.mode, target)  # DCT-domain reduction, never below target
            image = _to_rgb(image, composite)
            image = image.resize(target, Image.Resampling.LANCZOS, reducing_gap=None)
            how = RESIZED
        else:
            image = _to_rgb(image, composite)
            image.load()
    except Unreadable:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise Unreadable(f"cannot decode image: {exc}") from None
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality, subsampling=sampling if sampling >= 0 else 0)
    return out.getvalue(), image.height, image.width, how


def _decode_check(data: bytes) -> None:
    """Reduced-scale Pillow decode of a JPEG (all entropy data read, 1/8 of the IDCT work)."""
    image = _open_image(data)
    try:
        image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
        image.load()
    except (OSError, ValueError, SyntaxError) as exc:
        raise Unreadable(f"cannot decode image: {exc}") from None


def strict_problem(data: bytes | memoryview, kept: bool = True) -> str | None:
    """Why the JPEG ``data`` fails ``check="decode"`` (its errors.json reason), or None:
    damaged entropy-coded data as the strict decoder reports it. A ``kept`` file that the
    strict decode refuses for another reason is left to Pillow's reduced-scale decode; one
    to re-encode, to the re-encoding decode."""
    return _problem(data, strict_decode_error(data), kept)


def _problem(data: bytes | memoryview, error: str | None, kept: bool) -> str | None:
    """:func:`strict_problem` of ``data`` given its strict decode's ``error``."""
    if error is None:
        return None
    if error.startswith(CORRUPT_PREFIXES):
        return damage_reason(error)
    if kept:
        try:
            _decode_check(data)
        except Unreadable as exc:
            return str(exc)
    return None


def kept_jpegs_problems(jpegs: list[bytes | memoryview]) -> list[str | None]:
    """:func:`strict_problem` of each kept file's JPEG, the files checked together (several
    decoded at once: :func:`fastload.data.format.jpeg_damage.strict_decode_errors`)."""
    return [_problem(data, error, True)
            for data, error in zip(jpegs, strict_decode_errors(jpegs), strict=True)]


class NeedsDecode(Exception):
    """``keep_only`` was asked, but this file has to be decoded (re-encoded or decode-checked)."""


def process_bytes(
    data: bytes | memoryview, max_side: int | None = None, quality: int = 90,
    check: str = "markers", composite: bool = False, *, keep_only: bool = False,
) -> tuple[bytes, int, int, str]:
    """Validate ``data`` and return ``(jpeg bytes, height, width, how)``.

    ``composite``: re-encoded images with alpha are composited on white (see the module
    docstring) instead of converted as torchvision's loader converts them.

    ``how`` is ``"kept"`` (the input bytes, untouched), ``"converted"`` or ``"resized"``.
    Raises :class:`Unreadable` for a file that cannot be used, and with ``keep_only``
    :class:`NeedsDecode` for a file that is fine but needs Pillow.
    """
    if not data:
        raise Unreadable("empty file (0 bytes)")
    if data[:2] == b"\xff\xd8":
        frame = parse_jpeg(data)
        keep = _keepable(frame, max_side, max_image_pixels())
        if check == "decode":
            if keep_only:
                raise NeedsDecode
            problem = strict_problem(data, keep)
            if problem is not None:
                raise Unreadable(problem)
        if keep:
            return data, frame[2], frame[3], KEPT
    if keep_only:
        raise NeedsDecode
    return _reencode(data, max_side, quality, composite)


_HEADROOM = 32  # bytes reserved before the image for the Datum prefix (at most 26)
_TAILROOM = 16  # bytes reserved after it for the suffix (at most 13)


class ScratchBuffer:
    """One buffer reused for every file a caller reads, grown when a file needs more.

    A fresh ``bytearray`` per file is zero-filled and often freshly mapped: for 80 KB
    photos that cost about 7% of a keep-bytes conversion (benchmarks/NOTES.md C4).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def get(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes; its contents are overwritten by the next call."""
        if len(self._buffer) < size:
            self._buffer = bytearray(max(size, 2 * len(self._buffer)))
        return self._buffer


def _buffer(size: int, scratch: ScratchBuffer | None) -> bytearray:
    """``scratch``'s buffer, or a new one (not zeroed: each caller writes every byte of the
    record it makes of it, and the record is all that is read or kept)."""
    return scratch.get(size) if scratch is not None else unfilled_bytearray(size)


def _read_with_room(path: str, scratch: ScratchBuffer | None = None) -> tuple[bytearray, int]:
    """The file's bytes at offset ``_HEADROOM`` of a buffer with room for a Datum around them.

    The buffer is ``scratch``'s when given (valid until its next use), else a new one.
    """
    # os.open + one readv: four system calls and no file object; open() makes a FileIO
    # (an extra fstat) and needs a second read to see the end (NOTES.md C8).
    # O_NONBLOCK: opening a FIFO does not wait for a writer (a regular file's reads ignore it)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # not inherited by children (PEP 446)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):  # a FIFO or a device: no end to read to
            raise OSError(f"not a regular file but {_file_kind(status.st_mode)}; list only "
                          "image files")
        size = status.st_size
        needed = _HEADROOM + size + _TAILROOM
        buffer = _buffer(needed, scratch)
        # One byte past the size: a regular file reads short only at its end, so a full
        # read means it grew since fstat.
        got = os.readv(fd, [memoryview(buffer)[_HEADROOM:_HEADROOM + size + 1]])
        if got > size:
            data = bytes(buffer[_HEADROOM:_HEADROOM + got]) + _read_rest(fd)
            buffer = bytearray(_HEADROOM) + data + bytearray(_TAILROOM)
            got = len(data)
    finally:
        os.close(fd)
    return buffer, got


def _file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def _read_span_with_room(path: str, offset: int, size: int,
                         scratch: ScratchBuffer | None = None) -> tuple[bytearray, int]:
    """Bytes ``[offset, offset + size)`` of ``path`` (a tar member) placed as
    :func:`_read_with_room` places a whole file's."""
    needed = _HEADROOM + size + _TAILROOM
    buffer = _buffer(needed, scratch)
    view = memoryview(buffer)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while got < size:
            n = os.preadv(fd, [view[_HEADROOM + got:_HEADROOM + size]], offset + got)
            if n == 0:
                raise OSError(f"the file ends {size - got} bytes before the end of this "
                              "member (it changed since it was listed?)")
            got += n
    finally:
        os.close(fd)
    return buffer, size


def _copy_with_room(data: bytes | memoryview,
                    scratch: ScratchBuffer | None = None) -> tuple[bytearray, int]:
    """In-memory image bytes (a parquet row's) placed as :func:`_read_with_room` places a file's."""
    size = len(data)
    needed = _HEADROOM + size + _TAILROOM
    buffer = _buffer(needed, scratch)
    buffer[_HEADROOM:_HEADROOM + size] = data
    return buffer, size


def _read_rest(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def check_file(
    path: str, label: int, max_side: int | None = None, quality: int = 90,
    check: str = "markers", composite: bool = False, *, keep_only: bool = False,
    scratch: ScratchBuffer | None = None, span: tuple[int, int] | None = None,
    data: bytes | memoryview | None = None,
) -> tuple | None:
    """``("ok", datum record, its CRC-32, how)`` or ``("skip", reason)``.

    The image is the file ``path``, or with ``span = (offset, size)`` that byte range of it
    (a tar member), or ``data`` (bytes already in memory; ``path`` is then only its name).

    A kept JPEG's record is assembled around the bytes as read (no copy); the record is
    then a ``memoryview`` (``bytes`` when ``check_file_task_copy`` runs it in a worker),
    of ``scratch``'s buffer when given: valid only until ``scratch`` is used again.
    With ``keep_only``, a file that needs decoding returns ``None`` (the cheap check that
    the converter's main process runs before handing such files to worker processes), and
    a kept one's tuple holds a fifth item, the JPEG's own view inside the record (what the
    strict check reads, without parsing the record again).
    """
    try:
        if data is not None:
            buffer, size = _copy_with_room(data, scratch)
        elif span is not None:
            buffer, size = _read_span_with_room(path, *span, scratch)
        else:
            buffer, size = _read_with_room(path, scratch)
    except OSError as exc:
        return ("skip", f"cannot read file: {exc.strerror or exc}")
    view = memoryview(buffer)
    try:
        image, height, width, how = process_bytes(
            view[_HEADROOM:_HEADROOM + size], max_side, quality, check, composite,
            keep_only=keep_only
        )
    except NeedsDecode:
        return None
    except Unreadable as exc:
        return ("skip", str(exc))
    except Exception as exc:  # noqa: BLE001 - a decoder bug must not kill the conversion
        return ("skip", f"unexpected error while reading the image: {type(exc).__name__}: {exc}")
    if how == KEPT:
        prefix, suffix = datum_parts(size, label, height, width, 3)
        start, end = _HEADROOM - len(prefix), _HEADROOM + size + len(suffix)
        view[start:_HEADROOM] = prefix
        view[_HEADROOM + size:end] = suffix
        record = view[start:end]
        if keep_only:
            return ("ok", record, crc32(record), how, view[_HEADROOM:_HEADROOM + size])
    else:
        record = encode_datum(image, label, height, width, 3)
    return ("ok", record, crc32(record), how)


def check_file_task_copy(task: tuple, span: tuple[int, int] | None = None,
                         data: bytes | None = None) -> tuple:
    """``check_file`` over one ``(path, label, max_side, quality, check[, composite])`` tuple
    (and ``span`` or ``data``), for a worker process: the record as picklable ``bytes``."""
    result = check_file(*task, span=span, data=data)
    if result[0] == "ok" and isinstance(result[1], memoryview):
        result = ("ok", result[1].tobytes(), *result[2:])
    return result
