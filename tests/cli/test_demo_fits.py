"""The demo decides from the machine: the AMP row where bf16 (or fp16 on a GPU) is native,
a stated skip with the measured ratio where it is emulated; the A/B's set sized from one
measured training step; progress as plain lines in a log, a bar on a terminal."""

from __future__ import annotations

import io
import warnings

import pytest


def test_amp_row_is_skipped_with_the_measured_ratio_where_bf16_is_emulated():
    from fastload.train.amp import choose_amp

    choice = choose_amp("cpu", measure=lambda: 0.123, native=False)
    assert choice.mode is None and choice.ratio == pytest.approx(0.123)
    assert choice.sentence == "bf16 is emulated on this CPU: skipped (measured ratio x0.12)"
    native = choose_amp("cpu", measure=lambda: pytest.fail("measured"), native=True)
    assert native.mode == "bf16" and "native" in native.sentence


def test_bf16_on_a_cpu_without_native_support_warns(monkeypatch):
    from fastload.train import amp

    monkeypatch.setattr(amp, "native_bf16", lambda device_type: False)
    with pytest.warns(UserWarning, match="emulates bfloat16"):
        assert amp.warn_if_emulated("bf16", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not amp.warn_if_emulated("off", "cpu")


def test_autocast_speed_ratio_times_both_precisions():
    import torch

    from fastload.train.amp import autocast_speed_ratio

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 4))
    ratio = autocast_speed_ratio(model, torch.randn(2, 3, 4, 4), torch.tensor([0, 1]), steps=1)
    assert ratio > 0


def test_training_pace_times_fp32_and_bf16_only_when_asked():
    from fastload.train.compare import measure_training_pace

    pace = measure_training_pace("vit_tiny_patch16_224", 32, 2, steps=1)
    assert pace.step_s > 0 and pace.bf16_ratio is None
    assert measure_training_pace("vit_tiny_patch16_224", 32, 2, bf16=True, steps=1,
                                 bf16_steps=1).bf16_ratio > 0


def test_the_ab_prediction_counts_every_step_of_the_loader_rows_and_the_cut_technique_rows():
    from fastload.bench.demo_plan import ROW_START_S, STEP_FACTOR, predict_ab_seconds

    rows = ["baseline", "fastload", "amp", "gc"]
    # 2,000 images in batches of 32: 63 steps an epoch; two loader rows of 2 epochs, two
    # technique rows stopped 16 steps into their second
    seconds = predict_ab_seconds(2000, step_s=0.5, batch_size=32, epochs=2, rows=rows,
                                 technique_steps=16)
    assert seconds == pytest.approx(4 * ROW_START_S + STEP_FACTOR * 0.5 * (2 * 126 + 2 * 79))
    # 500 images: an epoch of 16 steps is no longer than the cut, so every row runs it all
    seconds = predict_ab_seconds(500, step_s=0.5, batch_size=32, epochs=2, rows=rows,
                                 technique_steps=16)
    assert seconds == pytest.approx(4 * ROW_START_S + STEP_FACTOR * 0.5 * 4 * 32)


def test_the_ab_trains_on_the_largest_set_predicted_within_the_budget():
    from fastload.bench.demo_plan import AB_BUDGET_S, TRAIN_SIZES, plan_ab

    rows = ["baseline", "fastload", "gc"]
    fast = plan_ab(0.05, batch_size=32, epochs=2, rows=rows, technique_steps=16)
    assert (fast.train, fast.val) == (TRAIN_SIZES[0], TRAIN_SIZES[0] // 5)
    assert fast.predicted_s <= AB_BUDGET_S and "would take" not in fast.sentence
    slow = plan_ab(0.62, batch_size=32, epochs=2, rows=rows, technique_steps=16,
                   model="vit_tiny_patch16_224", img_size=64)
    assert slow.train < TRAIN_SIZES[0] and slow.predicted_s <= AB_BUDGET_S
    bigger = [n for n in TRAIN_SIZES if n > slow.train]
    assert all(plan_ab(0.62, batch_size=32, epochs=2, rows=rows, technique_steps=16,
                       sizes=(n,)).predicted_s > AB_BUDGET_S for n in bigger)
    assert slow.sentence.startswith("an fp32 training step takes 0.62 s here "
                                    "(vit_tiny_patch16_224, 32 images at 64 px): the A/B "
                                    f"trains on {slow.train:,} generated images (2,000 would "
                                    "take about ")
    # nothing fits: the smallest set, its prediction stated
    crawl = plan_ab(30.0, batch_size=32, epochs=2, rows=rows, technique_steps=16)
    assert crawl.train == min(TRAIN_SIZES) and crawl.predicted_s > AB_BUDGET_S


def test_progress_in_a_log_is_plain_lines_with_elapsed_and_time_left():
    from fastload.utils.progress import LineProgress, progress

    now = [0.0]
    stream = io.StringIO()
    bar = progress(10, "epoch 1/2", "batches", stream=stream)
    assert isinstance(bar, LineProgress)
    bar = LineProgress(10, "epoch 1/2", "batches", every_s=5, stream=stream,
                       clock=lambda: now[0])
    for _ in range(4):
        now[0] += 2.0
        bar.update(1)
    bar.set_postfix(loss="0.5")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "epoch 1/2: 3/10 batches (30%), 0:06 elapsed, ~0:14 left"
    assert lines[-1] == "epoch 1/2: 4/10 batches (40%), 0:08 elapsed, ~0:12 left, loss=0.5"
    assert "\r" not in stream.getvalue()


def test_a_disabled_progress_writes_nothing():
    from fastload.utils.progress import LineProgress

    stream = io.StringIO()
    with LineProgress(3, disable=True, stream=stream, every_s=1e-9) as bar:
        bar.update(3)
    assert stream.getvalue() == ""
