"""``targets`` of a fastload set: its ``labels.i32`` memory-mapped, read as a list of ints.

A set of 100 M images has 100 M labels: as a Python list (ImageFolder's ``targets``) that is
several GB in every rank; memory-mapped, it is the file's 400 MB of page cache shared by
every process of the machine. :class:`Labels` keeps the list's reading surface: ``len``,
``targets[i]`` (an ``int``), slices (a ``list``), iteration, ``in``, ``==`` with a list,
``+`` with a list or labels and ``*`` by an int (a new ``list``), and
``np.asarray(targets)`` (the mapped int32 array itself, read-only, no copy). It cannot be
changed in place (``targets[i] = x`` raises TypeError); make a list (``list(targets)``) to
edit one. A pickled copy (for a DataLoader worker under spawn) maps the file again in the
process that unpickles it instead of carrying the labels.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastload.data.format.constants import LABELS_DTYPE

__all__ = ["Labels", "as_label_array"]

LABEL_DTYPE = np.dtype(LABELS_DTYPE)
_CHUNK = 1 << 16  # labels converted to ints at a time when iterating


class Labels(Sequence):
    """The labels ``[start, stop)`` of the ``labels.i32`` file ``path`` (of ``total`` labels),
    memory-mapped read-only; see the module docstring."""

    def __init__(self, path: str | os.PathLike, total: int, start: int = 0,
                 stop: int | None = None, *, _array: np.ndarray | None = None) -> None:
        self.path = Path(path)
        self.total = int(total)
        self.start = int(start)
        self.stop = self.total if stop is None else int(stop)
        self._array = _array if _array is not None else _map(self.path, self.total)[
            self.start:self.stop]

    @property
    def array(self) -> np.ndarray:
        """The labels as a read-only int32 array (a view of the mapping; no copy)."""
        return self._array

    def view(self, start: int, stop: int) -> Labels:
        """Labels ``[start, stop)`` of these, sharing their mapping (no new file handle)."""
        return Labels(self.path, self.total, self.start + start, self.start + stop,
                      _array=self._array[start:stop])

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._array[index].tolist()
        try:  # what a list takes: an int, or anything with __index__ (not a bool array)
            position = operator.index(index)
        except TypeError:
            position = None
        if position is None or isinstance(index, np.bool_):
            raise TypeError(f"list indices must be integers or slices, not "
                            f"{type(index).__name__}")
        if not -len(self._array) <= position < len(self._array):
            raise IndexError("list index out of range")
        return int(self._array[position])

    def __iter__(self) -> Iterator[int]:
        for begin in range(0, len(self._array), _CHUNK):
            yield from self._array[begin:begin + _CHUNK].tolist()

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return any(value == v for v in self)  # what a list of ints answers
        return bool((self._array == value).any())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Labels):
            return np.array_equal(self._array, other._array)
        if isinstance(other, list):  # a list is never equal to a tuple or a range
            if len(other) != len(self):
                return False
            try:
                values = np.asarray(other, dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                return list(self) == list(other)
            return values.ndim == 1 and bool((values == self._array).all())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __add__(self, other: object) -> list[int]:
        if isinstance(other, Labels | list):  # a new list, as list + list gives
            return self.tolist() + list(other)
        return NotImplemented

    def __radd__(self, other: object) -> list[int]:
        if isinstance(other, list):
            return other + self.tolist()
        return NotImplemented

    def __mul__(self, times: object) -> list[int]:
        try:
            return self.tolist() * operator.index(times)
        except TypeError:
            return NotImplemented

    __rmul__ = __mul__

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if dtype is None or np.dtype(dtype) == self._array.dtype:
            return self._array.copy() if copy else self._array
        return self._array.astype(dtype)

    def tolist(self) -> list[int]:
        return self._array.tolist()

    def __repr__(self) -> str:
        head = self._array[:6].tolist()
        more = ", ..." if len(self) > 6 else ""
        return (f"Labels([{', '.join(map(str, head))}{more}], {len(self)} labels of "
                f"{str(self.path)!r})")

    def __reduce__(self) -> tuple:
        return (Labels, (str(self.path), self.total, self.start, self.stop))


def _map(path: Path, total: int) -> np.ndarray:
    """``path`` mapped as ``total`` read-only labels; ValueError naming it when its size
    differs (the file changed since its checks)."""
    if total == 0:
        return np.zeros(0, dtype=LABEL_DTYPE)
    size = os.stat(path).st_size
    if size != total * LABEL_DTYPE.itemsize:
        raise ValueError(f"{str(path)!r} holds {size} bytes, but {total} labels were expected "
                         f"({total * LABEL_DTYPE.itemsize} bytes): the file changed since it was "
                         "opened; open the data set again")
    return np.memmap(path, dtype=LABEL_DTYPE, mode="r", shape=(total,))


def as_label_array(targets: Sequence[int] | np.ndarray) -> np.ndarray:
    """``targets`` as a 1-D integer array, without a copy when it is :class:`Labels` or
    already an integer array (what the loader's sources index per batch)."""
    if isinstance(targets, Labels):
        return targets.array
    array = np.asarray(targets)
    if array.dtype.kind not in "iu":
        array = np.asarray(targets, dtype=np.int64)
    return array
