"""multiprocessing's process-wide helpers that a pool of fastload's starts, stopped with it.

A ``ProcessPoolExecutor`` on the ``forkserver`` context (the torch suffix's worker processes,
:func:`fastload.pipelines.process_pool`) starts, once per process, the forkserver process and
``resource_sharer``'s thread (it hands the pool's pipes to the workers), and they outlive the
pool: a script whose loader had run such a pool kept a process, a thread and their
descriptors after ``close()``. :class:`StartedHelpers`, taken before the pool starts, notes
which were not running then and stops those once the pool has ended. multiprocessing starts
them again for whoever needs them next.

The resource tracker process stays: it holds the names of every semaphore and shared-memory
block this process made since it started (the caller's too), and unlinks them when stopped.
"""

from __future__ import annotations

import multiprocessing.forkserver
import multiprocessing.resource_sharer

__all__ = ["StartedHelpers"]


def _forkserver_running() -> bool:
    try:
        return multiprocessing.forkserver._forkserver._forkserver_pid is not None
    except AttributeError:  # another CPython's internals: nothing is noted, nothing stopped
        return False


def _sharer_running() -> bool:
    try:
        return multiprocessing.resource_sharer._resource_sharer._listener is not None
    except AttributeError:
        return False


class StartedHelpers:
    """Which of the forkserver and ``resource_sharer``'s thread are not running now (so a
    pool started next starts them), to :meth:`stop` after that pool has ended."""

    def __init__(self) -> None:
        self.forkserver = not _forkserver_running()
        self.sharer = not _sharer_running()

    def stop(self) -> None:
        """Stop those of them that were started since (call once the pool's workers have
        exited); what ran before stays."""
        if self.forkserver and _forkserver_running():
            multiprocessing.forkserver._forkserver._stop()
        if self.sharer and _sharer_running():
            multiprocessing.resource_sharer.stop()
        self.forkserver = self.sharer = False
