"""glibc's heap trim, for a command's own process.

glibc's ``malloc`` gives the top of the heap back to the kernel once 128 KB or more of it is
free (its trim threshold, raised on its own only after a large ``mmap``ed block is freed). A
conversion's LMDB transaction ``malloc``s its dirty pages (2-3 MB for 32 photographs) and frees
them at the commit: the whole block went back each time and was faulted in again by the next
transaction, about 18 page faults a record for a whole ``fastload convert`` (benchmarks/NOTES.md
C26). The setting is process-wide, so only a command that owns its process calls this (the
``fastload convert`` command line), never the library's functions.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["KEPT_HEAP_BYTES", "keep_freed_heap"]

KEPT_HEAP_BYTES = 64 << 20  # freed bytes the heap's top may keep: a few transactions' worth

_M_TRIM_THRESHOLD = -1  # mallopt's parameter (malloc.h)
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_")


def keep_freed_heap(limit: int = KEPT_HEAP_BYTES) -> bool:
    """Let this process's heap keep up to ``limit`` freed bytes at its top instead of giving
    them back at each ``free`` (glibc's ``mallopt(M_TRIM_THRESHOLD)``).

    Returns True where it was set; False where the user set glibc's malloc options in the
    environment (theirs are kept) or the C library has no ``mallopt`` (not glibc).
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc." in tunables:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_TRIM_THRESHOLD, int(limit)) == 1
