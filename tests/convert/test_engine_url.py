"""The engine core with a URL destination, on a real S3 server (SeaweedFS), without an
engine: shard jobs run in any order, any number of times or at once upload the set the
serial conversion makes; a finished shard is never written again. (A task
SIGKILLed mid-shard and retried: tests/convert/test_engine_ray.py, on a real engine.)"""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import shutil
import time

from seaweed import BUCKET, client

from fastload.data.convert.destination import REPLACEMENT
from fastload.data.convert.engine import ShardBusy, run_shard
from fastload.data.convert.plan import plan_conversion
from fastload.data.remote.engine_tasks import finish_url_shards, plan_url_shard_jobs


def url_plan(src, url, storage_options, **options):
    options = {"shards": 4, "workers": 1, "progress": False, **options}
    return plan_url_shard_jobs(plan_conversion(src, url, storage_options=storage_options,
                                               **options))


def objects(s3_server, url: str) -> dict:
    """Every object under ``url`` with its ETag and modification time."""
    found = client(s3_server).find(url.removeprefix("s3://"), detail=True)
    return {key: (info.get("ETag"), info.get("LastModified")) for key, info in found.items()}


def test_url_jobs_run_twice_shuffled_with_a_lost_result_upload_the_serial_set(
        s3_server, s3_options, engine_source, serial_engine_set, same_set, download_set,
        tmp_path):
    url = f"s3://{BUCKET}/engine/twice.set"
    plan = url_plan(engine_source, url, s3_options, staging=tmp_path / "staging")
    jobs = list(plan.jobs)
    random.Random(0).shuffle(jobs)
    first = [run_shard(job) for job in jobs]
    second = [run_shard(job) for job in reversed(jobs)]
    assert {r.state for r in first} == {"converted"}
    assert {r.state for r in second} == {"done"}
    report = finish_url_shards(plan, first[1:] + [first[2]])  # one lost, one duplicated
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    assert report.manifest["num_shards"] == 4
    same_set(download_set(url), serial_engine_set)
    assert not list((tmp_path / "staging").iterdir())  # every attempt folder removed


def test_a_url_job_resubmitted_after_the_end_rewrites_nothing(
        s3_server, s3_options, engine_source, tmp_path):
    url = f"s3://{BUCKET}/engine/resubmitted.set"
    plan = url_plan(engine_source, url, s3_options)
    finish_url_shards(plan, [run_shard(job) for job in plan.jobs])
    before = objects(s3_server, url)
    time.sleep(1.1)  # S3 times have whole seconds: a rewrite would show
    assert run_shard(plan.jobs[1]).state == "done"
    assert objects(s3_server, url) == before


def _attempt(job, start):
    start.wait()
    try:
        return run_shard(job).state
    except ShardBusy:
        return "busy"


def test_two_url_attempts_of_one_shard_at_once_leave_one_valid_shard(
        s3_server, s3_options, engine_source, serial_engine_set, same_set, download_set,
        tmp_path):
    url = f"s3://{BUCKET}/engine/raced.set"
    plan = url_plan(engine_source, url, s3_options)
    # two machines: each attempt stages in its own folder, both upload
    twins = [dataclasses.replace(plan.jobs[0], staging=str(tmp_path / f"machine{i}"))
             for i in range(2)]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(2) as pool:
            both = [pool.apply_async(_attempt, (job, start)) for job in twins]
            start.set()
            states = sorted(r.get(timeout=120) for r in both)
    assert states.count("converted") >= 1 and set(states) <= {"converted", "done", "busy"}
    report = finish_url_shards(plan, [run_shard(job) for job in plan.jobs])
    assert report.manifest["count"] == 24
    same_set(download_set(url), serial_engine_set)


def _serial(jobs, on_result, *, address, retries, cpus):
    """The jobs one after another in this process (an engine's adapter without an engine)."""
    for job in jobs:
        on_result(run_shard(job))


def test_a_url_overwrite_on_an_engine_keeps_the_finished_set_until_the_new_one_is_whole(
        s3_server, s3_options, engine_source, serial_engine_set, same_set, download_set,
        tmp_path):
    from fastload.data.convert.folder import ConvertError, convert_folder
    from fastload.data.remote.engine_tasks import convert_url_on_engine

    url = f"s3://{BUCKET}/engine/overwritten.set"
    convert_folder(engine_source, url, shards=4, workers=1, progress=False,
                   storage_options=s3_options)
    broken = tmp_path / "broken"
    for path in sorted(engine_source.rglob("*.jpg")):
        (broken / path.parent.name).mkdir(parents=True, exist_ok=True)
        (broken / path.parent.name / path.name).write_bytes(path.read_bytes())
    sorted(broken.rglob("*.jpg"))[-1].write_bytes(b"not a jpeg")  # in the last shard
    options = {"shards": 4, "workers": 1, "progress": False, "storage_options": s3_options}
    try:
        convert_url_on_engine(plan_conversion(broken, url, strict=True, **options), _serial,
                              overwrite=True)
    except ConvertError as exc:
        assert "unreadable image" in str(exc)
    else:
        raise AssertionError("the strict overwrite should stop at the broken file")
    down = download_set(url)  # the finished set as it was, beside the stopped replacement
    shutil.rmtree(down / REPLACEMENT)
    same_set(down, serial_engine_set)
    shutil.rmtree(down)
    resized = tmp_path / "resized"
    convert_folder(engine_source, resized, shards=4, workers=1, progress=False, max_side=6)
    report = convert_url_on_engine(plan_conversion(engine_source, url, max_side=6, **options),
                                   _serial, overwrite=True)
    assert report.path == url and report.manifest["num_shards"] == 4
    same_set(download_set(url), resized)


def test_a_url_overwrite_on_an_engine_whose_move_stopped_is_finished_without_converting(
        s3_server, s3_options, engine_source, same_set, download_set, tmp_path):
    from fastload.data.convert.folder import convert_folder
    from fastload.data.remote.engine_tasks import convert_url_on_engine

    url = f"s3://{BUCKET}/engine/moved.set"
    options = {"shards": 4, "workers": 1, "progress": False, "storage_options": s3_options}
    convert_folder(engine_source, url, **options)
    convert_folder(engine_source, f"{url}/{REPLACEMENT}", max_side=6, **options)
    client(s3_server).rm(url.removeprefix("s3://") + "/fastload-set.json")  # the move's start
    report = convert_url_on_engine(plan_conversion(engine_source, url, max_side=6, **options),
                                   _serial, overwrite=True)
    assert report.stored == 0 and report.finished_shards == [0, 1, 2, 3]
    resized = tmp_path / "resized"
    convert_folder(engine_source, resized, shards=4, workers=1, progress=False, max_side=6)
    same_set(download_set(url), resized)
