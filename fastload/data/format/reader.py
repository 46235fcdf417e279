"""Read-only access to a finished fastload LMDB directory.

The LMDB environment is opened lazily, once per process (checked by pid), read-only
with ``lock=False`` and ``readahead=False``: LMDB handles do not survive ``fork``, and a
reader pickled into a DataLoader worker reopens the file there. Labels come from the
``labels.i32`` sidecar, memory-mapped (:class:`~fastload.data.format.targets.Labels`), so samplers
get ``targets`` without a pass over the database and without a copy per process.
"""

from __future__ import annotations

import operator
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from fastload.data.format.constants import (
    CHECKSUM_DTYPE,
    CHECKSUM_FILE,
    DATA_FILE,
    FORMAT_NAME,
    LABELS_DTYPE,
    LABELS_FILE,
    META_FILE,
    PARTIAL_FILE,
    STATE_COMPLETE,
    SUPPORTED_VERSIONS,
    crc32,
    record_key,
)
from fastload.data.format.datum import datum_fields
from fastload.data.format.envs import acquire_env, release_env
from fastload.data.format.limits import MAX_META_BYTES, MAX_RECORDS, class_list_problem
from fastload.data.format.lmdb_meta import check_data_file
from fastload.data.format.targets import Labels
from fastload.data.format.untrusted import read_json, refuse_url, regular_file_size, short_repr
from fastload.utils.threads import after_fork_in_child


def record_index(index: Any, count: int, path: str | os.PathLike) -> int:
    """``index`` as a record number in ``[0, count)``: an integer (``int``, a NumPy integer,
    an integer tensor of one element; not a bool), negative counting from the end. TypeError
    or IndexError, naming ``path``, otherwise."""
    if isinstance(index, bool | np.bool_):
        raise TypeError(f"record index must be an int, but got {type(index).__name__}")
    try:
        number = operator.index(index)
    except TypeError:
        raise TypeError(f"record index must be an int, but got {type(index).__name__} "
                        f"{index!r}") from None
    if not -count <= number < count:
        raise IndexError(f"record index {number} is out of range for {str(path)!r} "
                         f"({count} records)")
    return number + count if number < 0 else number

def load_meta(path: Path) -> dict:
    """The parsed ``fastload.json`` of ``path``; one clear sentence when it is not usable."""
    if not path.exists():
        raise FileNotFoundError(
            f"LMDB directory {str(path)!r} does not exist; run `fastload convert SRC {path}` first"
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"{str(path)!r} is a file, not a fastload LMDB directory; pass the folder that "
            "`fastload convert` wrote"
        )
    meta_path = path / META_FILE
    if not meta_path.exists():
        if (path / PARTIAL_FILE).exists():
            raise ValueError(
                f"{str(path)!r} is a partial conversion; rerun the same `fastload convert` "
                "command to finish it"
            )
        if (path / DATA_FILE).exists():  # LMDB's file without ours: not written by fastload
            raise FileNotFoundError(
                f"{str(path)!r} has no {META_FILE}, so it is not a fastload database; run "
                f"`fastload convert SRC {path}` first")
        raise FileNotFoundError(  # a source folder, most likely: convert it beside itself
            f"{str(path)!r} has no {META_FILE}, so it is not a fastload database; to convert "
            f"the images under it: `fastload convert {path} {path}.lmdb`")
    fix = "restore it or reconvert it with overwrite=True"
    meta = read_json(meta_path, MAX_META_BYTES, fix)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{str(meta_path)!r} does not describe a {FORMAT_NAME} database; {fix}")
    if meta.get("version") not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"{str(path)!r} uses format version {short_repr(meta.get('version'))} but this "
            f"fastload reads versions {SUPPORTED_VERSIONS}; upgrade fastload or reconvert it "
            "with overwrite=True"
        )
    if meta.get("state") != STATE_COMPLETE:
        raise ValueError(
            f"{str(path)!r} is a partial conversion (state {short_repr(meta.get('state'))}); "
            "rerun the same `fastload convert` command to finish it"
        )
    count = meta.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_RECORDS:
        raise ValueError(
            f"{str(meta_path)!r} states count={short_repr(count)}, not a record count; the "
            "sidecar is damaged: restore it or reconvert it with overwrite=True"
        )
    _check_meta_fields(meta, meta_path, fix)
    return meta


