"""Hostile or damaged sidecars, concurrent readers, killed readers: clear errors, no loss."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torchvision.transforms as T
from hypothesis import given, settings
from hypothesis import strategies as st

import fastload
from fastload.data.format.constants import CHECKSUM_FILE, LABELS_FILE, META_FILE
from fastload.data.format.datum import datum_fields, decode_datum, encode_datum
from fastload.data.format.reader import LMDBReader

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture
def db(synth_lmdb, tmp_path):
    """A private copy of the converted synth database, free to damage."""
    copy = tmp_path / "db"
    shutil.copytree(synth_lmdb, copy)
    return copy


def _edit_meta(db, **changes) -> None:
    meta = json.loads((db / META_FILE).read_text())
    meta.update(changes)
    (db / META_FILE).write_text(json.dumps(meta))


def test_missing_sidecar_says_the_folder_is_not_a_database(db):
    (db / META_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="has no fastload.json"):
        LMDBReader(db)


def test_malformed_sidecar_names_the_file_and_its_json_error(db):
    (db / META_FILE).write_text('{"format": "fastload-lmdb", "count": ')
    with pytest.raises(ValueError, match="fastload.json' is not valid JSON"):
        LMDBReader(db)


def test_sidecar_with_a_newer_format_version_asks_to_upgrade(db):
    _edit_meta(db, version=99)
    with pytest.raises(ValueError, match="format version 99 .* upgrade fastload"):
        LMDBReader(db)


@pytest.mark.parametrize("count", [-1, "48", None, 4.5])
def test_sidecar_count_that_is_not_a_count_is_refused(db, count):
    _edit_meta(db, count=count)
    with pytest.raises(ValueError, match="not a record count"):
        LMDBReader(db)


def test_sidecar_count_larger_than_the_database_is_refused(db):
    _edit_meta(db, count=60)
    (db / LABELS_FILE).write_bytes((db / LABELS_FILE).read_bytes() + bytes(48))
    (db / CHECKSUM_FILE).write_bytes((db / CHECKSUM_FILE).read_bytes() + bytes(48))
    with pytest.raises(OSError, match="holds 48 records but its fastload.json says count=60"):
        LMDBReader(db)


def test_missing_or_short_checksum_file_is_refused_before_any_read(db):
    (db / CHECKSUM_FILE).write_bytes((db / CHECKSUM_FILE).read_bytes()[:-4])
    with pytest.raises(ValueError, match="holds 47 checksums for 48 records"):
        LMDBReader(db)
    (db / CHECKSUM_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="checksums.crc32' is missing"):
        fastload.LMDBDataset(db)


def test_a_flipped_byte_in_a_record_names_its_key(db):
    reader = LMDBReader(db, checksums=False)
    data = bytes(reader.image_bytes(30)[0])
    reader.close()
    raw = bytearray((db / "data.mdb").read_bytes())
    offset = raw.find(data) + len(data) // 2
    raw[offset] ^= 0x10
    (db / "data.mdb").write_bytes(bytes(raw))
    with pytest.raises(OSError, match="record 00000030 .* CRC-32"):
        LMDBReader(db).image_bytes(30)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=3000), label=st.integers(-2**31, 2**31 - 1),
       height=st.integers(0, 2**31 - 1), width=st.integers(0, 2**31 - 1))
def test_codec_round_trips_any_bytes_and_label(data, label, height, width):
    record = encode_datum(data, label, height, width)
    datum = decode_datum(record)
    assert (datum.data, datum.label, datum.height, datum.width) == (data, label, height, width)
    fields = datum_fields(record)
    assert bytes(fields[0]) == data and fields[1] == label


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(max_size=200))
def test_decoding_random_bytes_gives_a_datum_or_a_value_error(junk):
    try:
        datum = decode_datum(junk)
    except ValueError:
        return
    assert datum.data in junk  # the record's own bytes, never invented ones
    fields = (datum.label, datum.height, datum.width, datum.channels)
    assert all(isinstance(v, int) and -2**31 <= v < 2**31 for v in fields)  # int32, as declared
    again = decode_datum(encode_datum(datum.data, *fields))
    assert again == dataclasses.replace(datum, encoded=True)  # what it read, it writes back


_READER = textwrap.dedent("""
    import sys, zlib
    from fastload.data.format.reader import LMDBReader
    reader = LMDBReader(sys.argv[1])
    for _ in range(int(sys.argv[2])):
        total = sum(zlib.crc32(reader.record(i)) for i in range(len(reader)))
    print(total)
