"""``checksums.crc32`` is memory-mapped, as ``labels.i32`` is (issue 41: it was read into
anonymous memory, 4 B/record in every process). Real LMDB files."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest

from fastload.data.format.constants import CHECKSUM_FILE
from fastload.data.format.reader import CorruptRecord, LMDBReader


@pytest.fixture
def db(synth_lmdb, tmp_path):
    copy = tmp_path / "db"
    shutil.copytree(synth_lmdb, copy)
    return copy


def test_checksums_are_a_read_only_map_of_the_file(db):
    reader = LMDBReader(db)
    sums = reader.checksums
    assert isinstance(sums, np.memmap) and sums.dtype == np.uint32
    assert str(sums.filename) == str((db / CHECKSUM_FILE).resolve())
    assert not sums.flags.writeable
    assert np.array_equal(sums, np.fromfile(db / CHECKSUM_FILE, dtype="<u4"))
    for i in range(len(reader)):
        reader.record(i)  # every CRC-32 checked against the mapped file


def test_a_pickled_reader_maps_the_file_again_instead_of_carrying_a_copy(db):
    reader = LMDBReader(db)
    copy = pickle.loads(pickle.dumps(reader))
    assert isinstance(copy.checksums, np.memmap)
    assert np.array_equal(copy.checksums, reader.checksums)
    assert copy.record(3) == reader.record(3)
    unchecked = pickle.loads(pickle.dumps(LMDBReader(db, checksums=False)))
    assert unchecked.checksums is None


def test_a_changed_checksum_is_still_caught_through_the_map(db):
    sums = bytearray((db / CHECKSUM_FILE).read_bytes())
    sums[4 * 5] ^= 0xFF
    (db / CHECKSUM_FILE).write_bytes(bytes(sums))
    reader = LMDBReader(db)
    with pytest.raises(CorruptRecord, match="00000005"):
        reader.record(5)


def test_a_truncated_checksum_file_is_a_python_error_naming_it(db):
    (db / CHECKSUM_FILE).write_bytes((db / CHECKSUM_FILE).read_bytes()[:-6])
    with pytest.raises(ValueError, match=r"checksums\.crc32.*not a whole number"):
        LMDBReader(db)
