"""The shard cache's locks: between processes an ``flock`` per shard lock file, within a
process a table of the shards this process leases. See :mod:`fastload.data.remote.cache`
for who takes which.

``flock`` locks belong to open file descriptions, not to processes: a process that asks for
an exclusive lock on a shard through one descriptor while it holds a shared one through
another waits for itself forever. So a process takes a shard's ``flock`` through one
descriptor at a time, owned by its :class:`LocalShard` entry (one per lock file, made on
first use and kept for the process's life): the entry counts the :class:`Lease` objects
handed out on it (all sharing the one shared lock) and says whether a thread of this
process is taking the lock or fetching the shard now (``busy``). A second acquire of a
shard in the same process reuses the lease or waits on the entry's condition; it never
waits on ``flock`` for a lock this process holds.

A forked child inherits the descriptors but not the locks' meaning (the parent still holds
them): every lock descriptor of the parent is closed in the child and its table starts
empty.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from fastload.utils.threads import after_fork_in_child

__all__ = ["Cancelled", "Lease", "LocalShard", "close_lock", "global_lock", "held_here",
           "in_use_here", "install_fork_hook", "is_held", "local_shard", "open_lock",
           "try_exclusive", "wait_flock"]

_OPEN: set[int] = set()  # every lock descriptor this process has open (closed in a fork child)
_TABLE: dict[str, LocalShard] = {}
_TABLE_LOCK = threading.Lock()
_DROPPED: list[LocalShard] = []  # leases garbage-collected while their entry was locked
_POLL_MAX_S = 0.2  # the longest sleep between two tries of a lock another process holds


class Cancelled(Exception):
    """A wait for a shard's lock was given up because its caller cancelled it."""


class LocalShard:
    """This process's view of one shard's lock file ``lock`` (module docstring).

    ``count``: leases handed out; ``fd``: the descriptor holding the shared lock while
    ``count > 0``; ``busy``: a thread of this process is taking the lock or fetching the
    shard. Read and change them only under ``cond``."""

    def __init__(self, lock: Path) -> None:
        self.lock = lock
        self.cond = threading.Condition(threading.Lock())
        self.count = 0
        self.fd = -1
        self.busy = False

    def give_back(self) -> None:
        """One lease fewer (under ``cond``): the last one closes the descriptor, which
        releases the shared lock."""
        self.count -= 1
        if self.count <= 0:
            self.count = 0
            if self.fd >= 0:
                close_lock(self.fd)
            self.fd = -1
            self.cond.notify_all()


def _forget_in_child() -> None:
    """A forked child holds none of its parent's locks: close its copies of the lock
    descriptors (the parent's locks stay, as they live on its own descriptors too) and start
    an empty table (a parent's thread may have held an entry's lock at the fork)."""
    global _TABLE_LOCK
    for fd in list(_OPEN):
        try:
            os.close(fd)
        except OSError:
            pass
    _OPEN.clear()
    _TABLE.clear()
    _DROPPED.clear()
    _TABLE_LOCK = threading.Lock()


def install_fork_hook() -> None:
    """Close inherited lock descriptors in forked children (registered once)."""
    after_fork_in_child(_forget_in_child)


def _drain_dropped() -> None:
    while _DROPPED:
        try:
            shard = _DROPPED.pop()
        except IndexError:
            return
        with shard.cond:
            shard.give_back()


def local_shard(lock: Path) -> LocalShard:
    """The entry of the lock file ``lock`` in this process's table (made on first use)."""
    _drain_dropped()
    key = os.path.abspath(lock)
    with _TABLE_LOCK:
        entry = _TABLE.get(key)
        if entry is None:
            entry = _TABLE[key] = LocalShard(Path(key))
        return entry


def in_use_here(lock: Path) -> bool:
    """Whether this process leases the shard of ``lock`` or a thread of it is fetching it."""
    entry = _TABLE.get(os.path.abspath(lock))
    return entry is not None and (entry.busy or entry.count > 0)


def held_here() -> dict[str, int]:
    """``{lock file: leases}`` of every shard this process leases now (for tests)."""
    with _TABLE_LOCK:
        return {key: entry.count for key, entry in _TABLE.items() if entry.count}


class Lease:
    """A shared lock on one installed shard: it is not evicted until :meth:`release`."""

    def __init__(self, folder: Path, shard: LocalShard) -> None:
        self.folder = folder
        self.pid = os.getpid()
        self._shard: LocalShard | None = shard

    def __repr__(self) -> str:
        state = "held" if self._shard is not None else "released"
        return f"Lease({str(self.folder)!r}, {state})"

    @property
    def held(self) -> bool:
        """Whether this lease still holds its shard (False once released, or in a child)."""
        return self._shard is not None and self.pid == os.getpid()

    def release(self) -> None:
        """Let the shard go (idempotent; a no-op in a forked child, which never held it)."""
        shard, self._shard = self._shard, None
        if shard is None or self.pid != os.getpid():
            return
        _drain_dropped()
        with shard.cond:
            shard.give_back()

    def __del__(self) -> None:  # a reader dropped without close() lets its shards go
        shard, self._shard = self._shard, None
        try:  # at interpreter exit, module globals (os) may be gone already
            if shard is None or self.pid != os.getpid():
                return
            # the collector may run inside this very entry's critical section: no wait
            if shard.cond.acquire(timeout=0.05):
                try:
                    shard.give_back()
                finally:
                    shard.cond.release()
            else:
                _DROPPED.append(shard)  # given back at the next acquire or release
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def open_lock(path: Path, *, create: bool = True) -> int:
    """A descriptor of the lock file ``path`` (not inherited by exec'd programs, closed in
    forked children); close it with :func:`close_lock`."""
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o666)
    _OPEN.add(fd)
    return fd


def close_lock(fd: int) -> None:
    """Close a descriptor of :func:`open_lock` (releasing its lock)."""
    _OPEN.discard(fd)
    os.close(fd)


def wait_flock(fd: int, operation: int, deadline: float,
               cancelled: Callable[[], bool] | None, timed_out: Callable[[float], str],
               until: Callable[[], bool] | None = None) -> bool:
    """Take ``flock(fd, operation)``, trying again while another process holds the lock,
    until ``time.monotonic()`` passes ``deadline`` (``TimeoutError(timed_out(waited_s))``)
    or ``cancelled()`` says so (:class:`Cancelled`). True once taken; False, without it,
    as soon as ``until()`` is true (checked while the lock is held elsewhere: what the
    wait was for has happened)."""
    import fcntl

    start = time.monotonic()
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if until is not None and until():
            return False
        if cancelled is not None and cancelled():
            raise Cancelled()
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(timed_out(now - start))
        time.sleep(min(pause, deadline - now))
        pause = min(2 * pause, _POLL_MAX_S)


def try_exclusive(path: Path) -> int | None:
    """A descriptor holding ``path``'s lock exclusively, taken without waiting; None when
    someone holds it (or it cannot be opened)."""
    import fcntl

    try:
        fd = open_lock(path)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        close_lock(fd)
        return None
    return fd


def is_held(path: Path) -> bool:
    """Whether someone holds ``path``'s lock exclusively (a download under way)."""
    import fcntl

    try:
        fd = open_lock(path, create=False)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        close_lock(fd)


@contextmanager
def global_lock(path: Path):
    """Hold the lock file ``path`` exclusively for the block (waiting for it)."""
    import fcntl

    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        close_lock(fd)
