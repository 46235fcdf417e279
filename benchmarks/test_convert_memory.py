"""Conversion at scale: memory flat in the number of files, rates per core, an ImageNet estimate.

Run (prints every figure it measured, in one run)::

    .venv/bin/python -m pytest -q -s -p no:cacheprovider benchmarks/test_convert_memory.py

``--benchmark-disable`` (as ``make test`` runs it) shrinks every size to a smoke run.

* **Memory**: a fresh process converts 10,000 and then 100,000 files (hard links to a few
  small generated photos) in keep-bytes mode; its peak private (anonymous) memory and
  peak RSS are measured. Private growth per file is the state the converter keeps per
  file (the file list), not image data; RSS also counts page-cache pages of the LMDB map
  the process touched, which the kernel reclaims at will. The same for 10,000 and 100,000
  records of each container source (WebDataset tars, parquet files, a ``datasets``
  folder; ``source_kinds.py`` writes them), each record a distinct JPEG (the small photos
  with a numbered comment segment), so parquet cannot deduplicate them.
* **Rates**: ImageNet-like generated photos (about 450x380, 60-120 KB), in keep-bytes mode
  with 1 process and with 2 shard processes converting in parallel (``shards=2`` with
  ``shard_index`` 0 and 1: keep-bytes work is done by the main process, so processes, not
  ``workers``, are how it scales), and in ``max_side=256`` mode with ``workers`` 1 and 2.
* **Estimate**: ImageNet's train set (1,281,167 images, about 140 GB, mean about 470x390 px)
  on 16 cores with ``--shards 16``, from the measured rates (keep-bytes: bytes/s;
  ``--max-side``: megapixels/s). Two figures: CPU-bound on idle cores (per CPU-second rates
  of the 2-process runs, which include their duplicated work, times 16), and from the
  wall-clock 1 -> 2 scaling measured here, a range from "the 2-core efficiency holds at 16"
  to "it compounds at every doubling" (on a loaded machine this range is wide).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

IMAGENET_IMAGES = 1_281_167  # ILSVRC-2012 train
IMAGENET_BYTES = 140e9  # about 140 GB of JPEGs
IMAGENET_MEGAPIXELS = 469 * 387 / 1e6  # its commonly cited mean resolution
TARGET_CORES = 16

# A child process: import, say "ready", wait for "go" on stdin, convert, report its end time,
# CPU seconds (its own and its worker processes'), peak RSS (VmHWM: includes page-cache
# pages of the LMDB map) and, with "sample_memory", peak private anonymous memory (RssAnon,
# sampled every 5 ms by a thread: what a conversion really holds).
CHILD = r"""
import json, resource, sys, threading, time
from fastload.data.convert.folder import convert_folder
def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
def status():
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) * 1024 for k, _, v in (l.partition(":") for l in f)
                if k in ("VmHWM", "RssAnon")}
peak = [0]
def sample():
    while True:
        peak[0] = max(peak[0], status()["RssAnon"])
        time.sleep(0.005)
