"""Memory that file reads fill again and again: a block per file read, given back once the
batch that read it is decoded.

A fresh array for each file read costs a page fault and the kernel's zeroing of every page
of it before the copy: on 1 MB photos that was 0.15 ms of a 0.4 ms read (about 2% of a
high-resolution epoch, more in epochs where page faults stall; benchmarks/NOTES.md H12).
A block that was read into before is already mapped: the read is the copy alone.

A block is lent by :meth:`ReadBuffers.take` and comes back only through
:meth:`ReadBuffers.give_back`, which the epoch calls for a batch whose decode is over and
whose encoded arrays nothing else holds (the scaled path's threads are done with them, and
the batch was not resubmitted after a decoder reset, whose cancelled tasks may still read
them). An array never given back is an ordinary numpy array: it lives as long as its
references, and the pool simply lends another block.
"""

from __future__ import annotations

import bisect
import os
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["DEFAULT_READ_BUFFER_BYTES", "ReadBuffers"]

_ROUND = 64 << 10  # block sizes: multiples of 64 KiB, with a quarter of headroom
DEFAULT_READ_BUFFER_BYTES = 256 << 20  # 256 MiB of free blocks at most, per loader


class ReadBuffers:
    """Up to ``max_bytes`` of free blocks kept for reuse; a file smaller than
    ``min_file_bytes`` (malloc serves those from memory already mapped) or larger than
    ``max_file_bytes`` gets an array of its own, never pooled."""

    def __init__(self, max_bytes: int = DEFAULT_READ_BUFFER_BYTES, min_file_bytes: int = 256 << 10,
                 max_file_bytes: int = 32 << 20) -> None:
        self.max_bytes = max_bytes
        self.min_file_bytes = min_file_bytes
        self.max_file_bytes = max_file_bytes
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []  # blocks to lend, smallest first
        self._free_bytes = 0
        # id(block) -> block while lent; weak: a block never given back dies with its views
        self._lent: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (its contents undefined): a view of a free block at
        least that large and at most twice as large, or of a new block."""
        if not self.min_file_bytes <= nbytes <= self.max_file_bytes:
            return np.empty(max(nbytes, 0), dtype=np.uint8)
        if self._pid != os.getpid():  # a forked child: none of the parent's state is ours
            self._reset()
        with self._lock:
            fits = bisect.bisect_left(self._free, nbytes, key=_size)  # the smallest that fits
            if fits < len(self._free) and self._free[fits].nbytes <= 2 * nbytes:
                block = self._free.pop(fits)
                self._free_bytes -= block.nbytes
            else:
                if fits > 0:  # a new block replaces a free one too small for this file:
                    self._free_bytes -= self._free.pop(fits - 1).nbytes  # no more blocks
                block = np.empty(-(-(nbytes + nbytes // 4) // _ROUND) * _ROUND, dtype=np.uint8)
            self._lent[id(block)] = block
        return block[:nbytes]

    def give_back(self, arrays: Iterable[Any]) -> None:
        """The blocks behind ``arrays`` (views :meth:`take` returned; others are ignored)
        may be lent again: the caller holds no reference to them any more."""
        if self._pid != os.getpid():
            return
        with self._lock:
            for array in arrays:
                block = self._lent.pop(id(getattr(array, "base", None)), None)
                if block is None or self._free_bytes + block.nbytes > self.max_bytes:
                    continue
                bisect.insort(self._free, block, key=_size)
                self._free_bytes += block.nbytes


def _size(block: np.ndarray) -> int:
    return block.nbytes
