"""Images per CPU-second of `fastload bench` rows, interleaved in one process.

On a shared machine wall-clock img/s swings with the other tenants' load; the CPU time the
loader's own process tree spends per image (user + system of the process and its
children, psutil) is steadier. All rows are built in this process, warmed up for one epoch,
then run one epoch each in rounds (d, e, a, f, d, e, a, f, ...). Prints per row the median
img/CPU-s and wall img/s with their spread, and each row's per-round ratio to the decode
ceiling (f) when it ran.

Usage (data made with ``fastload synth`` and ``fastload convert``)::

    python benchmarks/profile_stages.py FOLDER --lmdb L --lmdb-small S --rows deaf --rounds 9

Not a test (pytest does not collect it); numbers go to benchmarks/NOTES.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psutil

from fastload.bench.rows import RowSpec, make_row


def _tree_cpu(me: psutil.Process) -> float:
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # a worker that just exited
            continue
        total += times.user + times.system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="ImageFolder tree of the measured images")
    parser.add_argument("--lmdb", help="the folder converted as it is (rows b, d)")
    parser.add_argument("--lmdb-small", help="the folder converted with --max-side (row e)")
    parser.add_argument("--rows", default="daf", help="row letters, as in fastload bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transforms", choices=("train", "val"), default="train")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    spec = RowSpec(folder=args.folder, lmdb=args.lmdb, lmdb_small=args.lmdb_small,
                   batch_size=args.batch_size, threads=args.threads, transforms=args.transforms)
    me = psutil.Process()
    runners = {}
    for key in args.rows:
        runner = make_row(key, spec)
        runner.setup()
        runner.run_epoch()  # warm-up
        runners[key] = runner
    results: dict[str, list[tuple[float, float]]] = {key: [] for key in runners}
    for _ in range(args.rounds):
        for key, runner in runners.items():
            cpu0, wall0 = _tree_cpu(me), time.perf_counter()
            images = runner.run_epoch()
            wall, cpu = time.perf_counter() - wall0, _tree_cpu(me) - cpu0
            results[key].append((images / cpu, images / wall))
    for key, rows in results.items():
        per_cpu, per_wall = [r[0] for r in rows], [r[1] for r in rows]
        line = (f"{key}: {statistics.median(per_cpu):6.0f} img/CPU-s "
                f"[{min(per_cpu):.0f}-{max(per_cpu):.0f}]  {statistics.median(per_wall):6.0f} "
                f"img/s wall [{min(per_wall):.0f}-{max(per_wall):.0f}]")
        if "f" in results and key != "f":
            ratio = [a[0] / b[0] for a, b in zip(rows, results["f"], strict=True)]
            line += (f"  /f per round {statistics.median(ratio):.2f} "
                     f"[{min(ratio):.2f}-{max(ratio):.2f}]")
        print(line)
    for runner in runners.values():
        runner.close()


if __name__ == "__main__":
    main()
