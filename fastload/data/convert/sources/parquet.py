"""Parquet files as a conversion source, read with ``pyarrow.parquet``.

Files are read in the order given (a folder's or a glob's ``*.parquet`` sorted by name),
rows in file order. Listing reads each file's footer and its label column only; the image
column is read at conversion time, ``BATCH_ROWS`` rows at a time (``iter_batches``,
without pre-buffering whole row groups), so memory stays bounded by one batch. A resumed
conversion starts reading at the row group that holds its next row.

Columns: see :mod:`fastload.data.convert.sources.arrow` (``image_column`` ``"image"`` and
``label_column`` ``"label"`` by default). Class names come from the ``ClassLabel`` that
``datasets`` records in the schema's ``huggingface`` metadata when there is one (every
file must agree), otherwise from the labels (:mod:`fastload.data.convert.sources.labels`).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from pathlib import Path

from fastload.data.convert.sources.arrow import (
    BATCH_ROWS,
    check_columns,
    column_options,
    hf_class_names,
    image_cells,
    label_values,
    null_image,
)
from fastload.data.convert.sources.base import Record, RecordTable, SourceList, files_digest
from fastload.data.convert.sources.labels import assign_labels

PARQUET_SUFFIXES = (".parquet",)


def _import_pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("reading parquet files needs pyarrow; install it with "
                          "`pip install 'fastload-dali[sources]'` (or `pip install pyarrow`)") from None
    return pq


class _Unreadable(ValueError):
    """A parquet file pyarrow cannot read (its reason is reported for its one record)."""


def _read_labels(handle, label_column: str) -> list:
    try:
        return label_values(handle.read(columns=[label_column], use_threads=False).column(0))
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"its {label_column!r} column cannot be decoded ({exc})") from None


def _open(path: Path):
    pq = _import_pyarrow()
    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise _Unreadable(f"not a readable parquet file ({' '.join(str(exc).split())})") from None


class ParquetRecords(RecordTable):
    """The rows of parquet files: their labels, and row-group bounds to start reading anywhere.

    A file pyarrow cannot open (no footer: cut short) is one bad record; a row group that
    fails to decode while converting makes its rows bad records, and reading goes on with
    the next row group.
    """

    def __init__(self, files: list[Path], root: Path, image_column: str, label_column: str):
        self.files = files
        self.root = root
        self.image_column = image_column
        self._file_starts: list[int] = []
        self._group_starts: list[list[int]] = []  # per file: first row of each row group
        self._file_rows: list[int] = []
        unreadable: dict[int, str] = {}  # record index -> why its file cannot be read
        values = []
        names, first = None, None  # class names of the first readable file, and that file
        for path in files:
            self._file_starts.append(len(values))
            try:
                handle = _open(path)
                schema = handle.schema_arrow
                check_columns(schema, image_column, label_column, repr(str(path)))
                file_values = _read_labels(handle, label_column)
            except _Unreadable as exc:
                unreadable[len(values)] = str(exc)
                self._group_starts.append([])
                self._file_rows.append(1)
                values.append(None)
                continue
            file_names = hf_class_names(schema.metadata, label_column)
            if first is None:
                names, first = file_names, path
            elif file_names != names:
                raise ValueError(f"{str(path)!r} gives column {label_column!r} other class names "
                                 f"than {str(first)!r}; convert files of one data set together")
            starts, row = [], 0
            for g in range(handle.metadata.num_row_groups):
                starts.append(row)
                row += handle.metadata.row_group(g).num_rows
            handle.close()
            self._group_starts.append(starts)
            self._file_rows.append(row)
            values += file_values
        self._bytes = sum(p.stat().st_size for p in files)
        self.classes, labels, self._problems = assign_labels(values, names)
        for i, value in enumerate(values):
            if value is None:
                self._problems[i] = unreadable.get(i, f"the {label_column!r} of this row is null")
        self._labels = array("i", labels)
        super().__init__(len(values))

    def _locate(self, index: int) -> tuple[int, int]:
        file = bisect.bisect_right(self._file_starts, index) - 1
        return file, index - self._file_starts[file]

    def _name(self, index: int) -> str:
        file, row = self._locate(index)
        return f"{self.files[file]}:row {row}" if self._group_starts[file] else str(self.files[file])

    def _label(self, index: int) -> int:
        return self._labels[index]

    def _read(self, start: int, stop: int) -> Iterator[Record]:
        index = start
        while index < stop:
            file, row = self._locate(index)
            starts = self._group_starts[file]
            if not starts:  # unreadable file: one bad record
                yield self._record(index, None, None)
                index += 1
                continue
            handle = _open(self.files[file])
            first = bisect.bisect_right(starts, row) - 1
            try:
                for group in range(first, len(starts)):
                    end = self._file_starts[file] + (starts[group + 1] if group + 1 < len(starts)
                                                     else self._file_rows[file])
                    for record in self._read_group(handle, group, index, min(stop, end)):
                        yield record
                        index += 1
                    if index >= stop:
                        return
            finally:
                handle.close()

    def _read_group(self, handle, group: int, index: int, stop: int) -> Iterator[Record]:
        """Records ``index`` .. ``stop - 1``, all in row group ``group`` of ``handle``."""
        file, row = self._locate(index)
        skip = row - self._group_starts[file][group]
        try:
            batches = handle.iter_batches(batch_size=BATCH_ROWS, columns=[self.image_column],
                                          row_groups=[group], use_threads=False)
            for batch in batches:
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                for data, path in _after(image_cells(batch.column(0)), skip):
                    yield self._record(index, data, path)
                    index += 1
                    if index >= stop:
                        return
                skip = 0
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            reason = f"row group {group} of this file cannot be decoded ({' '.join(str(exc).split())})"
            for rest in range(index, stop):
                yield Record(self._name(rest), -1, problem=reason)

    def _record(self, index: int, data, path) -> Record:
        name = self._name(index)
        problem = self._problems.get(index)
        if problem is not None:
            return Record(name, -1, problem=problem)
        if data is None:
            return Record(name, -1, problem=null_image(self.image_column, path))
        return Record(name, self._labels[index], data=data)

    def fingerprint(self) -> tuple[str, int]:
        digest = files_digest("parquet", self.classes, self.files, self.root)
        digest.update(f"{self.image_column}\n".encode())
        digest.update(self._labels.tobytes())
        return digest.hexdigest(), self._bytes


def _after(cells: Iterator, skip: int) -> Iterator:
    for _ in range(skip):
        next(cells)
    return cells


def list_parquet(files: list[Path], root: Path, image_column: str | None = None,
                 label_column: str | None = None) -> SourceList:
    """The rows of parquet ``files`` as a :class:`SourceList`."""
    table = ParquetRecords(files, root, image_column or "image", label_column or "label")
    if len(table) == 0:
        raise ValueError(f"the parquet files under {str(root)!r} hold no rows")
    return SourceList(root=root, kind="parquet", classes=table.classes, samples=table,
                      options=column_options(image_column, label_column))
