"""Reading a sharded fastload set (see :mod:`fastload.data.sets.manifest`) as one data set.

:class:`ShardedReader` has :class:`~fastload.data.format.reader.LMDBReader`'s interface (``path``,
``meta``, ``classes``, ``class_to_idx``, ``targets``, ``len``, ``key``, ``record``,
``image_bytes``, ``close``) over global indices. A set is a closed folder, read only as far
as it is checked:

* **At open** it reads the manifest and the set's labels file only: the manifest's schema,
  paths and ranges (:mod:`fastload.data.sets.schema`), and ``labels.i32`` holding
  ``count`` labels, each in ``[0, len(classes))``.
* **At a shard's first read**, in the process that reads it (so a rank touches only the
  shards its samples live in), before any of its records is returned: its files lie in its
  folder, its ``fastload.json`` opens (:class:`~fastload.data.format.reader.LMDBReader`'s checks)
  and names this shard of this set (index, shard count, source, fingerprint, classes,
  options), its record count and the CRC-32 of its ``checksums.crc32`` equal the
  manifest's, and its labels equal the set's labels over its range. Each record's CRC-32
  and label are then checked as it is read. A shard that fails these checks is refused
  once: each later read of it raises the same error at once, without opening it again,
  until :meth:`ShardedReader.forget_refusals` (the loader calls it at each ``iter()``) or
  :meth:`ShardedReader.release_shard`. Naming a record (:meth:`ShardedReader.key`) never
  opens its shard, so an error message about a refused shard cannot fail itself.

A process keeps at most ``max_open_shards`` shards open (up to 2 file handles and 2 memory
maps each; default :data:`MAX_OPEN_SHARDS`, 256, or an eighth of the soft open-file limit if
lower): opening one more closes the least recently read one (through
:meth:`ShardedReader.release_shard`), so an epoch in global order over 100,000 shards stays
under the open-file limit. A shard being read by another thread is not closed under that read
(:mod:`fastload.data.sets.open_shards`: it is closed when the read ends, and the bound is
exceeded meanwhile by at most the reads under way), and what a read returned stays valid
after its shard is closed (the bytes are copied out of the LMDB map). Reads are safe from
several threads. A shard that passed its first read's checks is remembered: when it is
opened again only its ``fastload.json``'s identity and record count are compared with the
manifest (its records' CRC-32s and labels are still checked as each is read).

A rank holds about 13 bytes per shard after the open (:class:`~fastload.data.sets.table.
ShardTable`: ranges and CRC-32s as arrays; a shard's entry is built when it is asked for),
not the parsed manifest.

What only ``fastload verify`` checks: every record of every shard (its CRC-32, its Datum,
its label) and a decode of a sample (see :mod:`fastload.data.sets.verify`).
"""

from __future__ import annotations

import copy
import os
import resource
from collections.abc import Callable
from typing import Any

import numpy as np

from fastload.data.format.constants import (
    CHECKSUM_FILE,
    DATA_FILE,
    LABELS_FILE,
    META_FILE,
    crc32,
    record_key,
)
from fastload.data.format.reader import LMDBReader, map_labels, record_index
from fastload.data.format.targets import Labels
from fastload.data.format.untrusted import confined_path
from fastload.data.sets.manifest import (
    SET_LABELS_FILE,
    identity_differences,
    is_sharded_set,
    manifest_path,
    open_manifest,
)
from fastload.data.sets.open_shards import OpenShards
from fastload.data.sets.schema import ShardEntry, repair_advice
from fastload.data.sets.table import ShardEntries

__all__ = ["MAX_OPEN_SHARDS", "ShardedReader", "open_reader"]

#: the most shards a :class:`ShardedReader` keeps open in a process unless told otherwise
#: (``max_open_shards=``), lowered to an eighth of the soft ``RLIMIT_NOFILE`` (at least 8):
#: each holds up to 2 file handles (data.mdb, the mapped checksums) and their maps. Read
#: when a reader is made: changing it changes the default of the readers made later.
MAX_OPEN_SHARDS = 256


