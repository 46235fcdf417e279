"""A list of image files with labels (a CSV or a JSONL file) as a :class:`SourceList`.

Relative paths are relative to the list file's folder. A list names files its author
chose, so paths may leave that folder (``..``, absolute, or through a symlink: a linked
folder or file whose real path lies outside), but never silently: rows whose path
resolves outside it are reported in one ``UserWarning`` (their count and the first line).
Labels follow :mod:`fastload.data.convert.sources.labels`: a row whose label the rule skips
(``-1`` among class indices, ``cat`` among them...) is a bad record, reported in
``errors.json`` with its line, like an unreadable file; rows keep the list's order.

The list is streamed, never held: listing reads it once (counting its records, checking
each row and label, collecting the distinct labels) and keeps one checkpoint (the byte
position and line number of a record) every ``CHECKPOINT_EVERY`` records; the
fingerprint and the conversion read it again from the nearest checkpoint. Memory is the
class names plus 16 bytes per ``CHECKPOINT_EVERY`` records, whatever the list's length
(a list of 10 M rows held as Python tuples was over 2 GB).
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from fastload.data.convert.sources.base import (
    IMG_EXTENSIONS,
    Record,
    RecordTable,
    SourceList,
    files_fingerprint,
)
from fastload.data.convert.sources.labels import Label, LabelRule

__all__ = ["CHECKPOINT_EVERY", "FileListTable", "ListCursor", "file_list_source"]

CHECKPOINT_EVERY = 1024  # records between two stored reading positions


class ListCursor(Protocol):
    """Rows of a list file from a position: ``next()`` gives ``(line number, path as written,
    raw label)`` for each record (blank lines and a header skipped, each row checked: a bad
    one raises ValueError naming its line); ``tell()`` is the position of the next row,
    ``line`` the line number before it, both to reopen the list there."""

    empty_hint: str
    line: int

    def __iter__(self) -> Iterator[tuple[int, str, Label]]: ...

    def __next__(self) -> tuple[int, str, Label]: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...


class CursorFactory(Protocol):
    def __call__(self, list_path: Path, position: int = 0, line: int = 0) -> ListCursor: ...


def file_list_source(list_path: Path, kind: str, cursor: CursorFactory) -> SourceList:
    """The records of the list file ``list_path`` read by ``cursor`` (one pass)."""
    base = list_path.parent
    rule = LabelRule()
    outside = _Outside(str(base))
    checkpoints: list[tuple[int, int]] = []
    count = 0
    rows = cursor(list_path)
    try:
        while True:
            if count % CHECKPOINT_EVERY == 0:
                checkpoints.append((rows.tell(), rows.line))
            row = next(rows, None)
            if row is None:
                break
            line_no, path, label = row
            outside.add(line_no, path)
            rule.add(label)
            count += 1
    finally:
        rows.close()
    if not count:
        raise ValueError(f"{str(list_path)!r} lists no images; {rows.empty_hint}")
    if outside.count:
        line_no, path = outside.first
        warnings.warn(
            f"{str(list_path)!r}: {outside.count} row(s) name files outside the "
            f"{kind.upper()}'s folder {str(base)!r} (by '..', an absolute path or a symlink), "
            f"the first on line {line_no} ({path!r}); they are converted as listed",
            UserWarning, stacklevel=4)
    table = FileListTable(list_path, kind, cursor, rule, count, checkpoints)
    return SourceList(root=base, kind=kind, classes=table.classes, samples=table)


class _Outside:
    """Counts the rows of a list whose file lies outside the list's folder ``root``: by its
    path (``..``, absolute) or, symlinks followed, by its real path. Per distinct folder
    (cached) one ``realpath`` and one ``scandir`` for the names of its symlinks; per row a
    set look-up (an ``lstat`` a row cost 5x the listing's time on a 2-core machine)."""

    _FOLDERS = 1 << 14  # folders remembered at once (a few MiB at most)

    def __init__(self, root: str) -> None:
        self.root = root
        self.prefix = os.path.join(root, "")
        self.real_prefix = os.path.join(os.path.realpath(root), "")
        self.count = 0
        self.first: tuple[int, str] | None = None
        self._folders: dict[str, tuple[str | None, frozenset[str]]] = {}

    def add(self, line_no: int, path: str) -> None:
        if self._leaves(path):
            self.count += 1
            self.first = self.first or (line_no, path)

    def _leaves(self, path: str) -> bool:
        if path.startswith(os.sep) or ".." in path:
            joined = os.path.normpath(os.path.join(self.root, path))
            if not (joined + os.sep).startswith(self.prefix):
                return True
            folder, _, name = joined.rpartition(os.sep)
        else:
            folder, _, name = path.rpartition(os.sep)  # relative to root: the cache key
        known = self._folders.get(folder)
        if known is None:
            known = self._folder(folder)
        real, links = known
        if real is None:
            return True
        return name in links and not os.path.realpath(
            os.path.join(real, name)).startswith(self.real_prefix)

    def _folder(self, folder: str) -> tuple[str | None, frozenset[str]]:
        """``(real path, names of its symlinks)`` of ``folder`` (relative to the list's
        folder, or absolute), remembered; real path None when it lies outside."""
        if len(self._folders) >= self._FOLDERS:
            self._folders.clear()
        real = os.path.realpath(os.path.join(self.root, folder))
        if not (real + os.sep).startswith(self.real_prefix):
            known: tuple[str | None, frozenset[str]] = (None, frozenset())
        else:
            try:
                with os.scandir(real) as entries:
                    links = frozenset(e.name for e in entries if e.is_symlink())
            except OSError:  # missing or unreadable: the conversion reports its files
                links = frozenset()
            known = (real, links)
        self._folders[folder] = known
        return known


class FileListTable(RecordTable):
    """The records of a list file, read from it on demand: ``table[i]`` is ``(absolute
    path, label)`` as the list of them was; iterating streams them; slices are views."""

    def __init__(self, list_path: Path, kind: str, cursor: CursorFactory, rule: LabelRule,
                 count: int, checkpoints: list[tuple[int, int]]) -> None:
        super().__init__(count)
        self.list_path = list_path
        self.root = list_path.parent
        self.kind = kind
        self.classes = rule.classes()
        self._cursor = cursor
        self._rule = rule
        self._count = count
        self._checkpoints = checkpoints  # (position, line); a text position may be large

    def rows_from(self, index: int) -> Iterator[tuple[int, str, Label]]:
        """Rows ``(line, path as written, raw label)`` of records ``index, index + 1, ...``."""
        k = min(index // CHECKPOINT_EVERY, len(self._checkpoints) - 1)
        position, line = self._checkpoints[k]
        rows = self._cursor(self.list_path, position, line)
        try:
            for _ in range(index - k * CHECKPOINT_EVERY):
                next(rows)
            yield from rows
        finally:
            rows.close()

    def _rows(self, start: int, stop: int) -> Iterator[tuple[int, str, Label]]:
        """``(line, absolute path, raw label)`` of records ``start .. stop - 1``."""
        base = str(self.root)
        count = stop - start
        if count <= 0:
            return
        for line, path, label in self.rows_from(start):
            yield line, os.path.normpath(os.path.join(base, path)), label
            count -= 1
            if not count:
                return

    def _records(self, start: int, stop: int) -> Iterator[tuple[str, int]]:
        """``(absolute path, label index)`` of records ``start .. stop - 1`` (-1 where the
        label rule skips the row)."""
        resolve = self._rule.resolve
        for _, path, label in self._rows(start, stop):
            yield path, resolve(label)[0]

    def _name(self, index: int) -> str:
        return next(self._records(index, index + 1))[0]

    def _label(self, index: int) -> int:
        return next(self._records(index, index + 1))[1]

    def _read(self, start: int, stop: int) -> Iterator[Record]:
        resolve, where = self._rule.resolve, self.list_path.name
        for line, path, label in self._rows(start, stop):
            index, problem = resolve(label)
            if problem is None:
                yield Record(path, index, path)
            else:
                yield Record(path, -1, problem=f"{where} line {line}: {problem}")

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return self._records(self._start, self._stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list | tuple):
            return len(other) == len(self) and all(
                a == tuple(b) for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def fingerprint(self) -> tuple[str, int]:
        """As the list of ``(path, label)`` fingerprints (:meth:`SourceList.fingerprint`),
        so a partial conversion made from a listing held in memory still resumes."""
        return files_fingerprint(self.kind, self.classes, self.root,
                                 self._records(0, self._count))


class CsvCursor:
    """The rows of a ``path,label`` CSV (UTF-8, an optional BOM, an optional header on the
    first row: ``path,label``, or other names where its path cell names no file and no
    image) from a position; ``line`` counts the CSV's rows."""

    empty_hint = "add rows of `path,label`"

    def __init__(self, list_path: Path, position: int = 0, line: int = 0) -> None:
        self.list_path = list_path
        self.line = line
        self._where = repr(str(list_path))
        self._file = open(list_path, encoding="utf-8", newline="")  # noqa: SIM115
        if position:
            self._file.seek(position)
        self._reader = csv.reader(self._lines(first=position == 0))

    def _lines(self, first: bool) -> Iterator[str]:
        readline = self._file.readline
        line = readline()
        if first and line.startswith("\ufeff"):
            line = line[1:]
        while line:
            yield line
            line = readline()

    def __iter__(self) -> CsvCursor:
        return self

    def __next__(self) -> tuple[int, str, str]:
        where = self._where
        while True:
            try:
                row = next(self._reader)
            except UnicodeDecodeError:
                raise ValueError(_not_utf8(self.list_path, "the CSV")) from None
            except csv.Error as exc:
                raise ValueError(f"{where} line {self.line + 1} is not a readable CSV row "
                                 f"({exc}); each row must be `path,label`") from None
            self.line += 1
            if len(row) != 2:
                if not row or all(not cell.strip() for cell in row):
                    continue
                raise ValueError(f"{where} line {self.line} has {len(row)} columns; each row "
                                 "must be `path,label`")
            path, label = row[0].strip(), row[1].strip()
            if not path or not label:
                if not path and not label:  # a blank row
                    continue
                raise ValueError(f"{where} line {self.line} has an empty path or label")
            if self.line == 1 and self._is_header(path, label):
                continue
            return self.line, path, label

    def _is_header(self, path: str, label: str) -> bool:
        """Whether the first row is a header: ``path,label``, or any other names
        (``filename,class``...) where its path is no file and no image name, so a header
        never becomes a record and its label a class."""
        if (path.lower(), label.lower()) == ("path", "label"):
            return True
        return (not path.lower().endswith(IMG_EXTENSIONS)
                and not (self.list_path.parent / path).is_file())

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()


def _not_utf8(list_path: Path, what: str) -> str:
    """The sentence for a list that is not UTF-8, naming its first bad line (a second,
    binary pass: the text reader's error does not say where)."""
    offset = 0
    with open(list_path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                return (f"{str(list_path)!r} line {line_no} is not UTF-8 (byte "
                        f"{raw[exc.start]:#04x} at offset {offset + exc.start}); save {what} "
                        "as UTF-8")
            offset += len(raw)
    return f"{str(list_path)!r} is not UTF-8; save {what} as UTF-8"

