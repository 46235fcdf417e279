"""Buffers their caller fills before reading them, allocated without being zeroed first.

``bytearray(n)`` zero-fills its ``n`` bytes. A strict conversion reads every kept file into a
buffer of its own (it waits in memory for its check), and that zero-fill touched every fresh
page once more: a fresh process's strict conversion took 5-11% more CPU (benchmarks/NOTES.md
C27).
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Callable

__all__ = ["unfilled_bytearray"]


@functools.cache  # looked up once (two threads' first calls may both look: the same answer)
def _allocator() -> Callable[[None, int], bytearray]:
    """CPython's ``PyByteArray_FromStringAndSize(NULL, n)`` (its bytes left as allocated);
    ``bytearray(n)`` where ctypes cannot reach it."""
    try:
        import ctypes

        # by item, not attribute: a function object of our own, not the one
        # ctypes.pythonapi caches for every caller (its argtypes are ours to set)
        function = ctypes.pythonapi["PyByteArray_FromStringAndSize"]
        function.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
        function.restype = ctypes.py_object
        return function
    except (ImportError, AttributeError, OSError):
        return lambda _, size: bytearray(size)


def unfilled_bytearray(size: int) -> bytearray:
    """A ``bytearray`` of ``size`` bytes whose contents are undefined (not zeroed): for a
    buffer every byte of which the caller writes before it reads or hands it on."""
    size = operator.index(size)  # an int, as bytearray(n) takes (ctypes would take 3.0)
    if size < 0:
        raise ValueError(f"unfilled_bytearray(): size must be 0 or more, not {size}")
    if size > sys.maxsize:  # ctypes would wrap it silently
        raise OverflowError(f"unfilled_bytearray(): size {size} is more than sys.maxsize")
    return _allocator()(None, size)
