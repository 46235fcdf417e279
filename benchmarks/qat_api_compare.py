"""PT2E QAT (``fastload finetune --qat``) against torchao's own QAT API, one timm ViT-Tiny on CPU.

    .venv/bin/python benchmarks/qat_api_compare.py --train 400 --val 200 --epochs 1 --img-size 128

One run: generated photos (``fastload.data.pictures.synth``, 4 classes) -> a short fp32 fine-tune
(``fastload.train.finetune``, as ``benchmarks/test_quantize_tradeoff.py`` does) -> from that one
checkpoint, the same ``--epochs`` of training, same batches in the same order (materialised once),
same AdamW and cosine schedule (``fastload.train.optim``), for:

- ``fp32``: the float model itself (reference for the training time and accuracy);
- ``pt2e``: ``fastload.train.quantize.prepare_qat`` (``prepare_qat_pt2e`` + ``X86InductorQuantizer``)
  -> ``convert`` (``convert_pt2e``): int8 per-channel weights, uint8 per-tensor static activations;
- ``ao``: ``quantize_(model, QATConfig(Int8DynamicActivationIntxWeightConfig(int8, PerAxis(0)),
  step="prepare"))`` (module swap to ``FakeQuantizedLinear``: int8 per-channel symmetric weights,
  int8 per-token asymmetric dynamic activations), then two converts of the same trained model:
  ``ao-intx``: ``QATConfig(same base, step="convert")`` (what the QAT API itself produces,
  ``IntxUnpackedToInt8Tensor`` weights), and ``ao-int8``: ``QATConfig(step="convert")`` (swap back)
  + ``quantize_(Int8DynamicActivationInt8WeightConfig(act_mapping_type=ASYMMETRIC))`` — the same
  numerics with torchao's int8 x int8 matmul (``Int8Tensor``).

Latency: every model under ``torch.compile`` with Inductor freezing (eager where compiling fails,
said in the output), interleaved rounds (fp32, pt2e, ao-intx, ao-int8, fp32, ...), each round the
median of ``--repeats`` forwards; median and range over rounds. ``--json FILE`` writes everything.

This file runs the comparison and prints the table; torchao's QAT API and the inventories of what
each path quantizes are in ``qat_api_paths.py``, size and latency in ``qat_api_latency.py`` (both
beside it, imported from the script's folder).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import traceback

import torch
import torch.nn.functional as F
from qat_api_latency import measure_latency, state_bytes
from qat_api_paths import (
    ao_convert_int8,
    ao_convert_intx,
    ao_prepare,
    module_inventory,
    pt2e_inventory,
)
from torch import nn

from fastload.data.pictures.synth import synthesize
from fastload.train.config import FinetuneConfig
from fastload.train.export import model_from_checkpoint
from fastload.train.finetune import finetune
from fastload.train.finetune_data import (
    ResumableSampler,
    SeededDataset,
    open_dataset,
    train_val_transforms,
)
from fastload.train.loop import evaluate
from fastload.train.optim import cosine_schedule, create_optimizer, default_lr
from fastload.train.quantize import convert, prepare_qat, save_program

BATCH = 32
CLASSES = 4


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=int, default=400, help="generated training images")
    p.add_argument("--val", type=int, default=200, help="generated val images")
    p.add_argument("--epochs", type=int, default=1, help="QAT epochs of each path (from the fp32 checkpoint)")
    p.add_argument("--fp32-epochs", type=int, default=2, help="epochs of the fp32 fine-tune (random init)")
    p.add_argument("--img-size", type=int, default=128)
    p.add_argument("--batches", type=int, nargs="+", default=[8, 64], help="latency batch sizes")
    p.add_argument("--rounds", type=int, default=7, help="interleaved latency rounds")
    p.add_argument("--repeats", type=int, default=5, help="forwards per model per round (median)")
    p.add_argument("--no-compile", action="store_true", help="time every model eagerly")
    p.add_argument("--data", help="existing DATA folder (train/ + val/) instead of generated photos")
    p.add_argument("--work", help="folder for data and files (default: a temporary one)")
    p.add_argument("--json", help="write all figures to this file")
    return p.parse_args(argv)


# ---------------------------------------------------------------- data, training, evaluation

def _epoch_batches(data: pathlib.Path, img_size: int, epochs: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Every epoch's training batches, decoded and augmented once (fastload's train transform,
    seeded per sample), so that every path sees the same images in the same order and the timed
    training loop holds the model's work only."""
    train_tf, _ = train_val_transforms(img_size)
    dataset = SeededDataset(open_dataset("folder", data / "train", train_tf), seed=0)
    sampler = ResumableSampler(len(dataset), shuffle=True, seed=0)
    epochs_out = []
    for epoch in range(epochs):
        dataset.epoch = epoch
        sampler.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=0)
        epochs_out.append([(x, y) for x, y in loader])
    return epochs_out


