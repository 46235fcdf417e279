"""The local shard cache: a folder fastload owns, bounded in bytes, shared by a node's processes.

Layout (``root`` is ``cache_dir=``, else ``$FASTLOAD_CACHE``, else ``~/.cache/fastload``)::

    root/
      .fastload-cache.lock          serialises the byte accounting (reserving, evicting)
      shards/                       every set's shards, named by content (cache_layout)
        <shard>-<hash>/             an installed shard: its files and .fastload-cache.json
        .locks/<shard>-<hash>.lock  one lock file per shard
        .part-<shard>-<hash>-<pid>-<n>/  a download in progress (reserved.json: its bytes)
      sets/set-<hash>/              one set's manifest and labels (hash: the manifest's bytes)
      sets/<name>-<hash>/lmdb/      a single LMDB read from a URL (hash: its URL and endpoint)

A shard's name is a hash of what the set's manifest says of it (its set's identity, its
index, record range and the CRC-32 of its checksum file), not of its URL: a run resumed
through another endpoint, another spelling of the URL or a copy of the set, at any world
size, uses what the cache holds. A copy is still used only after it was checked against
that description (below), so a name never stands in for a check.

Per shard, an ``flock`` on its lock file says who uses it (:mod:`~fastload.data.remote.leases`):

* a reader holds it **shared** while it has the shard open (a :class:`Lease`);
* a download holds it **exclusive**: a second process (or thread) wanting the same shard
  waits, then finds it installed, so the ranks of a node download a shard once (a process
  that found it missing and waits to fetch it stops waiting as soon as it is installed:
  the one that fetched it holds it shared for as long as it reads it);
* eviction takes it exclusive **without waiting**: a shard anyone holds is never evicted.

Within a process the lock is taken through one descriptor at a time (``flock`` locks belong
to open file descriptions, so a second one would wait for the first forever): the leases of
one shard in one process share one shared lock, counted in memory, and a thread wanting a
shard another thread of the process is fetching waits on an in-process condition. A shard
this process leases is so never installed again under its readers. Every wait is bounded
(``LOCK_WAIT_S``, a prefetch's shorter) and ends with a ``TimeoutError`` naming the shard.

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

import errno
import json
import logging
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import fastload.data.remote.cache_layout as layout
from fastload.data.remote.cache_layout import (
    LOCKS,
    MARKER,
    RESERVED,
    SHARDS,
    content_name,
    default_cache_dir,
    set_key,
)
from fastload.data.remote.leases import (
    Cancelled,
    Lease,
    LocalShard,
    close_lock,
    global_lock,
    in_use_here,
    install_fork_hook,
    is_held,
    local_shard,
    open_lock,
    try_exclusive,
    wait_flock,
)

__all__ = ["LOCK_WAIT_S", "MARKER", "CacheDiskFull", "CacheOverBoundWarning", "Cancelled",
           "Lease", "ShardCache", "content_name", "default_cache_dir", "set_key"]

LOCK_WAIT_S = 300.0  # the longest wait for a shard another thread or process is fetching
_WAIT_LOGGED_S = 0.05  # a lock wait at least this long gets a debug record

log = logging.getLogger(__name__)  # hits, misses, evictions, waits: debug records
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class CacheDiskFull(OSError):
    """The shard cache's disk (or quota) is full: free space or lower ``cache_bytes``."""