""")


def test_eight_processes_read_one_lmdb_while_a_conversion_writes_elsewhere(synth_lmdb,
                                                                           synth_root, tmp_path):
    readers = [subprocess.Popen([sys.executable, "-c", _READER, str(synth_lmdb), "20"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(8)]
    writer = subprocess.run([sys.executable, "-m", "fastload.tools.cli", "convert",
                             str(synth_root / "train"), str(tmp_path / "other"),
                             "--workers", "1", "--no-progress"], capture_output=True, timeout=120)
    outputs = [p.communicate(timeout=120) for p in readers]
    assert writer.returncode == 0
    assert all(p.returncode == 0 for p in readers), [err for _, err in outputs]
    assert len({out for out, _ in outputs}) == 1  # every reader saw the same bytes


_ITERATE = textwrap.dedent("""
    import os, sys, torch, torchvision.transforms as T
    import fastload
    loader = fastload.DataLoader(fastload.LMDBDataset(sys.argv[1], transform=T.Compose(
        [T.Resize(16), T.CenterCrop(16), T.ToTensor()])), batch_size=4, shuffle=True, seed=3)
    for images, labels in loader:
        torch.save(loader.state_dict(), sys.argv[2] + ".tmp")
        os.replace(sys.argv[2] + ".tmp", sys.argv[2])
        print(loader.last_batch_indices, flush=True)
        if sys.argv[3] == "slow":
            import time; time.sleep(0.2)
""")


@pytest.mark.slow
def test_a_killed_reader_resumes_from_its_saved_state_with_identical_remaining_indices(
        synth_lmdb, tmp_path):
    state = tmp_path / "state.pt"
    process = subprocess.Popen([sys.executable, "-c", _ITERATE, str(synth_lmdb), str(state),
                                "slow"], stdout=subprocess.PIPE, text=True)
    seen = [process.stdout.readline() for _ in range(4)]  # four batches, then the kill
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert all(seen)
    reference = fastload.DataLoader(fastload.LMDBDataset(synth_lmdb, transform=SMALL),
                                    batch_size=4, shuffle=True, seed=3)
    order = [list(reference.last_batch_indices) for _ in reference]
    saved = torch.load(state, weights_only=True)
    resumed = fastload.DataLoader(fastload.LMDBDataset(synth_lmdb, transform=SMALL),
                                  batch_size=4, shuffle=True, seed=3)
    resumed.load_state_dict(saved)
    rest = [list(resumed.last_batch_indices) for _ in resumed]
    assert saved["batches_yielded"] >= 4
    assert rest == order[saved["batches_yielded"]:]


def test_a_corrupt_record_mid_epoch_raises_within_seconds_naming_its_key(db):
    reader = LMDBReader(db, checksums=False)
    data = bytes(reader.image_bytes(37)[0])
    reader.close()
    raw = bytearray((db / "data.mdb").read_bytes())
    raw[raw.find(data) + 100] ^= 0xFF
    (db / "data.mdb").write_bytes(bytes(raw))
    loader = fastload.DataLoader(fastload.LMDBDataset(db, transform=SMALL), batch_size=4,
                                 num_workers=2)
    start = time.monotonic()
    with pytest.raises(fastload.SampleError, match="00000037") as err:
        for _ in loader:
            pass
    assert time.monotonic() - start < 20
    assert err.value.names == [f"LMDB key '00000037' in '{db}'"]
