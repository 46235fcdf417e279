"""A sharded conversion resumes like a single one: the same command after a kill or a full
disk finishes the unfinished shards and keeps the finished ones (checked, not trusted);
processes giving another `--shards` for one folder are refused under the set's lock."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.verify import verify_set


@pytest.fixture(scope="module")
def source(sharded_set):
    return sharded_set.parent / "src"  # the 61 images the session's 3-shard set came from


def records(path) -> list[tuple[bytes, int]]:
    reader = LMDBDataset(path).reader
    return [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
            for i in range(len(reader))]


def command(src, dst, *extra) -> list[str]:
    return [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
            "--shards", "3", "--workers", "1", "--commit-every", "5", "--no-progress", *extra]


def test_the_same_command_after_a_kill_keeps_finished_shards_and_finishes_the_rest(
        source, sharded_set, tmp_path):
    dst = tmp_path / "set"
    # Shard 0 commits 5 times (20 files); the 7th commit of the process is inside shard 1.
    env = {**os.environ, "FASTLOAD_TEST_CRASH": "after_commit:7"}
    assert subprocess.run(command(source, dst), env=env, capture_output=True,
                          timeout=120).returncode == -9
    assert not (dst / MANIFEST_FILE).exists()
    done = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "finished shard(s) 0 found from an earlier run: checked and kept" in done.stdout
    # killed after shard 1's 2nd commit, before its progress record: redone from file 25
    assert "resumed a partial conversion at file 25" in done.stdout
    assert "manifest written (61 records in 3 shards)" in done.stdout
    assert records(dst) == records(sharded_set)
    assert verify_set(dst, full=True).ok


def test_a_finished_shard_that_no_longer_opens_is_refused_on_rerun_naming_it(
        source, tmp_path):
    dst = tmp_path / "set"
    env = {**os.environ, "FASTLOAD_TEST_CRASH": "after_commit:7"}
    subprocess.run(command(source, dst), env=env, capture_output=True, timeout=120)
    labels = dst / shard_name(0, 3) / "labels.i32"
    labels.write_bytes(labels.read_bytes()[:-4])  # a finished shard damaged since
    again = subprocess.run(command(source, dst), capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    assert f"shard '{dst / shard_name(0, 3)}' is finished but does not open" in again.stderr
    assert "holds 19 labels for 20 records" in again.stderr


def test_a_finished_shard_from_other_options_is_refused_on_rerun(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=3, shard_index=0,
                   quality=70, max_side=8)
    with pytest.raises(FileExistsError, match="is finished, but was converted .* options"):
        convert_folder(source, dst, workers=1, progress=False, shards=3)


def test_a_full_disk_in_the_second_shard_is_one_error_and_the_rerun_resumes(
        source, sharded_set, tmp_path, monkeypatch):
    import fastload.data.format.writer as writer

    real = writer.write_json_atomic

    def full_disk(path, obj, **kwargs):  # the OS refusing the second progress record of shard 1
        if path.parent.name == shard_name(1, 3) and obj.get("seen") == 10:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, obj, **kwargs)

    monkeypatch.setattr(writer, "write_json_atomic", full_disk)
    dst = tmp_path / "set"
    with pytest.raises(OSError) as err:
        convert_folder(source, dst, workers=1, progress=False, shards=3, commit_every=5)
    assert err.value.errno == errno.ENOSPC and not (dst / MANIFEST_FILE).exists()
    monkeypatch.setattr(writer, "write_json_atomic", real)
    report = convert_folder(source, dst, workers=1, progress=False, shards=3, commit_every=5)
    assert report.finished_shards == [0] and report.resumed
    assert report.resumed_from == 25  # shard 1 starts at file 20; its first commit held
    assert report.manifest is not None and report.manifest["count"] == 61
    assert records(dst) == records(sharded_set)
    assert verify_set(dst, full=True).ok


@pytest.fixture(scope="module")
def noisy_source(tmp_path_factory):
    """90 incompressible 64 px JPEGs (~800 KB): more than a 512 KiB disk holds."""
    root = tmp_path_factory.mktemp("noisy_src")
    rng = np.random.default_rng(3)
    for i in range(90):
        folder = root / f"c{i % 3}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
            folder / f"{i:03d}.jpg", quality=95)
    return root


def test_a_real_full_disk_mid_set_stops_with_one_error_and_the_same_command_resumes(
        noisy_source, small_disk, tmp_path):
    reference = tmp_path / "reference"
    convert_folder(noisy_source, reference, workers=1, progress=False, shards=3)
    disk = small_disk.path
    dst = disk / "set"
    full = subprocess.run(command(noisy_source, dst), capture_output=True, text=True,
                          timeout=120)
    assert full.returncode == 1
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1 and "the disk may be full" in lines[0], full.stderr
    small_disk.grow()
    done = subprocess.run(command(noisy_source, dst), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "manifest written (90 records in 3 shards)" in done.stdout
    assert records(dst) == records(reference)
    assert verify_set(dst, full=True).ok


def test_processes_giving_other_shard_counts_for_one_folder_are_refused_naming_what_is_there(
        source, tmp_path):
    dst = tmp_path / "set"
    base = [sys.executable, "-m", "fastload.tools.cli", "convert", str(source), str(dst),
            "--workers", "1", "--no-progress"]
    procs = [subprocess.Popen([*base, "--shards", "4", "--shard-index", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
             subprocess.Popen([*base, "--shards", "2", "--shard-index", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    outputs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], outputs
    winner, loser = (4, 2) if codes[0] == 0 else (2, 4)
    refusal = outputs[codes.index(1)][1]
    assert f"holds 1 shard(s) of a {winner}-shard set" in refusal
    assert f"pass --shards {winner}" in refusal
    done = 0 if winner == 4 else 1
    assert {p.name for p in dst.iterdir() if p.is_dir()} == {shard_name(done, winner)}
    for k in set(range(winner)) - {done}:  # the set that got in finishes with its own command
        convert_folder(source, dst, workers=1, progress=False, shards=winner, shard_index=k)
    assert json.loads((dst / MANIFEST_FILE).read_text())["num_shards"] == winner
    assert verify_set(dst).ok


def test_rerunning_a_finished_sharded_conversion_refuses_like_a_single_database(
        source, tmp_path, capsys):
    from fastload.tools.cli import main as cli

    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=3)
    assert cli(["convert", str(source), str(dst), "--shards", "3", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "already holds a finished sharded set (61 records in 3 shards)" in err
    assert "--overwrite" in err
