"""LMDB's own metadata, read with plain file reads before the file is memory-mapped.

LMDB maps ``data.mdb`` and touches pages through the map: a page past the end of a
truncated file is a SIGBUS that kills the process. So before ``lmdb.open`` the reader
checks the file against its two meta pages (LMDB 0.9 layout, ``MDB_VERSION`` 1,
little-endian, 64-bit): the meta page with the higher transaction id is the current one,
and the file must hold its ``last_pg + 1`` pages of ``page_size`` bytes.

Meta page layout (byte offsets inside the page; a 16-byte page header comes first)::

    16  uint32 magic 0xBEEFC0DE      20  uint32 version
    40  uint32 page size (free DB's md_pad)
    40 + 48 + 32  uint64 entries of the main DB
    136 uint64 last used page number 144 uint64 transaction id
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

LMDB_MAGIC = 0xBEEFC0DE
LMDB_DATA_VERSION = 1
_HEADER = 16  # page header bytes before MDB_meta
_META_BYTES = 152  # page header + MDB_meta up to and including mm_txnid
_DB_BYTES = 48  # one MDB_db record
_PSIZE_AT = 40  # mm_dbs[FREE_DBI].md_pad holds the page size
_ENTRIES_AT = 40 + _DB_BYTES + 32  # mm_dbs[MAIN_DBI].md_entries
_LAST_PG_AT = 136
_TXNID_AT = 144
# Page sizes LMDB may have used (the OS page size at creation): 4 KiB .. 64 KiB.
PAGE_SIZES = (4096, 8192, 16384, 32768, 65536)

_RECOVER = ("re-copy it from the original, check it with `fastload verify`, or convert "
            "the source again")


class DamagedDatabase(OSError):
    """``data.mdb`` does not match LMDB's own metadata (truncated, cut short or not LMDB)."""


@dataclass(frozen=True)
class LMDBMeta:
    """The current meta page of a ``data.mdb``."""

    page_size: int
    last_page: int  # last page number in use
    txnid: int
    entries: int  # records in the main (unnamed) database

    @property
    def needed_bytes(self) -> int:
        """Bytes the file must hold for every page LMDB may touch."""
        return (self.last_page + 1) * self.page_size


def _parse(page: bytes) -> LMDBMeta | None:
    if len(page) < _META_BYTES:
        return None
    magic, version = struct.unpack_from("<II", page, _HEADER)
    if magic != LMDB_MAGIC or version != LMDB_DATA_VERSION:
        return None
    (psize,) = struct.unpack_from("<I", page, _PSIZE_AT)
    (entries,) = struct.unpack_from("<Q", page, _ENTRIES_AT)
    last_pg, txnid = struct.unpack_from("<QQ", page, _LAST_PG_AT)
    if psize not in PAGE_SIZES:
        return None
    return LMDBMeta(page_size=psize, last_page=last_pg, txnid=txnid, entries=entries)


HEAD_BYTES = max(PAGE_SIZES) + _META_BYTES  # enough of a file's start for both meta pages


def meta_from_head(head: bytes) -> LMDBMeta | None:
    """The current meta page found in the first :data:`HEAD_BYTES` of a ``data.mdb`` (a
    remote object's start, say); None when neither meta page is valid."""
    first = _parse(head[:_META_BYTES])
    candidates = [first] if first is not None else []
    for psize in (first.page_size,) if first is not None else PAGE_SIZES:
        second = _parse(head[psize:psize + _META_BYTES])
        if second is not None and second.page_size == psize:
            candidates.append(second)
            break
    return max(candidates, key=lambda meta: meta.txnid) if candidates else None


def read_lmdb_meta(data_file: str | os.PathLike) -> tuple[LMDBMeta, int]:
    """``(current meta page, file size)`` of ``data_file``; :class:`DamagedDatabase` when
    neither meta page is valid."""
    path = Path(data_file)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        meta = meta_from_head(handle.read(HEAD_BYTES))
    if meta is None:
        what = "is empty" if size == 0 else f"has no valid LMDB meta page ({size} bytes)"
        raise DamagedDatabase(f"{str(path)!r} {what}, so it is not a usable LMDB file; {_RECOVER}")
    return meta, size


def check_data_file(data_file: str | os.PathLike, count: int | None = None) -> LMDBMeta:
    """Check ``data_file`` against its meta pages (and ``count``, the sidecar's record count)
    before it is mapped; raise :class:`DamagedDatabase` naming what is missing."""
    path = Path(data_file)
    if not path.is_file():
        if os.path.lexists(path):  # a folder, a FIFO, a device, a link to one or to nothing
            raise DamagedDatabase(f"{str(path)!r} is not a regular file, so the database has "
                                  f"no records; {_RECOVER}")
        raise FileNotFoundError(f"{str(path)!r} is missing, so the database has no records; {_RECOVER}")
    meta, size = read_lmdb_meta(path)
    if size < meta.needed_bytes:
        missing = meta.needed_bytes - size
        raise DamagedDatabase(
            f"{str(path)!r} is truncated: LMDB's metadata needs {meta.needed_bytes} bytes "
            f"({meta.last_page + 1} pages of {meta.page_size}) but the file holds {size}, "
            f"{missing} bytes are missing; {_RECOVER}"
        )
    if count is not None and meta.entries != count:
        raise DamagedDatabase(
            f"{str(path)!r} holds {meta.entries} records but its fastload.json says count="
            f"{count}; the database and its sidecar files do not belong together: {_RECOVER}"
        )
    return meta
