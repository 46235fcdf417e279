"""One conversion at a time per destination folder: an exclusive ``flock`` on the folder.

The lock is taken on the folder itself (no extra file in the database) before anything in
it is read or removed, and held until ``fastload.json`` is written or the writer closes.
A killed process's lock goes with it, so a resume is never blocked by a dead converter.
A sharded set also has one lock file (:func:`set_lock`) for the steps that decide what the
whole set is: which shard count it has, and when its manifest is written.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from contextlib import contextmanager
from pathlib import Path

from fastload.utils.threads import after_fork_in_child

# Folders this process converts into -> the descriptor holding their exclusive flock.
_DST_LOCKS: dict[str, int] = {}


def lock_destination(dst: Path) -> None:
    """Hold an exclusive ``flock`` on the ``dst`` folder itself (no extra file) while this
    process converts into it; a second conversion into the same folder is refused."""
    import fcntl

    key = os.path.realpath(dst)
    if key in _DST_LOCKS:
        return
    after_fork_in_child(_forget_in_child)
    fd = os.open(key, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FileExistsError(
            f"another conversion is writing into {str(dst)!r} right now; let it finish (or "
            "stop it and rerun its command to resume) instead of starting a second one"
        ) from None
    _DST_LOCKS[key] = fd


def locked_here(dst: Path) -> bool:
    """Whether this process holds :func:`lock_destination`'s lock on ``dst`` (a thread of
    it converts into that folder)."""
    return os.path.realpath(dst) in _DST_LOCKS


def unlock_destination(dst: Path) -> None:
    """Release :func:`lock_destination`'s lock (idempotent)."""
    fd = _DST_LOCKS.pop(os.path.realpath(dst), None)
    if fd is not None:
        os.close(fd)


def _forget_in_child() -> None:
    """A forked child (a conversion worker) must not keep the lock alive after its parent
    dies: close its copies of the descriptors (closing, not unlocking, leaves the parent's
    lock in place)."""
    for fd in _DST_LOCKS.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _DST_LOCKS.clear()


@contextmanager
def set_lock(root: Path, lock_name: str):
    """Hold an exclusive ``flock`` on the lock file ``root/lock_name`` of a sharded set for
    the ``with`` block, waiting for another holder: it serialises the short steps that decide
    what the set is (claiming shards of one shard count, completing the manifest). Not
    reentrant: a process must not nest two blocks on one set."""
    import fcntl

    fd = os.open(Path(root) / lock_name, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def remove_lone_lock(folder: Path, lock_name: str, rest: Collection[str] = ()) -> bool:
    """Remove :func:`set_lock`'s file ``folder/lock_name`` where the folder holds nothing but
    it and the names ``rest``, taking its ``flock`` first (not waiting: a process inside its
    steps keeps the file). True where the folder is then left holding just ``rest``."""
    import fcntl

    try:
        names = set(os.listdir(folder))
    except OSError:
        return False
    if names - {lock_name} != set(rest):
        return False
    if lock_name in names:
        try:
            fd = os.open(Path(folder) / lock_name, os.O_RDWR)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(Path(folder) / lock_name)  # while held: no other process is in its steps
        except OSError:
            return False
        finally:
            os.close(fd)
    return True
