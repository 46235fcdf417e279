"""``fastload convert``'s strict check in threads, kept records gathered into tasks
(``fastload.data.convert.check_batches``): every record gets its own verdict, in any number,
whatever task it went in; the threads end when asked and start again when needed."""

from __future__ import annotations

import io
import random
import threading

import numpy as np
import pytest
from damage import scramble_scan
from PIL import Image

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


@pytest.mark.parametrize("count", [1, LEAST - 1, LEAST, MOST, 3 * MOST + 1])
def test_each_record_gets_its_own_verdict_whatever_task_it_went_in(files, count):
    order = [i % len(files) for i in range(count)]
    random.Random(count).shuffle(order)
    batches = CheckBatches(workers=2, least=LEAST, most=MOST)
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
