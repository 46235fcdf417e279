"""What a rank pays to open a sharded set: the manifest and labels once, then each shard on
first touch (its sidecar, labels and LMDB environment). Prints the measured figures::

    .venv/bin/python -m pytest -q -s -p no:cacheprovider benchmarks/test_set_open.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from PIL import Image

from fastload.data.convert import convert_folder
from fastload.data.shards import ShardedReader


def test_opening_a_set_and_its_shards(request, tmp_path, capsys):
    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    shards, per_shard = (4, 2) if smoke else (64, 4)
    rng = np.random.default_rng(0)
    for i in range(shards * per_shard):
        folder = tmp_path / "src" / f"c{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
            folder / f"{i:05d}.jpg")
    convert_folder(tmp_path / "src", tmp_path / "set", workers=1, progress=False, shards=shards)
    opens, touches = [], []
    for _ in range(5):
        start = time.perf_counter()
        reader = ShardedReader(tmp_path / "set")
        opens.append(time.perf_counter() - start)
        for k in range(shards):
            start = time.perf_counter()
            reader.image_bytes(k * per_shard)
            touches.append(time.perf_counter() - start)
        assert reader.opened_shards == list(range(shards))
        reader.close()
    with capsys.disabled():
        print(f"\nset of {shards} shards: open (manifest + labels) "
              f"{statistics.median(opens) * 1e3:.2f} ms median; first read of a shard "
              f"(sidecar + labels + LMDB open) {statistics.median(touches) * 1e3:.2f} ms median, "
              f"{max(touches) * 1e3:.2f} ms worst")
