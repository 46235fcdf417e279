"""Conversion survives being killed, a full disk and a second converter, and loses nothing."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from fastload.data.convert.folder import convert_folder, is_complete
from fastload.data.format.constants import CHECKSUM_FILE, ERRORS_FILE, LABELS_FILE, PARTIAL_FILE
from fastload.data.pictures.synth import synthesize


def dump(db) -> dict:
    """Every key and value, the checksum and label sidecars and the skip list of ``db``."""
    import lmdb

    with lmdb.open(str(db), readonly=True, lock=False) as env, env.begin() as txn:
        records = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    return {
        "records": records,
        "checksums": (db / CHECKSUM_FILE).read_bytes(),
        "labels": (db / LABELS_FILE).read_bytes(),
        "skipped": json.loads((db / ERRORS_FILE).read_text())["skipped"],
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """300 generated photos, every one re-encoded by ``--max-side 64`` (so the run lasts)."""
    root = tmp_path_factory.mktemp("reliability_src")
    return synthesize(root, train=300, val=0, classes=3, seed=1, workers=1, min_side=96,
                      max_side=200) / "train"


def command(src, dst) -> list[str]:
    return [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
            "--workers", "2", "--commit-every", "7", "--max-side", "64", "--no-progress"]


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """``(dump of an uninterrupted run, seconds to its first progress file, seconds of
    conversion after that)``."""
    dst = tmp_path_factory.mktemp("reliability_ref") / "db"
    start = time.monotonic()
    process = subprocess.Popen(command(source, dst), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    while not (dst / PARTIAL_FILE).exists() and process.poll() is None:
        time.sleep(0.002)
    started = time.monotonic() - start
    assert process.wait(timeout=300) == 0, process.stderr.read()
    return dump(dst), started, time.monotonic() - start - started


def _seen(dst) -> int:
    try:
        return json.loads((dst / PARTIAL_FILE).read_text())["seen"]
    except (FileNotFoundError, ValueError, KeyError):  # not written yet, or mid-replace
        return -1


@pytest.mark.slow
def test_convert_resumes_after_sigkill_at_random_points_identically(source, reference, tmp_path):
    expected = reference[0]
    dst = tmp_path / "db"
    rng = random.Random(5)
    killed_mid_way = 0
    for _ in range(5):
        if is_complete(dst):
            break
        # A random point of what is left: kill once the progress record passes it (the
        # converter keeps going while this polls, so the kill lands anywhere after it).
        first = max(0, _seen(dst)) + 1
        if first >= 300:  # every file done, the finish was cut short: the rerun below ends it
            break
        target = rng.randrange(first, 300)
        process = subprocess.Popen(command(source, dst), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        while process.poll() is None and _seen(dst) < target:
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
        if process.wait(timeout=60) == -signal.SIGKILL and not is_complete(dst):
            killed_mid_way += 1
    assert killed_mid_way >= 3, "the kills did not land inside the conversion"
    if not is_complete(dst):
        result = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert "resumed a partial conversion" in result.stdout
    assert dump(dst) == expected


def test_a_second_conversion_into_the_same_folder_at_once_refuses(source, reference, tmp_path):
    dst = tmp_path / "db"
    first = subprocess.Popen(command(source, dst), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (dst / PARTIAL_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    first.send_signal(signal.SIGSTOP)  # mid-way, its lock held, until the second has run
    try:
        finished = is_complete(dst)
        second = subprocess.run(command(source, dst), capture_output=True, text=True,
                                timeout=300)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert not finished, "the first conversion finished before it could be paused"
    assert second.returncode != 0
    assert "another conversion is writing into" in second.stderr
    assert dump(dst) == reference[0]


def test_a_full_disk_stops_with_one_error_and_the_partial_resumes(source, reference,
                                                                   small_disk):
    disk = small_disk.path
    dst = disk / "db"
    result = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the disk may be full" in lines[0], result.stderr
    assert "rerun the same command to resume" in lines[0]
    assert (dst / PARTIAL_FILE).exists() and not is_complete(dst)
    small_disk.grow()
    result = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "resumed a partial conversion" in result.stdout
    assert dump(dst) == reference[0]


def test_enospc_injected_at_a_sidecar_write_is_one_error_and_resumable(source, tmp_path,
                                                                        monkeypatch):
    import fastload.data.format.writer as writer

    real = writer.write_json_atomic
    calls = []

    def full_disk(path, obj, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the second progress record (the first partial is destination's)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, obj, **kwargs)

    monkeypatch.setattr(writer, "write_json_atomic", full_disk)
    dst = tmp_path / "db"
    with pytest.raises(OSError) as err:
        convert_folder(source, dst, workers=1, commit_every=40, max_side=64, progress=False)
    assert err.value.errno == errno.ENOSPC and not is_complete(dst)
    monkeypatch.setattr(writer, "write_json_atomic", real)
    report = convert_folder(source, dst, workers=1, commit_every=40, max_side=64, progress=False)
    assert report.resumed and report.stored == 300
    fresh = convert_folder(source, tmp_path / "fresh", workers=1, commit_every=40, max_side=64,
                           progress=False)
    assert dump(dst) == dump(fresh.path)


def test_resuming_a_partial_whose_data_mdb_was_cut_short_is_an_error_not_sigbus(source,
                                                                                tmp_path):
    dst = tmp_path / "db"
    env = {**os.environ, "FASTLOAD_TEST_CRASH": "after_progress:20"}
    result = subprocess.run(command(source, dst), env=env, capture_output=True, timeout=300)
    assert result.returncode == -signal.SIGKILL
    with open(dst / "data.mdb", "r+b") as handle:
        handle.truncate((dst / "data.mdb").stat().st_size // 2)
    result = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "cannot resume the partial conversion" in result.stderr
    assert "truncated" in result.stderr and "overwrite" in result.stderr
