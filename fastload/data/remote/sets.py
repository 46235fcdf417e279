"""Reading a fastload set (or one LMDB) at a URL, through the local shard cache.

:class:`RemoteShardedReader` is a :class:`~fastload.data.sets.shards.ShardedReader` whose folder
is the set's cache folder (:mod:`fastload.data.remote.cache`), named by the manifest's
bytes: opening it fetches the manifest, and the set's labels unless that folder has them,
and checks them as a local set's are. Its shards live in the cache's shard store, each
named by what the manifest says of it (:meth:`RemoteShardedReader.shard_fingerprint`), so
another URL or endpoint for the same set, or a resumed run at another world size, reads
what the cache holds. A shard is fetched on its first read in a process, or ahead of it by
:meth:`RemoteShardedReader.prefetch`: its files are downloaded (a copy shorter than the
listed object is fetched again; server errors are retried, then raised naming the URL) and
checked against the manifest, as a local shard is at its first read, *before* it is
installed in the cache; a shard that does not match raises :class:`ShardRefused` (a
``ValueError``) naming its URL, for each of its records, without fetching it again.

A cached copy that fails a check at its first read here (its sidecar, checksum file or
labels are not the manifest's) or a record of it that fails its CRC-32 is moved aside and
fetched again, once per shard and reader; if the fresh copy fails too, the error says what
differs, the URL it came from and its cache folder. Naming a record (:meth:`key`) never
opens or fetches its shard.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import fastload.data.remote.fetch as fetch
from fastload.data.format.constants import (
    CHECKSUM_FILE,
    DATA_FILE,
    LABELS_FILE,
    META_FILE,
    record_key,
)
from fastload.data.format.limits import MAX_META_BYTES
from fastload.data.format.reader import CorruptRecord, LMDBReader, record_index
from fastload.data.remote.cache import (
    DISK_FULL,
    Lease,
    ShardCache,
    content_name,
    set_key,
)
from fastload.data.remote.prefetch import Prefetcher
from fastload.data.remote.url import RemoteLocation
from fastload.data.sets.schema import MAX_MANIFEST_BYTES, ShardEntry, repair_advice
from fastload.data.sets.shards import ShardedReader

__all__ = ["PREFETCH_WAIT_S", "RemoteLMDBReader", "RemoteShardedReader", "ShardRefused",
           "endpoint_of", "open_url", "remote_kind"]

MANIFEST = "fastload-set.json"
SHARD_FILES = (META_FILE, DATA_FILE, CHECKSUM_FILE, LABELS_FILE)  # what a reader needs
PREFETCH_THREADS = 2
PREFETCH_WAIT_S = 120.0  # a prefetch waits this long for another process's download
REFETCH_WAIT_S = 30.0  # a bad copy is fetched again once no other process reads it, or fails


class ShardRefused(ValueError):
    """Shard ``shard`` of the set at ``url`` was refused (its copy does not pass the checks):
    an error of each of its records, raised again for each without another download."""

    def __init__(self, message: str, shard: int, url: str) -> None:
        super().__init__(message)
        self.shard, self.url = shard, url

    def __reduce__(self):
        return type(self), (str(self), self.shard, self.url)


def endpoint_of(location: RemoteLocation) -> str | None:
    """The server a location's URL is resolved on (S3's endpoint), for its cache key."""
    options = location.storage_options
    endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
        "endpoint_url")
    if endpoint is None and location.protocol in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return endpoint


def _shard_listing(location: RemoteLocation, needed: Iterable[str]) -> dict[str, int]:
    """``{file: bytes}`` of the ``needed`` files of the remote folder ``location``;
    FileNotFoundError naming the URL when one is missing."""
    listed = fetch.listing(location)
    missing = [name for name in needed if name not in listed]
    if missing:
        raise FileNotFoundError(
            f"{location.url} lacks {', '.join(missing)}: it is not a complete fastload "
            "database; upload it again (rerun `fastload convert SRC URL ...`, which resumes)")
    return {name: listed[name] for name in needed}


class RemoteShardedReader(ShardedReader):
    """A sharded set at a URL, read through a :class:`ShardCache` (module docstring).

    ``url`` is the set's URL; ``path`` is its local cache folder. Each shard a process reads
    is leased in the cache (not evicted by any process) until :meth:`release_shard` or
    :meth:`close`; when the cache is full of leased shards, the reader lets go of its own
    least recently read shard before the cache goes over its bound.
    """

    _shards_present = False
    streaming = True  # the loader's default order is the shard-aware one (loader/shard_order)

    def __init__(self, location: RemoteLocation, cache: ShardCache | None = None, *,
                 listed: dict[str, int] | None = None) -> None:
        self.url = location.url
        self._location = location
        self._cache = cache if cache is not None else ShardCache()
        listed = listed if listed is not None else fetch.listing(location)
        folder = self._sync_set_files(listed)
        try:
            super().__init__(folder)
        except (OSError, ValueError):  # the cached labels may be the damaged copy: once more
            (folder / LABELS_FILE).unlink(missing_ok=True)
            folder = self._sync_set_files(listed)
            try:
                super().__init__(folder)
            except (OSError, ValueError) as exc:
                raise type(exc)(self._url_advice(str(exc), folder)) from None
        self._identity = content_name("set", {  # what each shard's sidecar must say
            "format_version": self.meta["shard_format_version"],
            **{key: self.meta[key] for key in ("source", "source_kind", "source_fingerprint",
                                               "classes", "options")}})
        self._store = self._cache.shard_store()  # each shard's folder: see _entry
        self._leases: dict[int, Lease] = {}
        self._recent: OrderedDict[int, None] = OrderedDict()
        self._prefetcher: Prefetcher | None = None
        self._refused: dict[int, ShardRefused] = {}  # shards whose every copy was refused
        self._fetched_again: set[int] = set()  # shards whose bad cached copy was replaced

    def __repr__(self) -> str:
        return (f"RemoteShardedReader({self.url!r}, records={len(self)}, "
                f"shards={self.num_shards}, cache={str(self.path)!r})")

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.update(_leases={}, _recent=OrderedDict(), _prefetcher=None, _refused={},
                     _fetched_again=set())
        return state

    def _url_advice(self, message: str, folder: Path) -> str:
        """``message`` with a local set's repair advice replaced by a URL set's."""
        return message.replace(repair_advice(folder), (
            f"the set at {self.url} is damaged (its copy in the cache folder {str(folder)!r} "
            f"was fetched again and fails the same way): repair a local copy (`fastload "
            "verify DIR --repair`) and upload it again, or rerun the `fastload convert` that "
            "wrote it"))

    @property
    def cache(self) -> ShardCache:
        """The shard cache this reader fetches into."""
        return self._cache

    def shard_url(self, shard: int) -> str:
        """The URL of shard ``shard``'s folder."""
        return f"{self.url}/{self._table.path(shard)}"

    def _entry(self, shard: int) -> ShardEntry:
        """Shard ``shard``'s entry, its folder the cache's copy, named by what the manifest
        says of it (:meth:`shard_fingerprint`)."""
        entry = self._table[shard]
        return entry._replace(folder=str(self._store / content_name(
            entry.path, self.shard_fingerprint(shard))))

    def _sync_set_files(self, listed: dict[str, int]) -> Path:
        """The set's cache folder, named by its manifest's bytes, holding the manifest and
        the set's labels (fetched when it lacks them, atomically, under the set's lock: the
        ranks of a node fetch once); ``listed`` is the set folder's listing."""
        from fastload.data.convert.dst_lock import set_lock
        from fastload.data.format.atomic import write_bytes_atomic

        if MANIFEST not in listed:
            raise FileNotFoundError(
                f"{self.url} holds no {MANIFEST}, so it is not a finished fastload set; "
                f"convert one there with `fastload convert SRC {self.url} --shards N` (a "
                "rerun finishes an interrupted upload)")
        for name, bound in ((MANIFEST, MAX_MANIFEST_BYTES), (LABELS_FILE, 4 * 10**9)):
            if name in listed and listed[name] > bound:
                raise ValueError(f"{self.url}/{name} holds {listed[name]} bytes, more than a "
                                 f"fastload set's {name} may hold; it is not a fastload set")
        manifest = fetch.read_bytes(self._location.child(MANIFEST), listed[MANIFEST])
        folder = self._cache.set_folder(content_name("set", manifest))  # not the URL: any copy
        with set_lock(folder, ".fastload-set.lock"):
            labels = folder / LABELS_FILE
            if LABELS_FILE in listed and not (
                    labels.is_file() and labels.stat().st_size == listed[LABELS_FILE]):
                part = folder / f".{LABELS_FILE}.{os.getpid()}.part"
                try:
                    fetch.download(self._location.child(LABELS_FILE), part,
                                   listed[LABELS_FILE])
                    os.replace(part, labels)
                except BaseException as exc:
                    part.unlink(missing_ok=True)
                    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
                        raise OSError(exc.errno, f"the cache disk is full: free space or "
                                      f"lower cache_bytes (the shard cache at "
                                      f"{str(self._cache.root)!r} was writing the labels of "
                                      f"{self.url}: {exc.strerror or exc})") from None
                    raise
            cached = folder / MANIFEST
            if not (cached.is_file() and cached.read_bytes() == manifest):
                write_bytes_atomic(cached, manifest, durable=False)
        return folder

    def shard_fingerprint(self, shard: int) -> dict:
        """What the manifest says of shard ``shard``, which a cached copy must have been
        checked against to be used: the identity its sidecar must carry (hashed), its index,
        record range and the CRC-32 of its checksum file. No URL: the same shard read
        through another endpoint or URL is the same copy."""
        entry = self._table[shard]
        return {"set": self._identity, "index": entry.index,
                "of": self.num_shards, "count": entry.count, "start": entry.start,
                "checksum_file_crc32": entry.checksum_crc32}

    def _fill(self, entry: ShardEntry, part: Path, files: dict[str, int]) -> None:
        """Download shard ``entry`` into ``part`` and check it as its first read would."""
        where = self._location.child(entry.path)
        fetch.download_files(where, files, part)
        try:
            reader = LMDBReader(part)
        except (OSError, ValueError) as exc:
            raise ShardRefused(f"shard {entry.index} downloaded from {where.url} is damaged: "
                               f"{exc}; upload it again (rerun the `fastload convert` that "
                               "wrote the set)", entry.index, where.url) from None
        problem = self.shard_problem(reader, entry)
        reader.close()
        if problem:
            raise ShardRefused(f"shard {entry.index} downloaded from {where.url} does not "
                               f"match the set's manifest: {problem}; upload the set again "
                               "(rerun the `fastload convert` that wrote it)", entry.index,
                               where.url)

    def _acquire(self, shard: int, *, keep: bool, make_room=None, overflow: bool = True,
                 wait_s: float | None = None, cancelled: Callable[[], bool] | None = None,
                 refresh: bool = False):
        entry = self._entry(shard)
        where = self._location.child(entry.path)
        return self._cache.acquire(
            Path(entry.folder), self.shard_fingerprint(shard),
            lambda: _shard_listing(where, SHARD_FILES),
            lambda part, files: self._fill(entry, part, files),
            keep=keep, make_room=make_room, overflow=overflow, wait_s=wait_s,
            cancelled=cancelled, refresh=refresh)

    def shard_reader(self, shard: int) -> LMDBReader:
        """Shard ``shard``'s reader: fetched into the cache and leased on first use here; a
        cached copy failing its checks is fetched again once (module docstring);
        :class:`ShardRefused` when no copy passes them (raised again at once afterwards)."""
        reader = self._open.get(shard)  # now the most recently read of the open shards
        lease = self._leases.get(shard)
        if reader is not None and lease is not None and lease.held:
            self._recent.move_to_end(shard)
            return reader
        refused = self._refused.get(shard)
        if refused is not None:
            raise ShardRefused(str(refused), shard, refused.url)
        self._leases.pop(shard, None)
        self._lease(shard)
        try:
            return self._open_leased(shard)
        except (OSError, ValueError) as exc:
            if shard in self._fetched_again:
                raise self._refuse(shard, str(exc)) from None
            return self._fetched_anew(shard)

    def _lease(self, shard: int, **acquire: Any) -> None:
        """Lease the cached copy of ``shard`` (fetched when missing); a refusal is kept."""
        try:
            self._leases[shard] = self._acquire(
                shard, keep=True, make_room=lambda: self._let_go_of_one(shard), **acquire)
        except ShardRefused as exc:
            self._refused[shard] = exc
            raise
        self._recent[shard] = None

    def _open_leased(self, shard: int) -> LMDBReader:
        """The reader of ``shard``'s leased copy; its lease is let go when opening fails."""
        try:
            return super().shard_reader(shard)
        except BaseException:
            self.release_shard(shard)
            raise

    def _open_shard(self, entry: ShardEntry) -> LMDBReader:
        """Open the cached copy of shard ``entry`` and check it against the manifest (what
        its download was checked for: a copy changed in the cache since fails here)."""
        reader = LMDBReader(entry.folder)
        problem = self.shard_problem(reader, entry)
        if problem:
            reader.close()
            raise ValueError(problem)
        reader.share_labels(self.targets.view(entry.start, entry.stop))
        return reader

    def _fetched_anew(self, shard: int) -> LMDBReader:
        """Move the cached copy of ``shard``, which failed a check, aside and fetch it
        again (once per shard): its reader; :class:`ShardRefused` when the fresh copy fails
        too. A failed download (a server down) is raised as it is."""
        self.release_shard(shard)
        self._fetched_again.add(shard)
        self._lease(shard, wait_s=REFETCH_WAIT_S, refresh=True)
        try:
            return self._open_leased(shard)
        except (OSError, ValueError) as exc:
            raise self._refuse(shard, str(exc)) from None

    def _refuse(self, shard: int, problem: str) -> ShardRefused:
        """The refusal of ``shard``, whose copy fetched again fails ``problem`` (kept: each
        later read of the shard raises it again without a download)."""
        url = self.shard_url(shard)
        refused = ShardRefused(
            f"shard {shard} of the set at {url} fails its check in the cache folder "
            f"{self._entry(shard).folder!r}, fetched again: {problem}; the object at {url} "
            "is not what the set's manifest describes: upload the set again (rerun the "
            "`fastload convert` that wrote it); if the server's copy is right, delete that "
            "cache folder and rerun", shard, url)
        self._refused[shard] = refused
        return refused

    def _bad_record(self, shard: int, exc: CorruptRecord) -> CorruptRecord:
        url = self.shard_url(shard)
        return CorruptRecord(
            f"{exc} (in a copy of shard {shard} fetched again from {url} into the cache folder "
            f"{self._entry(shard).folder!r}: the object on the server holds other bytes than "
            "the set was written with: upload the set again (rerun the `fastload convert` "
            "that wrote it); if the server's copy is right, delete that cache folder and "
            "rerun)")

    def _read(self, index: int, read: Callable):
        """``read(shard reader, record)`` of global ``index``; a record failing its check
        in a cached copy has the copy fetched again once (module docstring)."""
        shard, local = self.locate(index)
        reader = self.shard_reader(shard)
        try:
            return read(reader, local)
        except CorruptRecord as exc:
            if shard in self._fetched_again:
                raise self._bad_record(shard, exc) from None
        reader = self._fetched_anew(shard)
        try:
            return read(reader, local)
        except CorruptRecord as exc:
            raise self._bad_record(shard, exc) from None

    def key(self, index: int) -> bytes:
        """``b"<shard folder>/<record key>"`` of global ``index``, from the manifest alone
        (never opens or fetches the shard: error messages name records with it)."""
        shard, local = self.locate(index)
        entry = self._table[shard]
        return entry.path.encode() + b"/" + record_key(
            record_index(local, entry.count, self.shard_url(shard)))

    def record(self, index: int) -> bytes:
        """The raw Datum value of global record ``index``."""
        return self._read(index, LMDBReader.record)

    def image_bytes(self, index: int):
        """``(encoded JPEG bytes, label, (height, width))`` of global record ``index``."""
        return self._read(index, LMDBReader.image_bytes)

    def _let_go_of_one(self, keep: int) -> bool:
        """Release this process's least recently read shard other than ``keep`` (called on
        the reading thread, so no read of it is under way); False when there is none."""
        for shard in self._recent:
            if shard != keep and shard in self._leases:
                self.release_shard(shard)
                return True
        return False

    def release_shard(self, shard: int) -> None:
        """Close shard ``shard`` here and give back its lease: the cache may now evict it."""
        super().release_shard(shard)
        self._recent.pop(shard, None)
        lease = self._leases.pop(shard, None)
        if lease is not None:
            lease.release()

    def prefetch(self, shards: Iterable[int]) -> list[Future]:
        """Fetch ``shards`` into the cache in the background, in the order given.

        The interface a shard-aware order uses to have the next shards ready before it
        reads them. Returns one ``Future`` per shard, whose result is True once the shard
        is in the cache (already there, or downloaded and checked), False when the cache
        had no room (a prefetch evicts only shards nobody holds and never goes over the
        bound), or whose exception is the fetch's (the read of that shard then fetches it
        again, and raises). Nothing is leased: a prefetched shard is not opened, and may be
        evicted before it is read if the cache needs the room. Downloads run in up to
        ``PREFETCH_THREADS`` daemon threads of this reader (:mod:`~fastload.data.remote.
        prefetch`: they never keep the process from exiting, and end with :meth:`close` or
        when the reader is garbage-collected, cancelling what has not started), which
        touch no global random generator; a shard being fetched here or by another process
        is waited for, not fetched twice, at most ``PREFETCH_WAIT_S`` (then the Future
        holds a ``TimeoutError`` naming the shard). A shard this process has refused is not
        fetched again.
        """
        indices = [self._shard_index(k) for k in shards]
        prefetcher = self._prefetcher
        if prefetcher is None or prefetcher.pid != os.getpid() or prefetcher.cancelled():
            prefetcher = self._prefetcher = Prefetcher(self, _prefetch_one, PREFETCH_THREADS)
        return [prefetcher.submit(k) for k in indices]

    def cancel_prefetch(self) -> None:
        """Cancel the prefetches not started; one under way stops waiting for locks (a
        download under way finishes into the cache). Later prefetches start afresh."""
        prefetcher, self._prefetcher = self._prefetcher, None
        if prefetcher is not None and prefetcher.pid == os.getpid():
            prefetcher.close()

    def is_cached(self, shard: int) -> bool:
        """Whether shard ``shard`` is in the cache now, checked against the manifest, so
        that opening it downloads nothing (a shard-aware order may read those first)."""
        entry = self._entry(self._shard_index(shard))
        return self._cache.holds(Path(entry.folder), self.shard_fingerprint(entry.index))

    def _shard_index(self, shard: object) -> int:
        import operator

        try:
            index = operator.index(shard)
        except TypeError:
            raise TypeError(f"a shard index must be an int, but got {shard!r}") from None
        if isinstance(shard, bool) or not 0 <= index < self.num_shards:
            raise IndexError(f"shard index {shard!r} is out of range for {self.url} "
                             f"({self.num_shards} shards)")
        return index

    def forget_refusals(self) -> None:
        """Check the shards refused so far again at their next read (a new epoch: the
        objects may have been put right since): fetched again, a bad cached copy replaced
        once more."""
        self._refused.clear()
        self._fetched_again.clear()
        forget = getattr(super(), "forget_refusals", None)
        if forget is not None:
            forget()

    def close(self) -> None:
        """Close every shard, give back the leases, cancel the prefetches (a download under
        way finishes into the cache first; its thread then ends)."""
        self.cancel_prefetch()
        for shard in list(self._leases):
            self.release_shard(shard)
        super().close()