# Sidecar fields the format fixes: a fastload.json naming other files or dtypes is not ours
# (a dtype of "O" would make numpy read objects; a path could point anywhere).
_FIXED = {"labels_file": LABELS_FILE, "labels_dtype": LABELS_DTYPE,
          "checksum_file": CHECKSUM_FILE, "checksum_dtype": CHECKSUM_DTYPE}


def _check_meta_fields(meta: dict, meta_path: Path, fix: str) -> None:
    for key, fixed in _FIXED.items():
        if meta.get(key, fixed) != fixed:
            raise ValueError(f"{str(meta_path)!r} states {key}={short_repr(meta[key])}, but "
                             f"the format fixes it to {fixed!r}; {fix}")
    problem = class_list_problem(meta.get("classes", []))
    if problem:
        raise ValueError(f"{str(meta_path)!r} states classes={short_repr(meta['classes'])}, "
                         f"which {problem}; {fix}")


def _checked_sidecar(path: Path, meta: dict, kind: str, default_file: str,
                     default_dtype: str, fix: str) -> Path:
    """``path``'s ``kind`` sidecar file, its size checked against the record count before it
    is read; a missing or short file is one error naming it and ``fix``."""
    import numpy as np

    sidecar = path / default_file
    dtype = np.dtype(default_dtype)
    try:
        size = regular_file_size(sidecar, "sidecar")
    except FileNotFoundError:
        raise FileNotFoundError(f"{str(sidecar)!r} is missing; {fix}") from None
    if size != meta["count"] * dtype.itemsize:
        noun = "labels" if kind == "labels" else "checksums"
        held = (f"{size // dtype.itemsize} {noun}" if size % dtype.itemsize == 0
                else f"{size} bytes, not a whole number of {noun},")
        raise ValueError(f"{str(sidecar)!r} holds {held} for {meta['count']} records; {fix}")
    return sidecar


def load_sidecar_array(path: Path, meta: dict, kind: str, default_file: str,
                        default_dtype: str, fix: str):
    """The per-record ``kind`` array (labels, checksums) beside ``path``'s data.mdb, read into
    memory after :func:`_checked_sidecar`'s size check."""
    import numpy as np

    sidecar = _checked_sidecar(path, meta, kind, default_file, default_dtype, fix)
    return np.fromfile(sidecar, dtype=np.dtype(default_dtype))


def map_labels(path: Path, meta: dict, labels_file: str, num_classes: int, fix: str) -> Labels:
    """``path``'s labels file memory-mapped (:class:`~fastload.data.format.targets.Labels`), its size
    checked before it is mapped and every label checked to lie in ``[0, num_classes)``."""
    sidecar = _checked_sidecar(path, meta, "labels", labels_file, LABELS_DTYPE, fix)
    labels = Labels(sidecar, int(meta["count"]))
    check_label_range(labels.array, num_classes, sidecar, fix)
    return labels


def check_label_range(labels, num_classes: int, where: Path, fix: str) -> None:
    """ValueError naming ``where`` unless every label is in ``[0, num_classes)``."""
    import numpy as np

    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        bad = int(np.flatnonzero((labels < 0) | (labels >= num_classes))[0])
        raise ValueError(f"{str(where)!r} holds label {int(labels[bad])} at record {bad}, "
                         f"outside [0, {num_classes}) for the {num_classes} classes; {fix}")


def load_labels(path: Path, meta: dict) -> Labels:
    """Per-record labels from the labels sidecar, memory-mapped, checked against the record
    count and the class count."""
    return map_labels(path, meta, LABELS_FILE, len(meta.get("classes", [])),
                      "reconvert it with overwrite=True")


