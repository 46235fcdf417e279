"""What an engine costs a conversion: ``convert --shards N`` in this machine's processes
beside the same conversion as Ray and Dask tasks, on the same set and the same cores.

    python benchmarks/engine_overhead.py --images 2000 --shards 8 --repeats 3 \\
        --out docs/benchmarks/results/engine-overhead.json

The source is ``fastload synth``'s generated photos (300-800 px JPEGs, 10 classes) in a
temporary folder. Every row converts it into a fresh folder (removed after) with the
default strict check, and is timed with ``time.perf_counter`` around ``convert_folder``:

* ``processes``: no engine, ``workers=CORES`` (today's multi-process conversion);
* ``ray``: ``engine="ray"`` joined to a local Ray of ``CORES`` CPUs started once before the
  rows (its start is timed apart: ``ray_start_s``), one single-process task per shard;
* ``dask``: ``engine="dask"`` on a ``LocalCluster`` of ``CORES`` single-threaded worker
  processes started once before the rows (``dask_start_s``).

Each row's first conversion (the engine's workers start and import fastload) is timed
apart as ``first_call_s`` and not in the medians. Rows are interleaved (every row once,
then again, ``--repeats`` times, the order rotated);
the JSON holds every time, and the summary the medians, min-max and images per second.
An engine's overhead is its median over the processes' median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _convert(src: Path, dst: Path, shards: int, cores: int, row: str, address) -> float:
    from fastload.data.convert.folder import convert_folder

    shutil.rmtree(dst, ignore_errors=True)
    options = {"shards": shards, "progress": False}
    if row == "processes":
        options["workers"] = cores
    else:
        options.update(engine=row, engine_address=address)
    start = time.perf_counter()
    report = convert_folder(src, dst, **options)
    seconds = time.perf_counter() - start
    assert report.manifest is not None and report.skipped == 0, report.summary()
    shutil.rmtree(dst)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rows", default="processes,ray,dask")
    parser.add_argument("--out", default=None, metavar="JSON")
    args = parser.parse_args(argv)
    rows = args.rows.split(",")
    from fastload.data.pictures.synth import synthesize

    with tempfile.TemporaryDirectory(prefix="fastload-engine-bench-") as tmp:
        root = Path(tmp)
        synthesize(root / "photos", train=args.images, val=0, classes=10, seed=0,
                   workers=args.cores)
        src = root / "photos" / "train"
        source_mb = sum(p.stat().st_size for p in src.rglob("*.jpg")) / 1e6
        addresses: dict[str, object] = {"processes": None}
        starts, owned = {}, []
        if "ray" in rows:
            import ray

            start = time.perf_counter()
            ray.init(num_cpus=args.cores, include_dashboard=False, configure_logging=False,
                     _node_ip_address="127.0.0.1")
            starts["ray_start_s"] = time.perf_counter() - start
            addresses["ray"] = None  # joins the Ray of this process
            owned.append(ray.shutdown)
        if "dask" in rows:
            import distributed

            start = time.perf_counter()
            cluster = distributed.LocalCluster(n_workers=args.cores, threads_per_worker=1,
                                               processes=True, host="127.0.0.1",
                                               dashboard_address=None)
            starts["dask_start_s"] = time.perf_counter() - start
            addresses["dask"] = cluster.scheduler_address
            owned.append(cluster.close)
        times: dict[str, list[float]] = {row: [] for row in rows}
        first: dict[str, float] = {}
        try:
            for row in rows:
                first[row] = round(_convert(src, root / "set", args.shards, args.cores, row,
                                            addresses[row]), 3)
            for repeat in range(args.repeats):
                order = rows[repeat % len(rows):] + rows[:repeat % len(rows)]
                for row in order:
                    seconds = _convert(src, root / "set", args.shards, args.cores, row,
                                       addresses[row])
                    times[row].append(seconds)
                    print(f"{row:9s} {seconds:7.2f} s", file=sys.stderr, flush=True)
        finally:
            for close in reversed(owned):
                close()
    base = statistics.median(times["processes"]) if "processes" in times else None
    summary = {}
    for row, values in times.items():
        median = statistics.median(values)
        summary[row] = {"median_s": round(median, 3), "min_s": round(min(values), 3),
                        "max_s": round(max(values), 3),
                        "images_per_s": round(args.images / median, 1),
                        **({"over_processes": round(median / base, 3)} if base else {})}
    result = {"images": args.images, "source_mb": round(source_mb, 1), "shards": args.shards,
              "cores": args.cores, "repeats": args.repeats, "times_s": times,
              **{k: round(v, 2) for k, v in starts.items()}, "first_call_s": first,
              "summary": summary,
              "load_average": os.getloadavg()}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
