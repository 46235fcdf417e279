"""Listing memory of a conversion from a ``path,label`` CSV, at 10 M rows.

Run (prints its figures)::

    .venv/bin/python -m pytest -q -s -p no:cacheprovider benchmarks/test_listing_memory.py

``--benchmark-disable`` (as ``make test`` runs it) shrinks the list to 100,000 rows;
``FASTLOAD_LISTING_ROWS=N`` sets it. The CSV is generated under the system's temporary
folder (``path,label`` rows of 1,000 class folders, about 26 bytes a row; no image files:
listing does not read them, and the fingerprint's ``stat`` of a missing file costs what a
present one does). A fresh process then does what every ``fastload convert SRC DST --shards
16 --shard-index 15`` process does before its first image: it lists the CSV
(``list_source``), fingerprints it (a ``stat`` per row), splits it into 16 shards and reads
the rows of the last one. Printed: the process's peak RSS (``VmHWM``: ``ru_maxrss`` would include the
pytest process it was forked from) above its RSS after the imports, per row, the RSS still
held after listing, and the seconds of each phase. ``FASTLOAD_LISTING_CODE=DIR`` runs the
child with ``DIR`` first on ``sys.path`` (e.g. an older fastload unpacked there by
``git archive``), to measure code before and after a change in one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
def rss():
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) * 1024 for k, _, v in (l.partition(":") for l in f)
                if k in ("VmRSS", "VmHWM")}
from fastload.data.convert.source_list import list_source
from fastload.data.sets.manifest import shard_bounds
from fastload.data.convert.sources.base import iter_records
base = rss()["VmRSS"]
times = {}
t = time.perf_counter()
source = list_source(sys.argv[1])
times["list"] = time.perf_counter() - t
listed = rss()["VmRSS"]
t = time.perf_counter()
source.fingerprint()
times["fingerprint"] = time.perf_counter() - t
t = time.perf_counter()
begin, stop = shard_bounds(len(source.samples), 16)[-1]
read = sum(1 for _ in iter_records(source.samples[begin:stop]))
times["last shard's rows"] = time.perf_counter() - t
print(json.dumps({"rows": len(source.samples), "classes": len(source.classes), "read": read,
                  "base_rss": base, "listed_rss": listed,
                  "peak_rss": rss()["VmHWM"],
                  "times": times}))
"""


def _rows(request) -> int:
    if os.environ.get("FASTLOAD_LISTING_ROWS"):
        return int(os.environ["FASTLOAD_LISTING_ROWS"])
    return 100_000 if request.config.getoption("benchmark_disable", default=False) else 10_000_000


def _write_csv(path: Path, rows: int) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write("path,label\n")
        step = 100_000
        for begin in range(0, rows, step):
            out.write("".join(f"c{i % 1000:04d}/{i:09d}.jpg,{i % 1000}\n"
                              for i in range(begin, min(rows, begin + step))))


def test_listing_memory_of_a_csv_conversion(request, capsys):
    rows = _rows(request)
    with tempfile.TemporaryDirectory(prefix="fastload-listing-") as folder:
        csv_path = Path(folder) / "list.csv"
        _write_csv(csv_path, rows)
        env = dict(os.environ)
        code = os.environ.get("FASTLOAD_LISTING_CODE")
        if code:
            env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # cwd: not this checkout, which `-c` would put first on sys.path
        done = subprocess.run([sys.executable, "-c", CHILD, str(csv_path)], env=env, cwd=folder,
                              capture_output=True, text=True, timeout=3600)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        size = csv_path.stat().st_size
    assert report["rows"] == rows and report["classes"] == min(rows, 1000)
    grown = report["peak_rss"] - report["base_rss"]
    with capsys.disabled():
        times = ", ".join(f"{k} {v:.1f} s" for k, v in report["times"].items())
        print(f"\nCSV listing, {rows:,} rows ({size / 2**20:.0f} MiB){' [' + code + ']' if code else ''}: "
              f"peak RSS {report['peak_rss'] / 2**20:.0f} MiB, {grown / 2**20:.0f} MiB above the "
              f"imports' {report['base_rss'] / 2**20:.0f} MiB ({grown / rows:.1f} bytes per row); "
              f"after listing {(report['listed_rss'] - report['base_rss']) / 2**20:.0f} MiB held; "
              f"{times}")
    if not code:
        assert grown / rows < 8  # the list held as Python tuples is over 200 bytes a row
