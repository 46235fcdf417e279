"""The CPU decode ceiling and floor: each file decoded on all cores, nothing else.

Row (f), the ceiling: each worker process of a ``multiprocessing`` pool reads a file and
decodes every pixel of it with Pillow (libjpeg-turbo), with no draft mode, no resize, no crop
and no tensor conversion. No loader that fully decodes each image can beat it on the same
cores; a region-of-interest or DCT-downscaled decode can.

Row (i), the floor: the same pool decodes each JPEG at the smallest DCT scale, 1/8, to grey
(:func:`decode_file_floor`). Every decode of a sequential JPEG pays the entropy (Huffman)
decoding of all its coefficients, of every component, whatever the scale or region; at 1/8
the inverse DCT of a block is its DC term and grey output skips the chroma blocks' and the
colour conversion, so what is left is that entropy decoding: the cheapest decode of the file
libjpeg-turbo offers (measured against Pillow's ``draft()`` and simplejpeg at 1/8 to RGB,
benchmarks/NOTES.md H5). A file that is not a JPEG is decoded in full by Pillow.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence

from fastload.utils.checks import check_positive_int

__all__ = ["decode_file", "decode_file_floor", "DecodeCeiling"]


def decode_file(path: str) -> int:
    """Read ``path`` and fully decode it to RGB with Pillow; return the number of pixels."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
            if image.mode != "RGB":
                image = image.convert("RGB")
            width, height = image.size
    except OSError as exc:
        raise OSError(f"cannot decode {path!r}: {exc}") from exc
    return width * height


def decode_file_floor(path: str) -> int:
    """Read ``path`` and decode it at 1/8 scale to grey (simplejpeg): the entropy decoding of
    the whole file and little else; return the pixels of the full-size image. Not a JPEG (or
    one simplejpeg cannot read): Pillow's full decode, as :func:`decode_file`."""
    import simplejpeg

    with open(path, "rb") as handle:
        data = handle.read()
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        simplejpeg.decode_jpeg(data, colorspace="GRAY", min_height=1, min_width=1)
    except ValueError:
        return decode_file(path)
    return width * height


class DecodeCeiling:
    """A pool of ``processes`` workers; each :meth:`run_epoch` decodes every file once with
    ``decode`` (:func:`decode_file`: the ceiling; :func:`decode_file_floor`: the floor).

    The pool lives from construction to :meth:`close` (like persistent loader workers), so
    its start-up cost stays out of the measured epochs.
    """

    def __init__(self, files: Sequence[str], processes: int | None = None,
                 decode: Callable[[str], int] = decode_file) -> None:
        if len(files) == 0:
            raise ValueError("files should name at least one image, but got an empty list")
        check_positive_int("processes", processes, allow_none=True)
        self.files = [os.fspath(f) for f in files]
        self.processes = processes or len(os.sched_getaffinity(0))
        self._decode = decode
        # Chunks small enough to balance the load, large enough to keep IPC negligible.
        self._chunksize = max(1, len(self.files) // (self.processes * 8))
        context = multiprocessing.get_context("fork")
        self._pool = context.Pool(self.processes)

    def run_epoch(self) -> int:
        """Decode every file once across the pool; return the number of images decoded."""
        if self._pool is None:
            raise RuntimeError("DecodeCeiling was closed; create a new one to decode again")
        count = 0
        for _ in self._pool.imap_unordered(self._decode, self.files, chunksize=self._chunksize):
            count += 1
        return count

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.terminate()
