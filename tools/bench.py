"""``fastload bench DATA``: loaders side by side on the same images; table, JSON, PNG."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fastload.bench.rows import ROW_KEYS

_ROWS_HELP = (
    "rows to run, as letters (default: all): a torchvision ImageFolder + torch DataLoader; "
    "b torch DataLoader + fastload.LMDBDataset; c fastload.DataLoader on the folder; "
    "d fastload.DataLoader on the LMDB; e on an LMDB converted with --max-side; "
    "f decode ceiling (Pillow full decode, all cores); g hand-written DALI graph; "
    "h FFCV (skipped unless ffcv is installed); i entropy-decode floor (each JPEG at 1/8 DCT "
    "scale, all cores)"
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench",
        help="measure loaders side by side (table, --json, --plot)",
        description="Measure data loaders side by side on the same images in interleaved "
        "rounds: images/s (median over epochs after warm-up), ratio to (a), share of the "
        "decode ceiling (f) and of the entropy-decode floor (i), memory and CPU use of each "
        "loader's process tree.",
    )
    parser.add_argument("data", type=Path,
                        help="ImageFolder tree, or a folder with train/ and val/ (fastload synth)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per batch (64)")
    parser.add_argument("--image-size", type=int, default=224, help="output side in px (224)")
    parser.add_argument("--transforms", choices=("train", "val"), default="train",
                        help="train: RandomResizedCrop, flip; val: Resize, CenterCrop (train)")
    parser.add_argument("--epochs", type=int, default=3, help="measured epochs per row (3)")
    parser.add_argument("--warmup-epochs", type=int, default=1,
                        help="unmeasured epochs per row before measuring (1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="worker processes / DALI threads per row (default: all cores)")
    parser.add_argument("--rows", default=ROW_KEYS, help=_ROWS_HELP)
    parser.add_argument("--max-side", type=int, default=256,
                        help="stored long side for row (e)'s LMDB (256)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="cache for converted LMDBs and subsets (default: DATA.fastload-bench "
                        "next to DATA)")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only N images, spread evenly over the classes")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="gpu: mixed (nvJPEG) decode, batches on cuda:0; auto: gpu when "
                        "CUDA is available (auto)")
    parser.add_argument("--hw-decoder-load", type=float, default=0.65,
                        help="share of JPEGs sent to the hardware decoder on GPU (0.65)")
    parser.add_argument("--seed", type=int, default=0, help="shuffling / augmentation seed (0)")
    parser.add_argument("--recipe", default=None, metavar="NAME[,NAME...]",
                        help="compare torch's tuned loader (a) with fastload (c) on transform "
                        "recipes, side by side, one table row a recipe: 'all' or names from "
                        "fastload.bench.recipes.RECIPE_NAMES (default, ra, ta_wide, augmix, "
                        "autoaugment, random_erasing, backend_tensor, use_v2, mixup_cutmix, "
                        "eval, timm_train, timm_deit, timm_eval)")
    parser.add_argument("--json", type=_json_path, default=None, metavar="FILE",
                        help="write the results as JSON ('-': on stdout, the table on stderr)")
    parser.add_argument("--plot", type=_plot_path, default=None, metavar="FILE.png",
                        help="write a PNG bar chart")
    parser.set_defaults(run=run)
    return parser


def _json_path(text: str) -> Path:
    from fastload.tools.cli import output_file

    return Path(output_file(text))


def _plot_path(text: str) -> Path:
    from fastload.tools.cli import checked_output
    from fastload.utils.checks import is_png

    return Path(checked_output(text, is_png, "a PNG chart"))


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


# BenchConfig fields whose flag is not ``--`` + the field name with dashes.
_FLAGS = {"data": "DATA", "rows": "--rows", "batch_size": "--batch-size",
          "image_size": "--image-size", "transforms": "--transforms", "epochs": "--epochs",
          "warmup_epochs": "--warmup-epochs", "threads": "--threads", "max_side": "--max-side",
          "workdir": "--workdir", "limit": "--limit", "device": "--device",
          "hw_decoder_load": "--hw-decoder-load", "seed": "--seed"}


def run(args: argparse.Namespace) -> int:
    """Exit status as ``fastload --help`` says: 2 for an option value BenchConfig refuses,
    1 when the data cannot be used or a row failed."""
    from fastload.bench.harness import BenchConfig, format_table, run_bench, write_json, write_plot
    from fastload.bench.report import report_json
    from fastload.tools.cli import EXIT_FAILURE, EXIT_USAGE, report_error

    rows = "".join(ch for ch in args.rows.lower() if ch not in ", ")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.recipe is not None:
        return _run_recipes(args, log)
    try:
        config = BenchConfig(
            data=args.data,
            rows=rows,
            batch_size=args.batch_size,
            image_size=args.image_size,
            transforms=args.transforms,
            epochs=args.epochs,
            warmup_epochs=args.warmup_epochs,
            threads=args.threads,
            max_side=args.max_side,
            workdir=args.workdir,
            limit=args.limit,
            device=_device(args.device),
            hw_decoder_load=args.hw_decoder_load,
            seed=args.seed,
        )
    except (ValueError, TypeError) as exc:  # an option value: nothing was done
        return report_error("bench", exc, _FLAGS, EXIT_USAGE)
    try:
        report = run_bench(config, log=log)
    except (ValueError, OSError) as exc:  # the data: missing, empty, unreadable
        return report_error("bench", exc, _FLAGS, EXIT_FAILURE)
    to_stdout = args.json is not None and os.fspath(args.json) == "-"
    print(format_table(report), file=sys.stderr if to_stdout else sys.stdout)
    if to_stdout:
        print(report_json(report), end="", flush=True)
    elif args.json is not None:
        print(f"wrote {os.fspath(write_json(report, args.json))}")
    if args.plot is not None:
        if any(r.images_per_s is not None for r in report.rows):
            print(f"wrote {os.fspath(write_plot(report, args.plot))}",
                  file=sys.stderr if to_stdout else sys.stdout)
        else:
            print(f"no row was measured; {os.fspath(args.plot)} not written", file=sys.stderr)
    return 0 if all(r.status != "failed" for r in report.rows) else 1


def _run_recipes(args: argparse.Namespace, log) -> int:
    from fastload.bench.harness import run_recipes
    from fastload.bench.recipes import RECIPE_NAMES
    from fastload.tools.cli import EXIT_FAILURE, EXIT_USAGE, report_error

    names = list(RECIPE_NAMES) if args.recipe == "all" else [
        n.strip() for n in args.recipe.split(",") if n.strip()]
    unused = [flag for flag, value in (("--json", args.json), ("--plot", args.plot))
              if value is not None]
    if unused:  # the recipe table is printed only: refused rather than silently not written
        verb, them = ("apply", "them") if len(unused) > 1 else ("applies", "it")
        print(f"fastload bench: error: {' and '.join(unused)} {verb} to the loader rows, not to "
              f"--recipe (whose table is printed); drop {them}, or bench the rows without "
              "--recipe", file=sys.stderr)
        return EXIT_USAGE
    try:
        table, _ = run_recipes(
            names, log=log, data=args.data, batch_size=args.batch_size,
            image_size=args.image_size, epochs=args.epochs, warmup_epochs=args.warmup_epochs,
            threads=args.threads, workdir=args.workdir, limit=args.limit,
            device=_device(args.device), hw_decoder_load=args.hw_decoder_load, seed=args.seed)
    except (ValueError, TypeError) as exc:  # an option value or a recipe name
        return report_error("bench", exc, _FLAGS, EXIT_USAGE)
    except OSError as exc:  # the data: missing, empty, unreadable
        return report_error("bench", exc, _FLAGS, EXIT_FAILURE)
    print(table)
    return 0
