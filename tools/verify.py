"""``fastload verify DST``: record count, every checksum, decode of a sample (or all);
``--repair`` rebuilds a sharded set's manifest from its shards."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    from fastload.tools.cli import output_file

    parser = subparsers.add_parser(
        "verify",
        help="check a fastload LMDB or sharded set: count, checksums, decodes",
        description=(
            "Check DST: the record count against its metadata, every record's CRC-32 and "
            "label, and that a seeded sample of records (all with --full) decodes to the "
            "size the record states, without damaged JPEG data (a strict decode). A sharded set: first what opening it checks (the "
            "manifest, paths inside the set, ranges, labels), then each shard's sidecar "
            "against the manifest and every record of the shard folder it reads; the summary "
            "says what was checked. Exits non-zero and lists the bad keys on any problem."
        ),
    )
    parser.add_argument("dst", metavar="DST",
                        help="LMDB directory or sharded set written by fastload convert")
    parser.add_argument("--full", action="store_true",
                        help="decode every record (progress on stderr: a bar on a terminal, "
                             "a line every 30 s otherwise)")
    parser.add_argument("--sample", type=int, default=64, metavar="N",
                        help="records to decode without --full (default: 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the decode sample")
    parser.add_argument("--repair", action="store_true",
                        help="sharded set only: if its manifest or labels file fails the open "
                             "checks, rebuild both from the shard folders (only when every "
                             "shard verifies clean), then verify")
    parser.add_argument("--json", default=None, metavar="FILE", type=output_file,
                        help="write the report as JSON: ok, errors, expected, found, "
                             "checksums_checked, decoded, bad, seconds, path (and a set's "
                             "shards, manifest_written, repaired, checked); '-': on stdout, "
                             "the text on stderr")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from fastload.data.format.verify import check_sample, verify_lmdb
    from fastload.data.remote import is_url, locate
    from fastload.data.sets.manifest import is_sharded_set
    from fastload.data.sets.verify import verify_set
    from fastload.tools.cli import (
        EXIT_FAILURE,
        EXIT_USAGE,
        printable,
        report_error,
        shell_words,
        write_json_report,
    )

    flags = {"overwrite": "`fastload convert --overwrite`", "repair": "--repair",
             "sample": "--sample"}
    try:
        check_sample(args.sample)
        where = locate(args.dst, None, "DST")  # an unsupported URL: nothing was done
        if args.repair and is_url(args.dst):
            raise ValueError(f"--repair rewrites a local set's manifest, but {args.dst!r} is a "
                             "URL; repair a local copy and upload it again")
    except (ImportError, ValueError) as exc:
        return report_error("verify", exc, flags, EXIT_USAGE)
    try:
        if is_url(args.dst):
            from fastload.data.remote.sets import remote_kind

            sharded = remote_kind(where)[0] == "set"
        else:
            sharded = is_sharded_set(where)
        if args.repair and not sharded:
            return report_error("verify", ValueError(
                f"--repair rebuilds a sharded set's manifest, but {args.dst!r} is not a sharded "
                "set; a single LMDB that does not verify is converted again "
                "(`fastload convert SRC DST --overwrite`)"), flags, EXIT_USAGE)
        if sharded:
            report = verify_set(args.dst, full=args.full, sample=args.sample, seed=args.seed,
                                repair=args.repair, progress=args.full)
        else:
            report = verify_lmdb(args.dst, full=args.full, sample=args.sample, seed=args.seed,
                                 progress=args.full)
    except (OSError, ValueError) as exc:
        return report_error("verify", exc, flags, EXIT_FAILURE)
    text = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON's
    print(f"{printable(report.path)}: {report.summary()}", file=text)
    for key, reason in report.bad[:50]:
        print(f"  bad {printable(key)}: {printable(shell_words(reason, flags))}", file=text)
    if len(report.bad) > 50:
        print(f"  ... and {len(report.bad) - 50} more", file=text)
    if args.json is not None:
        wrote = write_json_report("verify", {"sharded": sharded, **report.as_dict()}, args.json)
        if wrote is not None:
            print(f"wrote {printable(wrote)}")
    return 0 if report.ok else 1
