"""``fastload verify DST``: record count, every checksum, decode of a sample (or all)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify",
        help="check a fastload LMDB: count, checksums, decodes",
        description=(
            "Check DST: the record count against its metadata, every record's CRC-32 and "
            "label, and that a seeded sample of records (all with --full) decodes to the "
            "size the record states, without damaged JPEG data (a strict decode). Exits "
            "non-zero and lists the bad keys on any problem."
        ),
    )
    parser.add_argument("dst", metavar="DST", help="LMDB directory written by fastload convert")
    parser.add_argument("--full", action="store_true", help="decode every record")
    parser.add_argument("--sample", type=int, default=64, metavar="N",
                        help="records to decode without --full (default: 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the decode sample")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from fastload.data.manifest import is_sharded_set
    from fastload.data.shards import verify_set
    from fastload.data.verify import verify_lmdb

    check = verify_set if is_sharded_set(args.dst) else verify_lmdb  # a set: every shard
    try:
        report = check(args.dst, full=args.full, sample=args.sample, seed=args.seed)
    except (OSError, ValueError) as exc:
        from fastload.tools.cli import EXIT_FAILURE, report_error

        return report_error("verify", exc, {"overwrite": "`fastload convert --overwrite`"},
                            EXIT_FAILURE)
    print(f"{report.path}: {report.summary()}")
    for key, reason in report.bad[:50]:
        print(f"  bad {key}: {reason}")
    if len(report.bad) > 50:
        print(f"  ... and {len(report.bad) - 50} more")
    return 0 if report.ok else 1
