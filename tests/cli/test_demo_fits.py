"""The demo decides from the machine: the AMP row where bf16 (or fp16 on a GPU) is native,
a stated skip with the measured ratio where it is emulated; progress as plain lines in a
log, a bar on a terminal."""

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
