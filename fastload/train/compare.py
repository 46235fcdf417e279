"""The A/B table: one baseline run, then the speed techniques added one at a time.

Rows (cumulative, in this order unless ``rows=`` picks a subset, which stays cumulative)::

    baseline   fp32, torchvision ImageFolder + torch.utils.data.DataLoader
    fastload   + fastload.DataLoader reading DATA/train.lmdb (converted if missing)
    amp        + autocast bf16 (fp16 on a GPU without bf16)
    gc         + gradient checkpointing
    accum      + gradient accumulation: half the micro-batch, 2 micro-batches per step
               (same effective batch)
    freeze     + patch embedding, position embedding and the first half of the blocks frozen

Each row runs in its own fresh Python process
(:func:`fastload.utils.process.call_in_fresh_process`, the runner ``fastload bench`` uses too),
so its peak memory is its own: ``ru_maxrss`` and RSS never go down within a process.
Memory is that of the row's whole process tree — the training process and, for torch's
DataLoader, its worker processes — sampled from this process while the row runs
(:class:`fastload.utils.memory.TreeMemory`): PSS summed over the tree (each shared page
split among the processes mapping it, so torch's workers' shared libraries count once) and
USS (private pages). The training process's own peak above its pre-training level (CUDA
memory on a GPU) stays in each epoch's record as ``peak_mem_mb``.
``train.lmdb``/``val.lmdb`` are kept fresh by :func:`fastload.data.convert.ensure.ensure_lmdb`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import sys
import time

from fastload.data.convert.ensure import ensure_lmdb
from fastload.train.config import FinetuneConfig
from fastload.utils.memory import TreeMemory
from fastload.utils.process import call_in_fresh_process
from fastload.utils.progress import format_duration

__all__ = ["ROWS", "TrainingPace", "amp_mode", "check_rows", "format_table",
           "measure_training_pace", "row_configs", "run_compare"]

ROWS = {
    "baseline": "baseline: fp32, torchvision ImageFolder + torch DataLoader",
    "fastload": "+ fastload.DataLoader from LMDB",
    "amp": "+ AMP",
    "gc": "+ gradient checkpointing",
    "accum": "+ accumulation (batch/2 x 2)",
    "freeze": "+ freeze embeddings and first half of blocks",
}


def amp_mode() -> str:
    """The AMP dtype an "AMP" row trains in: ``"fp16"`` on a GPU without bf16, else ``"bf16"``."""
    import torch

    if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        return "fp16"
    return "bf16"


@dataclasses.dataclass(frozen=True)
class TrainingPace:
    """What a few training steps measured on this machine: ``step_s``, the seconds of one
    fp32 forward+backward step, and ``bf16_ratio``, bf16 autocast's speed over fp32's (None
    when not measured)."""

    step_s: float
    bf16_ratio: float | None = None


def measure_training_pace(model_name: str, img_size: int, batch_size: int, *,
                          bf16: bool = False, steps: int = 5,
                          bf16_steps: int = 1) -> TrainingPace:
    """The fp32 step of ``model_name`` at ``img_size`` and ``batch_size`` on this CPU (the
    median of ``steps`` timed steps on random inputs), and with ``bf16`` bf16 autocast's
    speed over it (the median of ``bf16_steps`` after a warm-up step: where bf16 is emulated
    a step is 8-16 times longer, about 5 s on a Zen 1, and the ratio is only stated by
    :func:`fastload.train.amp.choose_amp`, which skips the row whatever it is): what the
    demo sizes its A/B by, in a few seconds."""
    import torch

    from fastload.train.amp import training_step_seconds
    from fastload.train.model import model_to_load

    generator = torch.Generator().manual_seed(0)
    model = model_to_load(model_name, 10, img_size)
    images = torch.randn(batch_size, 3, img_size, img_size, generator=generator)
    labels = torch.randint(0, 10, (batch_size,), generator=generator)
    step_s = training_step_seconds(model, images, labels, "off", steps)
    if not bf16:
        return TrainingPace(step_s)
    bf16_s = training_step_seconds(model, images, labels, "bf16", bf16_steps)
    return TrainingPace(step_s, step_s / bf16_s if bf16_s > 0 else float("inf"))


def _freeze_patterns(model_name: str, img_size: int) -> tuple[str, ...]:
    from fastload.train.model import model_to_load

    model = model_to_load(model_name, 2, img_size)
    depth = len(getattr(model, "blocks", []))
    if depth == 0:
        raise ValueError(f"the freeze row needs a ViT with .blocks, but model={model_name!r} has none")
    names = {n for n, _ in model.named_parameters()}
    patterns = ["patch_embed.*"] + [p for p in ("cls_token", "pos_embed", "reg_token") if p in names]
    return tuple(patterns + [f"blocks.{i}.*" for i in range(depth // 2)])


def check_rows(rows: list[str]) -> None:
    """Raise ``ValueError`` naming the entries of ``rows`` that are not in :data:`ROWS`."""
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise ValueError(f"rows should be among {', '.join(ROWS)}, but got {unknown}")


def row_configs(base: FinetuneConfig, rows: list[str]) -> list[tuple[str, FinetuneConfig]]:
    """The config of each row: ``base`` with the techniques of this row and the ones before."""
    check_rows(rows)
    ordered = [r for r in ROWS if r in rows]
    config = dataclasses.replace(
        base, loader="torch", data_format="folder", amp="off", grad_checkpointing=False,
        accum_steps=1, freeze=(), train_lmdb=None, val_lmdb=None, resume=None, checkpoint=None,
        progress=False,
    )
    out = []
    for row in ordered:
        if row == "fastload":
            config = dataclasses.replace(config, loader="fastload", data_format="lmdb")
        elif row == "amp":
            config = dataclasses.replace(config, amp=amp_mode())
        elif row == "gc":
            config = dataclasses.replace(config, grad_checkpointing=True)
        elif row == "accum":
            config = dataclasses.replace(
                config, batch_size=max(1, base.batch_size // 2), accum_steps=2 * base.accum_steps
            )
        elif row == "freeze":
            config = dataclasses.replace(config, freeze=_freeze_patterns(base.model, base.img_size))
        out.append((row, config))
    return out


def _ensure_lmdb(data: pathlib.Path, progress: bool) -> None:
    for split in ("train", "val"):
        if (data / split).is_dir():
            ensure_lmdb(data / split, data / f"{split}.lmdb", progress=progress)


_MIB = 1 << 20


def _summarise(row: str, config: FinetuneConfig, record: dict, tree) -> dict:
    epochs = record["epochs"]
    timed = epochs[1:] if len(epochs) > 1 else epochs  # the first epoch pays start-up costs
    mean = lambda key: sum(e[key] for e in timed) / len(timed)  # noqa: E731
    return {
        "row": row,
        "label": ROWS[row] + (f" {config.amp}" if row == "amp" else ""),
        "time_per_epoch_s": mean("epoch_time_s"),
        "images_per_s": mean("images_per_s"),
        "data_stall_share": mean("data_stall_share"),
        "peak_mem_mb": max(e["peak_mem_mb"] for e in epochs),
        "peak_rss_mb": max(e["peak_rss_mb"] for e in epochs),
        # the row's whole process tree (training process + loader workers), peaks
        "tree_pss_mb": None if tree.pss is None else tree.pss / _MIB,
        "tree_uss_mb": None if tree.uss is None else tree.uss / _MIB,
        "tree_rss_mb": tree.rss / _MIB,
        "tree_processes": tree.processes,
        "val_top1": epochs[-1]["val_top1"],
        "cuda": record.get("cuda", False),  # peak_mem_mb is CUDA memory
        "epochs": epochs,
        "config": dataclasses.asdict(config),
    }


def run_compare(base: FinetuneConfig, rows: list[str] | None = None, out: str | None = None,
                progress: bool = True, row_steps: dict[str, int] | None = None) -> list[dict]:
    """Run every row in a fresh process on ``base.data``; return one summary dict per row.

    ``base.data`` must hold ``train/`` and ``val/`` folders; ``train.lmdb``/``val.lmdb`` are
    converted from them when absent. ``out`` (optional) receives the rows as JSON.
    ``row_steps`` ends the named rows after that many optimizer steps (their speed and
    memory stay comparable, their accuracy does not). ``progress``: a line on stderr as
    each row starts and ends (elapsed, an estimate of what is left) and each row's epochs
    as :func:`fastload.train.finetune.finetune` shows them.
    """
    if base.data is None or not (pathlib.Path(base.data) / "train").is_dir():
        raise ValueError("run_compare needs base.data with train/ and val/ folders (from `fastload synth`)")
    data = pathlib.Path(base.data)
    configs = row_configs(base, rows or list(ROWS))
    unknown = sorted(set(row_steps or {}) - {row for row, _ in configs})
    if unknown:
        raise ValueError(f"row_steps should name rows that run, but got {unknown}")
    configs = [(row, dataclasses.replace(config, progress=progress,
                                         max_steps=(row_steps or {}).get(row, config.max_steps)))
               for row, config in configs]
    if any(c.loader == "fastload" for _, c in configs):
        _ensure_lmdb(data, progress)
    results = []
    started = time.monotonic()
    for index, (row, config) in enumerate(configs):
        if progress:
            print(f"[compare] row {index + 1}/{len(configs)} {row}: {ROWS[row]}"
                  + (f" (stops after {config.max_steps} steps)" if config.max_steps else "")
                  + f", {format_duration(time.monotonic() - started)} elapsed",
                  file=sys.stderr, flush=True)
        memory = TreeMemory()
        memory.start()
        try:
            record = call_in_fresh_process(_run_row, config, name=f"fastload-compare-{row}",
                                           on_start=functools.partial(memory.watch, row))
        finally:
            memory.stop()
        results.append(_summarise(row, config, record, memory.peaks[row]))
        if progress:
            elapsed = time.monotonic() - started
            left = elapsed / (index + 1) * (len(configs) - index - 1)
            print(f"[compare] row {index + 1}/{len(configs)} {row} done: "
                  f"{results[-1]['images_per_s']:.1f} images/s; {format_duration(elapsed)} "
                  f"elapsed, ~{format_duration(left)} left", file=sys.stderr, flush=True)
    if out:
        pathlib.Path(out).write_text(json.dumps(results, indent=2))
    return results


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def format_table(results: list[dict]) -> str:
    """A Markdown table of :func:`run_compare` rows, speed relative to the first row; memory
    is the row's whole process tree (training process + loader workers), PSS and USS."""
    cuda = any(r.get("cuda") for r in results)
    lines = [
        "| configuration | time/epoch (s) | images/s | speed-up | data stall | "
        "peak PSS, process tree (MiB) | peak USS, process tree (MiB) | "
        + ("peak CUDA (MiB) | " if cuda else "") + "val top-1 |",
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if cuda else "") + "---:|",
    ]
    base = results[0]["images_per_s"] if results else 0.0
    for r in results:
        top1 = "n/a" if r["val_top1"] is None else f"{100 * r['val_top1']:.1f}%"
        speed = r["images_per_s"] / base if base else 0.0
        lines.append(
            f"| {r['label']} | {r['time_per_epoch_s']:.2f} | {r['images_per_s']:.1f} | "
            f"{speed:.2f}x | {100 * r['data_stall_share']:.0f}% | {_mib(r.get('tree_pss_mb'))} | "
            f"{_mib(r.get('tree_uss_mb'))} | "
            + (f"{r['peak_mem_mb']:,.0f} | " if cuda else "") + f"{top1} |"
        )
    return "\n".join(lines)


def _run_row(config: FinetuneConfig) -> dict:
    """In the row's fresh process: run ``config``; its epochs (as dicts) and step count."""
    import torch

    from fastload.train.finetune import finetune

    result = finetune(config)
    cuda = (config.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    return {"epochs": [e.as_dict() for e in result.epochs], "steps": result.steps, "cuda": cuda}
