"""What every conversion source gives the converter: a :class:`SourceList` and its records.

A source is an ordered list of records. Files on disk (an ImageFolder tree, a CSV or JSONL
list) are a plain ``list`` of ``(path, label)``; containers of many images (WebDataset tar
shards, parquet files, a Hugging Face ``datasets`` folder) are a :class:`RecordTable`,
which reads its images in order without holding them: a tar member is a byte range of its
shard, a parquet row's bytes live in one batch of rows at a time. Either way
:func:`iter_records` yields one :class:`Record` per source record, from any position, so a
resumed conversion continues at the record where the interrupted one stopped.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

# torchvision.datasets.folder.IMG_EXTENSIONS, repeated here so conversion never imports torch.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class Record(NamedTuple):
    """One source record as the converter reads it.

    ``name`` names it in reports (a path, ``shard.tar:key.jpg``, ``file.parquet:row 7``);
    the image is the file ``path`` (``span`` and ``data`` None), the byte range
    ``span = (offset, size)`` of ``path``, or the bytes ``data``. ``problem`` set: the
    record has no usable image or label, and this is why (it is skipped and reported).
    """

    name: str
    label: int
    path: str | None = None
    span: tuple[int, int] | None = None
    data: bytes | memoryview | None = None
    problem: str | None = None


class RecordTable:
    """The records of a container source: ``len``, slicing (a view, for shards) and
    :meth:`records`. ``table[i]`` is ``(name, label)``; subclasses implement
    :meth:`_name`, :meth:`_label`, :meth:`_read` and :meth:`fingerprint`."""

    def __init__(self, count: int) -> None:
        self._start, self._stop = 0, count

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, item):
        if isinstance(item, slice):
            begin, stop, step = item.indices(len(self))
            if step != 1:
                raise ValueError(f"{type(self).__name__} slices must be contiguous, but got "
                                 f"step={step}")
            view = copy.copy(self)  # shares the listing; only the window moves
            view._start, view._stop = self._start + begin, self._start + max(begin, stop)
            return view
        if not isinstance(item, int) or isinstance(item, bool):
            raise TypeError(f"record index must be an int, but got {type(item).__name__}")
        if item < 0:
            item += len(self)
        if not 0 <= item < len(self):
            raise IndexError(f"record index {item} is out of range ({len(self)} records)")
        return self._name(self._start + item), self._label(self._start + item)

    def records(self, start: int = 0) -> Iterator[Record]:
        """Records ``start, start + 1, ...`` of this table (or view), in order."""
        return self._read(self._start + start, self._stop)

    def _name(self, index: int) -> str:
        raise NotImplementedError

    def _label(self, index: int) -> int:
        raise NotImplementedError

    def _read(self, start: int, stop: int) -> Iterator[Record]:
        raise NotImplementedError

    def fingerprint(self) -> tuple[str, int]:
        raise NotImplementedError


def iter_records(samples, start: int = 0) -> Iterator[Record]:
    """The records of ``samples`` (a :class:`RecordTable` or a list of ``(path, label)``)
    from index ``start`` on."""
    if isinstance(samples, RecordTable):
        yield from samples.records(start)
        return
    for index in range(start, len(samples)):
        path, label = samples[index]
        yield Record(path, label, path)


def files_digest(kind: str, classes: list[str], files: list[Path], root: Path) -> hashlib._Hash:
    """A SHA-256 started over a container source's kind, classes and each file's relative
    name, size and mtime (the records' own keys and labels are added by the caller)."""
    digest = hashlib.sha256()
    digest.update(f"{kind}\n{len(classes)}\n".encode())
    for name in classes:
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
    for path in files:
        st = os.stat(path)
        rel = os.path.relpath(path, root)
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest


@dataclass(frozen=True)
class SourceList:
    """The ordered samples of a conversion source.

    ``samples`` is a list of ``(absolute path, label)`` for an ImageFolder tree, a
    :class:`RecordTable` for containers and for file lists (CSV, JSONL: streamed from the
    list file, see :mod:`fastload.data.convert.sources.filelist`); ``options`` are the reading
    options that shaped the records (a resumed conversion must use the same).
    """

    root: Path
    kind: str  # "folder", "csv", "jsonl", "webdataset", "parquet" or "datasets"
    classes: list[str]
    samples: list[tuple[str, int]] | RecordTable
    options: dict = field(default_factory=dict)

    def fingerprint(self) -> tuple[str, int]:
        """``(SHA-256 over every relative path, label, size and mtime in order, total bytes)``.

        Resuming a partial conversion requires the same fingerprint, so a source that
        changed since the partial was written is refused instead of mixed in. A container
        source hashes each file's size and mtime and each record's key and label.
        """
        if isinstance(self.samples, RecordTable):
            return self.samples.fingerprint()
        return files_fingerprint(self.kind, self.classes, self.root, self.samples)


def files_fingerprint(kind: str, classes: list[str], root: Path,
                      samples: Iterable[tuple[str, int]]) -> tuple[str, int]:
    """:meth:`SourceList.fingerprint` of file records ``(absolute path, label)``, in order
    (an iterable: a listing streamed from its file hashes alike)."""
    total = 0
    prefix = os.path.join(str(root), "")
    digest = hashlib.sha256()
    digest.update(f"{kind}\n{len(classes)}\n".encode())
    for name in classes:
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
    for path, label in samples:
        try:
            st = os.stat(path)
            size, mtime = st.st_size, st.st_mtime_ns
            total += size
        except OSError:
            size, mtime = -1, -1
        rel = path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, root)
        digest.update(f"{rel}\0{label}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest(), total