def _val_loader(data: pathlib.Path, img_size: int):
    _, val_tf = train_val_transforms(img_size)
    return torch.utils.data.DataLoader(open_dataset("folder", data / "val", val_tf), batch_size=BATCH,
                                       shuffle=False, num_workers=0)


def _top1(model: nn.Module, val) -> float:
    return _val(model, val)[0]


def _val(model: nn.Module, val) -> tuple[float, float]:
    """``(top-1, mean cross-entropy)`` on the val set (the loss still ranks models when top-1 ties)."""
    correct, total, loss_sum = evaluate(model, val, torch.device("cpu"), "off", False)
    return correct / total, loss_sum / total


def train_interleaved(models: dict[str, nn.Module], epochs: list, lr: float) -> dict[str, list[float]]:
    """Same loop for every model: AdamW (fastload's parameter groups), cosine over all steps,
    float32 cross-entropy, the same batches in the same order. Epochs are interleaved across the
    models (epoch 0 of each, then epoch 1 of each, ...) so that a slow spell of the host falls on
    all of them; returns the seconds each epoch took (forward, backward, step) per model."""
    steps = sum(len(batches) for batches in epochs)
    state = {}
    for name, model in models.items():
        optimizer = create_optimizer(model, "adamw", lr=lr, weight_decay=0.01)
        state[name] = (model, optimizer, cosine_schedule(optimizer, steps))
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for batches in epochs:
        for name, (model, optimizer, schedule) in state.items():
            model.train()
            start = time.perf_counter()
            for images, labels in batches:
                loss = F.cross_entropy(model(images).float(), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
            seconds[name].append(time.perf_counter() - start)
    for model in models.values():
        model.eval()
    return seconds


# ---------------------------------------------------------------- run

def _try(label: str, errors: dict, fn, *args):
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001  (a path that fails is a finding: reported)
        errors[label] = f"{type(error).__name__}: {error}"
        print(f"[{label}] FAILED: {errors[label]}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return None


def main(argv=None) -> dict:
    args = _args(argv)
    torch.manual_seed(0)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="qat_api_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)  # noqa: E731
    data = pathlib.Path(args.data) if args.data else synthesize(
        work / "data", train=args.train, val=args.val, classes=CLASSES, seed=0, min_side=96, max_side=320)
    log(f"data {data} (torch {torch.__version__}, threads {torch.get_num_threads()})")

    fp32_ckpt = work / "fp32.pt"
    fp32_run = finetune(FinetuneConfig(data=str(data), loader="torch", img_size=args.img_size, batch_size=BATCH,
                                       num_workers=min(2, os.cpu_count() or 1), epochs=args.fp32_epochs,
                                       warmup_epochs=0.5, progress=False, device="cpu",
                                       checkpoint=str(fp32_ckpt)))
    start_model, _ = model_from_checkpoint(fp32_ckpt)
    val = _val_loader(data, args.img_size)
    lr = default_lr(from_weights=True)
    epochs = _epoch_batches(data, args.img_size, args.epochs)
    log(f"fp32 fine-tune done: {args.fp32_epochs} epochs, val top-1 {fp32_run.val_top1:.4f}; "
        f"{len(epochs[0])} batches of {BATCH} per epoch, lr {lr}")

    result: dict = {"settings": vars(args), "lr": lr, "batch_size": BATCH, "errors": {},
                    "start_top1": _top1(start_model, val), "paths": {}}
    errors = result["errors"]
    paths = result["paths"]

    # fp32 reference, (1) PT2E QAT through fastload.train.quantize, (2) torchao's QAT API
    fp32 = copy.deepcopy(start_model)
    qat = prepare_qat(copy.deepcopy(start_model), args.img_size)
    ao = _try("ao prepare", errors, ao_prepare, copy.deepcopy(start_model))
    training = {"fp32": fp32, "pt2e": qat} | ({"ao": ao} if ao is not None else {})
    if ao is not None:
        result["ao_prepared_modules"] = module_inventory(ao)
    seconds = train_interleaved(training, epochs, lr)
    log(f"trained {args.epochs} epochs each: {seconds}")

    paths["fp32"] = {"epoch_s": seconds["fp32"], "top1": _top1(fp32, val), "loss": _val(fp32, val)[1],
                     "bytes": state_bytes(fp32)}
    pt2e = {"epoch_s": seconds["pt2e"]}
    pt2e["fake_quant_top1"], pt2e["fake_quant_loss"] = _val(qat, val)
    pt2e_int8 = convert(copy.deepcopy(qat))
    pt2e["int8_top1"], pt2e["int8_loss"] = _val(pt2e_int8, val)
    pt2e["bytes"] = os.path.getsize(save_program(pt2e_int8, work / "pt2e.int8.pt2", args.img_size))
    pt2e["quantizes"] = pt2e_inventory(pt2e_int8)
    paths["pt2e"] = pt2e
    log(f"pt2e: {pt2e}")

    models = {"fp32": fp32, "pt2e": pt2e_int8}
    if ao is not None:
        fq = _try("ao fake-quant eval", errors, _val, ao, val) or (None, None)
        entry = {"epoch_s": seconds["ao"], "fake_quant_top1": fq[0], "fake_quant_loss": fq[1]}
        for name, fn in (("ao-intx", ao_convert_intx), ("ao-int8", ao_convert_int8)):
            int8 = _try(f"{name} convert", errors, fn, ao)
            if int8 is None:
                continue
            row = dict(entry)
            row["int8_top1"], row["int8_loss"] = _try(f"{name} eval", errors, _val, int8, val) or (None, None)
            path = work / f"{name}.pt"
            saved = _try(f"{name} save", errors, lambda m, p: torch.save(m.state_dict(), p), int8, path)
            row["bytes"] = os.path.getsize(path) if saved is None and path.exists() else None
            row["quantizes"] = module_inventory(int8)
            paths[name] = row
            models[name] = int8
            log(f"{name}: {row}")

    latency, how = measure_latency(models, args.img_size, args.batches, args.rounds, args.repeats,
                                   compile=not args.no_compile)
    result["latency"] = {str(k): v for k, v in latency.items()}
    result["timed_as"] = how
    log("latency done")
    print(format_report(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return result


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def format_report(result: dict) -> str:
    paths = result["paths"]
    names = [n for n in ("fp32", "pt2e", "ao-intx", "ao-int8") if n in paths]
    fp32_bytes = paths["fp32"]["bytes"]
    lines = [f"fp32 start point val top-1 {_pct(result['start_top1'])}",
             "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]

    def line(label, cell):
        lines.append(f"| {label} | " + " | ".join(cell(paths[n], n) for n in names) + " |")

    line("val top-1 after the QAT epochs (fp32: float epochs)",
         lambda r, n: _pct(r.get("top1", r.get("fake_quant_top1"))))
    line("val top-1 of the converted int8 model", lambda r, n: _pct(r.get("int8_top1")) if n != "fp32" else "-")
    line("val loss after the QAT epochs", lambda r, n: _num(r.get("loss", r.get("fake_quant_loss"))))
    line("val loss of the converted int8 model", lambda r, n: _num(r.get("int8_loss")) if n != "fp32" else "-")
    line("train s/epoch, median (range)", lambda r, n: (
        f"{statistics.median(r['epoch_s']):.1f} ({min(r['epoch_s']):.1f}-{max(r['epoch_s']):.1f})"
        if r.get("epoch_s") else "n/a"))
    for batch, row in result["latency"].items():
        line(f"latency ms, batch {batch}: median (range)", lambda r, n, row=row: (
            f"{row[n]['median_ms']:.1f} ({row[n]['min_ms']:.1f}-{row[n]['max_ms']:.1f})" if n in row else "n/a"))
        line(f"latency vs fp32, batch {batch}: median (range)", lambda r, n, row=row: (
            f"{row[n]['ratio_median']:.2f} ({row[n]['ratio_min']:.2f}-{row[n]['ratio_max']:.2f})"
            if n in row else "n/a"))
    line("serialized MB (vs fp32)", lambda r, n: (
        f"{r['bytes'] / 1e6:.2f} ({r['bytes'] / fp32_bytes:.2f})" if r.get("bytes") else "n/a"))
    lines.append("timed as: " + "; ".join(f"{k}: {v}" for k, v in result["timed_as"].items()))
    if result["errors"]:
        lines.append("errors: " + json.dumps(result["errors"], indent=1))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