def _prefetch_one(reader: RemoteShardedReader, shard: int,
                  cancelled: Callable[[], bool]) -> bool:
    """One prefetch of ``reader``'s ``shard`` (in a :class:`Prefetcher` thread)."""
    if shard in reader._refused:
        return False
    try:
        return reader._acquire(shard, keep=False, overflow=False, wait_s=PREFETCH_WAIT_S,
                               cancelled=cancelled)
    except ShardRefused as exc:
        reader._refused.setdefault(shard, exc)
        raise


class RemoteLMDBReader(LMDBReader):
    """One fastload LMDB at a URL, fetched whole into the cache and leased while open.

    There is no manifest to check the download against: the files must have the sizes the
    server lists, and the database passes :class:`LMDBReader`'s checks at open (sidecars,
    labels, ``data.mdb`` against LMDB's meta pages), then every record's CRC-32 as read."""

    def __init__(self, location: RemoteLocation, cache: ShardCache | None = None) -> None:
        self.url = location.url
        self._cache = cache if cache is not None else ShardCache()
        folder = self._cache.set_folder(set_key(location.url, endpoint_of(location))) / "lmdb"
        files = _shard_listing(location, SHARD_FILES)
        if files[META_FILE] > MAX_META_BYTES:
            raise ValueError(f"{location.url}/{META_FILE} holds {files[META_FILE]} bytes, "
                             "more than a fastload database's may hold")

        def fill(part: Path, listed: dict[str, int]) -> None:
            fetch.download_files(location, listed, part)
            try:
                LMDBReader(part).close()
            except (OSError, ValueError) as exc:
                raise ValueError(f"the database downloaded from {location.url} is damaged: "
                                 f"{exc}; upload it again") from None

        self._lease = self._cache.acquire(folder, {"url": location.url, "files": files},
                                          lambda: files, fill)
        super().__init__(folder)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_lease"] = None
        return state

    def close(self) -> None:
        super().close()
        lease = getattr(self, "_lease", None)
        if lease is not None:
            lease.release()
            self._lease = None


def remote_kind(location: RemoteLocation) -> tuple[str, RemoteLocation, dict[str, int]]:
    """``("set" or "lmdb", the folder's location, its listing)`` of what ``location`` (a
    set's folder or manifest, or a database's folder) holds; FileNotFoundError naming the
    URL otherwise."""
    if location.url.endswith("/" + MANIFEST):
        parent = location.url.rsplit("/", 1)[0]
        location = RemoteLocation(parent, location.storage_options)
    listed = fetch.listing(location)
    if MANIFEST in listed:
        return "set", location, listed
    if META_FILE in listed:
        return "lmdb", location, listed
    raise FileNotFoundError(
        f"{location.url} holds no fastload set ({MANIFEST}) or database ({META_FILE}); "
        f"write one there with `fastload convert SRC {location.url} --shards N`")


def open_url(location: RemoteLocation, cache: ShardCache | None = None):
    """A :class:`RemoteShardedReader` for a set at ``location`` (its folder or its
    manifest), a :class:`RemoteLMDBReader` for one database (see :func:`remote_kind`)."""
    kind, location, listed = remote_kind(location)
    if kind == "set":
        return RemoteShardedReader(location, cache, listed=listed)
    return RemoteLMDBReader(location, cache)
