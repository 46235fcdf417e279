"""The CPU decode ceiling: Pillow's full decode of the same files on all cores, nothing else.

This is the benchmark's row (f). Each worker process of a ``multiprocessing`` pool reads a
file and decodes every pixel of it with Pillow (libjpeg-turbo), with no draft mode, no
resize, no crop and no tensor conversion. No loader that fully decodes each image can beat
it on the same cores; a region-of-interest or DCT-downscaled decode can.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence

from fastload.utils.checks import check_positive_int

__all__ = ["decode_file", "DecodeCeiling"]


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


class DecodeCeiling:
    """A pool of ``processes`` workers; each :meth:`run_epoch` decodes every file once.

    The pool lives from construction to :meth:`close` (like persistent loader workers), so
    its start-up cost stays out of the measured epochs.
    """

    def __init__(self, files: Sequence[str], processes: int | None = None) -> None:
        if len(files) == 0:
            raise ValueError("files should name at least one image, but got an empty list")
        check_positive_int("processes", processes, allow_none=True)
        self.files = [os.fspath(f) for f in files]
        self.processes = processes or len(os.sched_getaffinity(0))
        # Chunks small enough to balance the load, large enough to keep IPC negligible.
        self._chunksize = max(1, len(self.files) // (self.processes * 8))
        context = multiprocessing.get_context("fork")
        self._pool = context.Pool(self.processes)

    def run_epoch(self) -> int:
        """Decode every file once across the pool; return the number of images decoded."""
        if self._pool is None:
            raise RuntimeError("DecodeCeiling was closed; create a new one to decode again")
        count = 0
        for _ in self._pool.imap_unordered(decode_file, self.files, chunksize=self._chunksize):
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
