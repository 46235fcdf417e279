"""A run stopped mid-epoch and resumed in a new process repeats the uninterrupted losses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from fastload.train.checkpoint import load_checkpoint, save_checkpoint
from fastload.train.finetune import FinetuneConfig, finetune


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["torch", "fastload"])
def test_resume_mid_epoch_in_new_process_matches_uninterrupted_losses(two_epoch_run, tmp_path, loader):
    # 48 images, batch 8, 2 micro-batches per step: 3 steps per epoch, 6 in all (fp32, CPU).
    common, full = two_epoch_run(loader)
    ckpt = tmp_path / "run.pt"
    first = finetune(FinetuneConfig(**common, max_steps=4, checkpoint=str(ckpt)))
    assert first.losses == full.losses[:8]
    state = load_checkpoint(ckpt)
    assert state["step"] == 4 and state["loader"]["epoch"] == 1
    assert state["loader"]["micro_step"] == 2  # stopped inside epoch 2

    def run_cli(log, *extra):
        args = ["finetune", common["data"], "--loader", loader, "--img-size", "32",
                "--batch-size", "8", "--accum-steps", "2", "--epochs", "2", "--workers", "0",
                "--warmup-steps", "2", "--device", "cpu", "--no-progress", "--log", str(log),
                *extra]
        done = subprocess.run([sys.executable, "-m", "fastload.tools.cli", *args], check=True,
                              capture_output=True, text=True)
        assert "| epoch |" in done.stdout
        return [json.loads(line) for line in log.read_text().splitlines()]

    records = run_cli(tmp_path / "resumed.jsonl", "--resume", str(ckpt))
    assert [r["event"] for r in records] == ["start", "step", "step", "epoch", "end"]
    steps = [r for r in records if r["event"] == "step"]
    assert [r["step"] for r in steps] == [5, 6]
    # Each step logs the loss of its last micro-batch. The uninterrupted run it must repeat
    # runs in a fresh process too: this process's float state (its threads, what earlier
    # tests in it set) is not a new process's, and the contract is about new processes.
    uninterrupted = run_cli(tmp_path / "full.jsonl")
    full_steps = {r["step"]: r["loss"] for r in uninterrupted if r["event"] == "step"}
    # the same batches in the same order; the float sums may differ in the last bits where
    # the BLAS library picks its thread count by the machine's load (MKL_DYNAMIC)
    assert [r["loss"] for r in steps] == pytest.approx([full_steps[5], full_steps[6]],
                                                       rel=1e-5, abs=1e-6)
    assert abs(full_steps[5] - full.losses[9]) < 1e-4  # and it is this process's run
    assert records[3]["images"] == 32 and records[-1]["val_top1"] == uninterrupted[-1]["val_top1"]
    assert load_checkpoint(ckpt)["step"] == 6


def test_checkpoint_write_is_atomic_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(2)}, "step": 1})
    save_checkpoint(path, {"model": {"w": torch.zeros(2)}, "step": 2})
    assert load_checkpoint(path)["step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left
    torch.save({"w": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a fastload fine-tuning checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_checkpoint_layout_round_trips_through_pack_and_read(tmp_path):
    from fastload.train.checkpoint import pack_checkpoint, read_checkpoint

    state = pack_checkpoint(
        model={"w": torch.ones(2)}, optimizer={"state": {}}, scaler={}, scheduler={"last": 3},
        epoch=1, micro_step=2, loader_kind="fastload", batch_size=8, seed=5,
        loader_state={"epoch": 1}, step=4, skipped_total=1, classes=["a", "b"],
        config={"model": "vit", "img_size": 32})
    assert state["loader"]["consumed"] == 16  # micro-batches done x batch size
    save_checkpoint(tmp_path / "c.pt", state)
    back = read_checkpoint(tmp_path / "c.pt")
    assert (back.epoch, back.micro_step, back.step, back.skipped_total) == (1, 2, 4, 1)
    assert back.loader_kind == "fastload" and back.loader_state == {"epoch": 1}
    assert back.classes == ["a", "b"] and back.config == {"model": "vit", "img_size": 32}
    assert torch.equal(back.model["w"], torch.ones(2)) and torch.equal(back.rng, torch.get_rng_state())
