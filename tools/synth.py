"""``fastload synth OUT``: write an ImageFolder tree of generated JPEGs, or with ``--photos``
of crops of real photographs (:mod:`fastload.data.pictures.photos`)."""

from __future__ import annotations

import argparse
import time


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "synth",
        help="generate an ImageFolder tree of realistic JPEGs",
        description="Write OUT/train/<class>/*.jpg and OUT/val/<class>/*.jpg: photo-like "
        "pictures (about 300-800 px a side, 60-120 KB) whose classes a small model can learn, "
        "or with --photos collages of crops of the public-domain and CC0 photographs "
        "scikit-image and matplotlib ship (0.2-0.4 MP, class k = photo k). "
        "The same arguments give the same bytes.",
    )
    parser.add_argument("out", metavar="OUT", help="output folder")
    parser.add_argument("--train", type=int, default=1000, help="training images (default 1000)")
    parser.add_argument("--val", type=int, default=200, help="validation images (default 200)")
    parser.add_argument("--classes", type=int, default=None,
                        help="number of classes (default 10; with --photos all 7 photos)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all cores)"
    )
    parser.add_argument("--min-side", type=int, default=None,
                        help="shortest side, px (default 300; not with --photos)")
    parser.add_argument("--max-side", type=int, default=None,
                        help="longest side, px (default 800; not with --photos)")
    parser.add_argument(
        "--size",
        type=_size,
        default=None,
        metavar="WxH",
        help="every picture WxH px, e.g. 2100x1680 for camera-sized photos "
        "(default: drawn between --min-side and --max-side, or 0.2-0.4 MP with --photos)",
    )
    parser.add_argument(
        "--photos", action="store_true",
        help="collages of crops of real photographs instead of generated pictures (needs "
        "scikit-image: pip install 'fastload-dali[photos]')",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(run=run)
    return parser


def _size(text: str) -> tuple[int, int]:
    """``"2100x1680"`` -> ``(1680, 2100)``: (height, width) from the shell's width x height."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--size should be WIDTHxHEIGHT in pixels, e.g. 2100x1680, but got {text!r}"
        ) from None
    return height, width


# synthesize's arguments -> the flags that set them, for messages shown to a shell user.
_FLAGS = {"train": "--train", "val": "--val", "classes": "--classes", "seed": "--seed",
          "quality": "--quality", "workers": "--workers", "min_side": "--min-side",
          "max_side": "--max-side", "size": "--size", "out": "OUT"}


def _write(args: argparse.Namespace) -> tuple[object, int]:
    """Write the tree the flags ask for; ``(root, classes)``."""
    from fastload.data.pictures.photos import SOURCES, photo_tree
    from fastload.data.pictures.synth import synthesize

    common = {"train": args.train, "val": args.val, "classes": args.classes, "seed": args.seed,
              "quality": args.quality, "workers": args.workers,
              "progress": not args.no_progress, "size": args.size}
    if args.photos:
        given = [flag for flag, value in (("--min-side", args.min_side),
                                          ("--max-side", args.max_side)) if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} only apply to generated pictures; --photos draws "
                             "0.2-0.4 MP pictures, or every picture --size WxH")
        classes = len(SOURCES) if args.classes is None else args.classes
        return photo_tree(args.out, **{**common, "classes": classes}), classes
    classes = 10 if args.classes is None else args.classes
    root = synthesize(args.out, **{**common, "classes": classes},
                      min_side=300 if args.min_side is None else args.min_side,
                      max_side=800 if args.max_side is None else args.max_side)
    return root, classes


def run(args: argparse.Namespace) -> int:
    from fastload.data.pictures.synth import tree_stats
    from fastload.tools.cli import EXIT_FAILURE, EXIT_USAGE, report_error

    start = time.perf_counter()
    try:
        root, classes = _write(args)
    except ValueError as exc:  # both writers check their arguments before writing anything
        return report_error("synth", exc, _FLAGS, EXIT_USAGE)
    except OSError as exc:
        return report_error("synth", exc, _FLAGS, EXIT_FAILURE)
    seconds = time.perf_counter() - start
    stats = tree_stats(root)
    kind = ", crops of photographs" if args.photos else ""
    print(
        f"synth: {stats['count']} images ({args.train} train, {args.val} val, "
        f"{classes} classes{kind}) in {root}, mean {stats['mean_width']:.0f}x"
        f"{stats['mean_height']:.0f} px, mean {stats['mean_kb']:.1f} KB, "
        f"{stats['count'] / max(seconds, 1e-9):.0f} img/s"
    )
    return 0
