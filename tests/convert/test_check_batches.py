"""``fastload convert``'s strict check, kept records gathered into tasks
(``fastload.data.convert.check_batches``): every record gets its own verdict, in any number,
whatever task it went in and whichever thread checked it (a check thread, or the thread
waiting for a verdict, a few records at a time); the threads end when asked and start again
when needed."""

from __future__ import annotations

import io
import random
import threading
import time

import numpy as np
import pytest
from damage import scramble_scan
from PIL import Image

from fastload.data.convert import check_batches
from fastload.data.convert.check_batches import CheckBatches
from fastload.data.format.constants import crc32
from fastload.data.format.datum import encode_datum


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def _kept(data: bytes) -> tuple:
    record = encode_datum(data, 0, 64, 80, 3)
    return ("ok", record, crc32(record), "kept")


@pytest.fixture(scope="module")
def files() -> list[bytes]:
    intact = [_jpeg(seed) for seed in range(7)]
    return intact + [scramble_scan(intact[0]), scramble_scan(intact[3])]


LEAST, MOST = 3, 5  # small tasks: every path of the gathering in a few records


def _check_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fastload-check")]


@pytest.mark.parametrize("steal", [1, 2, MOST])
@pytest.mark.parametrize("count", [1, LEAST - 1, LEAST, MOST, 3 * MOST + 1])
def test_each_record_gets_its_own_verdict_whatever_task_it_went_in(files, count, steal):
    order = [i % len(files) for i in range(count)]
    random.Random(count).shuffle(order)
    batches = CheckBatches(workers=2, least=LEAST, most=MOST, steal=steal)
    try:
        checked = [batches.add(_kept(files[i])) for i in order]
        results = [record.get() for record in checked]  # the last task is never full
    finally:
        batches.shutdown()
    for i, result in zip(order, results, strict=True):
        if i < 7:
            assert result[0] == "ok" and bytes(result[1]) == bytes(_kept(files[i])[1])
        else:
            assert result[0] == "skip" and "damaged JPEG data" in result[1]


def test_a_task_starts_once_enough_records_are_gathered(files):
    batches = CheckBatches(workers=1, least=LEAST, most=MOST)
    try:
        first = batches.add(_kept(files[0]))
        assert not first.ready()  # gathered, no task yet
        rest = [batches.add(_kept(files[i])) for i in range(1, LEAST)]  # enough: started
        assert first.get()[0] == "ok" and first.ready()
        assert all(record.get()[0] == "ok" for record in rest)
    finally:
        batches.shutdown()


def test_asking_for_a_verdict_starts_the_task_of_the_records_gathered(files):
    batches = CheckBatches(workers=1, least=LEAST, most=MOST)
    try:
        lone = batches.add(_kept(files[7]))
        assert lone.get()[0] == "skip" and lone.ready()
    finally:
        batches.shutdown()


def test_shutting_down_checks_the_records_gathered_so_far(files):
    batches = CheckBatches(workers=2, least=LEAST, most=MOST)
    gathered = [batches.add(_kept(files[i])) for i in (1, 7)]
    batches.shutdown()
    assert [record.get()[0] for record in gathered] == ["ok", "skip"]
    assert not _check_threads()


def test_stopped_threads_end_and_start_again_for_the_next_records(files):
    batches = CheckBatches(workers=2, least=LEAST, most=MOST)
    try:
        before = [batches.add(_kept(files[i])) for i in range(LEAST)]
        batches.stop_threads()  # as before a fork: what was gathered is checked first
        assert all(record.ready() for record in before) and not _check_threads()
        after = [batches.add(_kept(files[i])) for i in (2, 8)]
        assert [record.get()[0] for record in after] == ["ok", "skip"]
    finally:
        batches.shutdown()
    assert not _check_threads()


@pytest.mark.parametrize(("workers", "threads"), [(1, 1), (2, 1), (4, 3)])
def test_workers_minus_one_threads_check_beside_the_reader(files, workers, threads):
    batches = CheckBatches(workers=workers, least=1, most=1)
    try:
        assert batches.add(_kept(files[0])).get()[0] == "ok"
        assert len(_check_threads()) == threads
    finally:
        batches.shutdown()
    assert not _check_threads()


def _wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


@pytest.fixture
def held_check_threads(monkeypatch):
    """The check threads' tasks wait until the returned event is set (the real check then
    runs); the thread each task ran in is listed."""
    release, ran_in = threading.Event(), []
    check = check_batches.kept_jpegs_problems

    def held(jpegs):
        ran_in.append(threading.current_thread())
        if threading.current_thread() is not threading.main_thread():
            release.wait(timeout=30)
        return check(jpegs)

    monkeypatch.setattr(check_batches, "kept_jpegs_problems", held)
    yield release, ran_in
    release.set()


