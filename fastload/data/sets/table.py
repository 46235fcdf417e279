"""A sharded set's checked shard entries, kept as arrays: what a rank holds per shard.

A manifest lists up to 100,000 shards. Parsed, each entry is a dict of eight fields (about
1 KB); a reader needs only each shard's ``[start, stop)`` range and the CRC-32 of its
checksum file, and its path and folder when it opens it. :class:`ShardTable` keeps the
ranges as one int64 array of bounds and the CRC-32s as a uint32 array (12 bytes per shard)
and builds a shard's :class:`ShardEntry` when asked. Paths are not stored when every shard
has the name fastload gives it (:func:`shard_name`); a manifest naming its shards otherwise
keeps their paths and real folders as lists (as it was checked: see
:mod:`fastload.data.sets.schema`).
"""

from __future__ import annotations

import array
import bisect
import operator
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SHARD_PREFIX", "ShardEntries", "ShardEntry", "ShardTable", "shard_name",
           "shard_names"]

SHARD_PREFIX = "shard-"


def shard_name(index: int, count: int) -> str:
    """The directory name of shard ``index`` of ``count``: ``shard-00001-of-00003``."""
    return f"{SHARD_PREFIX}{index:05d}-of-{count:05d}"


def shard_names(count: int, tail: str = "") -> list[str]:
    """``[shard_name(k, count) + tail for k in range(count)]``, made in bulk."""
    return list(map(f"{SHARD_PREFIX}%05d-of-{count:05d}{tail.replace('%', '%%')}".__mod__,
                    range(count)))


class ShardEntry(NamedTuple):
    """One checked entry of a manifest's ``shards`` list."""

    index: int
    path: str  # as the manifest names it, relative to the set's folder
    folder: str  # its real path, inside the set's folder
    count: int
    start: int
    stop: int
    checksum_crc32: int  # CRC-32 of the shard's checksums.crc32


class ShardTable:
    """The checked shard entries of a manifest (module docstring), indexable like a list.

    Args:
        real_root: the set's folder, ``os.path.realpath``'d.
        bounds: the ``num_shards + 1`` range bounds: shard ``k`` holds ``[bounds[k],
            bounds[k + 1])`` (checked by the caller: from 0, non-decreasing).
        crcs: the CRC-32 of each shard's checksum file.
        paths: each shard's path as the manifest names it; None when every shard ``k``
            is ``shard_name(k, num_shards)``.
        folders: each shard's real folder (with ``paths``); None: ``real_root/path``.
    """

    def __init__(self, real_root: str, bounds, crcs, paths: list[str] | None = None,
                 folders: list[str] | None = None) -> None:
        import numpy as np  # here, not at import: a conversion's shards need none (NOTES C24)

        self.real_root = real_root
        self._bounds = array.array("q")  # bisect over it is as fast as over a list
        self._bounds.frombytes(np.ascontiguousarray(bounds, dtype=np.int64).view(np.uint8))
        self._crcs = np.ascontiguousarray(crcs, dtype=np.uint32)
        self._paths = paths
        self._folders = folders

    def __len__(self) -> int:
        return len(self._crcs)

    def __getitem__(self, shard):
        if isinstance(shard, slice):
            return [self[k] for k in range(*shard.indices(len(self)))]
        k = self.shard_index(shard)
        return ShardEntry(k, self.path(k), self.folder(k), self._bounds[k + 1] - self._bounds[k],
                          self._bounds[k], self._bounds[k + 1], int(self._crcs[k]))

    def shard_index(self, shard) -> int:
        """``shard`` as an index in ``[0, len)`` (negative counts from the end); IndexError
        when out of range."""
        k = operator.index(shard)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"shard index {shard} is out of range ({len(self)} shards)")
        return k

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def __repr__(self) -> str:
        return f"ShardTable({self.real_root!r}, shards={len(self)}, records={self.count})"

    @property
    def count(self) -> int:
        """The records of all shards."""
        return self._bounds[-1]

    @property
    def starts(self) -> np.ndarray:
        """Each shard's first global index (a read-only int64 view)."""
        return self._view()[:-1]

    @property
    def stops(self) -> np.ndarray:
        """Each shard's end, exclusive (a read-only int64 view)."""
        return self._view()[1:]

    def _view(self) -> np.ndarray:
        import numpy as np

        view = np.frombuffer(self._bounds, dtype=np.int64)
        view.flags.writeable = False
        return view

    def ranges(self) -> np.ndarray:
        """The ``(num_shards, 2)`` int64 array of ``[start, stop)`` ranges (a copy)."""
        import numpy as np

        return np.stack([self.starts, self.stops], axis=1)

    def path(self, shard: int) -> str:
        """Shard ``shard``'s path as the manifest names it."""
        return self._paths[shard] if self._paths is not None else shard_name(shard, len(self))

    def folder(self, shard: int) -> str:
        """Shard ``shard``'s folder: its real path as checked when the set was opened."""
        if self._folders is not None:
            return self._folders[shard]
        return os.path.join(self.real_root, self.path(shard))

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard, record within it)`` of global ``index``, already in ``[0, count)``."""
        shard = bisect.bisect_right(self._bounds, index) - 1  # the last start <= index
        return shard, index - self._bounds[shard]

    def attested_rows(self) -> list[list]:
        """``[path, count, start, stop, checksum_file_crc32]`` per shard, in plain ints: what
        a manifest's attestation covers (:mod:`fastload.data.sets.attest`)."""
        starts, stops = self.starts.tolist(), self.stops.tolist()
        return [[self.path(k), stop - start, start, stop, crc]
                for k, (start, stop, crc) in enumerate(zip(starts, stops, self._crcs.tolist(),
                                                           strict=True))]


class ShardEntries(Sequence):
    """A reader's shard entries (:attr:`~fastload.data.sets.shards.ShardedReader.entries`),
    each built by ``entry(k)`` when read (a remote set's folders are in its cache)."""

    def __init__(self, table: ShardTable, entry: Callable[[int], ShardEntry]) -> None:
        self._table, self._entry = table, entry

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, shard):
        if isinstance(shard, slice):
            return [self[k] for k in range(*shard.indices(len(self)))]
        return self._entry(self._table.shard_index(shard))

    @property
    def starts(self) -> np.ndarray:
        """Each shard's first global index (int64, read-only)."""
        return self._table.starts

    @property
    def stops(self) -> np.ndarray:
        """Each shard's end, exclusive (int64, read-only)."""
        return self._table.stops

    def ranges(self) -> np.ndarray:
        """The ``(num_shards, 2)`` int64 ``[start, stop)`` ranges."""
        return self._table.ranges()

    def attested_rows(self) -> list[list]:
        """:meth:`ShardTable.attested_rows` of the set."""
        return self._table.attested_rows()
