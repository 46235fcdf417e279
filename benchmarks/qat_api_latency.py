"""Size and latency of the models ``benchmarks/qat_api_compare.py`` compares: serialized bytes, and
interleaved rounds of forwards under ``torch.compile`` with Inductor freezing (eager where
compiling fails). Imported by that script only.
"""

from __future__ import annotations

import io
import statistics
import time

import torch
from torch import nn


def state_bytes(model: nn.Module) -> int:
    """The bytes ``torch.save`` writes for the model's state dict."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def _median_ms(model, images: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(images)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def measure_latency(models: dict[str, nn.Module], img_size: int, batches, rounds: int, repeats: int,
                    compile: bool) -> tuple[dict, dict]:
    """``({batch: {name: {median, min, max, ratio...}}}, {name: how it ran})``: interleaved rounds,
    every model compiled with Inductor freezing where that works (each batch size compiled before
    its rounds), else eager."""
    how: dict[str, str] = {}
    firsts: dict[str, list[str]] = {}
    out: dict = {}
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        for batch in batches:
            images = torch.randn(batch, 3, img_size, img_size, generator=torch.Generator().manual_seed(batch))
            runners = {}
            for name, model in models.items():
                runner = model
                if compile and how.get(name, "compiled").startswith("compiled"):
                    try:
                        start = time.perf_counter()
                        runner = torch.compile(model, dynamic=False)
                        runner(images)
                        firsts.setdefault(name, []).append(f"{time.perf_counter() - start:.0f} s at batch {batch}")
                        how[name] = f"compiled (freezing; first call {', '.join(firsts[name])})"
                    except Exception as error:  # noqa: BLE001  (reported, then timed eagerly)
                        how[name] = f"eager: torch.compile failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
                        runner = model
                        torch._dynamo.reset()
                elif not compile:
                    how[name] = "eager (--no-compile)"
                runner(images)
                runner(images)
                runners[name] = runner
            per_round = {name: [] for name in runners}
            for _ in range(rounds):
                for name, runner in runners.items():
                    per_round[name].append(_median_ms(runner, images, repeats))
            row = {}
            for name, times in per_round.items():
                ratios = [t / f for t, f in zip(times, per_round["fp32"], strict=True)]
                row[name] = {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                             "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                             "ratio_max": max(ratios)}
            out[batch] = row
            torch._dynamo.reset()
    return out, how