def test_the_thread_waiting_for_a_verdict_checks_queued_records_itself(files, held_check_threads):
    release, ran_in = held_check_threads
    batches = CheckBatches(workers=2, least=1, most=3, steal=2)
    try:
        records = [batches.add(_kept(files[0]))]
        _wait_until(lambda: ran_in)  # the one check thread holds the first task
        records += [batches.add(_kept(files[i])) for i in (1, 7, 2, 3, 8, 4)]
        # this thread checks the queued ones, two records at a time, until its verdict is in
        assert records[-1].get()[0] == "ok"
        assert threading.main_thread() in ran_in
        assert [record.ready() for record in records[1:]] == [True] * 6
        release.set()
        assert [record.get()[0] for record in records] == [
            "ok", "ok", "skip", "ok", "ok", "skip", "ok"]
    finally:
        release.set()
        batches.shutdown()


def test_a_cancelled_record_raises_instead_of_waiting(files, held_check_threads):
    release, ran_in = held_check_threads
    batches = CheckBatches(workers=2, least=1, most=1)
    records = [batches.add(_kept(files[0]))]
    _wait_until(lambda: ran_in)  # the thread holds the first
    records += [batches.add(_kept(files[i])) for i in (1, 2)]
    threading.Timer(0.2, release.set).start()
    batches.shutdown(cancel_futures=True)  # the queued tasks are dropped, the first ends
    assert records[0].get()[0] == "ok"
    for record in records[1:]:
        with pytest.raises(RuntimeError, match="stopped before"):
            record.get()
    assert not _check_threads()


def test_records_gathered_but_not_started_are_dropped_on_cancel(files):
    batches = CheckBatches(workers=2, least=LEAST, most=MOST)
    gathered = [batches.add(_kept(files[i])) for i in range(LEAST - 1)]  # in no task yet
    batches.shutdown(cancel_futures=True)
    for record in gathered:
        with pytest.raises(RuntimeError, match="stopped before"):
            record.get()
    assert not _check_threads()


def test_verdicts_hold_after_a_thread_frees_its_check_caches(files):
    from fastload.data.format.jpeg_damage import release_thread_cache, strict_decode_errors

    first = strict_decode_errors(files * 2)
    release_thread_cache()
    release_thread_cache()  # nothing left to free: no error
    assert strict_decode_errors(files * 2) == first
    assert [error is None for error in first] == [True] * 7 + [False] * 2 + [True] * 7 + [False] * 2


def _reader_waits_on_the_held_thread(files, held_check_threads, end_input: bool):
    """Records 0-1 in the check thread's (held) task, 2-7 queued two a task; the reader
    asks for record 0's verdict (the thread is released 0.3 s later): which thread checked
    each task, once every verdict is in."""
    release, ran_in = held_check_threads
    batches = CheckBatches(workers=2, least=2, most=2, steal=1)
    try:
        records = [batches.add(_kept(files[i])) for i in (0, 1)]
        _wait_until(lambda: ran_in)  # the one check thread holds the first task
        records += [batches.add(_kept(files[i])) for i in (2, 7, 3, 4, 8, 5)]
        if end_input:
            batches.end_input()
        threading.Timer(0.3, release.set).start()
        assert records[0].get()[0] == "ok"
        _wait_until(lambda: all(record.ready() for record in records))
        assert [record.get()[0] for record in records] == [
            "ok", "ok", "ok", "skip", "ok", "ok", "skip", "ok"]
        return ["reader" if thread is threading.main_thread() else "thread" for thread in ran_in]
    finally:
        release.set()
        batches.shutdown()


def test_the_waiting_reader_leaves_the_threads_a_task_while_they_check_its_record(
        files, held_check_threads):
    # one record at a time while two would stay queued; the thread takes the last two
    assert _reader_waits_on_the_held_thread(files, held_check_threads, end_input=False) == [
        "thread", "reader", "reader", "reader", "reader", "thread"]


def test_after_the_input_ends_the_waiting_reader_checks_every_queued_record(
        files, held_check_threads):
    assert _reader_waits_on_the_held_thread(files, held_check_threads, end_input=True) == [
        "thread"] + ["reader"] * 6


def test_at_the_input_end_the_queued_records_are_checked_steal_at_a_time(files, monkeypatch):
    release, sizes = threading.Event(), []
    check = check_batches.kept_jpegs_problems

    def held(jpegs):
        sizes.append(len(jpegs))
        release.wait(timeout=30)
        return check(jpegs)

    monkeypatch.setattr(check_batches, "kept_jpegs_problems", held)
    batches = CheckBatches(workers=2, least=2, most=4, steal=2)
    try:
        records = [batches.add(_kept(files[i])) for i in (0, 1)]
        _wait_until(lambda: sizes)  # the one check thread holds the first task
        records += [batches.add(_kept(files[i % len(files)])) for i in range(2, 10)]
        batches.end_input()  # two queued tasks of four
        release.set()
        _wait_until(lambda: all(record.ready() for record in records))
        assert sizes == [2, 2, 2, 2, 2]  # the thread took them two at a time
    finally:
        release.set()
        batches.shutdown()