args = json.loads(sys.argv[1])
if args.pop("sample_memory", False):
    threading.Thread(target=sample, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
start = cpu()
report = convert_folder(args.pop("src"), args.pop("dst"), progress=False, **args)
end, cpu_s = time.time(), cpu() - start
peak[0] = max(peak[0], status()["RssAnon"])
print(json.dumps({"end": end, "stored": report.stored, "peak_rss": status()["VmHWM"],
                  "peak_private": peak[0], "cpu_s": cpu_s}))
"""


def _smoke(request) -> bool:
    return bool(request.config.getoption("benchmark_disable", default=False))


def _convert_in_children(jobs: list[dict]) -> tuple[float, list[dict]]:
    """Run each job (convert_folder kwargs) in its own process, all started together once
    every interpreter has imported fastload; returns (wall seconds from the start to the
    last end, each child's report)."""
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(job)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for job in jobs]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    start = time.time()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, out
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return max(r["end"] for r in reports) - start, reports


def _link_tree(photos: list[Path], root: Path, count: int, per_folder: int = 1000) -> Path:
    """An ImageFolder tree of ``count`` hard links to ``photos`` (1,000 files a folder)."""
    for i in range(count):
        folder = root / f"c{i // per_folder:04d}"
        if i % per_folder == 0:
            folder.mkdir(parents=True)
        os.link(photos[i % len(photos)], folder / f"{i:07d}.jpg")
    return root


def _photos(base: Path, count: int, **sizes) -> list[Path]:
    from fastload.data.pictures.synth import synthesize

    synthesize(base, train=count, val=0, classes=2, seed=0, workers=1, **sizes)
    return sorted((base / "train").rglob("*.jpg"))


def test_conversion_memory_is_flat_in_the_number_of_files(request, tmp_path, capsys):
    sizes = (500, 5_000) if _smoke(request) else (10_000, 100_000)
    photos = _photos(tmp_path / "photos", 16, min_side=48, max_side=96)
    peaks = {}
    for count in sizes:
        tree = _link_tree(photos, tmp_path / f"tree{count}", count)
        _, (report,) = _convert_in_children([{"src": str(tree), "dst": str(tmp_path / f"db{count}"),
                                              "workers": 1, "sample_memory": True}])
        assert report["stored"] == count
        peaks[count] = report
    small, large = sizes
    per_file = {key: (peaks[large][key] - peaks[small][key]) / (large - small)
                for key in ("peak_private", "peak_rss")}
    with capsys.disabled():
        print(f"\nconvert memory (keep-bytes, workers=1), {small:,} -> {large:,} files: peak "
              f"private {peaks[small]['peak_private'] / 2**20:.1f} -> "
              f"{peaks[large]['peak_private'] / 2**20:.1f} MiB ({per_file['peak_private']:.0f} "
              f"bytes per extra file); peak RSS incl. the LMDB map's page-cache pages "
              f"{peaks[small]['peak_rss'] / 2**20:.1f} -> {peaks[large]['peak_rss'] / 2**20:.1f} "
              f"MiB ({per_file['peak_rss']:.0f} bytes per file)")
    assert per_file["peak_private"] < 1024  # image data held would be ~3 KB per file here


def _numbered(photo: bytes, i: int) -> bytes:
    """``photo`` made unique by a JPEG comment segment (COM) holding ``i``, still kept as is."""
    body = b"fastload record %08d" % i
    return photo[:2] + b"\xff\xfe" + (len(body) + 2).to_bytes(2, "big") + body + photo[2:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["webdataset", "parquet", "datasets"])
def test_container_conversion_memory_is_flat_in_the_number_of_records(request, tmp_path, capsys,
                                                                      kind):
    pytest.importorskip({"webdataset": "tarfile", "parquet": "pyarrow"}.get(kind, kind))
    from source_kinds import write_source

    sizes = (500, 5_000) if _smoke(request) else (10_000, 100_000)
    photos = [p.read_bytes() for p in _photos(tmp_path / "photos", 16, min_side=48, max_side=96)]
    peaks = {}
    for count in sizes:
        items = [(i % 10, _numbered(photos[i % len(photos)], i)) for i in range(count)]
        src = write_source(kind, items, tmp_path / f"{kind}{count}")
        del items
        _, (report,) = _convert_in_children([{"src": str(src), "dst": str(tmp_path / f"db{count}"),
                                              "workers": 1, "sample_memory": True}])
        assert report["stored"] == count
        peaks[count] = report
    small, large = sizes
    per_record = {key: (peaks[large][key] - peaks[small][key]) / (large - small)
                  for key in ("peak_private", "peak_rss")}
    with capsys.disabled():
        print(f"\nconvert memory ({kind}, keep-bytes, workers=1), {small:,} -> {large:,} records: "
              f"peak private {peaks[small]['peak_private'] / 2**20:.1f} -> "
              f"{peaks[large]['peak_private'] / 2**20:.1f} MiB ({per_record['peak_private']:.0f} "
              f"bytes per extra record); peak RSS {peaks[small]['peak_rss'] / 2**20:.1f} -> "
              f"{peaks[large]['peak_rss'] / 2**20:.1f} MiB ({per_record['peak_rss']:.0f} bytes "
              "per record)")
    if not _smoke(request):  # at smoke sizes the readers' fixed costs (pyarrow's pool) dominate
        assert per_record["peak_private"] < 1024  # image data held would be ~2 KB per record


def _rate_rows(request, tmp_path) -> dict[str, dict]:
    smoke = _smoke(request)
    photos = _photos(tmp_path / "photos", 8 if smoke else 40, **(
        {"min_side": 64, "max_side": 160} if smoke else {}))
    from PIL import Image

    pixels = [math.prod(Image.open(p).size) for p in photos]
    keep_count, resize_count = (40, 16) if smoke else (4_000, 400)
    keep = _link_tree(photos, tmp_path / "keep", keep_count)
    resize = _link_tree(photos, tmp_path / "resize", resize_count)
    mean_bytes = sum(p.stat().st_size for p in photos) / len(photos)
    mean_mp = sum(pixels) / len(pixels) / 1e6
    runs = {
        "keep-bytes, 1 process": (keep, [{"workers": 1}]),
        "keep-bytes, 2 shard processes": (keep, [{"workers": 1, "shards": 2, "shard_index": k}
                                                 for k in range(2)]),
        "max_side=256, workers=1": (resize, [{"workers": 1, "max_side": 256}]),
        "max_side=256, workers=2": (resize, [{"workers": 2, "max_side": 256}]),
    }
    rows = {}
    for name, (tree, jobs) in runs.items():
        dst = tmp_path / name.replace(" ", "_").replace(",", "").replace("=", "")
        seconds, reports = _convert_in_children([{"src": str(tree), "dst": str(dst), **j}
                                                 for j in jobs])
        files = keep_count if tree == keep else resize_count
        cpu_s = sum(r["cpu_s"] for r in reports)
        rows[name] = {"files": files, "seconds": seconds, "img_s": files / seconds,
                      "mb_s": files * mean_bytes / seconds / 1e6,
                      "mp_s": files * mean_mp / seconds, "cpu_s": cpu_s,
                      "img_cpu_s": files / cpu_s, "mb_cpu_s": files * mean_bytes / cpu_s / 1e6,
                      "mp_cpu_s": files * mean_mp / cpu_s}
    rows["_photos"] = {"mean_kb": mean_bytes / 1e3, "mean_mp": mean_mp}
    return rows


def _estimate_hours(per_core: float, efficiency: float, work: float) -> tuple[float, float]:
    """(hours if the 1->2 efficiency holds at 16 cores, hours if it compounds per doubling)."""
    doublings = math.log2(TARGET_CORES)
    best = work / (per_core * TARGET_CORES * min(1.0, efficiency)) / 3600
    worst = work / (per_core * TARGET_CORES * min(1.0, efficiency) ** doublings) / 3600
    return best, worst


def test_conversion_rates_per_core_and_an_imagenet_estimate(request, tmp_path, capsys):
    load_before = os.getloadavg()[0]
    rows = _rate_rows(request, tmp_path)
    load_after = os.getloadavg()[0]
    photos = rows.pop("_photos")
    keep1, keep2 = rows["keep-bytes, 1 process"], rows["keep-bytes, 2 shard processes"]
    ms1, ms2 = rows["max_side=256, workers=1"], rows["max_side=256, workers=2"]
    keep_eff = keep2["img_s"] / (2 * keep1["img_s"])
    ms_eff = ms2["img_s"] / (2 * ms1["img_s"])
    keep_h = _estimate_hours(keep1["mb_s"] * 1e6, keep_eff, IMAGENET_BYTES)
    ms_h = _estimate_hours(ms1["mp_s"], ms_eff, IMAGENET_IMAGES * IMAGENET_MEGAPIXELS)
    # CPU-bound on idle cores: per CPU-second rates of the 2-process/2-worker runs (they
    # include the duplicated source listing and the pool's overhead), times 16 cores.
    keep_cpu_h = IMAGENET_BYTES / (keep2["mb_cpu_s"] * 1e6 * TARGET_CORES) / 3600
    ms_cpu_h = IMAGENET_IMAGES * IMAGENET_MEGAPIXELS / (ms2["mp_cpu_s"] * TARGET_CORES) / 3600
    lines = [f"\nconvert rates on {os.cpu_count()} cores, load average {load_before:.1f} -> "
             f"{load_after:.1f} (photos: mean {photos['mean_kb']:.0f} KB, "
             f"{photos['mean_mp']:.3f} MP):"]
    lines += [f"  {name:30s} {r['files']:5d} files {r['seconds']:6.2f} s wall {r['img_s']:6.0f} "
              f"img/s {r['mb_s']:6.1f} MB/s | {r['cpu_s']:6.2f} CPU-s {r['img_cpu_s']:6.0f} img "
              "per CPU-s" for name, r in rows.items()]
    lines += [
        f"  1 -> 2 wall-clock scaling: keep-bytes {keep_eff:.2f}, max_side {ms_eff:.2f} "
        "(1.00 = linear; a loaded machine gives less)",
        f"  ImageNet train ({IMAGENET_IMAGES:,} images, {IMAGENET_BYTES / 1e9:.0f} GB) on "
        f"{TARGET_CORES} cores, --shards {TARGET_CORES}:",
        f"    keep-bytes: {keep_cpu_h:.2f} h CPU-bound on idle cores (storage must sustain "
        f"{IMAGENET_BYTES / 1e6 / (keep_cpu_h * 3600):.0f} MB/s); from the wall-clock scaling "
        f"here {keep_h[0]:.2f}-{keep_h[1]:.2f} h",
        f"    --max-side 256: {ms_cpu_h:.2f} h CPU-bound on idle cores; from the wall-clock "
        f"scaling here {ms_h[0]:.2f}-{ms_h[1]:.2f} h",
    ]
    with capsys.disabled():
        print("\n".join(lines))
    assert all(r["img_s"] > 0 for r in rows.values())
