"""``fastload convert SRC DST``: an image folder, list, tar shards or parquet/datasets into an LMDB."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    from fastload.tools.cli import output_file

    parser = subparsers.add_parser(
        "convert",
        help="convert images (a folder, a list, WebDataset tars, parquet) into a fastload LMDB",
        description=(
            "Convert SRC into the LMDB directory DST. SRC is an ImageFolder tree "
            "SRC/<class>/<images>; a CSV of `path,label` rows or a JSONL of {\"path\", \"label\"} "
            "objects; WebDataset .tar shards (a file, a folder of them or a quoted glob such "
            "as 'shards/*.tar'); .parquet files (likewise); or a Hugging Face datasets "
            "folder made by save_to_disk. JPEGs are stored byte for byte; other formats "
            "become 8-bit RGB JPEGs. Unreadable files are skipped and listed in DST/errors.json. "
            "An interrupted run is resumed by rerunning the same command."
        ),
    )
    parser.add_argument("src", metavar="SRC",
                        help="ImageFolder directory, .csv/.jsonl list, .tar shards, .parquet "
                             "files (file, folder or glob) or a datasets save_to_disk folder")
    parser.add_argument("dst", metavar="DST",
                        help="LMDB directory to write, or a URL (s3://bucket/train.set, with "
                             "--shards or --shard-size) to upload a sharded set to")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes that decode the images needing conversion, and "
                             "cores that check the JPEGs kept as they are (WORKERS - 1 threads and "
                             "the reading thread; default: all cores)")
    parser.add_argument("--max-side", type=int, default=None, metavar="N",
                        help="re-encode images whose long side exceeds N pixels, resized to N")
    parser.add_argument("--quality", type=int, default=90,
                        help="JPEG quality of re-encoded images (default: 90)")
    parser.add_argument("--check", choices=("markers", "decode"), default="decode",
                        help="how JPEGs get validated: a strict 1/8-scale decode that skips "
                             "those with damaged data, which decoders read with only a "
                             "warning (default), or their markers and end-of-image only "
                             "(faster; the loader then checks each record at its first read)")
    parser.add_argument("--composite", action="store_true",
                        help="composite transparent pixels on white (and scale 16-bit images "
                             "by 1/257) when re-encoding; by default images are converted as "
                             "torchvision's ImageFolder loads them (convert('RGB'))")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first unreadable file instead of skipping it")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a finished database at DST")
    parser.add_argument("--commit-every", type=int, default=None, metavar="N",
                        help="source files per LMDB commit, i.e. resume granularity (default: 256)")
    parser.add_argument("--shards", type=int, default=None, metavar="N",
                        help="write N LMDB shards under DST plus a manifest (a sharded set "
                             "that reads as one data set, in source order)")
    parser.add_argument("--shard-index", type=int, default=None, metavar="I",
                        help="with --shards: convert shard I only, so N processes or machines "
                             "convert in parallel; the last to finish writes the manifest")
    parser.add_argument("--shard-size", type=float, default=None, metavar="MB",
                        help="instead of --shards: the shards' target size in MB (the source's "
                             "bytes / MB, rounded up; 64-256 suit streaming)")
    parser.add_argument("--staging", default=None, metavar="DIR",
                        help="DST a URL: the local folder each shard is written in before it "
                             "is uploaded (default: staging/ in the shard cache, "
                             "$FASTLOAD_CACHE or ~/.cache/fastload)")
    parser.add_argument("--image-column", default=None, metavar="NAME",
                        help="parquet/datasets: the image column, {bytes, path} or binary "
                             "(default: image)")
    parser.add_argument("--label-column", default=None, metavar="NAME",
                        help="parquet/datasets: the label column (default: label)")
    parser.add_argument("--label-field", default=None, metavar="NAME",
                        help="WebDataset: read each sample's label from this field of its "
                             ".json member (default: its .cls member)")
    parser.add_argument("--engine", choices=("ray", "dask", "spark"), default=None,
                        help="with --shards/--shard-size: convert each shard as a task of this "
                             "engine (retried after a lost worker; the manifest is written "
                             "here once every shard is checked); DST a folder every worker "
                             "sees, or a URL every worker can write. Default: this "
                             "machine's processes")
    parser.add_argument("--engine-address", default=None, metavar="ADDR",
                        help="with --engine: the cluster to join (a Ray address, default "
                             "$RAY_ADDRESS; a Dask scheduler address; a Spark master URL when "
                             "no SparkSession is active); default: a local one for this run")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--json", default=None, metavar="FILE", type=output_file,
                        help="write the report as JSON: path, stored, skipped, seen, errors "
                             "(count), skipped_files (path and reason of each), kept, "
                             "reencoded, seconds, resumed, resumed_from, classes, and a "
                             "sharded set's shards, manifest, finished_shards; '-': on "
                             "stdout, the text on stderr")
    parser.set_defaults(run=run)
    return parser


# convert_folder's arguments -> the flags that set them, for messages shown to a shell user.
_FLAGS = {"workers": "--workers", "max_side": "--max-side", "quality": "--quality",
          "strict": "--strict", "overwrite": "--overwrite", "check": "--check",
          "commit_every": "--commit-every", "shards": "--shards", "shard_index": "--shard-index",
          "shard_size_mb": "--shard-size", "staging": "--staging",
          "image_column": "--image-column", "label_column": "--label-column",
          "label_field": "--label-field", "engine": "--engine",
          "engine_address": "--engine-address"}


def run(args: argparse.Namespace) -> int:
    """Exit status as ``fastload --help`` says: 2 for an option value out of range (nothing
    written), 1 for a conversion that failed."""
    if "numpy" not in sys.modules:  # a conversion does no linear algebra: numpy's OpenBLAS
        # would start a thread per core that spins about 0.1 CPU-s after numpy's import, on
        # the cores the strict check runs on
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from fastload.utils.heap import keep_freed_heap

    keep_freed_heap()  # this process is the command's: LMDB's freed pages kept for the next
    from fastload.data.convert.folder import (
        DEFAULT_COMMIT_EVERY,
        ConvertError,
        check_convert_options,
        check_engine_options,
        convert_folder,
    )
    from fastload.data.format.untrusted import refuse_url
    from fastload.data.remote import locate
    from fastload.tools.cli import (
        EXIT_FAILURE,
        EXIT_USAGE,
        printable,
        report_error,
        write_json_report,
    )

    if args.commit_every is not None and args.commit_every <= 0:
        print(f"fastload convert: error: --commit-every should be a positive number of files, "
              f"but got {args.commit_every}", file=sys.stderr)
        return 2
    try:
        refuse_url(args.src, "SRC")
        if not args.src:
            raise ValueError("SRC is empty; pass the folder or list of images to convert")
        if not args.dst:
            raise ValueError("DST is empty; pass the folder to write the database into")
        remote = not isinstance(locate(args.dst, None, "DST"), str)  # unsupported: refused
        if remote and args.shards is None and args.shard_size is None:
            raise ValueError(f"DST {args.dst!r} is a URL, where fastload writes sharded sets "
                             "only: pass --shards N or --shard-size MB (64-256 MB shards suit "
                             "object storage)")
        if args.staging is not None and not remote:
            raise ValueError("--staging applies when DST is a URL; drop it for a local DST")
        check_convert_options(
            workers=args.workers, max_side=args.max_side, quality=args.quality,
            check=args.check, shards=args.shards, shard_index=args.shard_index,
            shard_size_mb=args.shard_size)
        check_engine_options(args.engine, args.engine_address, shards=args.shards,
                             shard_index=args.shard_index, shard_size_mb=args.shard_size)
    except (ImportError, ValueError) as exc:  # an option value: nothing was done
        return report_error("convert", exc, _FLAGS, EXIT_USAGE)
    try:
        report = convert_folder(
            args.src, args.dst, workers=args.workers, max_side=args.max_side,
            quality=args.quality, strict=args.strict, overwrite=args.overwrite,
            progress=not args.no_progress, check=args.check, composite=args.composite,
            commit_every=DEFAULT_COMMIT_EVERY if args.commit_every is None else args.commit_every,
            shards=args.shards, shard_index=args.shard_index, image_column=args.image_column,
            label_column=args.label_column, label_field=args.label_field,
            shard_size_mb=args.shard_size, staging=args.staging, engine=args.engine,
            engine_address=args.engine_address,
        )
    except ImportError as exc:  # a source kind whose optional extra is not installed
        return report_error("convert", exc, _FLAGS, EXIT_USAGE)
    except (ConvertError, OSError, ValueError) as exc:
        return report_error("convert", exc, _FLAGS, EXIT_FAILURE)
    except KeyboardInterrupt:
        print(f"fastload convert: interrupted; rerun the same command to resume into "
              f"{printable(args.dst)}", file=sys.stderr)
        return 130
    text = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON's
    resumed = (f" (resumed a partial conversion at file {report.resumed_from})"
               if report.resumed else "")
    print(f"{report.summary()} in {report.seconds:.1f} s{resumed}; "
          f"{report.kept} kept as they were, {report.reencoded} re-encoded -> "
          f"{printable(report.path)}", file=text)
    sharded = args.shards is not None or args.shard_size is not None
    if sharded:
        if report.finished_shards:
            print(f"finished shard(s) {', '.join(map(str, report.finished_shards))} found "
                  "from an earlier run: checked and kept", file=text)
        print(f"sharded set {printable(report.path)}: " + (
            f"manifest written ({report.manifest['count']} records in "
            f"{report.manifest['num_shards']} shards)"
            if report.manifest else "manifest pending until every shard is converted" + (
                "; the set it replaces is kept, readable, until then"
                if report.replacing else "")), file=text)
    if report.skipped:
        where = ("errors.json in each shard" if args.shards or args.shard_size
                 else printable(report.path / "errors.json"))
        print(f"skipped files and reasons: {where}", file=text)
        for error in report.errors[:5]:
            print(f"  {printable(error['path'])}: {printable(error['reason'])}", file=text)
        if report.skipped > 5:
            print(f"  ... and {report.skipped - 5} more", file=text)
    if args.json is not None:
        wrote = write_json_report("convert", _json_values(report, sharded), args.json)
        if wrote is not None:
            print(f"wrote {printable(wrote)}")
    return 0


def _json_values(report, sharded: bool) -> dict:
    """convert's ``--json`` fields: the report's, ``errors`` as a count and each skipped
    file under ``skipped_files``; a set's ``shards`` from its manifest (None while pending)."""
    import dataclasses

    values = dataclasses.asdict(report)
    skipped_files = values.pop("errors")
    values = {"ok": True, "path": str(report.path), "sharded": sharded,
              "errors": len(skipped_files), **{k: v for k, v in values.items() if k != "path"},
              "skipped_files": skipped_files}
    if sharded:
        values["shards"] = (report.manifest or {}).get("num_shards")
    return values
