"""What a rank pays to open a sharded set, checks included: at open the manifest (schema,
paths confined to the set, ranges) and the set's labels (count and range); at each shard's
first read its sidecar against the manifest (identity, count, checksum-file CRC-32, labels)
and its LMDB environment. Sets of 64 and 1,000 shards; prints the measured figures::

    .venv/bin/python -m pytest -q -s -p no:cacheprovider benchmarks/test_set_open.py

(``--benchmark-disable`` runs a 4-shard smoke version.)
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.sets.shards import ShardedReader


@pytest.mark.parametrize("shards", [64, 1000])
def test_opening_a_set_and_its_shards(request, tmp_path, capsys, shards):
    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    shards, per_shard = (4, 2) if smoke else (shards, 4)
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
    size = (tmp_path / "set" / "fastload-set.json").stat().st_size
    with capsys.disabled():
        print(f"\nset of {shards} shards ({size / 1024:.0f} KiB manifest): open (manifest, "
              f"paths, ranges, labels) {statistics.median(opens) * 1e3:.2f} ms median = "
              f"{statistics.median(opens) / shards * 1e6:.1f} us per shard; first read of a "
              f"shard (its files confined, sidecar against the manifest, labels, checksum-file "
              f"CRC-32, LMDB open) {statistics.median(touches) * 1e3:.2f} ms median, "
              f"{max(touches) * 1e3:.2f} ms worst")
