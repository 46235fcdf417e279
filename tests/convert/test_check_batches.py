"""``fastload convert``'s strict check in threads, four kept records a task
(``fastload.data.convert.check_batches``): every record gets its own verdict, in any number,
whether or not its batch filled up."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from damage import scramble_scan
from PIL import Image

from fastload.data.convert.check_batches import BATCH, CheckBatches
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


@pytest.mark.parametrize("count", [1, BATCH - 1, BATCH, 2 * BATCH + 1])
def test_each_record_gets_its_own_verdict_whatever_the_batch_holds(files, count):
    order = [i % len(files) for i in range(count)]
    random.Random(count).shuffle(order)
    batches = CheckBatches(workers=2)
    try:
        checked = [batches.add(_kept(files[i])) for i in order]
        results = [record.get() for record in checked]  # the last batch is never full
    finally:
        batches.shutdown()
    for i, result in zip(order, results, strict=True):
        if i < 7:
            assert result[0] == "ok" and bytes(result[1]) == bytes(_kept(files[i])[1])
        else:
            assert result[0] == "skip" and "damaged JPEG data" in result[1]


def test_a_record_is_ready_only_once_its_batch_was_checked(files):
    batches = CheckBatches(workers=1)
    try:
        first = batches.add(_kept(files[0]))
        assert not first.ready()  # waiting for its batch to fill
        rest = [batches.add(_kept(files[i])) for i in range(1, BATCH)]  # full: submitted
        assert first.get()[0] == "ok" and first.ready()
        assert all(record.get()[0] == "ok" for record in rest)
    finally:
        batches.shutdown()


def test_shutting_down_checks_the_records_gathered_so_far(files):
    batches = CheckBatches(workers=2)
    gathered = [batches.add(_kept(files[i])) for i in (1, 7)]
    batches.shutdown()
    assert [record.get()[0] for record in gathered] == ["ok", "skip"]
