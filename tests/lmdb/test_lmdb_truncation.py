"""Damaged LMDB files give one Python error naming the file, never a signal."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastload.data.format.constants import DATA_FILE, META_FILE
from fastload.data.format.lmdb_meta import DamagedDatabase, check_data_file, read_lmdb_meta
from fastload.data.format.reader import LMDBReader
from fastload.data.format.verify import verify_lmdb


@pytest.fixture
def db(synth_lmdb, tmp_path):
    """A private copy of the converted synth database, free to damage."""
    copy = tmp_path / "db"
    shutil.copytree(synth_lmdb, copy)
    return copy


def _truncate(db, size: int) -> None:
    with open(db / DATA_FILE, "r+b") as handle:
        handle.truncate(size)


# Reads every record of the database named in argv[1] and prints "ok" or the exception's
# class and message; a signal (SIGBUS) shows as a negative return code.
_READ_ALL = textwrap.dedent("""
    import sys
    from fastload.data.format.reader import LMDBReader
    try:
        reader = LMDBReader(sys.argv[1])
        values = [bytes(reader.record(i)) for i in range(len(reader))]
    except Exception as exc:
        print("error", type(exc).__name__, exc)
    else:
        print("ok", len(values), sum(map(len, values)))
""")


_INTACT: dict[str, str] = {}  # what the reader prints for the intact database


def _read_in_subprocess(db) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _READ_ALL, str(db)], capture_output=True,
                          text=True, timeout=60)


def test_meta_page_gives_page_size_and_the_file_size_it_needs(synth_lmdb):
    meta, size = read_lmdb_meta(synth_lmdb / DATA_FILE)
    assert meta.page_size == 4096 and meta.entries == 48
    assert meta.needed_bytes <= size


def test_truncated_data_mdb_raises_naming_the_file_and_the_missing_bytes(db):
    size = (db / DATA_FILE).stat().st_size
    _truncate(db, size // 3)
    with pytest.raises(DamagedDatabase) as info:
        LMDBReader(db)
    message = str(info.value)
    assert str(db / DATA_FILE) in message and "truncated" in message
    assert "bytes are missing" in message and "fastload verify" in message


def test_truncated_data_mdb_in_a_subprocess_is_an_exception_not_sigbus(db):
    _truncate(db, (db / DATA_FILE).stat().st_size // 3)
    result = _read_in_subprocess(db)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("error DamagedDatabase")


def test_data_mdb_cut_below_its_meta_pages_is_not_lmdb(db):
    _truncate(db, 100)
    with pytest.raises(DamagedDatabase, match="no valid LMDB meta page"):
        check_data_file(db / DATA_FILE)


def test_empty_data_mdb_says_it_is_empty(db):
    _truncate(db, 0)
    with pytest.raises(DamagedDatabase, match="is empty"):
        LMDBReader(db)


def test_missing_data_mdb_raises_file_not_found_naming_it(db):
    (db / DATA_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="data.mdb"):
        LMDBReader(db)


@pytest.mark.parametrize("kind", ["folder", "fifo", "link to a device"])
def test_a_data_mdb_that_is_no_regular_file_is_named_as_such_not_as_missing(db, kind):
    import os

    data = db / DATA_FILE
    data.unlink()
    if kind == "folder":
        data.mkdir()
    elif kind == "fifo":
        os.mkfifo(data)
    else:
        data.symlink_to("/dev/zero")
    with pytest.raises(DamagedDatabase, match="data.mdb' is not a regular file"):
        LMDBReader(db)
    report = verify_lmdb(db)
    assert not report.ok and "is not a regular file" in str(report.bad)


def test_sidecar_count_that_differs_from_lmdb_entries_is_refused(db):
    meta = json.loads((db / META_FILE).read_text())
    meta["count"] = 40
    (db / META_FILE).write_text(json.dumps(meta))
    for sidecar in ("labels.i32", "checksums.crc32"):  # consistent with count=40
        (db / sidecar).write_bytes((db / sidecar).read_bytes()[:160])
    with pytest.raises(DamagedDatabase, match="holds 48 records but its fastload.json says count=40"):
        LMDBReader(db)


def test_verify_reports_a_truncated_data_mdb_without_mapping_it(db):
    _truncate(db, (db / DATA_FILE).stat().st_size // 2)
    report = verify_lmdb(db)
    assert not report.ok
    assert report.bad[0][0] == DATA_FILE and "truncated" in report.bad[0][1]


def test_fastload_verify_cli_exits_nonzero_on_truncation(db, capsys):
    from fastload.tools.cli import main

    _truncate(db, (db / DATA_FILE).stat().st_size // 2)
    assert main(["verify", str(db)]) == 1
    assert "truncated" in capsys.readouterr().out


def _meta_page(page_size: int, last_page: int, txnid: int, entries: int) -> bytes:
    """An LMDB 0.9 meta page as mdb.c lays it out (see fastload.data.format.lmdb_meta)."""
    page = bytearray(page_size)
    struct.pack_into("<II", page, 16, 0xBEEFC0DE, 1)
    struct.pack_into("<I", page, 40, page_size)
    struct.pack_into("<Q", page, 40 + 48 + 32, entries)
    struct.pack_into("<QQ", page, 136, last_page, txnid)
    return bytes(page)


@pytest.mark.parametrize("page_size", [8192, 65536])
def test_meta_pages_of_other_page_sizes_pick_the_newer_transaction(tmp_path, page_size):
    path = tmp_path / DATA_FILE
    path.write_bytes(_meta_page(page_size, 3, 7, 2) + _meta_page(page_size, 5, 8, 3)
                     + bytes(page_size * 2))
    with pytest.raises(DamagedDatabase, match=f"6 pages of {page_size}"):
        check_data_file(path)
    meta, _ = read_lmdb_meta(path)
    assert (meta.txnid, meta.entries, meta.needed_bytes) == (8, 3, 6 * page_size)


def test_a_broken_first_meta_page_falls_back_to_the_second(tmp_path):
    path = tmp_path / DATA_FILE
    path.write_bytes(bytes(16384) + _meta_page(16384, 1, 4, 9))
    assert read_lmdb_meta(path)[0].entries == 9
    check_data_file(path, count=9)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0.0, max_value=1.0))
def test_any_truncation_point_gives_an_exception_or_a_correct_read(synth_lmdb, tmp_path_factory,
                                                                   fraction):
    db = tmp_path_factory.mktemp("cut") / "db"
    shutil.copytree(synth_lmdb, db)
    full = (db / DATA_FILE).stat().st_size
    _truncate(db, int(full * fraction))
    result = _read_in_subprocess(db)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}"
    assert result.returncode == 0, result.stderr
    if "intact" not in _INTACT:
        _INTACT["intact"] = _read_in_subprocess(synth_lmdb).stdout
    assert result.stdout.startswith("error ") or result.stdout == _INTACT["intact"]
