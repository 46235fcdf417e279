"""fastload verify: finds every kind of damage and names the bad keys."""

from __future__ import annotations

import shutil
import zlib

import numpy as np
import pytest

from fastload.data.format.constants import CHECKSUM_FILE, LABELS_FILE, PARTIAL_FILE, record_key
from fastload.data.format.datum import encode_datum
from fastload.data.format.reader import LMDBReader
from fastload.data.format.verify import verify_lmdb


def cli(argv: list[str]) -> int:
    """The ``fastload`` command, run in-process."""
    from fastload.tools.cli import main

    return main(argv)


@pytest.fixture
def db(synth_lmdb, tmp_path):
    """A private copy of the converted synth database, free to damage."""
    copy = tmp_path / "db"
    shutil.copytree(synth_lmdb, copy)
    return copy


def _replace_record(db, index: int, value: bytes) -> None:
    """Put ``value`` as record ``index`` and update its checksum, as a careful forger would."""
    import lmdb

    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        txn.put(record_key(index), value)
    checksums = np.fromfile(db / CHECKSUM_FILE, dtype="<u4")
    checksums[index] = zlib.crc32(value)
    checksums.tofile(db / CHECKSUM_FILE)


def test_verify_passes_a_sound_database(synth_lmdb, capsys):
    report = verify_lmdb(synth_lmdb, full=True)
    assert report.ok and report.found == report.expected == 48
    assert report.checksums_checked == 48 and report.decoded == 48
    assert cli(["verify", str(synth_lmdb)]) == 0
    assert "OK: 48/48 records, 48 checksums checked, 48 images decoded" in capsys.readouterr().out


def test_verify_catches_a_flipped_byte_in_data_mdb(db, capsys):
    data, _, _ = LMDBReader(db).image_bytes(7)
    needle = bytes(data[len(data) // 2: len(data) // 2 + 64])
    raw = bytearray((db / "data.mdb").read_bytes())
    # every copy: a page LMDB reused within the conversion may keep a stale copy of a record
    # in its unused room, and which copy is the record's is LMDB's business
    offset = raw.find(needle)
    assert offset > 0
    while offset >= 0:
        raw[offset + 10] ^= 0x01
        offset = raw.find(needle, offset + 1)
    (db / "data.mdb").write_bytes(bytes(raw))
    report = verify_lmdb(db, sample=0)
    assert [key for key, _ in report.bad] == ["00000007"]
    assert "checksum mismatch" in report.bad[0][1]
    assert cli(["verify", str(db)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "bad 00000007: checksum mismatch" in out


def test_verify_names_data_mdb_when_lmdb_cannot_read_its_own_pages(db, capsys):
    # a B-tree page's type damaged: LMDB's cursor raised MDB_CORRUPTED through verify
    raw = bytearray((db / "data.mdb").read_bytes())
    page = 4096
    for start in range(2 * page, len(raw), page):  # pages 0 and 1 are LMDB's meta pages
        flags = int.from_bytes(raw[start + 10:start + 12], "little")
        if flags & 0x03:  # a branch or leaf page: now an overflow page
            raw[start + 10:start + 12] = (0x04).to_bytes(2, "little")
    (db / "data.mdb").write_bytes(bytes(raw))
    report = verify_lmdb(db, sample=0)
    assert [key for key, _ in report.bad] == ["data.mdb"]
    assert "the file is damaged" in report.bad[0][1]
    assert cli(["verify", str(db)]) == 1
    assert "bad data.mdb: LMDB cannot read its pages" in capsys.readouterr().out


def test_full_verify_decodes_every_record(db):
    _replace_record(db, 3, encode_datum(b"\xff\xd8\xff\xe0 garbage", LMDBReader(db).targets[3], 10, 10))
    data, label, (height, width) = LMDBReader(db).image_bytes(9)
    _replace_record(db, 9, encode_datum(bytes(data), label, height + 1, width))
    report = verify_lmdb(db, full=True)
    bad = dict(report.bad)
    assert sorted(bad) == ["00000003", "00000009"]
    assert "does not decode" in bad["00000003"]
    assert f"Datum says {height + 1}x{width}" in bad["00000009"]


def test_verify_catches_missing_records_and_damaged_sidecars(db):
    import lmdb

    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        txn.delete(record_key(47))
    labels = np.fromfile(db / LABELS_FILE, dtype="<i4")
    labels[5] += 1
    labels.tofile(db / LABELS_FILE)
    report = verify_lmdb(db, sample=4)
    bad = dict(report.bad)
    assert "database holds 47 records; metadata says 48" in bad["count"]
    assert "label" in bad["00000005"]
    (db / CHECKSUM_FILE).write_bytes((db / CHECKSUM_FILE).read_bytes()[:-8])
    assert "holds 46 checksums for 48 records" in dict(verify_lmdb(db).bad)[CHECKSUM_FILE]
    (db / CHECKSUM_FILE).unlink()
    assert dict(verify_lmdb(db).bad)[CHECKSUM_FILE] == (
        f"checksum file {str(db / CHECKSUM_FILE)!r} is missing; restore it, or convert the "
        "source again over the database")


def test_verify_sample_is_seeded_and_bounded(synth_lmdb):
    assert verify_lmdb(synth_lmdb, sample=5, seed=1).decoded == 5
    assert verify_lmdb(synth_lmdb, sample=500).decoded == 48
    with pytest.raises(ValueError, match="sample=-1"):
        verify_lmdb(synth_lmdb, sample=-1)


def test_verify_refuses_partial_and_missing_databases(tmp_path, capsys):
    assert cli(["verify", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / PARTIAL_FILE).write_text("{}")
    assert cli(["verify", str(tmp_path / "partial")]) == 1
    assert "rerun the same `fastload convert` command" in capsys.readouterr().err


def test_verify_of_an_image_folder_suggests_converting_it_beside_itself(synth_root, capsys):
    folder = synth_root / "val"
    assert cli(["verify", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"`fastload convert {folder} {folder}.lmdb`" in err
    assert f"SRC {folder}`" not in err  # never into the source folder itself
