"""Int8 side by side: dynamic, static PTQ and QAT of one fine-tuned ViT-Tiny, against its fp32.

One run: fine-tune fp32 (``EPOCHS`` epochs) -> checkpoint; ``dynamic`` and ``static`` export that
checkpoint; ``qat`` trains ``QAT_EPOCHS`` more fake-quantized epochs starting from its weights
(``FinetuneConfig.weights``, so the lower fine-tuning learning rate) and exports that. Every
top-1 change is against the fp32 checkpoint's val top-1. Latency ratios are medians of
interleaved rounds (fp32, int8, fp32, ...) at batch 8 and 64; static and qat run both models
under ``torch.compile`` with Inductor freezing, dynamic runs both eagerly (see
``fastload.train.export``). Targets (issue 15): latency <= 0.6, size <= 0.3, top-1 >= -1.0
(static) and >= -0.5 points (qat). Nothing here asserts a timing.

    .venv/bin/python -m pytest -q -s benchmarks/test_quantize_tradeoff.py          # measure (224 px)
    .venv/bin/python -m pytest -q benchmarks/test_quantize_tradeoff.py --benchmark-disable  # smoke, 32 px

``FASTLOAD_QUANT_DATA=DIR`` uses an existing DATA folder (train/ + val/, or the LMDBs) instead of
generating one; ``FASTLOAD_QUANT_IMG``, ``_TRAIN``, ``_VAL``, ``_EPOCHS`` size the run;
``FASTLOAD_QUANT_OUT=FILE`` writes the rows as JSON.
"""

from __future__ import annotations

import json
import os

import pytest

from fastload.train.export import export_checkpoint
from fastload.train.finetune import FinetuneConfig, finetune

TARGETS = {"latency": 0.6, "size": 0.3, "top1": {"dynamic": None, "static": -0.010, "qat": -0.005}}


def _settings(smoke: bool) -> dict:
    env = os.environ.get
    return {
        "img_size": int(env("FASTLOAD_QUANT_IMG", 32 if smoke else 224)),
        "train": int(env("FASTLOAD_QUANT_TRAIN", 32 if smoke else 800)),
        "val": int(env("FASTLOAD_QUANT_VAL", 8 if smoke else 400)),
        "epochs": int(env("FASTLOAD_QUANT_EPOCHS", 1 if smoke else 2)),
        "qat_epochs": 1,
        "batches": (2,) if smoke else (8, 64),
        "rounds": 1 if smoke else 7,
        "calibration_batches": 1 if smoke else 8,
        "compile": not smoke,
    }


def _verdict(value: float | None, target: float | None, higher_is_better: bool) -> str:
    if value is None or target is None:
        return ""
    met = value >= target if higher_is_better else value <= target
    return " (met)" if met else " (missed)"


def format_rows(rows: list[dict]) -> str:
    """The README table: one column per quantization, each figure against fp32 and its target."""
    lines = ["| | " + " | ".join(r["quantize"] for r in rows) + " |", "|---|" + "---:|" * len(rows)]

    def line(label, cell):
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in rows) + " |")

    line("val top-1 vs fp32 (points)", lambda r: f"{100 * r['top1_vs_fp32']:+.2f}"
         + _verdict(r["top1_vs_fp32"], TARGETS["top1"][r["quantize"]], True))
    for i, batch in enumerate(rows[0]["batches"]):
        line(f"CPU latency vs fp32, batch {batch}", lambda r, i=i: f"{r['latency'][i]['ratio']:.2f}"
             + _verdict(r["latency"][i]["ratio"], TARGETS["latency"], False))
    line("file size vs fp32", lambda r: f"{r['size_ratio']:.2f}"
         + _verdict(r["size_ratio"], TARGETS["size"], False))
    line("timed", lambda r: "torch.compile + freezing" if r["compiled"] else "eager")
    return "\n".join(lines)


@pytest.mark.slow
def test_dynamic_static_and_qat_side_by_side(request, tmp_path_factory):
    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    s = _settings(smoke)
    work = tmp_path_factory.mktemp("quantize_bench")
    data = os.environ.get("FASTLOAD_QUANT_DATA")
    if data is None:
        from fastload.data.pictures.synth import synthesize

        sizes = {"min_side": 64, "max_side": 160} if smoke else {}
        data = str(synthesize(work / "data", train=s["train"], val=s["val"], classes=4, seed=0, **sizes))
    common = dict(data=data, loader="fastload", img_size=s["img_size"], batch_size=32, num_workers=2,
                  progress=False, device="cpu", warmup_epochs=0.5 if not smoke else 0.0)
    fp32_ckpt = work / "fp32.pt"
    fp32 = finetune(FinetuneConfig(**common, epochs=s["epochs"], checkpoint=str(fp32_ckpt)))
    qat_ckpt = work / "qat.pt"
    finetune(FinetuneConfig(**common, epochs=s["qat_epochs"], weights=str(fp32_ckpt), qat=True,
                            checkpoint=str(qat_ckpt)))
    measure = dict(latency_batches=s["batches"], latency_rounds=s["rounds"], compile=s["compile"])
    rows = []
    for quantize, ckpt in (("dynamic", fp32_ckpt), ("static", fp32_ckpt), ("qat", qat_ckpt)):
        report = export_checkpoint(ckpt, work / f"{quantize}.int8.pt{'' if quantize == 'dynamic' else '2'}", quantize=quantize,
                                   calibration_batches=s["calibration_batches"], **measure)
        row = report.as_dict()
        row["top1_vs_fp32"] = report.int8_top1 - fp32.val_top1
        row["batches"] = list(s["batches"])
        rows.append(row)
        assert report.int8_top1 is not None and report.size_ratio < 1.0
        assert [r["batch"] for r in report.latency] == list(s["batches"])
    table = format_rows(rows)
    print(f"\nfp32 val top-1 {100 * fp32.val_top1:.2f}% ({s['val']} val images, {s['img_size']} px, "
          f"{s['epochs']} epochs; qat: +{s['qat_epochs']} from its weights)\n{table}")
    out = os.environ.get("FASTLOAD_QUANT_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"settings": {**s, "batches": list(s["batches"])}, "fp32_top1": fp32.val_top1,
                       "rows": rows}, handle, indent=2)


@pytest.mark.parametrize("value, target, higher, verdict", [
    (-0.004, -0.005, True, " (met)"), (0.7, 0.6, False, " (missed)"), (0.1, None, True, "")])
def test_verdicts_compare_each_figure_with_its_target(value, target, higher, verdict):
    assert _verdict(value, target, higher) == verdict
