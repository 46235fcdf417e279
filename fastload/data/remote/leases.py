"""The shard cache's file locks (``flock``): a reader's shared lease on a shard, the
download's exclusive lock, the evictor's lock taken without waiting, and the cache-wide
lock of the byte accounting. See :mod:`fastload.data.remote.cache` for who takes which.

A lease lives on a descriptor of this process. A forked child inherits the descriptor but
not the lease (the parent still holds it): the child's copies are closed at fork.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Lease", "global_lock", "install_fork_hook", "is_held", "lease", "open_lock",
           "try_exclusive"]

_LEASE_FDS: dict[int, int] = {}  # descriptor -> pid that opened it (closed in a fork child)
_FORK_HOOK: list[bool] = []


def _forget_in_child() -> None:
    """A forked child does not hold its parent's leases: close its copies (the parent's
    locks stay, as they live on the parent's descriptors too)."""
    for fd in list(_LEASE_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _LEASE_FDS.clear()


def install_fork_hook() -> None:
    """Close inherited lease descriptors in forked children (registered once)."""
    if not _FORK_HOOK:
        os.register_at_fork(after_in_child=_forget_in_child)
        _FORK_HOOK.append(True)


@dataclass
class Lease:
    """A shared lock on one installed shard: it is not evicted until :meth:`release`."""

    folder: Path
    fd: int
    pid: int

    def release(self) -> None:
        """Let the shard go (idempotent; a no-op in a forked child, which never held it)."""
        if self.fd >= 0 and self.pid == os.getpid():
            _LEASE_FDS.pop(self.fd, None)
            os.close(self.fd)
        self.fd = -1

    def __del__(self) -> None:  # a reader dropped without close() lets its shards go
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def lease(folder: Path, fd: int) -> Lease:
    """A :class:`Lease` on ``folder`` owning ``fd`` (which holds the shared lock)."""
    held = Lease(folder, fd, os.getpid())
    _LEASE_FDS[fd] = held.pid
    return held


def open_lock(path: Path, *, create: bool = True) -> int:
    """A descriptor of the lock file ``path`` (not inherited by exec'd programs)."""
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    return os.open(path, flags, 0o666)


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
        os.close(fd)
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
        os.close(fd)


@contextmanager
def global_lock(path: Path):
    """Hold the lock file ``path`` exclusively for the block (waiting for it)."""
    import fcntl

    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