def _default_open_bound() -> int:
    """``MAX_OPEN_SHARDS``, lowered to an eighth of the soft open-file limit (at least 8)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_OPEN_SHARDS
    return max(8, min(MAX_OPEN_SHARDS, soft // 8))


class ShardedReader:
    """Read-only view of a sharded set as one data set with global indices.

    :class:`~fastload.data.LMDBReader`'s interface over global indices. Opening reads the
    manifest and the set's labels file only; each shard is opened and checked against the
    manifest at its first read in a process, and a shard that fails is refused (its error
    raised again at once) until :meth:`forget_refusals` or :meth:`release_shard` (see the
    module docstring for every check).

    Args:
        path: the set's folder or its manifest file (a local path; see
            :func:`~fastload.data.open_any` for URLs).
        max_open_shards: the most shards kept open at once in a process (the least
            recently read one is closed to open another; it reopens on its next read);
            None: :data:`MAX_OPEN_SHARDS` (256, a module constant read at open), or an
            eighth of the soft open-file limit if lower.

    Attributes:
        path (Path): the set's folder.
        max_open_shards (int): the bound on the shards open at once (may be changed).
        meta (dict): the parsed, checked manifest without its ``shards`` list (see
            :attr:`entries`).
        classes (list[str]): the class names, index = label.
        class_to_idx (dict[str, int]): class name -> label.
        targets (Labels): every record's label, the set's labels file memory-mapped.
        streaming (bool): True for a set read from object storage (the loader's default
            order is then by shards); False here.

    Raises:
        FileNotFoundError: there is no manifest (and no shard folder) at ``path``.
        ValueError: the manifest is missing while shards are unfinished, or it or the
            labels file is unusable (schema, paths, ranges, labels; the message says how to
            repair it), or ``path`` is a URL.
    """

    _shards_present = True  # a remote set's shards arrive in its cache folder on first use
    streaming = False  # read from object storage: the loader's default order is by shards

    def __init__(self, path: str | os.PathLike, *, max_open_shards: int | None = None) -> None:
        if max_open_shards is not None and (isinstance(max_open_shards, bool)
                                            or not isinstance(max_open_shards, int)
                                            or max_open_shards < 1):
            raise ValueError(f"max_open_shards must be a positive int, not {max_open_shards!r}")
        self.max_open_shards = (_default_open_bound() if max_open_shards is None
                                else max_open_shards)
        file = manifest_path(path)
        self.path = file.parent
        manifest, self._table = open_manifest(file, shards_present=self._shards_present)
        # the manifest less its shard list (~1 KB a shard parsed): the table holds what of it
        # a reader uses
        self.meta = {key: value for key, value in manifest.items() if key != "shards"}
        del manifest
        self.classes: list[str] = list(self.meta["classes"])
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(self.classes)}
        self._count = int(self.meta["count"])
        fix = repair_advice(self.path)
        # memory-mapped: a rank holds no copy of 100 M labels (fastload.data.format.targets)
        self.targets: Labels = map_labels(self.path, self.meta, SET_LABELS_FILE,
                                          len(self.classes), fix)
        # the open shards, least recently read first (at most max_open_shards)
        self._open = OpenShards()
        # shard -> the error its first read raised (see the module docstring)
        self._refusals: dict[int, Exception] = {}
        # shard -> passed its first read's checks in this process (a reopen skips them)
        self._checked = np.zeros(len(self._table), dtype=bool)

    @property
    def num_shards(self) -> int:
        """The number of shards the manifest lists."""
        return len(self._table)

    @property
    def entries(self) -> ShardEntries:
        """The manifest's shard entries, as checked at open (path, real folder, range): a
        sequence whose items are built when read (``starts``, ``stops`` and ``ranges()``
        give the ranges as arrays)."""
        return ShardEntries(self._table, self._entry)

    def _entry(self, shard: int) -> ShardEntry:
        """Shard ``shard``'s entry, its ``folder`` the one this reader opens."""
        return self._table[shard]

    @property
    def opened_shards(self) -> list[int]:
        """Indices of the shards open in this process now (at most :attr:`max_open_shards`,
        and the shards being read)."""
        pid = os.getpid()
        return sorted(k for k, r in self._open.items() if getattr(r, "_pid", None) == pid)

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return (f"ShardedReader({str(self.path)!r}, records={self._count}, "
                f"shards={self.num_shards}, classes={len(self.classes)})")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_open"] = OpenShards()  # reopened lazily where the copy reads
        state["_refusals"] = {}  # and checked again there
        state["_checked"] = np.zeros(len(self._table), dtype=bool)
        return state

    def close(self) -> None:
        """Drop this process's LMDB handles (shards reopen on the next read; a shard being
        read is closed when its read ends)."""
        self._open.clear()

    def release_shard(self, shard: int) -> None:
        """Close shard ``shard``'s handle in this process; it reopens on its next read.

        A reader done with a shard so holds nothing of it (a refusal of it is forgotten too).

        Args:
            shard: the shard's index, in ``[0, num_shards)``.
        """
        with self._open.lock:
            self._refusals.pop(shard, None)
            self._open.remove(shard)

    def forget_refusals(self) -> None:
        """Check the shards refused so far again at their next read (a new epoch: the
        files may have been put right since)."""
        self._refusals.clear()

    def prefetch(self, shards) -> list:
        """Ask for ``shards`` to be ready before they are read.

        A remote set fetches them into its cache in the background
        (:meth:`RemoteShardedReader.prefetch`); a local set's shards are always ready.

        Args:
            shards (Iterable[int]): the shard indices wanted.

        Returns:
            One ``concurrent.futures.Future`` per shard, in order; here each is already done
                with True.
        """
        from concurrent.futures import Future

        done = []
        for _ in shards:
            future: Future = Future()
            future.set_result(True)
            done.append(future)
        return done

    def is_cached(self, shard: int) -> bool:
        """Whether shard ``shard`` can be opened without a download.

        Args:
            shard: the shard's index, in ``[0, num_shards)``.

        Returns:
            True when no download is needed (a local set: always).
        """
        return True

    def locate(self, index: int) -> tuple[int, int]:
        """The shard holding global record ``index``, and the record's number within it.

        Args:
            index: the global record number, an integer in ``[-len, len)`` (negative counts
                from the end).

        Returns:
            ``(shard, record within it)``.

        Raises:
            TypeError: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
        """
        return self._table.locate(record_index(index, self._count, self.path))

    def shard_reader(self, shard: int) -> LMDBReader:
        """The reader of shard ``shard``, opened on first use here and checked against the
        manifest (module docstring).

        Args:
            shard: the shard's index, in ``[0, num_shards)``.

        Returns:
            The shard's reader, kept open for later reads in this process until more than
                :attr:`max_open_shards` others are read after it (then it is closed, and
                reopens by itself if used again): :meth:`record` and :meth:`image_bytes`
                are the reads that are safe from several threads.

        Raises:
            ValueError: the shard does not match the manifest (or its files are damaged),
                naming the shard; raised again (a copy of the first error) without opening
                it at each later read, until :meth:`forget_refusals`.
            OSError: the shard's files cannot be opened, likewise raised again.
        """
        with self._open.lock:  # one thread opens a shard; the others find it open
            reader = self._open.get(shard)
            if reader is not None:
                return reader
            refused = self._refusals.get(shard)
            if refused is not None:
                raise _again(refused)
            self._make_room(shard)
            try:
                reader = self._open_shard(self._entry(shard))
            except Exception as err:
                self._refusals[shard] = err
                raise
            self._open.add(shard, reader)
            return reader

    def _make_room(self, keep: int) -> None:
        """Close the least recently read shards (other than ``keep``, none being read) until
        one more may open within :attr:`max_open_shards`."""
        while len(self._open) >= max(1, self.max_open_shards):
            victim = self._open.idle_victim(keep)
            if victim is None:  # every open shard is being read: one more for now
                return
            self.release_shard(victim)

    def _pinned_read(self, index: int, read: Callable[[LMDBReader, int], Any]) -> Any:
        """``read(shard reader, record within it)`` of global ``index``, its shard kept open
        until the read returns (another thread's read may need the room meanwhile)."""
        shard, local = self.locate(index)
        with self._open.lock:
            reader = self.shard_reader(shard)
            reader.open()  # here, under the lock: two threads' first reads open it once
            self._open.pin(reader)
        try:
            return read(reader, local)
        finally:
            self._open.unpin(reader)

    def _open_shard(self, entry: ShardEntry) -> LMDBReader:
        where = f"shard {entry.index} ({entry.path!r}) of the set {str(self.path)!r}"
        # its folder inside the set (it may have become a symlink since the set was opened)
        folder = confined_path(self._table.real_root, entry.path, f"{where}: its folder")
        checked = bool(self._checked[entry.index])
        if not checked:
            for name in (META_FILE, DATA_FILE, CHECKSUM_FILE, LABELS_FILE):  # no symlink out
                confined_path(folder, name, f"{where}: its {name}")
        reader = LMDBReader(folder)
        fix = (f"run `fastload verify {self.path}` to check every record; copy the set again, "
               "or, if its shards are the ones you want, rebuild the manifest from them with "
               f"`fastload verify {self.path} --repair`")
        # reopened after a close to stay within max_open_shards: its identity and count only
        problem = (self._identity_problem(reader, entry) if checked
                   else self.shard_problem(reader, entry))
        if problem:
            reader.close()
            raise ValueError(f"{where} does not match the manifest: {problem}; {fix}")
        if checked:
            reader.targets = self.targets.view(entry.start, entry.stop)  # equal when checked
        else:
            reader.share_labels(self.targets.view(entry.start, entry.stop))
            self._checked[entry.index] = True
        return reader

    def shard_problem(self, reader: LMDBReader, entry: ShardEntry) -> str | None:
        """How the opened shard ``reader`` differs from the manifest's ``entry``.

        Args:
            reader: the opened shard.
            entry: the manifest's entry for that shard (one of :attr:`entries`).

        Returns:
            One phrase naming the first difference (identity, record count, CRC-32 of its
                checksum file, labels); None when it matches.
        """
        problem = self._identity_problem(reader, entry)
        if problem:
            return problem
        if crc32(reader.checksums.astype("<u4").tobytes()) != entry.checksum_crc32:
            return (f"its {CHECKSUM_FILE} differs from the one the manifest was written "
                    "for (CRC-32 mismatch)")
        if reader.targets != self.targets.view(entry.start, entry.stop):
            return (f"its {LABELS_FILE} differs from the set's {SET_LABELS_FILE} over "
                    f"[{entry.start}, {entry.stop})")
        return None

    def _identity_problem(self, reader: LMDBReader, entry: ShardEntry) -> str | None:
        """:meth:`shard_problem`'s cheap part: the sidecar's identity and record count."""
        differs = identity_differences(reader.meta, {
            "format_version": self.meta["shard_format_version"],
            **{key: self.meta[key] for key in ("source", "source_kind", "source_fingerprint",
                                               "classes", "options")},
            "shard": {"index": entry.index, "count": self.num_shards}})
        if differs:
            return (f"its {META_FILE} differs from the manifest in {', '.join(differs)} "
                    "(a shard of another set, or shards swapped)")
        if len(reader) != entry.count:
            return f"holds {len(reader)} records but the manifest says {entry.count}"
        return None

    def key(self, index: int) -> bytes:
        """The name of global record ``index``, from the manifest alone.

        Never opens the shard, so error messages name records with it.

        Args:
            index: the global record number (as :meth:`locate` takes it).

        Returns:
            ``b"<shard folder>/<record key>"``.

        Raises:
            TypeError: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
        """
        shard, local = self.locate(index)
        return self._table.path(shard).encode() + b"/" + record_key(local)

    def record(self, index: int) -> bytes:
        """The raw Datum value of global record ``index``, its CRC-32 checked.

        Args:
            index: the global record number (as :meth:`locate` takes it).

        Returns:
            The serialized Datum.

        Raises:
            ValueError: its shard is refused (see :meth:`shard_reader`).
            CorruptRecord: its bytes do not match their CRC-32.
            KeyError: the record is missing from its shard.
        """
        return self._pinned_read(index, LMDBReader.record)

    def image_bytes(self, index: int) -> tuple[memoryview, int, tuple[int, int]]:
        """The encoded image, label and size of global record ``index``.

        Args:
            index: the global record number (as :meth:`locate` takes it).

        Returns:
            ``(encoded JPEG bytes, label, (height, width))``, the bytes a zero-copy view.

        Raises:
            ValueError: its shard is refused (see :meth:`shard_reader`).
            CorruptRecord: the record fails its CRC-32, its Datum framing or its label.
        """
        return self._pinned_read(index, LMDBReader.image_bytes)


def _again(err: Exception) -> Exception:
    """A fresh exception like ``err`` (its type and message, no traceback) to raise again:
    the first one may still be in the caller's hands."""
    try:
        fresh = copy.copy(err)
    except Exception:  # noqa: BLE001 - an exception type copy cannot rebuild
        return ValueError(str(err))
    return fresh if isinstance(fresh, Exception) and str(fresh) == str(err) else ValueError(str(err))


def open_reader(path: str | os.PathLike) -> LMDBReader | ShardedReader:
    """A reader for a local sharded set or LMDB directory.

    Args:
        path: a sharded set's folder or manifest, or an LMDB directory.

    Returns:
        A :class:`ShardedReader` for a sharded set, else an
            :class:`~fastload.data.format.reader.LMDBReader` for one LMDB directory.

    Raises:
        FileNotFoundError: nothing readable is at ``path``.
        ValueError: what is there is damaged or unfinished (the message says how to fix
            it).
    """
    if is_sharded_set(path):
        return ShardedReader(path)
    return LMDBReader(path)