class CacheOverBoundWarning(UserWarning):
    """The shards readers hold fill the cache's bound, so the next one is fetched over it
    (a ``UserWarning``: shown once by Python's default filters)."""


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
        install_fork_hook()

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
            layout.make_folder(self.root)
            free = shutil.disk_usage(self.root).free
            self._max_bytes = max(1, (free + self.usage()) // 2)
        return self._max_bytes

    def set_folder(self, key: str) -> Path:
        """The folder of the set named ``key`` (:func:`content_name` of its manifest, or
        :func:`set_key` of its URL), made on first use."""
        return layout.make_folder(self.root / "sets" / key)

    def shard_store(self) -> Path:
        """The folder every set's shards are installed in, each under the
        :func:`content_name` of its description (made on first use)."""
        return layout.make_folder(self.root / SHARDS)

    def usage(self) -> int:
        """Bytes held: installed shards plus downloads in progress."""
        used, _ = self._scan(None)
        return used

    def holds(self, folder: Path, fingerprint: dict) -> bool:
        """Whether the shard ``folder`` is installed with ``fingerprint`` right now (it may
        be evicted a moment later unless leased)."""
        return layout.valid(folder, fingerprint)

    def acquire(self, folder: Path, fingerprint: dict,
                listing: Callable[[], dict[str, int]],
                fill: Callable[[Path, dict[str, int]], None], *, keep: bool = True,
                make_room: Callable[[], bool] | None = None,
                overflow: bool = True, wait_s: float | None = None,
                cancelled: Callable[[], bool] | None = None,
                refresh: bool = False) -> Lease | bool:
        """Make sure the shard ``folder`` is installed with ``fingerprint``, downloading it
        when it is not: ``listing()`` gives the ``{file: bytes}`` to fetch, ``fill(part,
        files)`` fetches and checks them into the folder ``part``. Returns a :class:`Lease`
        (``keep``), or True when installed and False when there was no room for it (only
        with ``overflow=False``).

        A shard this process already leases is leased again without touching its file lock;
        one another thread of this process is fetching is waited for on an in-process
        condition (:mod:`~fastload.data.remote.leases`). Waiting, for that thread or for
        another process's download, lasts at most ``wait_s`` (default ``LOCK_WAIT_S``), then
        raises ``TimeoutError`` naming the shard; ``cancelled()`` true ends a wait with
        :class:`~fastload.data.remote.leases.Cancelled`. ``refresh``: the installed copy
        failed a check its caller made: it is moved aside and fetched again (``OSError``
        when another reader of this process holds it open)."""
        shard = local_shard(layout.make_folder(folder.parent / LOCKS) / f"{folder.name}.lock")
        deadline = time.monotonic() + (LOCK_WAIT_S if wait_s is None else wait_s)
        with shard.cond:
            if shard.busy:
                log.debug("cache: waiting for another thread of this process fetching %s",
                          folder.name)
            while shard.busy:  # another thread of this process takes its lock or fetches it
                self._wait_here(shard, folder, deadline, cancelled)
            if shard.count:  # leased here: installed, and nobody can evict or replace it
                if refresh:
                    raise OSError(f"the cached shard {str(folder)!r} failed a check but "
                                  "another reader of this process holds it open, so it "
                                  "cannot be fetched again now; close that reader, or delete "
                                  "the folder and rerun")
                if not layout.valid(folder, fingerprint):
                    raise OSError(f"the cached shard {str(folder)!r} changed on disk while "
                                  "this process reads it (its files no longer have the sizes "
                                  "it was installed with); delete the folder and rerun")
                layout.touch(folder / MARKER)
                log.debug("cache hit: %s (already leased by this process)", folder.name)
                if not keep:
                    return True
                shard.count += 1
                return Lease(folder, shard)
            shard.busy = True
        try:
            return self._take(shard, folder, fingerprint, listing, fill, keep, make_room,
                              overflow, deadline, cancelled, refresh)
        finally:
            with shard.cond:
                shard.busy = False
                shard.cond.notify_all()

    def _wait_here(self, shard: LocalShard, folder: Path, deadline: float,
                   cancelled: Callable[[], bool] | None) -> None:
        """Wait (under ``shard.cond``) for the thread of this process busy with ``shard``."""
        if cancelled is not None and cancelled():
            raise Cancelled()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(self._timed_out(folder, shard.lock, None))
        shard.cond.wait(min(left, 0.25))

    def _timed_out(self, folder: Path, lock: Path, waited: float | None) -> str:
        who = "another thread of this process" if waited is None else "another process"
        return (f"gave up waiting for the shard {folder.name!r} of the shard cache at "
                f"{str(self.root)!r}: {who} has been fetching it (or holding its lock file "
                f"{str(lock)!r}) for longer than the wait's bound; if that process is stuck, "
                "end it, or give this run a cache_dir of its own")

    def _take(self, shard: LocalShard, folder: Path, fingerprint: dict, listing, fill,
              keep: bool, make_room, overflow: bool, deadline: float, cancelled,
              refresh: bool) -> Lease | bool:
        """Take the shard's file lock for this process (its entry is ``busy`` with this
        thread, and no lease of this process is out): shared to use it, exclusive to
        install it."""
        import fcntl

        def timed_out(waited: float) -> str:
            return self._timed_out(folder, shard.lock, waited)

        def lock(mode: int, until: Callable[[], bool] | None = None) -> bool:
            start = time.monotonic()
            taken = wait_flock(fd, mode, deadline, cancelled, timed_out, until)
            waited = time.monotonic() - start
            if waited >= _WAIT_LOGGED_S:
                log.debug("cache: waited %.2f s for the lock of %s (another process fetching "
                          "or reading it)", waited, folder.name)
            return taken

        fetched = False  # by this call: the next valid check is no cache hit
        fd = open_lock(shard.lock)
        try:
            for _ in range(4):  # a lock conversion is not atomic: an evictor may slip in
                if not refresh:
                    lock(fcntl.LOCK_SH)
                    if layout.valid(folder, fingerprint):
                        layout.touch(folder / MARKER)  # its last use, for the LRU order
                        log.debug("cache: %s fetched and installed in %s" if fetched else
                                  "cache hit: %s in %s", folder.name, self.root)
                        if not keep:
                            return True
                        with shard.cond:
                            shard.fd, shard.count, fd = fd, 1, -1
                        return Lease(folder, shard)
                # waits for a download of it elsewhere, or for the readers of a bad copy;
                # a shard another process installed meanwhile is taken shared (above): that
                # process holds it shared for as long as it reads it, so an exclusive lock
                # would not come until it closed the shard
                if not lock(fcntl.LOCK_EX, until=None if refresh else (
                        lambda: layout.valid(folder, fingerprint))):
                    continue
                if refresh:
                    refresh = False
                    if folder.exists():  # the copy that failed its caller's check
                        log.debug("cache: %s failed its reader's check: fetching it again",
                                  folder.name)
                        layout.discard(folder)
                if not layout.valid(folder, fingerprint):
                    if not self._install(folder, fingerprint, listing, fill, make_room,
                                         overflow):
                        return False
                    fetched = True
            raise OSError(f"the cached shard {str(folder)!r} was evicted four times while it "
                          "was being opened; raise cache_bytes")
        finally:
            if fd >= 0:
                close_lock(fd)

    def _install(self, folder, fingerprint, listing, fill, make_room, overflow) -> bool:
        for stale in folder.parent.glob(f".part-{folder.name}-*"):  # we hold its lock
            shutil.rmtree(stale, ignore_errors=True)
        files = listing()
        log.debug("cache miss: %s (%d files, %d bytes) to fetch into %s", folder.name,
                  len(files), sum(files.values()), self.root)
        part = self._reserve(folder, sum(files.values()), make_room, overflow)
        if part is None:
            log.debug("cache: no room for %s (shards in use fill cache_bytes): not fetched",
                      folder.name)
            return False
        try:
            fill(part, files)
            (part / RESERVED).unlink()
            sizes = layout.write_marker(part, fingerprint)
            if folder.exists():
                layout.discard(folder)
            os.rename(part, folder)
        except BaseException as exc:
            shutil.rmtree(part, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in DISK_FULL and not isinstance(
                    exc, CacheDiskFull):
                raise self._disk_full(exc, folder) from None
            raise
        with self._stats_lock:
            self.downloads += 1
            self.downloaded_bytes += sum(sizes.values())
        return True

    def _disk_full(self, exc: OSError, folder: Path) -> CacheDiskFull:
        return CacheDiskFull(exc.errno, f"the cache disk is full: free space or lower "
                             f"cache_bytes (the shard cache at {str(self.root)!r}, "
                             f"cache_bytes={self._max_bytes}, was writing {folder.name!r}: "
                             f"{exc.strerror or exc})")

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
                        log.debug("cache eviction: %s (%d bytes, least recently used) to make "
                                  "room for %s (%d bytes; bound %d)", shard.folder.name,
                                  shard.bytes, folder.name, size, bound)
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
                    "shard-aware order that keeps fewer shards open", CacheOverBoundWarning,
                    stacklevel=4)
            with self._global_lock():
                return self._part(folder, size)

    def _part(self, folder: Path, size: int) -> Path:
        part = layout.part_name(folder)
        try:
            part.mkdir()
            (part / RESERVED).write_text(json.dumps({"shard": folder.name, "bytes": size}))
        except OSError as exc:
            shutil.rmtree(part, ignore_errors=True)
            if exc.errno in DISK_FULL:
                raise self._disk_full(exc, folder) from None
            raise
        return part

    def _stores(self) -> Iterator[Path]:
        """The folders shards are installed in: the shard store, and each set's folder
        (a single LMDB's ``lmdb/``, and the shards of caches written before the store)."""
        if (self.root / SHARDS).is_dir():
            yield self.root / SHARDS
        sets = self.root / "sets"
        if sets.is_dir():
            for entry in os.scandir(sets):
                if entry.is_dir():
                    yield Path(entry.path)

    def _scan(self, skip: Path | None) -> tuple[int, list[_Held]]:
        """``(bytes held, installed shards other than skip)``; downloads in progress count
        while their shard's lock is held (a dead downloader's part counts nothing)."""
        used, held = 0, []
        for store in self._stores():
            for entry in os.scandir(store):
                path = Path(entry.path)
                if not entry.is_dir() or entry.name == LOCKS:
                    continue
                if entry.name.startswith(".part-"):
                    used += self._in_progress(path)
                elif not entry.name.startswith(".") and path != skip:
                    marker = layout.read_marker(path)
                    if marker is not None:
                        size = layout.marker_bytes(marker)
                        used += size
                        try:
                            last_use = (path / MARKER).stat().st_mtime
                        except OSError:  # evicted by another process a moment ago
                            continue
                        held.append(_Held(path, store / LOCKS / f"{entry.name}.lock", size,
                                          last_use))
        return used, held

    @staticmethod
    def _in_progress(part: Path) -> int:
        try:
            reserved = json.loads((part / RESERVED).read_text())
            lock = part.parent / LOCKS / f"{reserved['shard']}.lock"
            size = int(reserved.get("bytes", 0))
        except (OSError, ValueError, KeyError, TypeError):
            return 0
        return size if is_held(lock) else 0  # else: a crashed download's leftovers

    @staticmethod
    def _evict(shard: _Held) -> bool:
        """Delete ``shard`` if nobody holds it (a lock taken without waiting; a shard a
        thread of this process is opening is left alone too)."""
        if in_use_here(shard.lock):
            return False
        fd = try_exclusive(shard.lock)
        if fd is None:
            return False
        try:
            if not (shard.folder / MARKER).exists():
                return False
            layout.discard(shard.folder)
            return True
        finally:
            close_lock(fd)

    def _global_lock(self):
        return global_lock(layout.make_folder(self.root) / layout.GLOBAL_LOCK)
