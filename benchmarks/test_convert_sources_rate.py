"""Conversion rate of each source kind against the folder path, on the same images.

Run (prints the table it measured)::

    .venv/bin/python -m pytest -q -s -p no:cacheprovider benchmarks/test_convert_sources_rate.py

``FASTLOAD_BENCH_IMAGES=N`` sets the number of images (default 1,200: the 80 generated
ImageNet-like photos of ``convert_tree``'s kind, 300-800 px, about 80 KB, each copy made
distinct by a numbered JPEG comment so that parquet cannot deduplicate them);
``--benchmark-disable`` (as ``make test`` runs it) is a one-round smoke run on a dozen small
images. The same images are written as an ImageFolder tree, a JSONL list of its files,
WebDataset tar shards, parquet files (both 200 samples a shard/file, row groups of 100)
and a ``datasets`` ``save_to_disk`` folder (``source_kinds.py``). Each is converted in
keep-bytes mode (every JPEG stored as it is, ``check="markers"``) with ``workers=1``; ``ROUNDS`` alternating rounds,
each run from a flushed page cache with the source in it (``os.sync()`` and the previous
output removed, untimed). Reported: the best time of each, as images/s, MB/s of source
images, and its ratio to the folder's best time; and the share of the time spent listing
the source (``list_source`` alone, timed once).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from fastload.data.convert.folder import convert_folder
from fastload.data.convert.source_list import list_source

ROUNDS = 5
PER_SHARD = 200
RUNS = {  # name -> (source kind, workers)
    "folder": ("folder", 1), "jsonl": ("jsonl", 1), "webdataset": ("webdataset", 1),
    "parquet": ("parquet", 1), "datasets": ("datasets", 1),
}


def _numbered(photo: bytes, i: int) -> bytes:
    body = b"fastload record %08d" % i
    return photo[:2] + b"\xff\xfe" + (len(body) + 2).to_bytes(2, "big") + body + photo[2:]


def _items(request, tmp_path) -> list[tuple[int, bytes]]:
    from fastload.data.pictures.synth import synthesize

    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    count = int(os.environ.get("FASTLOAD_BENCH_IMAGES", 12 if smoke else 1200))
    sizes = {"min_side": 64, "max_side": 160} if smoke else {}
    synthesize(tmp_path / "photos", train=min(count, 80), val=0, classes=4, seed=0, workers=1,
               **sizes)
    photos = sorted((tmp_path / "photos" / "train").rglob("*.jpg"))
    labels = {p: sorted({q.parent.name for q in photos}).index(p.parent.name) for p in photos}
    return [(labels[photos[i % len(photos)]], _numbered(photos[i % len(photos)].read_bytes(), i))
            for i in range(count)]


def _convert(src, dst, workers: int) -> float:
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    os.sync()
    start = time.perf_counter()
    # markers only: the strict decode (the default) would hide what the source kind costs
    convert_folder(src, dst, workers=workers, progress=False, check="markers")
    return time.perf_counter() - start


def test_conversion_rate_of_each_source_kind_against_the_folder(request, tmp_path, capsys):
    for module in ("pyarrow", "datasets"):
        pytest.importorskip(module)
    from source_kinds import write_source

    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    items = _items(request, tmp_path)
    megabytes = sum(len(data) for _, data in items) / 1e6
    sources = {kind: write_source(kind, items, tmp_path / kind, per_shard=PER_SHARD)
               for kind in {kind for kind, _ in RUNS.values()}}
    load_before = os.getloadavg()[0]
    best = {name: float("inf") for name in RUNS}
    for _ in range(1 if smoke else ROUNDS):
        for name, (kind, workers) in RUNS.items():
            seconds = _convert(sources[kind], tmp_path / "out", workers)
            best[name] = min(best[name], seconds)
    listing = {}
    for name, (kind, workers) in RUNS.items():
        start = time.perf_counter()
        list_source(sources[kind], workers=workers)
        listing[name] = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    lines = [f"\nconvert rate by source kind, {len(items)} images ({megabytes:.0f} MB), keep-bytes, "
             f"best of {1 if smoke else ROUNDS} rounds, {os.cpu_count()} cores, load average "
             f"{load_before:.1f} -> {load_after:.1f}:"]
    for name, seconds in best.items():
        lines.append(f"  {name:22s} {seconds:6.3f} s {len(items) / seconds:7.0f} img/s "
                     f"{megabytes / seconds:6.1f} MB/s  {best['folder'] / seconds:4.2f}x the "
                     f"folder's rate; listing {listing[name] / seconds:4.0%} of the time")
    with capsys.disabled():
        print("\n".join(lines))
    assert all(seconds < float("inf") for seconds in best.values())
