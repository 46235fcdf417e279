"""``fastload demo --workdir DIR``: generate, convert, verify, measure, fine-tune, report.

What `make demo` runs. Each step prints one line and is skipped when its output already
exists with the same settings, so an interrupted demo resumes where it stopped and a
finished one reruns in seconds::

    DIR/synth.json              arguments of the finished generation (its completion marker)
    DIR/data/{train,val}/       generated ImageFolder tree (fastload.data.pictures.synth)
    DIR/data/{train,val}.lmdb/  fastload LMDB databases (fastload.data.convert.folder)
    DIR/photos.json, DIR/photos/train/
                                crops of real photographs, ImageNet-sized
                                (fastload.data.pictures.photos, `fastload synth --photos`)
    DIR/bench.json              `fastload bench` rows on the photographs
    DIR/recipe.json             `fastload bench --recipe ra` on the photographs:
                                torchvision's loader and fastload on the reference
                                RandAugment preset
    DIR/ab.json                 the fine-tune A/B rows on the generated set
                                (fastload.train.compare)
    DIR/report.md, DIR/*.png    the report and its charts (fastload.bench.demo_report)

Loader figures come from photographs (camera content decodes and augments as users' data
does); the A/B trains a ViT-Tiny from scratch on the generated classes, which are learnable,
so validation top-1 far above chance shows that images and labels line up end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fastload.bench.demo_plan import AB_BUDGET_S, TRAIN_SIZES, val_images

SPLITS = ("train", "val")
AB_ROWS = ("baseline", "fastload", "amp", "gc")


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo data set (ImageNet-like: 300-800 px photos, mean about 445x380)."""

    classes: int = 10
    train: int = 2000
    val: int = 400
    seed: int = 0
    min_side: int = 300
    max_side: int = 800


@dataclass(frozen=True)
class DemoPhotos:
    """The photographic set the loader benches read (fastload.data.pictures.photos)."""

    train: int = 1000
    megapixels: tuple[float, float] = (0.2, 0.4)


@dataclass(frozen=True)
class DemoTraining:
    """The measured parts: a short loader bench and the fine-tune A/B."""

    model: str = "vit_tiny_patch16_224"
    img_size: int = 64
    epochs: int = 2
    batch_size: int = 32
    bench_rows: str = "acdef"
    bench_epochs: int = 2
    bench_limit: int | None = 1000
    recipe: str = "ra"  # an augmentation recipe of fastload.bench.recipes, rows (a) and (c)
    recipe_limit: int | None = 512
    # the technique rows after the loader's (amp, gc) stop this many optimizer steps into
    # their second epoch: their speed and memory are measured, their accuracy is not the point
    technique_steps: int | None = 16


TINY = DemoConfig(classes=4, train=48, val=16, seed=0, min_side=64, max_side=160)
TINY_PHOTOS = DemoPhotos(train=28, megapixels=(0.01, 0.02))
TINY_TRAINING = DemoTraining(img_size=32, epochs=2, batch_size=16, bench_rows="adf",
                             bench_epochs=1, bench_limit=None, recipe_limit=None)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from fastload.tools.cli import at_least

    parser = subparsers.add_parser(
        "demo",
        help="generate images, convert, verify, bench and fine-tune, then write a report "
        "(what `make demo` runs)",
        description="Generate an ImageNet-like data set, convert it to fastload LMDB and "
        "verify it, measure loaders side by side on crops of real photographs, run a short "
        "fine-tune A/B on the generated set, and write DIR/report.md with charts. Steps "
        "whose output exists are skipped.",
    )
    parser.add_argument("--workdir", default="runs/demo",
                        help="working folder (default runs/demo)")
    parser.add_argument("--classes", type=at_least(1), default=DemoConfig.classes,
                        help=f"classes to generate (default {DemoConfig.classes})")
    parser.add_argument("--train", type=at_least(1), default=None,
                        help=f"training images (default: the most of "
                        f"{', '.join(f'{n:,}' for n in TRAIN_SIZES)} whose A/B is predicted "
                        f"within {AB_BUDGET_S / 60:g} minutes from a few timed training "
                        "steps)")
    parser.add_argument("--val", type=at_least(0), default=None,
                        help=f"validation images (default: a fifth of --train, "
                        f"{DemoConfig.val} for {DemoConfig.train:,})")
    parser.add_argument("--seed", type=int, default=DemoConfig.seed, help="random seed (default 0)")
    parser.add_argument("--workers", type=at_least(1), default=None,
                        help="worker processes (default: all cores)")
    parser.add_argument("--img-size", type=at_least(1), default=DemoTraining.img_size,
                        help=f"fine-tune resolution in px (default {DemoTraining.img_size})")
    parser.add_argument("--epochs", type=at_least(0), default=None,
                        help=f"fine-tune epochs (default {DemoTraining.epochs}; 0 skips the "
                        "bench and the A/B)")
    parser.add_argument("--amp", choices=("auto", "on", "off"), default="auto",
                        help="the A/B's AMP row: auto (default) runs it where the hardware "
                        "has native bf16 (or fp16 on a GPU) and, where bf16 would be "
                        "emulated, measures a few steps and skips it; on runs it anyway; "
                        "off leaves it out")
    # Test hook: a tiny data set with small images, so the whole demo runs in seconds.
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(run=run)
    return parser


