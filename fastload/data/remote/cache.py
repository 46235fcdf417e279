"""The local shard cache: a folder fastload owns, bounded in bytes, shared by a node's processes.

Layout (``root`` is ``cache_dir=``, else ``$FASTLOAD_CACHE``, else ``~/.cache/fastload``)::

    root/
      .fastload-cache.lock          serialises the byte accounting (reserving, evicting)
      sets/<name>-<hash>/           one remote set (hash: its URL and endpoint)
        fastload-set.json labels.i32    the set's manifest and labels, fetched at open
        .locks/<shard>.lock         one lock file per shard
        <shard>/                    an installed shard: its files and .fastload-cache.json
        .part-<shard>-<pid>-<n>/    a download in progress (reserved.json: its bytes)

Per shard, an ``flock`` on its lock file says who uses it:

* a reader holds it **shared** while it has the shard open (a :class:`Lease`);
* a download holds it **exclusive**: a second process (or thread) wanting the same shard
  waits, then finds it installed, so the ranks of a node download a shard once;
* eviction takes it exclusive **without waiting**: a shard anyone holds is never evicted.

A shard is downloaded into a ``.part-`` folder, checked by the caller's ``fill`` (against
the set's manifest), given a marker holding its fingerprint and file sizes, and renamed into
place: a crash leaves a ``.part-`` folder (removed by the next download of that shard),
never a shard that looks installed. An installed shard is used only while its marker equals
the fingerprint asked for and its files have the marker's sizes; else it is fetched again.

The bound (``max_bytes=``, else ``$FASTLOAD_CACHE_BYTES``, else half of what the cache's
disk has free plus what the cache holds) counts installed shards and downloads in progress;
room is made by evicting the least recently used shards that nobody holds. When the shards
in use fill it, ``make_room`` (the reader's own idle shards) is asked first; a foreground
read then goes over the bound with one warning, a prefetch does not start.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Lease", "ShardCache", "default_cache_dir", "set_key"]

MARKER = ".fastload-cache.json"
RESERVED = "reserved.json"
LOCKS = ".locks"
GLOBAL_LOCK = ".fastload-cache.lock"
MAX_MARKER_BYTES = 1 << 20
_COUNTER = itertools.count()
_LEASE_FDS: dict[int, int] = {}  # descriptor -> pid that opened it (closed in a fork child)
_FORK_HOOK: list[bool] = []


def default_cache_dir() -> Path:
    """``$FASTLOAD_CACHE``, else ``$XDG_CACHE_HOME/fastload``, else ``~/.cache/fastload``."""
    if os.environ.get("FASTLOAD_CACHE"):
        return Path(os.environ["FASTLOAD_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastload"


def set_key(url: str, endpoint: str | None = None) -> str:
    """The cache folder name of the set at ``url`` (served by ``endpoint``): its last part,
    made safe, and a hash of both (two servers' ``s3://b/set`` do not share a folder)."""
    digest = hashlib.sha256(f"{endpoint or ''}\n{url}".encode()).hexdigest()[:16]
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:40]
    return f"{tail or 'set'}-{digest}"


