"""Lightning (DDP, 2 CPU processes) and Accelerate (under torchrun) keep the DALI path and
see every image once per epoch across ranks."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

SCRIPTS = pathlib.Path(__file__).parents[1] / "scripts"
N, RANKS = 22, 2  # 11 per rank: the last batch of 4 is short


def write_images(root: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(N):
        folder = root / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (16, 20, 3), dtype=np.uint8)).save(
            folder / f"{i:03d}.jpg", quality=85)


def assert_every_image_once_per_epoch(out: pathlib.Path) -> list[dict]:
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]
    assert all(r["fallback_reason"] is None for r in records)
    for epoch in range(2):
        seen = [i for r in records for i in r["epochs"][epoch]]
        assert sorted(seen) == list(range(N))
    assert records[0]["epochs"][0] != records[0]["epochs"][1]  # reshuffled per epoch
    return records


@pytest.mark.slow
def test_lightning_ddp_trainer_keeps_the_fast_path_and_shards(tmp_path):
    pytest.importorskip("pytorch_lightning")
    write_images(tmp_path / "data")
    (tmp_path / "out").mkdir()
    subprocess.run([sys.executable, str(SCRIPTS / "lightning_worker.py"), str(tmp_path / "data"),
                    str(tmp_path / "out")], check=True, timeout=300, capture_output=True,
                   cwd=tmp_path)
    assert_every_image_once_per_epoch(tmp_path / "out")


@pytest.mark.slow
def test_accelerate_prepare_under_torchrun_keeps_the_fast_path_and_shards(tmp_path):
    pytest.importorskip("accelerate")
    write_images(tmp_path / "data")
    (tmp_path / "out").mkdir()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={RANKS}", str(SCRIPTS / "accelerate_worker.py"),
                    str(tmp_path / "data"), str(tmp_path / "out")],
                   check=True, timeout=300, capture_output=True)
    records = assert_every_image_once_per_epoch(tmp_path / "out")
    assert records[0]["type"] == "DataLoader"  # prepare() hands fastload's loader back as is