def _cached(path: Path, settings: dict) -> dict | None:
    """The record at ``path`` when it was made with ``settings``, else None."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if record.get("settings") == settings else None


def _device() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def _machine_line(device: str) -> str:
    cpu = platform.processor() or "CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if device == "gpu":
        import torch

        return f"{torch.cuda.get_device_name(0)} GPU, {cores} CPU cores ({cpu})"
    return f"{cores} CPU cores ({cpu}), no GPU"


def _synth_step(workdir: Path, config: DemoConfig, workers: int | None, progress: bool) -> str:
    from fastload.data.pictures.synth import synthesize, tree_stats

    images = workdir / "data"
    marker = workdir / "synth.json"
    wanted = asdict(config)
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8")) == wanted:
        stats = tree_stats(images)
        return f"synth: {stats['count']} images already in {images}, skipped"
    if marker.exists():
        raise FileExistsError(
            f"{marker} records a data set made with other arguments; remove {workdir} or pick "
            "another --workdir"
        )
    start = time.perf_counter()
    synthesize(images, workers=workers, progress=progress, **wanted)
    seconds = time.perf_counter() - start
    marker.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")
    stats = tree_stats(images)
    return (
        f"synth: {stats['count']} images ({config.classes} classes) in {images}, mean "
        f"{stats['mean_width']:.0f}x{stats['mean_height']:.0f} px, {stats['mean_kb']:.1f} KB, "
        f"{seconds:.1f} s"
    )


def _photos_step(workdir: Path, photos: DemoPhotos, seed: int, workers: int | None,
                 progress: bool) -> str:
    from fastload.data.pictures.photos import photo_tree
    from fastload.data.pictures.synth import tree_stats

    marker = workdir / "photos.json"
    wanted = {**asdict(photos), "seed": seed}
    wanted["megapixels"] = list(photos.megapixels)
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8")) == wanted:
        stats = tree_stats(workdir / "photos")
        return f"photos: {stats['count']} images already in {workdir / 'photos'}, skipped"
    if marker.exists():
        raise FileExistsError(
            f"{marker} records photographs made with other arguments; remove {workdir} or "
            "pick another --workdir"
        )
    start = time.perf_counter()
    root = photo_tree(workdir / "photos", train=photos.train, val=0, seed=seed,
                      workers=workers, progress=progress, megapixels=photos.megapixels)
    marker.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")
    stats = tree_stats(root)
    return (f"photos: {stats['count']} crops of photographs in {root}, mean "
            f"{stats['mean_width']:.0f}x{stats['mean_height']:.0f} px, "
            f"{stats['mean_kb']:.1f} KB, {time.perf_counter() - start:.1f} s")


def _convert_step(workdir: Path, split: str, workers: int | None, progress: bool) -> str:
    from fastload.data.convert.folder import convert_folder, is_complete

    dst = workdir / "data" / f"{split}.lmdb"
    if is_complete(dst):
        return f"convert {split}: {dst} is already a finished database, skipped"
    report = convert_folder(workdir / "data" / split, dst, workers=workers, progress=progress)
    resumed = f", resumed after {report.resumed_from} files" if report.resumed_from else ""
    return (
        f"convert {split}: {report.summary()} -> {dst} in {report.seconds:.1f} s "
        f"({report.stored / max(report.seconds, 1e-9):.0f} img/s{resumed})"
    )


def _verify_step(workdir: Path, split: str) -> tuple[bool, str]:
    from fastload.data.format.verify import verify_lmdb

    report = verify_lmdb(workdir / "data" / f"{split}.lmdb")
    line = f"verify {split}: {report.summary()}"
    if not report.ok:
        line += "; first problems: " + "; ".join(f"{k}: {why}" for k, why in report.bad[:3])
    return report.ok, line


def _bench_command(workdir: Path, training: DemoTraining, device: str) -> str:
    limit = f" --limit {training.bench_limit}" if training.bench_limit else ""
    return (f"fastload bench {workdir / 'photos'} --rows {training.bench_rows} --epochs "
            f"{training.bench_epochs}{limit} --device {device}")


def _bench_step(workdir: Path, training: DemoTraining, seed: int, device: str) -> tuple[dict, str]:
    settings = {"rows": training.bench_rows, "epochs": training.bench_epochs,
                "limit": training.bench_limit, "seed": seed, "device": device, "data": "photos"}
    return _bench_record(workdir, "bench", "bench", settings,
                         rows=training.bench_rows, epochs=training.bench_epochs,
                         limit=training.bench_limit, device=device, seed=seed)


def _recipe_command(workdir: Path, training: DemoTraining, device: str) -> str:
    limit = f" --limit {training.recipe_limit}" if training.recipe_limit else ""
    return (f"fastload bench {workdir / 'photos'} --recipe {training.recipe} --epochs "
            f"{training.bench_epochs}{limit} --device {device}")


def _recipe_step(workdir: Path, training: DemoTraining, seed: int,
                 device: str) -> tuple[dict, str]:
    settings = {"recipe": training.recipe, "epochs": training.bench_epochs,
                "limit": training.recipe_limit, "seed": seed, "device": device,
                "data": "photos"}
    return _bench_record(workdir, "recipe", f"recipe {training.recipe}", settings, rows="ac",
                         recipe=training.recipe, epochs=training.bench_epochs,
                         limit=training.recipe_limit, device=device, seed=seed)


def _bench_record(workdir: Path, name: str, title: str, settings: dict,
                  **config: object) -> tuple[dict, str]:
    """``fastload bench`` with ``config`` on the demo's data, recorded in DIR/<name>.json
    (and skipped when that record was made with ``settings``): ``(bench JSON, line)``."""
    done = _cached(workdir / f"{name}.json", settings)
    if done is not None:
        return done["bench"], f"{title}: " + done["line"] + " (done already, skipped)"
    from fastload.bench.harness import BenchConfig, run_bench
    from fastload.bench.report import write_json

    report = run_bench(BenchConfig(data=workdir / "photos", workdir=workdir / "photos-bench",
                                   **config), log=lambda line: _progress_line(title, line))
    bench = json.loads(write_json(report, workdir / "photos-bench" / f"{name}.json").read_text())
    rows = {r["row"]: r for r in bench["rows"] if r.get("images_per_s")}
    parts = [f"({k}) {r['images_per_s']:,.0f} img/s" for k, r in rows.items()]
    line = ", ".join(parts) + f" [{report.seconds:.0f} s]"
    (workdir / f"{name}.json").write_text(
        json.dumps({"settings": settings, "line": line, "bench": bench}, indent=2) + "\n",
        encoding="utf-8")
    return bench, f"{title}: " + line


def _plan_step(workdir: Path, config: DemoConfig, training: DemoTraining, device: str,
               amp: str, train: int | None, val: int | None, sizes: tuple[int, ...]):
    """``(AmpChoice, DemoConfig, sentence, line)``: the AMP row's fate and the generated
    set's size on this machine (one of ``sizes``), from a few measured training steps
    (fastload.bench.demo_plan). --train given is kept; else a set made earlier keeps its
    size; --val given is kept, else a fifth of the training images."""
    from fastload.bench.demo_plan import plan_ab
    from fastload.train.amp import AmpChoice, choose_amp, native_bf16
    from fastload.train.compare import amp_mode, measure_training_pace

    start = time.perf_counter()
    native = native_bf16("cuda" if device == "gpu" else "cpu")
    pace = None
    if device == "cpu":
        pace = measure_training_pace(training.model, training.img_size, training.batch_size,
                                     bf16=amp == "auto" and not native)
    if amp == "off":
        choice = AmpChoice(None, False, None, "AMP row left out (--amp off)")
    elif amp == "on":
        choice = AmpChoice(amp_mode(), True, None, "AMP row run as asked (--amp on)")
    else:
        choice = choose_amp("cuda" if device == "gpu" else "cpu", native=native,
                            measure=lambda: pace.bf16_ratio if pace else None)
    made = _made_set(workdir)
    if train is not None:
        config = replace(config, train=train,
                         val=val if val is not None else val_images(train))
        sized = f"--train {train:,} as given"
    elif made is not None:
        config = replace(config, train=made["train"], val=made["val"])
        sized = f"the set made earlier is kept: {made['train']:,} training images"
    elif pace is None:
        config = replace(config, val=val if val is not None else config.val)
        sized = f"training runs on the GPU: {config.train:,} generated images"
    else:
        plan = plan_ab(pace.step_s, batch_size=training.batch_size, epochs=training.epochs,
                       rows=_ab_rows(choice), technique_steps=training.technique_steps,
                       model=training.model, img_size=training.img_size, sizes=sizes)
        config = replace(config, train=plan.train, val=val if val is not None else plan.val)
        sized = plan.sentence
    line = f"plan: {sized}; {choice.sentence} [{time.perf_counter() - start:.0f} s]"
    return choice, config, sized, line


def _made_set(workdir: Path) -> dict | None:
    """The arguments of the set a finished earlier generation made (DIR/synth.json), where
    they give its sizes."""
    try:
        made = json.loads((workdir / "synth.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sized = isinstance(made, dict) and all(isinstance(made.get(k), int) for k in SPLITS)
    return made if sized else None


def _ab_rows(amp) -> list[str]:
    return [row for row in AB_ROWS if row != "amp" or amp.mode is not None]


def _progress_line(title: str, line: str) -> None:
    """A bench's per-row, per-round line, on stderr beside the other progress."""
    print(f"  {title}: {line}", file=sys.stderr, flush=True)


