"""Two gloo ranks under torchrun train one model: metrics summed over ranks, replicas equal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fastload.train.checkpoint import load_checkpoint


@pytest.mark.slow
def test_torchrun_two_gloo_ranks_shard_data_and_reduce_metrics(synth_lmdb_data, tmp_path):
    log, ckpt = tmp_path / "ddp.jsonl", tmp_path / "ddp.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "fastload.tools.cli", "finetune", str(synth_lmdb_data), "--loader", "fastload",
           "--img-size", "32", "--batch-size", "8", "--accum-steps", "2", "--epochs", "2",
           "--workers", "1", "--device", "cpu", "--no-progress", "--log-file", str(log),
           "--checkpoint", str(ckpt)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    start = records[0]
    assert start["event"] == "start" and start["rank_count"] == 2
    epochs = [r for r in records if r["event"] == "epoch"]
    # 48 images over 2 ranks: 24 each, 3 micro-batches of 8, 2 optimizer steps per epoch.
    assert [e["images"] for e in epochs] == [48, 48]
    assert [e["steps"] for e in epochs] == [2, 2]
    assert epochs[-1]["val_top1"] is not None and epochs[-1]["val_top1"] > 0.25
    assert done.stdout.count("| epoch |") == 1  # only rank 0 prints the table
    state = load_checkpoint(ckpt)
    assert state["step"] == 4
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
