"""The engine core without an engine: shard jobs run in a loop, in any order, any number of
times, with results lost or duplicated, give the set the serial conversion gives."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import random
import shutil

import pytest

from fastload.data.convert.engine import ShardBusy, plan_shard_jobs, run_shard
from fastload.data.convert.engine_run import finish_shards
from fastload.data.convert.folder import ConvertError, convert_folder
from fastload.data.convert.plan import plan_conversion
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.verify import verify_set


def plan_of(src, dst, **options):
    options = {"shards": 4, "workers": 1, "progress": False, **options}
    return plan_shard_jobs(plan_conversion(src, dst, **options))


def test_jobs_run_twice_shuffled_with_a_lost_and_a_duplicated_result_equal_the_serial_set(
        engine_source, serial_engine_set, same_set, tmp_path):
    dst = tmp_path / "set"
    plan = plan_of(engine_source, dst)
    assert [job.index for job in plan.jobs] == [0, 1, 2, 3]
    jobs = list(plan.jobs)
    random.Random(0).shuffle(jobs)
    first = [run_shard(job) for job in jobs]
    random.Random(1).shuffle(jobs)
    second = [run_shard(job) for job in jobs]
    assert {r.state for r in first} == {"converted"}
    assert {r.state for r in second} == {"done"}  # a finished shard is done, never an error
    results = first[1:] + [first[2]]  # shard first[0]'s result lost, one duplicated
    report = finish_shards(plan, results)
    assert report.manifest["count"] == 24 and report.summary() == "stored 24 + skipped 0 = seen 24"
    same_set(dst, serial_engine_set)


def test_a_job_resubmitted_after_the_end_rewrites_nothing(engine_source, tmp_path):
    dst = tmp_path / "set"
    plan = plan_of(engine_source, dst)
    finish_shards(plan, [run_shard(job) for job in plan.jobs])
    before = {p: p.stat().st_mtime_ns for p in dst.rglob("*")}
    assert run_shard(plan.jobs[1]).state == "done"
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == before


def test_a_shard_held_by_a_live_writer_raises_the_retryable_error(engine_source, tmp_path):
    dst = tmp_path / "set"
    plan = plan_of(engine_source, dst)
    job = plan.jobs[2]
    held = dst / f".attempt-{job.name}-other"
    held.mkdir()
    fd = os.open(held, os.O_RDONLY)  # another attempt's lock (a separate open file)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ShardBusy, match="another attempt is writing"):
            run_shard(job)
    finally:
        os.close(fd)
    # the holder died: its folder is taken over, and the driver leaves no attempt folder
    finish_shards(plan, [run_shard(j) for j in plan.jobs])
    assert not [p for p in dst.iterdir() if p.name.startswith(".attempt-")]


def _run(job, start):
    start.wait()
    try:
        return run_shard(job).state
    except ShardBusy:
        return "busy"


def test_two_attempts_of_one_shard_at_once_leave_one_valid_shard(
        engine_source, serial_engine_set, same_set, tmp_path):
    dst = tmp_path / "set"
    plan = plan_of(engine_source, dst)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(2) as pool:
            both = [pool.apply_async(_run, (plan.jobs[0], start)) for _ in range(2)]
            start.set()
            states = sorted(r.get(timeout=120) for r in both)
    assert "converted" in states and set(states) <= {"converted", "done", "busy"}
    report = finish_shards(plan, [run_shard(job) for job in plan.jobs])
    assert report.manifest is not None
    same_set(dst, serial_engine_set)


def test_a_strict_error_is_reported_not_retried_and_the_set_stays_resumable(
        engine_source, tmp_path):
    src = _copy_with_the_last_file_broken(engine_source, tmp_path / "src")
    broken = sorted(src.rglob("*.jpg"))[-1]
    dst = tmp_path / "set"
    plan = plan_of(src, dst, strict=True)
    results = [run_shard(job) for job in plan.jobs]
    assert [r.state for r in results] == ["converted"] * 3 + ["failed"]
    with pytest.raises(ConvertError, match="unreadable image .* shards unfinished: "
                       + shard_name(3, 4)):
        finish_shards(plan, results)
    assert not (dst / MANIFEST_FILE).exists()
    broken.unlink()  # a changed source: its finished shards are refused, as without engine
    with pytest.raises(FileExistsError, match="converted from another source"):
        convert_folder(src, dst, shards=4, workers=1, progress=False, engine="ray")


def test_an_overwrite_keeps_the_finished_set_until_the_driver_moves_the_new_shards_in(
        engine_source, serial_engine_set, same_set, tmp_path):
    dst, resized = tmp_path / "set", tmp_path / "resized"
    convert_folder(engine_source, dst, shards=4, workers=1, progress=False)
    convert_folder(engine_source, resized, shards=4, workers=1, progress=False, max_side=6)
    plan = plan_shard_jobs(plan_conversion(engine_source, dst, shards=4, workers=1,
                                           progress=False, max_side=6), overwrite=True)
    results = [run_shard(job) for job in plan.jobs]
    assert {r.state for r in results} == {"converted"}
    same_set(dst, serial_engine_set)  # every new shard finished, none moved in yet
    report = finish_shards(plan, results)
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    same_set(dst, resized)
    assert not list(dst.rglob(".fastload-replacement"))


def test_an_engine_overwrite_that_stores_no_file_keeps_the_finished_set(engine_source,
                                                                        tmp_path):
    dst, unreadable = tmp_path / "set", tmp_path / "unreadable"
    convert_folder(engine_source, dst, shards=4, workers=1, progress=False)
    shutil.copytree(dst, tmp_path / "before")
    for k in range(4):
        (unreadable / f"c{k}").mkdir(parents=True)
        (unreadable / f"c{k}" / "x.jpg").write_bytes(b"not an image")
    plan = plan_shard_jobs(plan_conversion(unreadable, dst, shards=4, workers=1,
                                           progress=False), overwrite=True)
    report = finish_shards(plan, [run_shard(job) for job in plan.jobs])
    assert report.kept_old and (report.seen, report.stored) == (4, 0)
    assert (dst / MANIFEST_FILE).read_bytes() == (tmp_path / "before" / MANIFEST_FILE).read_bytes()
    assert verify_set(dst, full=True).ok
    assert _records(dst) == _records(tmp_path / "before")


def test_an_overwrite_whose_shard_fails_keeps_the_finished_set_whole(engine_source, tmp_path):
    src = _copy_with_the_last_file_broken(engine_source, tmp_path / "src")
    dst = tmp_path / "set"
    convert_folder(src, dst, shards=4, workers=1, progress=False)  # the broken file skipped
    shutil.copytree(dst, tmp_path / "before")
    plan = plan_shard_jobs(plan_conversion(src, dst, shards=4, workers=1, progress=False,
                                           strict=True), overwrite=True)
    results = [run_shard(job) for job in plan.jobs]
    assert [r.state for r in results] == ["converted"] * 3 + ["failed"]
    with pytest.raises(ConvertError, match="unreadable image"):
        finish_shards(plan, results)
    # the old set, whole (the failed shard's attempt stays, for a rerun to resume)
    assert (dst / MANIFEST_FILE).read_bytes() == (tmp_path / "before" / MANIFEST_FILE).read_bytes()
    assert verify_set(dst, full=True).ok
    assert _records(dst) == _records(tmp_path / "before")


def _records(path) -> list[tuple[bytes, int]]:
    reader = LMDBDataset(path).reader
    return [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
            for i in range(len(reader))]


def _copy_with_the_last_file_broken(source, src):
    for path in source.rglob("*.jpg"):
        (src / path.parent.name).mkdir(parents=True, exist_ok=True)
        (src / path.parent.name / path.name).write_bytes(path.read_bytes())
    sorted(src.rglob("*.jpg"))[-1].write_bytes(b"not a jpeg")  # the last file: shard 3
    return src


def test_engine_options_are_checked_before_the_source_is_read(tmp_path):
    with pytest.raises(ValueError, match="needs|pass shards=N"):
        convert_folder(tmp_path / "nothing", tmp_path / "dst", engine="ray")
    with pytest.raises(ValueError, match="drop shard_index=1"):
        convert_folder(tmp_path / "nothing", tmp_path / "dst", shards=2, shard_index=1,
                       engine="dask")
    with pytest.raises(ValueError, match="engine should be one of"):
        convert_folder(tmp_path / "nothing", tmp_path / "dst", shards=2, engine="flink")
