"""Thread and process policy shared by every layer: what a helper thread may start, and
what a forked child must forget.

``one_omp_thread`` keeps the threads fastload starts from each starting an OpenMP team;
``after_fork_in_child`` registers a child-side fork hook once, however often it is asked.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

__all__ = ["after_fork_in_child", "at_interpreter_exit", "one_omp_thread", "openmp_library"]

_REGISTERED: set[Callable[[], None]] = set()


def after_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every child this process forks from now on; registered once per hook
    (``os.register_at_fork`` has no way to unregister, so a second call is a no-op)."""
    if hook in _REGISTERED:
        return
    _REGISTERED.add(hook)
    os.register_at_fork(after_in_child=hook)


_AT_EXIT: set[Callable[[], None]] = set()


def at_interpreter_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` (once per hook) when the interpreter begins to exit: before it joins
    the remaining threads and before any ``atexit`` hook runs, so a daemon thread of
    fastload's (an epoch's maker in a DALI fetch) is stopped before DALI's own atexit hook
    shuts down the pipelines under it, and before ``concurrent.futures`` refuses new
    work to the pools that thread uses.

    The one seam over ``threading._register_atexit`` (CPython 3.9+, what
    ``concurrent.futures`` itself registers with); without it, ``atexit.register``, which
    still runs before the atexit hooks of any library imported earlier (DALI is imported
    before a decoder, and so before any maker, exists)."""
    if hook in _AT_EXIT:
        return
    _AT_EXIT.add(hook)
    import threading

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(hook)
            return
    except RuntimeError:  # "can't register atexit after shutdown": exiting already
        return
    import atexit

    atexit.register(hook)


def one_omp_thread() -> None:
    """Thread-pool initializer: this thread's torch ops run without an OpenMP team.

    Each pool thread resamples its own share of the batch; torch would otherwise start a
    team of ``omp_get_max_threads()`` (all cores) from every pool thread for each op over
    32K elements, oversubscribing the cores DALI decodes on. OpenMP's thread count is a
    per-thread setting, so the caller's threads (the training loop's
    ``torch.get_num_threads()``) keep theirs.

    Fork-safe: it enters no OpenMP parallel region. A child forked while another thread
    of the parent was inside one inherits the OpenMP runtime's locks as that thread held
    them, and a region started in a new thread of the child could wait on them for ever."""
    # torch sets each thread's OpenMP count once, lazily (from a global torch.set_num_threads
    # value, if any), at the thread's first get_num_threads() or parallel op: let that happen
    # first, without a parallel region, then override it.
    import torch  # lazily: the data layer registers fork hooks without importing torch

    torch.get_num_threads()
    set_num_threads = _omp_set_num_threads()
    if set_num_threads is not None:
        set_num_threads(1)


@functools.cache  # opened once: no dlopen (and its loader lock) in a thread of a forked child
def _omp_set_num_threads():
    """The OpenMP runtime's ``omp_set_num_threads``, or None without one."""
    import ctypes

    lib = openmp_library()
    return None if lib is None else ctypes.CDLL(lib).omp_set_num_threads


@functools.cache  # a scan of /proc/self/maps (thousands of lines with torch) per epoch's maker
def openmp_library() -> str | None:
    """Path of the OpenMP runtime loaded in this process (libgomp, libiomp5, libomp)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                name = path.rsplit("/", 1)[-1]
                if name.startswith(("libgomp", "libiomp5", "libomp")) and ".so" in name:
                    return path
    except OSError:  # no /proc (not Linux): torch's default teams stay
        pass
    return None