def _ab_step(workdir: Path, training: DemoTraining, seed: int, device: str,
             progress: bool, rows: list[str]) -> tuple[list[dict], str]:
    settings = {**asdict(training), "seed": seed, "device": device, "rows": rows}
    done = _cached(workdir / "ab.json", settings)
    if done is not None:
        return done["rows"], "finetune A/B: " + done["line"] + " (done already, skipped)"
    import math

    from fastload.bench.demo_plan import technique_row_steps, technique_rows
    from fastload.train.compare import run_compare
    from fastload.train.finetune import FinetuneConfig

    base = FinetuneConfig(data=str(workdir / "data"), model=training.model,
                          img_size=training.img_size, epochs=training.epochs,
                          batch_size=training.batch_size, seed=seed, progress=False,
                          device="cuda" if device == "gpu" else "cpu")
    per_epoch = math.ceil(_split_count(workdir, "train") / training.batch_size)
    cut = technique_row_steps(per_epoch, training.epochs, training.technique_steps)
    row_steps = {row: cut for row in technique_rows(rows)} if cut is not None else {}
    start = time.perf_counter()
    ab_rows = run_compare(base, rows=rows, progress=progress, row_steps=row_steps)
    seconds = time.perf_counter() - start
    for row in ab_rows:
        if row["row"] in row_steps:
            row["label"] += f" (last epoch cut at {training.technique_steps} steps)"
    rows = ab_rows
    by_row = {r["row"]: r for r in rows}
    top1 = by_row["fastload"]["val_top1"]  # the full-length fastload row
    loader = by_row["fastload"]["images_per_s"] / by_row["baseline"]["images_per_s"]
    line = (f"{len(rows)} configurations, {training.model} from scratch at {training.img_size} "
            f"px, {training.epochs} epochs: fastload.DataLoader x{loader:.2f} images/s against "
            f"torchvision's (both fp32), val top-1 (fastload row) "
            f"{'n/a' if top1 is None else f'{100 * top1:.0f}%'} [{seconds:.0f} s]")
    (workdir / "ab.json").write_text(
        json.dumps({"settings": settings, "line": line, "rows": rows}, indent=2) + "\n",
        encoding="utf-8")
    return rows, "finetune A/B: " + line


