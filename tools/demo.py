"""``fastload demo --workdir DIR``: generate a data set, convert it to LMDB, verify it, fine-tune.

Each step prints one line and is skipped when its output already exists, so an
interrupted demo resumes where it stopped and a finished one reruns in seconds::

    DIR/synth.json            arguments of the finished generation (its completion marker)
    DIR/images/{train,val}/   generated ImageFolder tree (fastload.data.synth)
    DIR/lmdb/{train,val}/     fastload LMDB databases (fastload.data.convert)
    DIR/finetune.json         settings and figures of the finished fine-tune (fastload.train.finetune)
    DIR/finetune.jsonl        its per-step log

The fine-tune trains a ViT-Tiny from scratch for two epochs with ``fastload.DataLoader``
reading the LMDBs; the generated classes are learnable, so validation top-1 far above
chance shows that images and labels line up end to end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

SPLITS = ("train", "val")


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo data set."""

    classes: int = 10
    train: int = 400
    val: int = 100
    seed: int = 0
    min_side: int = 300
    max_side: int = 800


@dataclass(frozen=True)
class DemoTraining:
    """Settings of the demo fine-tune (small images, so it takes about a minute on 2 cores)."""

    model: str = "vit_tiny_patch16_224"
    img_size: int = 64
    epochs: int = 2
    batch_size: int = 32
    loader: str = "fastload"


TINY = DemoConfig(classes=4, train=48, val=16, seed=0, min_side=64, max_side=160)
TINY_TRAINING = DemoTraining(img_size=32, epochs=1, batch_size=16)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo",
        help="generate images, convert them to LMDB and verify (what `make demo` runs)",
        description="Generate a realistic image data set, convert its train and val splits "
        "to fastload LMDB databases and verify them. Steps whose output exists are skipped.",
    )
    parser.add_argument("--workdir", default=".demo", help="working folder (default .demo)")
    parser.add_argument("--classes", type=int, default=DemoConfig.classes,
                        help=f"classes to generate (default {DemoConfig.classes})")
    parser.add_argument("--train", type=int, default=DemoConfig.train,
                        help=f"training images (default {DemoConfig.train})")
    parser.add_argument("--val", type=int, default=DemoConfig.val,
                        help=f"validation images (default {DemoConfig.val})")
    parser.add_argument("--seed", type=int, default=DemoConfig.seed, help="random seed (default 0)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: all cores)")
    parser.add_argument("--img-size", type=int, default=DemoTraining.img_size,
                        help=f"fine-tune resolution in px (default {DemoTraining.img_size})")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"fine-tune epochs (default {DemoTraining.epochs}; 0 skips it)")
    # Test hook: a tiny data set with small images, so the whole demo runs in seconds.
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(run=run)
    return parser


def _synth_step(workdir: Path, config: DemoConfig, workers: int | None, progress: bool) -> str:
    from fastload.data.synth import synthesize, tree_stats

    images = workdir / "images"
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


def _convert_step(workdir: Path, split: str, workers: int | None, progress: bool) -> str:
    from fastload.data.convert import convert_folder, is_complete

    dst = workdir / "lmdb" / split
    if is_complete(dst):
        return f"convert {split}: {dst} is already a finished database, skipped"
    report = convert_folder(workdir / "images" / split, dst, workers=workers, progress=progress)
    resumed = f", resumed after {report.resumed_from} files" if report.resumed_from else ""
    return (
        f"convert {split}: {report.summary()} -> {dst} in {report.seconds:.1f} s "
        f"({report.stored / max(report.seconds, 1e-9):.0f} img/s{resumed})"
    )


def _verify_step(workdir: Path, split: str) -> tuple[bool, str]:
    from fastload.data.verify import verify_lmdb

    dst = workdir / "lmdb" / split
    report = verify_lmdb(dst)
    line = f"verify {split}: {report.summary()}"
    if not report.ok:
        line += "; first problems: " + "; ".join(f"{k}: {why}" for k, why in report.bad[:3])
    return report.ok, line


def _finetune_step(workdir: Path, training: DemoTraining, seed: int, progress: bool) -> str:
    marker = workdir / "finetune.json"
    wanted = {**asdict(training), "seed": seed}
    if marker.exists():
        done = json.loads(marker.read_text(encoding="utf-8"))
        if done.get("settings") == wanted:
            return "finetune: " + done["line"] + " (done already, skipped)"
    from fastload.train.finetune import FinetuneConfig, finetune

    config = FinetuneConfig(
        train_lmdb=str(workdir / "lmdb" / "train"), val_lmdb=str(workdir / "lmdb" / "val"),
        model=training.model, img_size=training.img_size, loader=training.loader,
        epochs=training.epochs, batch_size=training.batch_size, seed=seed,
        log=str(workdir / "finetune.jsonl"), progress=progress,
    )
    start = time.perf_counter()
    result = finetune(config)
    seconds = time.perf_counter() - start
    top1 = " -> ".join(
        "n/a" if e.val_top1 is None else f"{100 * e.val_top1:.0f}%" for e in result.epochs
    )
    images = sum(e.images for e in result.epochs)
    busy = sum(e.epoch_time_s for e in result.epochs)
    stall = sum(e.data_wait_s for e in result.epochs) / max(
        sum(e.data_wait_s + e.compute_s for e in result.epochs), 1e-9
    )
    line = (
        f"{training.model} from scratch, {training.img_size} px, {training.epochs} epoch(s), "
        f"{training.loader} loader on LMDB: val top-1 by epoch {top1} "
        f"(chance {100 / len(result.classes):.0f}%), {images / max(busy, 1e-9):.1f} img/s, "
        f"data stall {100 * stall:.1f}%, peak RSS {max(e.peak_rss_mb for e in result.epochs):.0f} "
        f"MiB, {seconds:.0f} s"
    )
    marker.write_text(json.dumps({"settings": wanted, "line": line,
                                  "epochs": [e.as_dict() for e in result.epochs]}, indent=2)
                      + "\n", encoding="utf-8")
    return "finetune: " + line


def run(args: argparse.Namespace) -> int:
    if args.tiny:
        config, training = TINY, TINY_TRAINING
    else:
        config = DemoConfig(classes=args.classes, train=args.train, val=args.val, seed=args.seed)
        training = DemoTraining(img_size=args.img_size)
    if args.epochs is not None:
        if args.epochs < 0:
            print(f"fastload demo: error: --epochs should be 0 or more, but got {args.epochs}",
                  file=sys.stderr)
            return 2
        training = replace(training, epochs=args.epochs)
    workdir = Path(args.workdir)
    progress = sys.stderr.isatty()
    steps = 1 + 2 * len(SPLITS) + (1 if training.epochs > 0 else 0)
    step = 0

    def say(line: str) -> None:
        nonlocal step
        step += 1
        print(f"[{step}/{steps}] {line}", flush=True)

    try:
        say(_synth_step(workdir, config, args.workers, progress))
        for split in SPLITS:
            say(_convert_step(workdir, split, args.workers, progress))
        ok = True
        for split in SPLITS:
            split_ok, line = _verify_step(workdir, split)
            ok = ok and split_ok
            say(line)
        if ok and training.epochs > 0:
            say(_finetune_step(workdir, training, config.seed, progress))
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"fastload demo: error: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1
