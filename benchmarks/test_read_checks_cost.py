"""Cost of the read-time integrity checks: the per-record CRC-32 and the stderr watch.

Every LMDB record is checked against ``checksums.crc32`` before its bytes reach a decoder,
and while an epoch runs the decoder's stderr goes through the watch of
``fastload.loader.decoder_log`` (one fence per batch). Measured side by side in one run:

* the CRC-32 of a batch of 64 records (microseconds per batch) against the time the loader
  takes to make a batch of 64 (the (d) row's work: LMDB read, decode, RandomResizedCrop,
  flip, normalise), as a share;
* whole epochs of ``fastload.DataLoader`` over the same ``LMDBDataset`` with the checks on
  and with the checksums switched off (``reader.checksums = None``), rounds alternating, as
  a ratio of images/s (median and range over rounds).

Also the alternatives for corrupt-JPEG detection in folders: the watch's fence per batch
against a strict ``simplejpeg`` decode of every image of the batch (full and 1/8 scale).

Run: ``pytest benchmarks/test_read_checks_cost.py -s`` (``FASTLOAD_BENCH_IMAGES=N`` for
the tree size; ``--benchmark-disable`` for a smoke run).
"""

from __future__ import annotations

import statistics
import time

import pytest
import torchvision.transforms as T

import fastload
from fastload.data.convert import convert_folder
from fastload.data.format import crc32

BATCH = 64
ROUNDS = 5

TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@pytest.fixture(scope="module")
def lmdb_tree(convert_tree, tmp_path_factory):
    return convert_folder(convert_tree, tmp_path_factory.mktemp("checks") / "db",
                          progress=False).path


def _epoch(loader) -> tuple[float, int]:
    start = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return time.perf_counter() - start, images


def test_read_checks_cost_side_by_side(lmdb_tree, benchmark):
    dataset = fastload.LMDBDataset(lmdb_tree, transform=TRAIN)
    reader = dataset.reader
    checksums = reader.checksums
    values = [reader.record(i) for i in range(min(len(reader), BATCH))]
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0,
                                 num_workers=2, drop_last=False)
    _epoch(loader)  # warm-up: graph built, page cache filled
    on_rates, off_rates, ratios = [], [], []
    for _ in range(ROUNDS):
        reader.checksums = checksums
        seconds, images = _epoch(loader)
        on = images / seconds
        reader.checksums = None
        seconds, images = _epoch(loader)
        off = images / seconds
        on_rates.append(on)
        off_rates.append(off)
        ratios.append(on / off)
    reader.checksums = checksums
    reps = 200
    start = time.perf_counter()
    for _ in range(reps):
        for value in values:
            crc32(value)
    crc_us = 1e6 * (time.perf_counter() - start) / reps * BATCH / len(values)
    batch_ms = 1e3 * BATCH / statistics.median(on_rates)
    info = {
        "crc_us_per_batch_of_64": crc_us,
        "loader_ms_per_batch_of_64": batch_ms,
        "crc_share_of_batch": crc_us / 1e3 / batch_ms,
        "imgs_per_s_checks_on_median": statistics.median(on_rates),
        "imgs_per_s_checks_off_median": statistics.median(off_rates),
        "ratio_on_over_off_median": statistics.median(ratios),
        "ratio_on_over_off_range": [min(ratios), max(ratios)],
    }
    benchmark.extra_info.update(info)
    print(f"\nCRC-32 of a batch of {BATCH}: {crc_us:.0f} us = {100 * info['crc_share_of_batch']:.2f}% "
          f"of the loader's {batch_ms:.1f} ms per batch; epochs with checks / without: "
          f"median {info['ratio_on_over_off_median']:.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f}) over {ROUNDS} alternating rounds")
    benchmark.extra_info.update(_detection_alternatives(reader, reps=20))
    print("corrupt-JPEG detection per batch of 64: stderr fence {fence_us_per_batch:.0f} us; "
          "a strict simplejpeg decode of every image {strict_ms_per_batch:.1f} ms "
          "(1/8 scale {strict_eighth_ms_per_batch:.1f} ms)".format(**benchmark.extra_info))
    benchmark.pedantic(lambda: [crc32(v) for v in values], rounds=3, iterations=1)


def _detection_alternatives(reader, reps: int) -> dict[str, float]:
    """The stderr watch's fence per batch against strict decodes of the batch's images."""
    import simplejpeg

    from fastload.loader.decoder_log import watch

    images = [bytes(reader.image_bytes(i)[0]) for i in range(min(len(reader), BATCH))]
    scale = BATCH / len(images)
    handle = watch()
    try:
        start = time.perf_counter()
        for _ in range(reps * 10):
            handle.fence()
        fence_us = 1e6 * (time.perf_counter() - start) / (reps * 10)
    finally:
        handle.close()
    start = time.perf_counter()
    for _ in range(reps):
        for data in images:
            simplejpeg.decode_jpeg(data, strict=True)
    strict_ms = 1e3 * (time.perf_counter() - start) / reps * scale
    start = time.perf_counter()
    for _ in range(reps):
        for data in images:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            simplejpeg.decode_jpeg(data, strict=True, min_height=height // 8,
                                   min_width=width // 8)
    eighth_ms = 1e3 * (time.perf_counter() - start) / reps * scale
    return {"fence_us_per_batch": fence_us, "strict_ms_per_batch": strict_ms,
            "strict_eighth_ms_per_batch": eighth_ms}