def _split_count(workdir: Path, split: str) -> int:
    """Images in the generated ``split`` folder (one file per image, in class folders)."""
    return sum(1 for path in (workdir / "data" / split).rglob("*") if path.is_file())


def _report_step(workdir: Path, config: DemoConfig, photos: DemoPhotos,
                 training: DemoTraining, device: str, bench: dict | None, recipe: dict | None,
                 ab_rows: list[dict] | None, notes: list[str]) -> list[str]:
    from fastload.bench.demo_report import headline, write_report

    low, high = photos.megapixels
    data = (f"loader benches: {photos.train} crops of real photographs, {low:g}-{high:g} MP; "
            f"fine-tune A/B: {config.train} train / {config.val} val generated JPEGs, "
            f"{config.classes} classes, {config.min_side}-{config.max_side} px")
    rows = [r["row"] for r in ab_rows or []] or list(AB_ROWS)
    finetune = (f"fastload finetune {workdir / 'data'} --compare {','.join(rows)} "
                f"--img-size {training.img_size} --epochs {training.epochs} "
                f"--batch-size {training.batch_size}")
    report = write_report(workdir, bench=bench, recipe=recipe, ab_rows=ab_rows,
                          machine=_machine_line(device), data=data, gpu=device == "gpu",
                          notes=notes,
                          commands={"bench": _bench_command(workdir, training, device),
                                    "recipe": _recipe_command(workdir, training, device),
                                    "finetune": finetune})
    return [f"report: {report}"] + ["  " + line
                                    for line in headline(bench, ab_rows, recipe).lines()]


