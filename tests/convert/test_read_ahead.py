"""A sharded conversion reads the next shard's records while the last strict checks of a
shard finish (``fastload.data.convert.read_ahead``): the set is the one a single worker
writes, and a record read ahead is taken once, by the writer that starts where it was read."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
from damage import scramble_scan
from PIL import Image

from fastload.data.convert import read_ahead
from fastload.data.convert.check_batches import CheckBatches, CheckedRecord
from fastload.data.convert.folder import convert_folder
from fastload.data.convert.read_ahead import ReadAhead

MARKERS = (None, 90, "markers", False)  # the keep-bytes options the writer's loop reads with


def _noise_jpeg(rng, height: int, width: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(
        out, "JPEG", quality=92)
    return out.getvalue()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """48 noisy JPEGs in 4 classes (large enough that a shard's last checks take a while),
    four of them scrambled (one the first of a shard) and two PNGs (read by a worker)."""
    root = tmp_path_factory.mktemp("read_ahead") / "src"
    rng = np.random.default_rng(5)
    for i in range(48):
        folder = root / f"class_{i // 12}"
        folder.mkdir(parents=True, exist_ok=True)
        if i in (17, 30):
            Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(
                folder / f"{i:03d}.png")
            continue
        data = _noise_jpeg(rng, 320 + i % 7 * 8, 400)
        (folder / f"{i:03d}.jpg").write_bytes(scramble_scan(data) if i in (3, 12, 25, 44)
                                              else data)
    return root


def test_a_sharded_strict_conversion_reading_ahead_writes_what_one_worker_writes(
        source, tmp_path, same_set, monkeypatch):
    taken = []
    take = ReadAhead.take

    def counted(self, start):
        entries = take(self, start)
        taken.append(0 if entries is None else len(entries[0]))
        return entries

    monkeypatch.setattr(read_ahead.ReadAhead, "take", counted)
    one = convert_folder(source, tmp_path / "one", workers=1, progress=False, shards=4)
    assert taken == [0, 0, 0]  # no check threads: nothing is read ahead
    taken.clear()
    two = convert_folder(source, tmp_path / "two", workers=2, progress=False, shards=4)
    assert (one.stored, one.skipped) == (two.stored, two.skipped) == (44, 4)
    same_set(tmp_path / "one", tmp_path / "two")
    assert len(taken) == 3 and sum(taken) > 0  # shards 1-3 took records read ahead


def _jpegs(tmp_path, count: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(9)
    samples = []
    for i in range(count):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(_noise_jpeg(rng, 24, 32))
        samples.append((str(path), i % 3))
    return samples


def test_records_read_ahead_keep_their_order_and_index_and_their_checks_start(tmp_path):
    samples = _jpegs(tmp_path, 6)
    ahead = ReadAhead(samples, 2)
    checks = CheckBatches(workers=1, least=2, most=4)
    try:
        assert [ahead.read_one(MARKERS, checks, most=3, most_bytes=1 << 20)
                for _ in range(4)] == [True, True, True, False]  # at most 3
        entries, held = ahead.take(2)
        assert [entry[0] for entry in entries] == [2, 3, 4]
        assert [entry[2] for entry in entries] == [2, 0, 1]  # the labels, in order
        assert all(isinstance(entry[3], CheckedRecord) for entry in entries)
        assert held == sum(entry[4] for entry in entries) > 0
        assert [entry[3].get()[0] for entry in entries] == ["ok"] * 3
    finally:
        checks.shutdown()


def test_records_read_ahead_are_taken_once_and_only_from_where_they_were_read(tmp_path):
    samples = _jpegs(tmp_path, 3)
    checks = CheckBatches(workers=1)
    try:
        ahead = ReadAhead(samples, 1)
        assert ahead.read_one(MARKERS, checks, most=8, most_bytes=1 << 20)
        assert ahead.take(0) is None  # a writer resumed elsewhere reads for itself
        assert len(ahead.take(1)[0]) == 1
        assert ahead.take(1) is None  # a retried run reads them again
        assert not ahead.read_one(MARKERS, checks, most=8, most_bytes=1 << 20)
    finally:
        checks.shutdown()


def test_reading_ahead_stops_at_a_file_for_a_worker_and_at_a_missing_one(tmp_path):
    samples = _jpegs(tmp_path, 2)
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    checks = CheckBatches(workers=1)
    try:
        for odd in (str(tmp_path / "x.png"), str(tmp_path / "gone.jpg")):
            ahead = ReadAhead([samples[0], (odd, 0), samples[1]], 0)
            read = [ahead.read_one(MARKERS, checks, most=8, most_bytes=1 << 20)
                    for _ in range(3)]
            entries, _ = ahead.take(0)
            if odd.endswith(".png"):  # left to the writer's loop, and nothing after it
                assert read == [True, False, False] and len(entries) == 1
            else:  # a file that cannot be read is a skipped record, as the loop makes it
                assert read == [True, True, True] and entries[1][3][0] == "skip"
    finally:
        checks.shutdown()


def _database(path) -> dict:
    """A database's records, labels, checksums and errors (what a rerun must equal)."""
    import json

    from fastload.data.format.dataset import LMDBDataset

    reader = LMDBDataset(path).reader
    return {
        "records": [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
                    for i in range(len(reader))],
        "sidecars": [(path / name).read_bytes() for name in ("labels.i32", "checksums.crc32")],
        "errors": json.loads((path / "errors.json").read_text()),
    }


@pytest.fixture
def early_reads(monkeypatch):
    """The records each one-database conversion read before its source was fingerprinted."""
    from fastload.data.convert import database, folder

    counts = []

    def counted(*args, **kwargs):
        early = database.read_early(*args, **kwargs)
        counts.append(None if early is None else len(early[1].entries))
        return early

    monkeypatch.setattr(folder, "read_early", counted)
    return counts


def test_a_strict_conversion_reads_its_first_records_while_the_source_is_fingerprinted(
        source, tmp_path, early_reads):
    one = convert_folder(source, tmp_path / "one", workers=1, progress=False)
    two = convert_folder(source, tmp_path / "two", workers=2, progress=False)
    assert early_reads == [None, 17]  # up to the first PNG (index 17), left to a worker
    assert (one.stored, one.skipped) == (two.stored, two.skipped) == (44, 4)
    assert _database(tmp_path / "one") == _database(tmp_path / "two")
    assert not [t for t in threading.enumerate() if t.name.startswith("fastload-check")]


def test_nothing_is_read_early_to_resume_a_partial_or_without_the_strict_check(
        source, tmp_path, early_reads, monkeypatch):
    import errno

    from fastload.data.format import writer

    real, calls = writer.write_json_atomic, []

    def full_disk(path, obj, **kwargs):  # the second progress record: a partial is left
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, obj, **kwargs)

    monkeypatch.setattr(writer, "write_json_atomic", full_disk)
    with pytest.raises(OSError):
        convert_folder(source, tmp_path / "db", workers=2, progress=False, commit_every=8)
    assert not [t for t in threading.enumerate() if t.name.startswith("fastload-check")]
    monkeypatch.setattr(writer, "write_json_atomic", real)
    resumed = convert_folder(source, tmp_path / "db", workers=2, progress=False, commit_every=8)
    convert_folder(source, tmp_path / "markers", workers=2, progress=False, check="markers")
    assert resumed.resumed and early_reads == [17, None]  # the first run read; markers: none
    convert_folder(source, tmp_path / "one", workers=1, progress=False, commit_every=8)
    assert _database(tmp_path / "db") == _database(tmp_path / "one")
