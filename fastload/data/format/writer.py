"""Writes a fastload LMDB directory: crash-safe, resumable, finished by an atomic sidecar.

Durability protocol (one writer process):

1. ``fastload.partial.json`` is written (atomically) before the LMDB environment exists
   (``destination.prepare_destination``, which also decides resume, replace or refuse):
   it names the source, its fingerprint and the options, so a directory holding records
   but no sidecar is always recognisable as a partial, never as a finished database.
2. Records are put in batches of source files (``commit`` marks the end of one), written
   in LMDB transactions of ``RECORDS_PER_TXN`` records. After each batch's last commit the
   partial file is replaced (write + rename) with the records committed (``stored``),
   the source files consumed (``seen``) and the files skipped so far. Commits and progress
   records reach the page cache in that order, which is all a process crash (SIGKILL,
   OOM kill, Ctrl-C) can interrupt. They are flushed to disk (``fsync``) every
   ``DURABLE_EVERY_S`` seconds and at the end, not at every commit: per-commit flushes would
   cost more than the conversion itself. After a machine crash the last unflushed batches
   may be gone; a partial damaged that way is detected and refused (``overwrite=True``).
3. On resume the partial file says where to continue. Records past ``stored`` (commits
   that landed before their batch's progress record) are deleted and redone, so the finished
   database is identical to an uninterrupted run. Checksums and labels of the kept prefix
   are recomputed from the records.
4. Finishing writes ``checksums.crc32``, ``labels.i32`` and ``errors.json``, then
   ``fastload.json`` with ``state: complete`` (atomically, last), then removes the partial.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from array import array
from pathlib import Path

from fastload.data.convert.dst_lock import unlock_destination
from fastload.data.format.atomic import (
    start_writeback,
    sync_directory,
    write_bytes_atomic,
    write_json_atomic,
)
from fastload.data.format.constants import (
    CHECKSUM_DTYPE,
    CHECKSUM_FILE,
    DATA_FILE,
    ERRORS_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    KEY_DIGITS,
    LABELS_DTYPE,
    LABELS_FILE,
    META_FILE,
    PARTIAL_FILE,
    STATE_COMPLETE,
    STATE_PARTIAL,
    crc32,
    little_endian_bytes,
    record_key,
)
from fastload.data.format.datum import datum_fields

MIN_MAP_SIZE = 64 << 20  # 64 MiB; LMDB's data.mdb is sparse, the map only reserves addresses
DURABLE_EVERY_S = 30.0  # seconds between fsyncs of the database and its progress record
# Small transactions: their dirty pages (~2.5 MB of photos) are still in the CPU cache when
# the commit copies them into the page cache. A 256-record transaction (~20 MB) was
# copied back from RAM: the whole conversion took 1.3-1.6x as long (benchmarks/NOTES.md C3).
RECORDS_PER_TXN = 32
CRASH_ENV = "FASTLOAD_TEST_CRASH"  # test hook: "<point>:<n>" SIGKILLs at the n-th <point>
_CRASH_SEEN = [0]  # <point>s this process has passed
CRASH_POINTS = ("mid_txn", "after_commit", "after_progress")


def _delete_from(cursor, index: int) -> None:
    """Delete every record at or past ``index`` (in the cursor's write transaction)."""
    if cursor.set_range(record_key(index)):
        while cursor.delete():
            pass


class MapFull(Exception):
    """The LMDB map filled inside a batch; it was rolled back and the map grown."""


class LMDBWriter:
    """Appends Datum records to ``dst`` in committed batches, from a prepared progress."""

    def __init__(self, dst: Path, identity: dict, progress: dict, *, map_size: int) -> None:
        import lmdb

        self.dst = dst
        self.identity = identity
        self.stored = int(progress["stored"])
        self.seen = int(progress["seen"])
        self.skipped: list[dict] = list(progress["skipped"])
        self.counts: dict[str, int] = dict(progress["counts"])
        self.resumed_from = self.seen
        self.resumed = bool(progress.get("resumed"))
        self._txn = None
        self._clear_pending()
        self._checksums = array("I")
        self._labels = array("i")
        self._crash_point, self._crash_at = _crash_hook()
        existing = (dst / DATA_FILE).stat().st_size if (dst / DATA_FILE).exists() else 0
        if existing:  # a partial cut short (a half copy) must not SIGBUS the resume
            from fastload.data.format.lmdb_meta import DamagedDatabase, check_data_file

            try:
                check_data_file(dst / DATA_FILE)
            except DamagedDatabase as exc:
                raise DamagedDatabase(f"cannot resume the partial conversion in {str(dst)!r}: "
                                      f"{exc}; or pass overwrite=True to start over") from None
        self._map_size = max(MIN_MAP_SIZE, int(map_size), 2 * existing)
        self._lmdb = lmdb
        try:
            self.env = lmdb.open(
                str(dst), map_size=self._map_size, subdir=True, readahead=False,
                # meminit: a page's unused room zeroed, not the process's freed heap written
                # into the file (tests/lmdb/test_writer_memory.py)
                meminit=True, max_dbs=0, lock=True, sync=False, metasync=False,
            )
        except lmdb.Error as exc:
            raise OSError(
                f"cannot open {str(dst)!r} for writing ({exc}); close any LMDBReader or "
                "LMDBDataset on it in this process first"
            ) from None
        self._last_flush = time.monotonic()
        self._data_fd = os.open(dst / DATA_FILE, os.O_RDONLY)
        self._reconcile()

    def _reconcile(self) -> None:
        """Drop records past ``stored``; recompute checksums and labels of the rest."""
        try:
            self._reconcile_records()
        except (self._lmdb.Error, ValueError) as exc:
            self.close()
            if isinstance(exc, ValueError):
                raise
            raise ValueError(
                f"the partial conversion in {str(self.dst)!r} is damaged ({exc}), e.g. by a "
                "machine crash; pass overwrite=True to start over"
            ) from None

    def _reconcile_records(self) -> None:
        with self.env.begin(write=True) as txn:
            cursor = txn.cursor()
            index = 0
            for key, value in cursor.iternext(keys=True, values=True):
                if index >= self.stored:
                    break
                if key != record_key(index):
                    raise ValueError(
                        f"partial conversion in {str(self.dst)!r} has record key {key!r} where "
                        f"{record_key(index)!r} was expected; pass overwrite=True to start over"
                    )
                self._checksums.append(crc32(value))
                self._labels.append(datum_fields(value)[1])
                index += 1
            if index < self.stored:
                raise ValueError(
                    f"partial conversion in {str(self.dst)!r} claims {self.stored} records but "
                    f"holds {index} (lost in a machine crash?); pass overwrite=True to start over"
                )
            _delete_from(cursor, self.stored)

    def add(self, value: bytes, crc: int, label: int, how: str) -> None:
        """Put one serialized Datum (``crc`` = its CRC-32) into the open batch.

        Raises :class:`MapFull` when the map filled: the batch is rolled back, the map
        grown, and the caller continues from :attr:`seen` (the last commit).
        """
        if self._txn is None:
            self._txn = self.env.begin(write=True)
        try:
            self._txn.put(record_key(self.stored + len(self._pending_crcs)), value, append=True)
        except self._lmdb.MapFullError:
            self._rollback_and_grow()
            raise MapFull from None
        except self._lmdb.Error as exc:  # e.g. spilled dirty pages hit a full disk
            self._txn.abort()
            self._txn = None
            raise self._write_failed(exc) from None
        self._maybe_crash("mid_txn")
        self._pending_crcs.append(crc)
        self._pending_labels.append(label)
        self._pending_counts[how] = self._pending_counts.get(how, 0) + 1
        if len(self._pending_crcs) % RECORDS_PER_TXN == 0:
            self._commit_txn()

    def _commit_txn(self) -> None:
        """Commit the open LMDB transaction (the batch's progress is recorded later)."""
        if self._txn is None:
            return
        txn, self._txn = self._txn, None
        try:
            txn.commit()
        except self._lmdb.MapFullError:
            self._txn = txn
            self._rollback_and_grow()
            raise MapFull from None
        except self._lmdb.Error as exc:  # a full disk shows as EIO or ENOSPC: the batch is lost,
            raise self._write_failed(exc) from None  # the last progress record still holds
        start_writeback(self._data_fd)  # per transaction: the final fsync waits for ~2.5 MB

    def _write_failed(self, exc: Exception) -> OSError:
        """The error for an LMDB write the file system refused (a full disk, most often)."""
        return OSError(errno.ENOSPC if "space" in str(exc) else errno.EIO,
                       f"writing {str(self.dst / DATA_FILE)!r} failed ({exc}); the disk may be "
                       "full: free space there and rerun the same command to resume from the "
                       "last committed batch")

    def skip(self, index: int, path: str, reason: str) -> None:
        """Record that source file ``index`` could not be used (kept by the next commit)."""
        self._pending_skipped.append({"index": index, "path": path, "reason": reason})

    def commit(self, seen: int) -> None:
        """Commit the open batch, then record that ``seen`` source files are done."""
        self._commit_txn()
        self._maybe_crash("after_commit")
        self._checksums.extend(self._pending_crcs)
        self._labels.extend(self._pending_labels)
        self.stored += len(self._pending_crcs)
        self.seen = seen
        self.skipped.extend(self._pending_skipped)
        for how, count in self._pending_counts.items():
            self.counts[how] = self.counts.get(how, 0) + count
        self._clear_pending()
        durable = time.monotonic() - self._last_flush >= DURABLE_EVERY_S
        if durable:
            self.env.sync(True)
            self._last_flush = time.monotonic()
        write_json_atomic(self.dst / PARTIAL_FILE, {
            "state": STATE_PARTIAL, **self.identity, "stored": self.stored, "seen": self.seen,
            "skipped": self.skipped, "counts": self.counts,
        }, durable=durable)
        self._maybe_crash("after_progress")

    def _clear_pending(self) -> None:
        self._pending_crcs = array("I")
        self._pending_labels = array("i")
        self._pending_counts: dict[str, int] = {}
        self._pending_skipped: list[dict] = []

    def _rollback_and_grow(self) -> None:
        """Drop the open batch (its committed transactions too), then double the map."""
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        self._clear_pending()
        self._map_size *= 2
        self.env.set_mapsize(self._map_size)  # first: deleting needs free pages too
        with self.env.begin(write=True) as txn:
            _delete_from(txn.cursor(), self.stored)

    @property
    def checksums(self) -> array:
        """The committed records' CRC-32s, in key order (what ``checksums.crc32`` will hold)."""
        return self._checksums

    def finish(self, meta: dict) -> dict:
        """Write the sidecars and ``fastload.json`` (last); returns the metadata written."""
        if self._txn is not None or self._pending_skipped:
            raise RuntimeError("finish() called with an uncommitted batch; call commit() first")
        self.env.sync(True)
        self._finishing = True  # keep the folder locked until fastload.json is written
        self.close()
        # Each sidecar is fsynced; one folder fsync then makes their renames durable, before
        # fastload.json (fsynced, renamed, folder fsynced) declares the database complete.
        write_bytes_atomic(self.dst / CHECKSUM_FILE, little_endian_bytes(self._checksums),
                           sync_dir=False)
        write_bytes_atomic(self.dst / LABELS_FILE, little_endian_bytes(self._labels),
                           sync_dir=False)
        write_json_atomic(self.dst / ERRORS_FILE, {
            "seen": self.seen, "stored": self.stored, "skipped_count": len(self.skipped),
            "skipped": self.skipped,
        }, sync_dir=False)
        sync_directory(self.dst)
        full = {
            "format": FORMAT_NAME, "version": FORMAT_VERSION, "state": STATE_COMPLETE,
            "count": self.stored, "seen": self.seen, "skipped": len(self.skipped),
            "key_digits": KEY_DIGITS, "record": "caffe.Datum (encoded=true, channels=3)",
            "checksum_file": CHECKSUM_FILE, "checksum_dtype": CHECKSUM_DTYPE,
            "checksum_algorithm": "crc32 (zlib) of each record value",
            "labels_file": LABELS_FILE, "labels_dtype": LABELS_DTYPE,
            "errors_file": ERRORS_FILE, "counts": self.counts, **self.identity, **meta,
        }
        write_json_atomic(self.dst / META_FILE, full)
        (self.dst / PARTIAL_FILE).unlink(missing_ok=True)
        unlock_destination(self.dst)
        return full

    def close(self) -> None:
        """Abandon the open batch (the partial stays resumable) and close the database."""
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        self.env.close()
        if self._data_fd is not None:
            os.close(self._data_fd)
            self._data_fd = None
        if not getattr(self, "_finishing", False):
            unlock_destination(self.dst)

    def _maybe_crash(self, point: str) -> None:
        if point == self._crash_point:
            _CRASH_SEEN[0] += 1  # per process: a sharded run's n-th point may be in shard 2
            if _CRASH_SEEN[0] == self._crash_at:
                os.kill(os.getpid(), signal.SIGKILL)


def _crash_hook() -> tuple[str | None, int]:
    spec = os.environ.get(CRASH_ENV, "")
    if not spec:
        return None, 0
    point, _, count = spec.partition(":")
    if point not in CRASH_POINTS or not count.isdigit():
        raise ValueError(f"{CRASH_ENV}={spec!r} must be '<point>:<n>' with point in {CRASH_POINTS}")
    return point, int(count)