def run(args: argparse.Namespace) -> int:
    train, val, sizes = args.train, args.val, TRAIN_SIZES
    if args.tiny:
        config, photos, training = TINY, TINY_PHOTOS, TINY_TRAINING
        val, sizes = config.val, (config.train,)
    else:
        config = DemoConfig(classes=args.classes, seed=args.seed)
        photos, training = DemoPhotos(), DemoTraining(img_size=args.img_size)
    if args.epochs is not None:
        training = replace(training, epochs=args.epochs)
    workdir = Path(args.workdir)
    if workdir.exists() and not workdir.is_dir():
        print(f"fastload demo: error: --workdir {str(workdir)!r} is a file; pass a folder (new, "
              "or made by an earlier demo)", file=sys.stderr)
        return 2
    workdir.mkdir(parents=True, exist_ok=True)
    from fastload.utils.progress import format_duration

    progress = sys.stderr.isatty()  # bars for synth and convert: a terminal only
    measured = training.epochs > 0
    steps = 1 + 2 * len(SPLITS) + (6 if measured else 0)
    step = 0
    started = time.perf_counter()

    def say(line: str) -> None:
        nonlocal step
        step += 1
        elapsed = format_duration(time.perf_counter() - started)
        print(f"[{step}/{steps}] {line} ({elapsed} elapsed)", flush=True)

    try:
        if measured:
            device = _device()
            if device == "gpu":
                print("a CUDA GPU is present: DALI decodes on it and training runs on it",
                      flush=True)
            # the AMP row and the set's size, decided from this machine before anything is made
            amp, config, sized, line = _plan_step(workdir, config, training, device,
                                                  args.amp, train, val, sizes)
            say(line)
        elif train is not None:
            config = replace(config, train=train,
                             val=val if val is not None else val_images(train))
        elif val is not None:
            config = replace(config, val=val)
        say(_synth_step(workdir, config, args.workers, progress))
        for split in SPLITS:
            say(_convert_step(workdir, split, args.workers, progress))
        ok = True
        for split in SPLITS:
            split_ok, line = _verify_step(workdir, split)
            ok = ok and split_ok
            say(line)
        if ok and measured:
            say(_photos_step(workdir, photos, config.seed, args.workers, progress))
            bench, line = _bench_step(workdir, training, config.seed, device)
            say(line)
            recipe, line = _recipe_step(workdir, training, config.seed, device)
            say(line)
            # the A/B's rows and epochs print plain lines in a log, a bar on a terminal
            ab_rows, line = _ab_step(workdir, training, config.seed, device, True,
                                     _ab_rows(amp))
            say(line)
            lines = _report_step(workdir, config, photos, training, device, bench, recipe,
                                 ab_rows, [sized, amp.sentence])
            say(lines[0])
            for line in lines[1:] + ["  " + amp.sentence]:
                print(line, flush=True)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"fastload demo: error: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1
