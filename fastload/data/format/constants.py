"""The fastload LMDB format: named constants shared by the writer, reader and verifier.

A fastload database is an LMDB *directory*::

    DST/
      data.mdb          records: key = zero-padded decimal index, value = Caffe Datum
      lock.mdb          created by LMDB
      fastload.json     sidecar metadata (see ``META_*`` keys), written last
      checksums.crc32   one little-endian uint32 CRC-32 per record value, in key order
      labels.i32        one little-endian int32 label per record, in key order
      errors.json       files the conversion could not use, with the reason
      fastload.partial.json  only while a conversion is unfinished: source fingerprint,
                        options and progress (records committed, source files seen)

Records hold no pickle; any reader (DALI's ``fn.readers.caffe`` included) can parse them.
A directory without ``fastload.json`` whose ``state`` is ``"complete"`` is a partial
conversion, never a finished database.
"""

from __future__ import annotations

import sys
from array import array

# The checksum of checksums.crc32 (converter, writer and verify all use this one).
try:  # ISA-L's CRC-32: the same values as zlib.crc32, about 5x faster on this machine
    from isal.isal_zlib import crc32 as crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib gives the same sums
    from zlib import crc32 as crc32

FORMAT_NAME = "fastload-lmdb"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)  # versions this reader understands

KEY_DIGITS = 8  # keys "00000000" .. "99999999"; LMDB sorts them in index order
META_FILE = "fastload.json"
CHECKSUM_FILE = "checksums.crc32"
CHECKSUM_DTYPE = "<u4"  # little-endian uint32, numpy dtype string
LABELS_FILE = "labels.i32"
LABELS_DTYPE = "<i4"  # little-endian int32, numpy dtype string
ERRORS_FILE = "errors.json"
PARTIAL_FILE = "fastload.partial.json"
DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"

# Sidecar key saying which check every JPEG passed at conversion: "strict" (libjpeg-turbo's
# strict decode, ``check="decode"``); absent for ``check="markers"`` and for sets written
# before it existed, whose records the loader decodes strictly at their first read.
META_JPEG_CHECK = "jpeg_check"
JPEG_CHECK_STRICT = "strict"
# The HMAC that binds that claim to the records under this user's key (see attest.py): the
# loader trusts the claim only where it verifies, and checks each record otherwise.
META_JPEG_ATTESTATION = "jpeg_check_attestation"

STATE_COMPLETE = "complete"
STATE_PARTIAL = "partial"

# Every file a fastload database directory may hold (``overwrite=True`` removes only these).
OWNED_FILES = (
    DATA_FILE, LOCK_FILE, META_FILE, CHECKSUM_FILE, LABELS_FILE, ERRORS_FILE, PARTIAL_FILE,
)


def record_key(index: int) -> bytes:
    """The LMDB key of record ``index``."""
    if not 0 <= index < 10**KEY_DIGITS:
        raise ValueError(f"record index must be in [0, {10**KEY_DIGITS}), but got index={index}")
    return b"%0*d" % (KEY_DIGITS, index)


def jpeg_checked(meta: dict) -> bool:
    """True when the sidecar (or a sharded set's manifest) ``meta`` *claims* every JPEG
    passed the strict decode at conversion; whether the loader may trust the claim is
    :func:`fastload.data.sets.attest.trusted_jpeg_check`'s decision."""
    return meta.get(META_JPEG_CHECK) == JPEG_CHECK_STRICT


def little_endian_bytes(values: array) -> bytes:
    """An ``array``'s values as the sidecars hold them: little-endian, whatever this machine's
    byte order (``checksums.crc32``, ``labels.i32``)."""
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()
