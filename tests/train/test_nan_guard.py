"""The NaN guard skips non-finite steps, counts and logs them, and stops after K in a row."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch

from fastload.train.amp import NanGuard, NonFiniteTrainingError, ScalerConfig
from fastload.train.finetune import FinetuneConfig, finetune


def _nan_on(steps_nan):
    def hook(step: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * float("nan") if steps_nan(step) else loss

    return hook


@pytest.mark.slow
@pytest.mark.parametrize("amp", ["off", "fp16"])
def test_guard_skips_nan_steps_then_stops_after_k_consecutive(synth_root, tmp_path, amp):
    log = tmp_path / "run.jsonl"
    config = FinetuneConfig(data=str(synth_root), loader="torch", img_size=32, batch_size=8,
                            epochs=2, num_workers=0, progress=False, amp=amp, max_skips=3,
                            log=str(log), scaler=ScalerConfig(init_scale=1024.0))
    # Optimizer step 2 (index 1) is poisoned alone; from step 4 (index 3) every step is.
    hook = _nan_on(lambda step: step == 1 or step >= 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # fp16 on CPU is slow: warned, not tested
        with pytest.raises(NonFiniteTrainingError) as caught:
            finetune(config, loss_hook=hook)
    error = caught.value
    assert error.skipped_total == 4
    assert [e["step"] for e in error.events] == [2, 4, 5, 6]
    assert [e["consecutive"] for e in error.events] == [1, 1, 2, 3]
    assert "3 consecutive" in error.diagnosis and "loss is non-finite" in error.diagnosis
    records = [json.loads(line) for line in log.read_text().splitlines()]
    skips = [r for r in records if r["event"] == "skip"]
    assert len(skips) == 4 and records[-1]["event"] == "stopped"
    assert [r["skipped"] for r in records if r["event"] == "step"] == [False, True, False, True, True, True]
    if amp == "fp16":  # the scaler backs off on each inf/NaN step: the logged scale halves
        assert [s["loss_scale"] for s in skips] == [1024.0, 512.0, 256.0, 128.0]
    else:
        assert all(s["loss_scale"] is None for s in skips)
    assert all(math.isnan(s["loss"]) for s in skips)


def _skip(guard: NanGuard, step: int, *, inputs_finite: bool = True, scale=None,
          loss: float = float("nan")) -> None:
    guard.record_skip(step=step, epoch=0, loss=loss, grad_norm=float("nan"), loss_scale=scale,
                      lr=1e-3, inputs_finite=inputs_finite, model=torch.nn.Linear(2, 2))


def test_guard_diagnoses_non_finite_inputs():
    guard = NanGuard(max_consecutive=2)
    _skip(guard, 1, inputs_finite=False)
    with pytest.raises(NonFiniteTrainingError, match="input batches hold NaN/Inf"):
        _skip(guard, 2)


def test_guard_diagnoses_collapsed_fp16_loss_scale():
    guard = NanGuard(max_consecutive=2, amp="fp16")
    _skip(guard, 1, scale=1.0, loss=2.0)
    with pytest.raises(NonFiniteTrainingError, match="loss scale collapsed from 65536 to 0.5"):
        _skip(guard, 2, scale=0.5, loss=2.0)


def test_guard_resets_its_run_after_a_good_step():
    guard = NanGuard(max_consecutive=2)
    _skip(guard, 1)
    guard.record_ok()
    _skip(guard, 3)
    assert guard.skipped_total == 2 and guard.consecutive == 1