def load_checksums(path: Path, meta: dict):
    """Per-record CRC-32s from ``path``'s checksum sidecar, memory-mapped read-only.

    Mapped as ``labels.i32`` is (:class:`~fastload.data.format.targets.Labels`): a process
    holds no copy of 4 bytes per record; the pages are shared with the page cache. The
    file's size is checked against the record count before it is mapped, so a missing or
    short file is a Python error naming it, never a SIGBUS.

    Args:
        path: the database directory.
        meta: its parsed ``fastload.json`` (``count`` is used).

    Returns:
        A read-only uint32 array of ``meta["count"]`` CRC-32s (a ``numpy.memmap``; an empty
            array for an empty database).

    Raises:
        FileNotFoundError: the checksum file is missing.
        ValueError: its size differs from ``count`` checksums.
        OSError: it cannot be mapped (the message names it).
    """
    fix = "restore it or reconvert it with overwrite=True"
    sidecar = _checked_sidecar(path, meta, "checksum", CHECKSUM_FILE, CHECKSUM_DTYPE, fix)
    count = int(meta["count"])
    if count == 0:
        return np.zeros(0, dtype=np.uint32)
    try:  # "<u4" is uint32 on the little-endian machines DALI runs on: no copy
        mapped = np.memmap(sidecar, dtype=np.dtype(CHECKSUM_DTYPE), mode="r", shape=(count,))
    except ValueError as exc:  # shortened since its size check
        raise ValueError(f"{str(sidecar)!r} cannot be mapped as {count} checksums ({exc}); "
                         f"{fix}") from None
    except OSError as exc:  # e.g. too many open files: name the file
        raise OSError(exc.errno, exc.strerror, str(sidecar)) from None
    return mapped.astype(np.uint32, copy=False)


_MAPPED = "mapped checksums"  # a pickled LMDBReader's checksums: map the file again

_OPENING = threading.Lock()  # a reader's first read in a process, see _transaction


def _new_opening_lock() -> None:  # a fork taken while another thread held it
    global _OPENING
    _OPENING = threading.Lock()


after_fork_in_child(_new_opening_lock)


class CorruptRecord(OSError, ValueError):
    """A record's bytes differ from what the converter wrote (checksum or Datum framing).

    An OSError as Pillow's decode errors are (what torch's loader raises over the same
    dataset), and a ValueError as a malformed record always was here. Its message names the
    record's key and the database, and says to run ``fastload verify`` and reconvert.
    """