def _forget_in_child() -> None:
    """A forked child does not hold its parent's leases: close its copies (the parent's
    locks stay, as they live on the parent's descriptors too)."""
    for fd in list(_LEASE_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _LEASE_FDS.clear()


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


@dataclass
class _Held:
    folder: Path
    lock: Path
    bytes: int
    last_use: float


class ShardCache:
    """The cache folder ``root`` bounded to ``max_bytes`` (see the module docstring).

    ``downloads`` and ``downloaded_bytes`` count what this object fetched in this process."""

    def __init__(self, root: str | os.PathLike | None = None,
                 max_bytes: int | None = None) -> None:
        if max_bytes is None and os.environ.get("FASTLOAD_CACHE_BYTES"):
            text = os.environ["FASTLOAD_CACHE_BYTES"]
            try:
                max_bytes = int(text)
            except ValueError:
                raise ValueError(f"FASTLOAD_CACHE_BYTES should be a number of bytes, but got "
                                 f"{text!r}") from None
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(
                max_bytes, int) or max_bytes <= 0):
            raise ValueError(f"cache_bytes should be a positive number of bytes, but got "
                             f"cache_bytes={max_bytes!r}")
        self.root = Path(os.path.abspath(root)) if root is not None else default_cache_dir()
        self._max_bytes = max_bytes
        self.downloads = 0
        self.downloaded_bytes = 0
        self._stats_lock = threading.Lock()
        self._warned = False
        if not _FORK_HOOK:
            os.register_at_fork(after_in_child=_forget_in_child)
            _FORK_HOOK.append(True)

    def __repr__(self) -> str:
        return f"ShardCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_stats_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._stats_lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        """The bound in bytes (the default is measured once, on first use)."""
        if self._max_bytes is None:
            self._folder(self.root)
            free = shutil.disk_usage(self.root).free
            self._max_bytes = max(1, (free + self.usage()) // 2)
        return self._max_bytes

    def set_folder(self, key: str) -> Path:
        """The folder of the set named ``key`` (:func:`set_key`), made on first use."""
        return self._folder(self.root / "sets" / key)

    def usage(self) -> int:
        """Bytes held: installed shards plus downloads in progress."""
        used, _ = self._scan(None)
        return used

    def holds(self, folder: Path, fingerprint: dict) -> bool:
        """Whether the shard ``folder`` is installed with ``fingerprint`` right now (it may
        be evicted a moment later unless leased)."""
        return self._valid(folder, fingerprint)

    def acquire(self, folder: Path, fingerprint: dict,
                listing: Callable[[], dict[str, int]],
                fill: Callable[[Path, dict[str, int]], None], *, keep: bool = True,
                make_room: Callable[[], bool] | None = None,
                overflow: bool = True) -> Lease | bool:
        """Make sure the shard ``folder`` is installed with ``fingerprint``, downloading it
        when it is not: ``listing()`` gives the ``{file: bytes}`` to fetch, ``fill(part,
        files)`` fetches and checks them into the folder ``part``. Returns a :class:`Lease`
        (``keep``), or True when installed and False when there was no room for it (only
        with ``overflow=False``)."""
        import fcntl

        locks = self._folder(folder.parent / LOCKS)
        fd = os.open(locks / f"{folder.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            for _ in range(4):  # a lock conversion is not atomic: an evictor may slip in
                fcntl.flock(fd, fcntl.LOCK_SH)
                if self._valid(folder, fingerprint):
                    _touch(folder / MARKER)  # its last use, for the LRU order
                    if not keep:
                        return True
                    lease = Lease(folder, fd, os.getpid())
                    _LEASE_FDS[fd] = lease.pid
                    fd = -1
                    return lease
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits for a download of it elsewhere
                if not self._valid(folder, fingerprint) and not self._install(
                        folder, fingerprint, listing, fill, make_room, overflow):
                    return False
            raise OSError(f"the cached shard {str(folder)!r} was evicted four times while it "
                          "was being opened; raise cache_bytes")
        finally:
            if fd >= 0:
                os.close(fd)

    def _install(self, folder, fingerprint, listing, fill, make_room, overflow) -> bool:
        for stale in folder.parent.glob(f".part-{folder.name}-*"):  # we hold its lock
            shutil.rmtree(stale, ignore_errors=True)
        files = listing()
        part = self._reserve(folder, sum(files.values()), make_room, overflow)
        if part is None:
            return False
        try:
            fill(part, files)
            (part / RESERVED).unlink()
            sizes = {entry.name: entry.stat().st_size for entry in os.scandir(part)
                     if entry.is_file()}
            (part / MARKER).write_text(json.dumps({"fingerprint": fingerprint,
                                                   "files": sizes}))
            _touch(part / MARKER)
            if folder.exists():
                self._discard(folder)
            os.rename(part, folder)
        except BaseException:
            shutil.rmtree(part, ignore_errors=True)
            raise
        with self._stats_lock:
            self.downloads += 1
            self.downloaded_bytes += sum(sizes.values())
        return True

    def _reserve(self, folder: Path, size: int, make_room, overflow: bool) -> Path | None:
        """A ``.part-`` folder for ``size`` bytes, made once evicting the least recently used
        idle shards leaves room (see the module docstring for when there is none)."""
        bound = self.max_bytes
        if size > bound:
            raise ValueError(f"the shard {folder.name!r} ({size} bytes) does not fit in the "
                             f"cache at {str(self.root)!r} (cache_bytes={bound}); pass a "
                             "larger cache_bytes")
        while True:
            with self._global_lock():
                used, held = self._scan(folder)
                for shard in sorted(held, key=lambda h: h.last_use):
                    if used + size <= bound:
                        break
                    if self._evict(shard):
                        used -= shard.bytes
                if used + size <= bound:
                    return self._part(folder, size)
            if make_room is not None and make_room():
                continue  # one of the caller's own idle shards was let go: try again
            if not overflow:
                return None
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"the shard cache at {str(self.root)!r} is full of shards in use "
                    f"({used} of cache_bytes={bound} bytes): fetching {folder.name!r} goes "
                    "over the bound; pass a larger cache_bytes, or read the set in a "
                    "shard-aware order that keeps fewer shards open", ResourceWarning,
                    stacklevel=4)
            with self._global_lock():
                return self._part(folder, size)

    def _part(self, folder: Path, size: int) -> Path:
        part = folder.parent / f".part-{folder.name}-{os.getpid()}-{next(_COUNTER)}"
        part.mkdir()
        (part / RESERVED).write_text(json.dumps({"shard": folder.name, "bytes": size}))
        return part

    def _scan(self, skip: Path | None) -> tuple[int, list[_Held]]:
        """``(bytes held, installed shards other than skip)``; downloads in progress count
        while their shard's lock is held (a dead downloader's part counts nothing)."""
        used, held = 0, []
        sets = self.root / "sets"
        if not sets.is_dir():
            return 0, []
        for set_dir in os.scandir(sets):
            if not set_dir.is_dir():
                continue
            for entry in os.scandir(set_dir.path):
                path = Path(entry.path)
                if not entry.is_dir() or entry.name == LOCKS:
                    continue
                if entry.name.startswith(".part-"):
                    used += self._in_progress(path)
                elif not entry.name.startswith(".") and path != skip:
                    marker = _read_marker(path)
                    if marker is not None:
                        size = sum(int(v) for v in marker.get("files", {}).values())
                        used += size
                        held.append(_Held(path, path.parent / LOCKS / f"{entry.name}.lock",
                                          size, (path / MARKER).stat().st_mtime))
        return used, held

    @staticmethod
    def _in_progress(part: Path) -> int:
        import fcntl

        try:
            reserved = json.loads((part / RESERVED).read_text())
            lock = part.parent / LOCKS / f"{reserved['shard']}.lock"
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except (OSError, ValueError, KeyError, TypeError):
            return 0
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return 0  # nobody downloads it: a crashed download's leftovers
        except BlockingIOError:
            return int(reserved.get("bytes", 0))
        finally:
            os.close(fd)

    def _evict(self, shard: _Held) -> bool:
        """Delete ``shard`` if nobody holds it (a lock taken without waiting)."""
        import fcntl

        try:
            fd = os.open(shard.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            if not (shard.folder / MARKER).exists():
                return False
            self._discard(shard.folder)
            return True
        finally:
            os.close(fd)

    @staticmethod
    def _discard(folder: Path) -> None:
        """Remove an installed shard: renamed away first (it stops looking installed at
        once), then deleted."""
        trash = folder.parent / f".trash-{folder.name}-{os.getpid()}-{next(_COUNTER)}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)

    @staticmethod
    def _valid(folder: Path, fingerprint: dict) -> bool:
        marker = _read_marker(folder)
        if marker is None or marker.get("fingerprint") != fingerprint:
            return False
        files = marker.get("files")
        if not isinstance(files, dict):
            return False
        for name, size in files.items():
            try:
                if os.stat(folder / name).st_size != size:
                    return False  # cut short or grown in the cache: fetched again
            except OSError:
                return False
        return True

    @contextmanager
    def _global_lock(self):
        import fcntl

        fd = os.open(self._folder(self.root) / GLOBAL_LOCK,
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @staticmethod
    def _folder(path: Path) -> Path:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot create the shard cache folder {str(path)!r}: "
                          f"{exc.strerror}; pass cache_dir= or set FASTLOAD_CACHE to a "
                          "writable folder") from None
        return path


def _touch(marker: Path) -> None:
    """Stamp ``marker`` with the clock's time: the kernel's own file times are coarse (a
    tick of several ms), too coarse to order two uses in a row."""
    now = time.time_ns()
    os.utime(marker, ns=(now, now))


def _read_marker(folder: Path) -> dict | None:
    try:
        with open(folder / MARKER, "rb") as handle:
            value = json.loads(handle.read(MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
