"""Where a strict conversion's two threads spend their time (issue 41), in one process.

    python benchmarks/strict_convert_timeline.py FOLDER [--rounds 15] [--dst /dev/shm]
        [--workers 2] [--markers] [--tree OTHER_CHECKOUT]

Converts FOLDER (an ImageFolder tree, e.g. ``fastload synth --photos --train 2000 --val 0``'s
``train``) into a database under ``--dst``, ``--rounds`` times in this process (the first
round is not counted), with ``--markers`` alternating with ``--check markers`` conversions.
Each strict conversion is timed by thread, by wrapping the check's tasks
(``fastload.data.convert.check_batches``):

* the conversion's seconds, the reader's (main thread's) CPU seconds and the process's;
* the check threads: when their first task starts, their idle time between tasks and after
  their last, and their share of the conversion spent checking;
* the reader: when it reads its last record, the records it checks itself and their CPU
  seconds, and how long it waits for a verdict with nothing to check.

With ``--tree``, two processes convert in turn, rounds alternating which goes first: one
with this checkout's fastload, one with OTHER_CHECKOUT's (built in place), each warm after
its first round; the medians of each, and the paired ratios this / other.

Prints the medians. Nothing is asserted: see benchmarks/NOTES.md (C25).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path

from fastload.data.convert import check_batches, database
from fastload.data.convert.folder import convert_folder


class _Timeline:
    """The wrapped functions' records for the conversion under way."""

    def __init__(self) -> None:
        self.tasks: list[tuple[bool, float, float, int, float]] = []  # main?, t0, t1, n, cpu
        self.waits = 0.0
        self.last_read = 0.0

    def install(self) -> None:
        run, help_or_wait, iter_records = (check_batches._Task.run,
                                           check_batches.CheckBatches.help_or_wait,
                                           database.iter_records)
        timeline = self

        def timed_run(task) -> None:
            count, start, cpu = len(task.records), time.perf_counter(), time.thread_time()
            try:
                run(task)
            finally:
                timeline.tasks.append((threading.current_thread() is threading.main_thread(),
                                       start, time.perf_counter(), count,
                                       time.thread_time() - cpu))

        def timed_help_or_wait(batches, record) -> None:
            before = len(timeline.tasks)
            start = time.perf_counter()
            help_or_wait(batches, record)
            if len(timeline.tasks) == before:  # nothing checked here: a wait
                timeline.waits += time.perf_counter() - start

        def timed_iter_records(*args, **kwargs):
            yield from iter_records(*args, **kwargs)
            timeline.last_read = time.perf_counter()

        check_batches._Task.run = timed_run
        check_batches.CheckBatches.help_or_wait = timed_help_or_wait
        database.iter_records = timed_iter_records


def _strict_round(src: Path, dst: Path, workers: int, timeline: _Timeline) -> dict:
    timeline.tasks, timeline.waits, timeline.last_read = [], 0.0, 0.0
    shutil.rmtree(dst, ignore_errors=True)
    cpu, main_cpu, start = time.process_time(), time.thread_time(), time.perf_counter()
    report = convert_folder(src, dst, workers=workers, check="decode", progress=False)
    end = time.perf_counter()
    threads = sorted(t for t in timeline.tasks if not t[0])
    reader = [t for t in timeline.tasks if t[0]]
    busy = sum(t[2] - t[1] for t in threads)
    return {
        "conversion s": report.seconds,
        "reader CPU s": time.thread_time() - main_cpu,
        "process CPU s": time.process_time() - cpu,
        "thread's first task at s": threads[0][1] - start if threads else 0.0,
        "thread idle between tasks s": sum(b[1] - a[2] for a, b in pairwise(threads)),
        "thread idle after its last s": end - threads[-1][2] if threads else 0.0,
        "thread checking, share": busy / (end - start),
        "reader's last read at s": timeline.last_read - start,
        "records the reader checked": sum(t[3] for t in reader),
        "reader's checks CPU s": sum(t[4] for t in reader),
        "reader waiting s": timeline.waits,
    }


def _round(args, timeline: _Timeline, dst: Path) -> dict:
    row = _strict_round(args.folder, dst, args.workers, timeline)
    if args.markers:
        shutil.rmtree(dst, ignore_errors=True)
        row["markers conversion s"] = convert_folder(args.folder, dst, workers=args.workers,
                                                     check="markers", progress=False).seconds
    return row


def _serve(args) -> None:
    """One round a line read from stdin, its row a JSON line on stdout (for --tree)."""
    timeline = _Timeline()
    timeline.install()
    dst = args.dst / f"fastload-timeline-{os.getpid()}"
    for _ in sys.stdin:
        print(json.dumps(_round(args, timeline, dst)), flush=True)
    shutil.rmtree(dst, ignore_errors=True)


def _rows_of_two_trees(args) -> dict[str, list[dict]]:
    here = Path(check_batches.__file__).resolve().parents[3]  # the checkout imported here
    trees = {"this": here, "other": args.tree.resolve()}
    options = [str(args.folder), "--dst", str(args.dst), "--workers", str(args.workers),
               *(["--markers"] if args.markers else []), "--serve"]
    servers = {name: subprocess.Popen(
        [sys.executable, __file__, *options], cwd=tree, text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(tree)})
        for name, tree in trees.items()}
    rows: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        for round_ in range(args.rounds + 1):
            for name in (["this", "other"] if round_ % 2 == 0 else ["other", "this"]):
                servers[name].stdin.write("round\n")
                servers[name].stdin.flush()
                row = json.loads(servers[name].stdout.readline())
                if round_:  # the first round warms the caches
                    rows[name].append(row)
    finally:
        for server in servers.values():
            server.stdin.close()
            server.wait()
    return rows


def _print(title: str, rows: list[dict]) -> None:
    print(title)
    for key in rows[0]:
        value = statistics.median(row[key] for row in rows)
        print(f"  {key:30s} {value:8.0f}" if key.startswith("records") else
              f"  {key:30s} {value:8.4f}")
    if "markers conversion s" in rows[0]:
        strict = statistics.median(row["conversion s"] for row in rows)
        markers = statistics.median(row["markers conversion s"] for row in rows)
        print(f"  strict / markers: {strict / markers:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dst", type=Path, default=Path("/dev/shm"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--markers", action="store_true",
                        help="alternate with --check markers conversions")
    parser.add_argument("--tree", type=Path, help="another checkout, timed in turn with this")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.folder = args.folder.resolve()
    if args.serve:
        _serve(args)
        return
    head = f"{args.rounds} rounds, {args.folder}, to {args.dst}, workers={args.workers}"
    if args.tree is None:
        timeline = _Timeline()
        timeline.install()
        dst = args.dst / "fastload-timeline"
        rows = [_round(args, timeline, dst) for _ in range(args.rounds + 1)][1:]
        shutil.rmtree(dst, ignore_errors=True)
        _print(f"{head}; medians", rows)
        return
    rows = _rows_of_two_trees(args)
    _print(f"{head}; this checkout, medians", rows["this"])
    _print(f"{args.tree}, medians", rows["other"])
    for key in ("conversion s", "process CPU s", "reader CPU s"):
        ratios = sorted(a[key] / b[key] for a, b in zip(rows["this"], rows["other"],
                                                        strict=True))
        print(f"  this / other, {key}: paired {statistics.median(ratios):.3f} "
              f"(quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[3 * len(ratios) // 4]:.3f})")


if __name__ == "__main__":
    main()
