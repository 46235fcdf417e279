"""This process's read-only LMDB environments, shared by every reader of one database.

py-lmdb refuses to open one environment twice in a process, and a forked child inherits
the parent's handle (unusable there by LMDB's rules). So read-only environments are
shared per process: key -> [owner pid, environment, users], changed under one lock (two
threads opening one path at once would open it twice). The key is the directory's real path
and the identity (device, inode) of its ``data.mdb``: a database converted again at the same
path (a new file moved in) gets an environment of its own, while readers of the old one keep
theirs.

A reader's ``__del__`` gives its environment back through :func:`release_env` with
``deferred=True``: the garbage collector may run it in a thread that holds the lock (a
collection started by an allocation inside :func:`acquire_env`), where waiting would never
end. Such a release is queued and applied by the next call that takes the lock.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

from fastload.data.format.constants import DATA_FILE
from fastload.data.format.lmdb_meta import check_data_file
from fastload.utils.threads import after_fork_in_child

__all__ = ["MAX_READERS", "acquire_env", "release_env"]

MAX_READERS = 1024

_ENVS: dict[tuple, list] = {}
_ENVS_LOCK = threading.Lock()
_DEFERRED: deque[tuple[tuple, int]] = deque()  # (key, pid) releases not yet applied


def _new_envs_lock() -> None:  # a fork taken while another thread held it
    global _ENVS_LOCK
    _ENVS_LOCK = threading.Lock()


after_fork_in_child(_new_envs_lock)


EnvKey = tuple[str, int, int]  # the real path, and data.mdb's device and inode


def acquire_env(path: Path, count: int | None = None) -> tuple[Any, EnvKey]:
    """This process's read-only environment for ``path`` (opened on first use), and the key
    to give it back with (:func:`release_env`).

    Before opening, ``data.mdb`` is checked against LMDB's meta pages (and ``count``, the
    sidecar's record count): a truncated file raises ``DamagedDatabase`` (an OSError)
    instead of a SIGBUS on the first page past its end.
    """
    real = os.path.realpath(path)
    try:
        stat = os.stat(os.path.join(real, DATA_FILE))
    except OSError:
        check_data_file(Path(real) / DATA_FILE, count)  # names what is missing, and the fix
        raise
    key = (real, stat.st_dev, stat.st_ino)
    with _ENVS_LOCK:
        _apply_deferred()
        return _acquire_env(key, path, count), key


def _acquire_env(key: EnvKey, path: Path, count: int | None):
    import lmdb

    pid = os.getpid()
    entry = _ENVS.get(key)
    if entry is not None and entry[0] != pid:  # inherited through fork: drop our copy only
        del _ENVS[key]
        try:
            entry[1].close()
        except lmdb.Error:
            pass
        entry = None
    if entry is None:
        check_data_file(Path(key[0]) / DATA_FILE, count)
        try:
            env = lmdb.open(
                key[0], readonly=True, lock=False, readahead=False, subdir=True,
                max_readers=MAX_READERS, meminit=False,
            )
        except lmdb.Error as exc:
            raise OSError(f"cannot open the LMDB database in {str(path)!r}: {exc}") from None
        entry = _ENVS[key] = [pid, env, 0]
    entry[2] += 1
    return entry[1]


def release_env(key: EnvKey, *, deferred: bool = False) -> None:
    """Give back the environment :func:`acquire_env` gave with ``key``; the last user closes
    it. ``deferred`` (a finaliser's call): never wait for the lock; queue the release when it
    is taken."""
    if deferred:
        _DEFERRED.append((key, os.getpid()))
        if _ENVS_LOCK.acquire(blocking=False):
            try:
                _apply_deferred()
            finally:
                _ENVS_LOCK.release()
        return
    with _ENVS_LOCK:
        _apply_deferred()
        _release(key, os.getpid())


def _apply_deferred() -> None:
    """The queued releases (the lock held)."""
    while _DEFERRED:  # only taken from under the lock: never emptied in between
        _release(*_DEFERRED.popleft())


def _release(key: EnvKey, pid: int) -> None:
    entry = _ENVS.get(key)
    if entry is not None and entry[0] == pid == os.getpid():
        entry[2] -= 1
        if entry[2] <= 0:
            del _ENVS[key]
            entry[1].close()
