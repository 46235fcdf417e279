"""Sharding under torch.distributed: torchrun, 3 CPU ranks (gloo), 101 tiny JPEGs."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from PIL import Image

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "ddp_worker.py"
N, RANKS = 101, 3  # N % 3 == 2: one index of padding; 2 batches of 32 per rank, the last short


def write_images(root: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(N):
        folder = root / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=80)


def launch(folder: pathlib.Path, out: pathlib.Path) -> list[dict]:
    out.mkdir()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={RANKS}", str(SCRIPT), str(folder), str(out)],
                   check=True, timeout=240, capture_output=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]


@pytest.mark.slow
def test_torchrun_three_ranks_shard_every_index_once_with_documented_padding(tmp_path):
    write_images(tmp_path / "data")
    first = launch(tmp_path / "data", tmp_path / "run1")
    per_rank = -(-N // RANKS)  # 34: the order is padded by wrapping to 102
    orders = []
    for epoch in range(2):
        shards = [record["epochs"][epoch] for record in first]
        assert [len(s) for s in shards] == [per_rank] * RANKS
        assert all(record["batches"] == -(-per_rank // 32) for record in first)
        order = [shards[k % RANKS][k // RANKS] for k in range(per_rank * RANKS)]
        assert sorted(set(order)) == list(range(N))  # every index, each epoch
        duplicates = [i for i, count in Counter(order).items() if count > 1]
        assert duplicates == [order[0]] and order[N:] == order[:1]  # the padding rule
        orders.append(order)
    assert orders[0] != orders[1]  # set_epoch reshuffles
    second = launch(tmp_path / "data", tmp_path / "run2")
    assert [r["epochs"] for r in second] == [r["epochs"] for r in first]
    # the torch fallback shards the same way and takes the next epoch at each iter()
    assert all(r["fallback_batches"] == r["batches"] for r in first)
    for epoch in range(2):
        shards = [record["fallback"][epoch]["indices"] for record in first]
        assert [record["fallback"][epoch]["count"] for record in first] == [per_rank] * RANKS
        assert sorted(set(i for s in shards for i in s)) == list(range(N))
    assert first[0]["fallback"][0]["indices"] != first[0]["fallback"][1]["indices"]