class LMDBReader:
    """Read-only view of a fastload LMDB directory (see the module docstring).

    Every record is checked against its CRC-32 from ``checksums.crc32`` before its bytes
    are returned (``checksums=False`` skips that, for measuring its cost); a mismatch raises
    :class:`CorruptRecord` naming the key, so damaged bytes never reach a decoder. The
    LMDB environment opens lazily, once per process, so the reader pickles to workers.

    Args:
        path: a finished fastload LMDB directory (a local path; see
            :func:`~fastload.data.open_any` for URLs).
        checksums: check each record against its CRC-32 before returning its bytes;
            False skips that, for measuring its cost.

    Attributes:
        path (Path): the directory, absolute.
        meta (dict): its parsed ``fastload.json`` (format, count, classes, options).
        classes (list[str]): the class names, index = label.
        class_to_idx (dict[str, int]): class name -> label.
        targets (Labels): every record's label, ``labels.i32`` memory-mapped.
        checksums (numpy.ndarray | None): the per-record CRC-32s (uint32), None with
            ``checksums=False``.

    Raises:
        FileNotFoundError: ``path`` or one of its sidecar files does not exist.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is a URL, or its metadata or a sidecar file is damaged or does
            not match the records (the message says how to fix it).
        OSError: the data file is truncated (``DamagedDatabase``).
    """

    def __init__(self, path: str | os.PathLike, *, checksums: bool = True) -> None:
        refuse_url(path, "LMDB directory")
        self.path = Path(os.path.abspath(os.path.expanduser(path)))
        self.meta: dict = load_meta(self.path)
        self.classes: list[str] = list(self.meta.get("classes", []))
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(self.classes)}
        self.targets: Labels = load_labels(self.path, self.meta)
        self._count = int(self.meta["count"])
        self.checksums = load_checksums(self.path, self.meta) if checksums else None
        check_data_file(self.path / DATA_FILE, self._count)
        self._env = None
        self._env_key: tuple | None = None  # what release_env takes
        self._txn = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"LMDBReader({str(self.path)!r}, records={self._count}, classes={len(self.classes)})"

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_env=None, _env_key=None, _txn=None, _pid=None)
        if isinstance(self.checksums, np.memmap):  # mapped again where the copy reads
            state["checksums"] = _MAPPED
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if isinstance(self.checksums, str) and self.checksums == _MAPPED:
            self.checksums = load_checksums(self.path, self.meta)

    def __del__(self) -> None:
        try:  # the collector may run this where acquire_env holds its lock: never wait
            self._drop(deferred=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def share_labels(self, labels: Labels) -> None:
        """Read ``labels`` instead of mapping this database's ``labels.i32``.

        One mapping and one file handle fewer per shard.

        Args:
            labels: labels equal to this database's own, e.g. a view of a sharded set's
                labels over this shard's range.

        Raises:
            ValueError: ``labels`` differ from this database's ``labels.i32``.
        """
        if not np.array_equal(labels.array, self.targets.array):
            raise ValueError(f"the labels given for {str(self.path)!r} differ from its "
                             f"{LABELS_FILE}")
        self.targets = labels

    def close(self) -> None:
        """Drop this process's LMDB handle (it is reopened on the next read)."""
        self._drop(deferred=False)

    def _drop(self, deferred: bool) -> None:
        """:meth:`close`; ``deferred`` (a finaliser's): see
        :func:`fastload.data.format.envs.release_env`."""
        if self._env is not None and self._pid == os.getpid():
            txn, self._txn = self._txn, None
            if txn is not None:
                txn.abort()
            release_env(self._env_key, deferred=deferred)
        self._env = self._env_key = self._txn = self._pid = None

    def open(self) -> None:
        """Open this process's LMDB handle now, if it is not open here yet (a read opens it
        otherwise)."""
        self._transaction()

    def _transaction(self):
        txn = self._txn
        if txn is not None and self._pid == os.getpid():
            return txn
        with _OPENING:  # threads whose first reads meet open the handle once
            if self._txn is None or self._pid != os.getpid():  # first use, or forked
                self._env = self._env_key = self._txn = self._pid = None
                self._env, self._env_key = acquire_env(self.path, self._count)
                self._txn = self._env.begin(write=False, buffers=False)
                self._pid = os.getpid()
            return self._txn

    def key(self, index: int) -> bytes:
        """The LMDB key of record ``index``.

        Args:
            index: the record number, an integer in ``[-len, len)`` (negative counts from
                the end).

        Returns:
            The key, its zero-padded decimal record number.

        Raises:
            TypeError: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
        """
        return record_key(record_index(index, self._count, self.path))

    def record(self, index: int) -> bytes:
        """The raw Datum value of record ``index``, its CRC-32 checked.

        Args:
            index: the record number (as :meth:`key` takes it).

        Returns:
            The serialized Datum (:func:`~fastload.data.decode_datum` parses it).

        Raises:
            KeyError: the record is missing from the database.
            CorruptRecord: its bytes do not match their CRC-32.
            TypeError: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
        """
        key = self.key(index)
        value = self._transaction().get(key)
        if value is None:
            raise KeyError(
                f"record {key.decode()} is missing from {str(self.path)!r}; the database is "
                "damaged: run `fastload verify` and reconvert it with overwrite=True"
            )
        if self.checksums is not None:
            stored = int(self.checksums[int(key)])
            if crc32(value) != stored:
                raise CorruptRecord(
                    f"record {key.decode()} of {str(self.path)!r} is corrupt: its CRC-32 is "
                    f"{crc32(value):08x}, the checksum file says {stored:08x}; run `fastload "
                    "verify` and reconvert it with overwrite=True"
                )
        return value

    def image_bytes(self, index: int) -> tuple[memoryview, int, tuple[int, int]]:
        """The encoded image, label and size of record ``index``.

        Args:
            index: the record number (as :meth:`key` takes it).

        Returns:
            ``(encoded JPEG bytes, label, (height, width))``, the bytes a zero-copy view.

        Raises:
            CorruptRecord: the record fails its CRC-32, its Datum framing, or holds a
                label other than ``labels.i32`` says.
            KeyError: the record is missing from the database.
            TypeError: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
        """
        try:
            data, label, height, width, _, _ = datum_fields(self.record(index))
        except CorruptRecord:
            raise
        except ValueError as exc:
            raise CorruptRecord(
                f"record {self.key(index).decode()} of {str(self.path)!r} is corrupt ({exc}); "
                "run `fastload verify` and reconvert it with overwrite=True"
            ) from None
        if label != self.targets[index]:  # targets (labels.i32) is what samplers and loaders use
            raise CorruptRecord(
                f"record {self.key(index).decode()} of {str(self.path)!r} holds label {label}, "
                f"but its labels.i32 says {self.targets[index]}; run `fastload verify` and "
                "reconvert it with overwrite=True")
        return data, label, (height, width)
