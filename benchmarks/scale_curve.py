"""How fastload's costs grow with the set: 10 k to 1 M records, 1 k to 100 k shards (issue 41).

    python benchmarks/scale_curve.py --records 10000,100000,1000000 \\
        --shards 1000,10000,100000 --out docs/benchmarks/results/scale-curve.json

Sets of small real JPEGs (32-64 px crops of the photos in ``fastload.data.pictures``) are
written with fastload's own writer under a temporary folder and deleted afterwards
(``scale_sets``). For each set, in a fresh process per measurement so that memory is that
process's own (``fastload.utils.process.call_in_fresh_process``):

* ``open``: ``fastload.LMDBDataset(path)`` (one LMDB, or a sharded set's manifest + labels);
* memory (``/proc/self/status``: RSS, its anonymous and file-backed parts) after the imports,
  after the open, after ``fastload.DataLoader(...)``, after ``iter()`` and after the first
  batch; per record = the change over the smallest set divided by the records added (the
  slope), so the constant cost of the DALI graph and the imports is not spread over records;
* time to the first batch (``iter()`` + the first ``next()``), then the median of the next
  batches (the steady cost of a batch: decoding and reading), and the second epoch's start;
* per-epoch overhead beyond decoding: the epoch start beyond a steady batch, plus the index
  pipeline of a whole epoch alone (the order and its batches of indices, no reading);
* ``state_dict()`` bytes (``torch.save`` into memory) mid-epoch;
* the order of an epoch for every rank of 8, 512 and 4,096 (simulated: the sampler with
  ``rank``/``num_replicas``, its indices sliced into batches as the loader slices them;
  above ``--max-ranks`` ranks an even sample of them), time per rank and the peak memory;
* sharded sets: the manifest's build (``complete_manifest``, which opens every shard), the
  open of every shard as a global-order epoch opens them (time, file descriptors, maps);
* ``verify``: records per second of ``verify_lmdb`` / ``verify_set`` (every record's CRC-32,
  Datum and label; ``--verify-sample`` decodes).

Each figure's growth is the log-log slope of the measured points: constant (< 0.15),
sublinear, linear (0.85-1.15) or worse than linear (> 1.15).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

BATCH = 256
WORLDS = (8, 512, 4096)
_STATUS = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "VmHWM": "hwm"}


# ---------------------------------------------------------------- helpers (any process)
def memory() -> dict[str, int]:
    """This process's RSS and its parts (bytes), after a garbage collection."""
    gc.collect()
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in _STATUS:
                out[_STATUS[key]] = int(value.split()[0]) * 1024
    return out


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux: ``clear_refs`` 5), if allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def _transform():
    from torchvision import transforms as T

    return T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor()])


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _maps() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def _own_batches(loader, epoch_sampler):
    """The index pipeline of one epoch as the loader runs it (its own sampler's indices,
    sliced into batches of lists), timed without reading any record."""
    order = epoch_sampler.indices()
    size = loader.batch_size
    count = 0
    for begin in range(0, len(order), size):
        count += len(order[begin:begin + size].tolist())
    return count


# ---------------------------------------------------------------- fresh-process bodies
def measure_loader(path: str, steady: int, order: str | None) -> dict:
    """Open, loader, first batch, steady batches, state_dict, second epoch: one process."""
    t0 = time.perf_counter()
    import torch

    import fastload
    from fastload.loader.dataloader import DataLoader  # noqa: F401 - the import is timed

    out = {"import_s": time.perf_counter() - t0}
    transform = _transform()
    mem = {"base": memory()}
    t = time.perf_counter()
    dataset = fastload.LMDBDataset(path, transform=transform)
    out["open_s"] = time.perf_counter() - t
    mem["open"] = memory()
    t = time.perf_counter()
    kwargs = {"order": order} if order else {}
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=1,
                                 seed=0, device="cpu", **kwargs)
    out["loader_s"] = time.perf_counter() - t
    mem["loader"] = memory()
    t = time.perf_counter()
    it = iter(loader)
    out["iter_s"] = time.perf_counter() - t
    mem["iter"] = memory()
    next(it)
    out["first_batch_s"] = time.perf_counter() - t
    mem["first_batch"] = memory()
    times = []
    for _ in range(min(steady, len(loader) - 1)):
        t = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t)
    out["steady_batch_s"] = statistics.median(times) if times else None
    mem["steady"] = memory()
    state = loader.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    out["state_dict_bytes"] = len(buf.getvalue())
    out["state_dict_fields"] = sorted(state)
    del it
    t = time.perf_counter()
    it = iter(loader)
    next(it)
    out["second_epoch_first_batch_s"] = time.perf_counter() - t
    del it
    # the index pipeline of a whole epoch alone (no reading, no decoding)
    sampler = loader.sampler
    t = time.perf_counter()
    out["index_epoch_samples"] = _own_batches(loader, sampler)
    out["index_epoch_s"] = time.perf_counter() - t
    out["memory"] = mem
    out["records"] = len(dataset)
    out["fds"] = _open_fds()
    loader.close()
    return out


def measure_rank_orders(n: int, ranges_path: str | None, worlds: list[int],
                        max_ranks: int) -> dict:
    """Every rank's epoch order (or an even sample of ranks) for each world size."""
    import numpy as np

    from fastload.loader.sampling import EpochSampler
    from fastload.loader.shard_order import ShardShuffleSampler

    ranges = np.load(ranges_path) if ranges_path else None
    kinds = ["global"] + (["shards"] if ranges is not None else [])
    out = {}
    for kind in kinds:
        for world in worlds:
            ranks = list(range(world)) if world <= max_ranks else sorted(set(
                np.linspace(0, world - 1, max_ranks).round().astype(int).tolist()))
            counts = np.zeros(n, dtype=np.int32) if len(ranks) == world else None
            before = memory()
            reset_peak()
            per_rank = []
            held = []
            for rank in ranks:
                t = time.perf_counter()
                if kind == "global":
                    sampler = EpochSampler(n, shuffle=True, seed=0, num_replicas=world,
                                           rank=rank)
                else:
                    sampler = ShardShuffleSampler(ranges, num_replicas=world, rank=rank,
                                                  shuffle=True, seed=0)
                order = sampler.indices()
                got = []
                for begin in range(0, len(order), BATCH):
                    got.append(np.asarray(order[begin:begin + BATCH]))
                per_rank.append(time.perf_counter() - t)
                mine = np.concatenate(got) if got else np.zeros(0, np.int64)
                base = getattr(order, "base", None)
                # a view (order[rank::W]) keeps its whole base array alive
                held.append(int(base.nbytes) if isinstance(base, np.ndarray)
                            else int(getattr(order, "nbytes", 0) or 0))
                if counts is not None:
                    np.add.at(counts, mine, 1)
                del order, got, mine, sampler
            peak = memory()["hwm"] - before["rss"]
            entry = {"ranks_computed": len(ranks), "per_rank_s_median": statistics.median(per_rank),
                     "per_rank_s_max": max(per_rank), "all_ranks_s": sum(per_rank),
                     "peak_extra_rss_bytes": peak,
                     "order_array_bytes_per_rank": int(statistics.median(held))}
            if counts is not None:
                entry["every_index_once_plus_padding"] = bool(
                    counts.min() >= 1 and int((counts - 1).sum()) <= world - 1)
            out[f"{kind}/{world}"] = entry
    return out


def measure_shard_opens(path: str, budget_s: float) -> dict:
    """Open every shard as a global-order epoch does (the reader keeps at most its
    ``max_open_shards`` open, closing the least recently read); time, and the file
    descriptors and memory maps held at the end."""
    import fastload

    dataset = fastload.LMDBDataset(path)
    reader = dataset.reader
    fds0, maps0, mem0 = _open_fds(), _maps(), memory()
    t = time.perf_counter()
    opened, error = 0, None
    for k in range(reader.num_shards):
        try:
            reader.shard_reader(k).record(0)  # a read maps the shard as an epoch's would
        except Exception as exc:  # noqa: BLE001 - the finding is the error
            error = f"{type(exc).__name__} at shard {k}: {str(exc)[:300]}"
            break
        opened += 1
        if time.perf_counter() - t > budget_s:
            break
    seconds = time.perf_counter() - t
    out = {"shards": reader.num_shards, "opened": opened, "seconds": seconds,
           "per_shard_s": seconds / max(1, opened), "fds_added": _open_fds() - fds0,
           "maps_added": _maps() - maps0, "rss_added": memory()["rss"] - mem0["rss"],
           "anon_added": memory()["anon"] - mem0["anon"], "error": error}
    reader.close()
    return out


def measure_verify(path: str, sharded: bool, sample: int) -> dict:
    if sharded:
        from fastload.data.sets.verify import verify_set as verify
    else:
        from fastload.data.format.verify import verify_lmdb as verify
    t = time.perf_counter()
    report = verify(path, sample=sample)
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "records": report.found, "decoded": report.decoded,
            "records_per_s": report.found / seconds, "ok": report.ok}


def measure_open_only(path: str) -> dict:
    """Open alone, in a process of its own: time and memory of the open."""
    import fastload
    from fastload.loader.dataloader import DataLoader  # noqa: F401

    before = memory()
    t = time.perf_counter()
    dataset = fastload.LMDBDataset(path)
    seconds = time.perf_counter() - t
    after = memory()
    return {"open_s": seconds, "rss_added": after["rss"] - before["rss"],
            "anon_added": after["anon"] - before["anon"], "records": len(dataset)}


# ---------------------------------------------------------------- parent
IN_PROCESS = [False]  # --in-process: a smoke run (tests); memory figures then mean little


def fresh(fn, *args):
    from fastload.utils.process import call_in_fresh_process

    if IN_PROCESS[0]:
        return fn(*args)
    return call_in_fresh_process(fn, *args, name=f"scale-{fn.__name__}", timeout_s=3600)


def growth(xs: list[float], ys: list[float]) -> dict:
    """Log-log slope of ``ys`` over ``xs`` and its reading."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True)
           if x and y and y > 0]
    if len(pts) < 2:
        return {"slope": None, "growth": "n/a"}
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else 0.0
    word = ("constant" if slope < 0.15 else "sublinear" if slope < 0.85
            else "linear" if slope <= 1.15 else "worse than linear")
    (x1, y1), (x2, y2) = pts[-2], pts[-1]
    tail = (y2 - y1) / (x2 - x1) if x2 != x1 else None
    return {"slope": round(slope, 3), "growth": word,
            "tail_slope": None if tail is None else round(tail, 3)}


def per_record(xs: list[int], ys: list[int]) -> float | None:
    """Least-squares slope of ``ys`` over ``xs`` (bytes per record beyond a constant)."""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None


def run_point(kind: str, size: int, args, jpegs, work: Path) -> dict:
    import numpy as np
    from scale_sets import write_lmdb, write_sharded_set

    from fastload.data.sets.manifest import complete_manifest

    point: dict = {"kind": kind, "size": size}
    path = work / f"{kind}-{size}"
    t = time.perf_counter()
    if kind == "records":
        write_lmdb(path, size, jpegs)
        point["records"] = size
        point["write_s"] = time.perf_counter() - t
        ranges_path = None
    else:
        write_sharded_set(path, size, args.per_shard, jpegs)
        point["write_shards_s"] = time.perf_counter() - t
        t = time.perf_counter()
        manifest = complete_manifest(path, size)
        point["manifest_build_s"] = time.perf_counter() - t
        point["manifest_bytes"] = (path / "fastload-set.json").stat().st_size
        point["records"] = manifest["count"]
        ranges = np.array([(e["start"], e["stop"]) for e in manifest["shards"]], np.int64)
        ranges_path = str(work / "ranges.npy")
        np.save(ranges_path, ranges)
        del manifest
    print(f"[{kind} {size}] written in {time.perf_counter() - t:.1f}s", flush=True)
    reps = [fresh(measure_open_only, str(path)) for _ in range(args.repeats)]
    point["open_only"] = {k: statistics.median(r[k] for r in reps)
                          for k in ("open_s", "rss_added", "anon_added")}
    point["loader"] = fresh(measure_loader, str(path), args.steady, None)
    if kind == "shards":
        point["loader_shards_order"] = fresh(measure_loader, str(path), args.steady, "shards")
        point["shard_opens"] = fresh(measure_shard_opens, str(path), args.shard_open_budget_s)
    print(f"[{kind} {size}] loader done", flush=True)
    point["rank_orders"] = fresh(measure_rank_orders, point["records"], ranges_path,
                                 list(args.worlds), args.max_ranks)
    print(f"[{kind} {size}] rank orders done", flush=True)
    if kind == "records" or size <= args.verify_shards_max:
        point["verify"] = fresh(measure_verify, str(path), kind == "shards", args.verify_sample)
    point["disk_bytes"] = int(subprocess.run(["du", "-sb", str(path)], capture_output=True,
                                             text=True).stdout.split()[0] or 0)
    print(f"[{kind} {size}] done", flush=True)
    return point  # the caller saves it, then deletes the set


def summarise(points: list[dict]) -> dict:
    """Growth of each figure over the points of each kind; bytes per record."""
    out = {}
    for kind in ("records", "shards"):
        pts = [p for p in points if p["kind"] == kind]
        if not pts:
            continue
        xs = [p["records"] for p in pts]
        sizes = [p["size"] for p in pts]
        figures = {
            "open_s": [p["open_only"]["open_s"] for p in pts],
            "loader_s": [p["loader"]["loader_s"] for p in pts],
            "iter_s": [p["loader"]["iter_s"] for p in pts],
            "first_batch_s": [p["loader"]["first_batch_s"] for p in pts],
            "steady_batch_s": [p["loader"]["steady_batch_s"] for p in pts],
            "second_epoch_first_batch_s": [p["loader"]["second_epoch_first_batch_s"]
                                           for p in pts],
            "index_epoch_s": [p["loader"]["index_epoch_s"] for p in pts],
            "state_dict_bytes": [p["loader"]["state_dict_bytes"] for p in pts],
        }
        for world in sorted({int(k.split("/")[1]) for p in pts for k in p["rank_orders"]}):
            for order in ("global", "shards"):
                key = f"{order}/{world}"
                if all(key in p["rank_orders"] for p in pts):
                    figures[f"rank_order_{order}_{world}_per_rank_s"] = [
                        p["rank_orders"][key]["per_rank_s_median"] for p in pts]
        if all("verify" in p for p in pts):
            figures["verify_s"] = [p["verify"]["seconds"] for p in pts]
        if kind == "shards":
            figures["manifest_build_s"] = [p["manifest_build_s"] for p in pts]
            figures["shard_open_per_shard_s"] = [p["shard_opens"]["per_shard_s"] for p in pts]
        summary = {"x": "records" if kind == "records" else "shards",
                   "records": xs, "sizes": sizes, "figures": figures,
                   "growth": {k: growth(sizes, v) for k, v in figures.items()}}
        mem = {}
        for stage in ("open", "loader", "iter", "first_batch", "steady"):
            for part in ("rss", "anon", "file"):
                ys = [p["loader"]["memory"][stage][part] - p["loader"]["memory"]["base"][part]
                      for p in pts]
                mem[f"{stage}.{part}"] = {"bytes": ys, "per_record": per_record(xs, ys),
                                          "per_unit": per_record(sizes, ys)}
        summary["memory_over_base"] = mem
        summary["open_only_anon_per_record"] = per_record(
            xs, [p["open_only"]["anon_added"] for p in pts])
        out[kind] = summary
    return out


def chart(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("open_s", "open (s)"), ("first_batch_s", "iter() to first batch (s)"),
              ("index_epoch_s", "index pipeline, one epoch (s)"),
              ("state_dict_bytes", "state_dict (bytes)"),
              ("rank_order_global_4096_per_rank_s", "order per rank, 4,096 ranks (s)"),
              ("verify_s", "verify (s)")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7.5))
    axes = axes.ravel()
    for ax, (key, title) in zip(axes, panels, strict=False):
        for kind, style in (("records", "o-"), ("shards", "s--")):
            s = result["summary"].get(kind)
            if s and key in s["figures"]:
                ax.loglog(s["records"], s["figures"][key], style,
                          label=f"{kind} ({s['growth'][key]['growth']})")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("records")
        ax.legend(fontsize=8)
    ax = axes[6]
    for kind, style in (("records", "o-"), ("shards", "s--")):
        s = result["summary"].get(kind)
        if s:
            ax.loglog(s["records"], [max(1, b) for b in s["memory_over_base"]["steady.anon"]["bytes"]],
                      style, label=f"{kind}: anon RSS over base")
    ax.set_title("rank memory beyond the mapped files (bytes)", fontsize=10)
    ax.set_xlabel("records")
    ax.legend(fontsize=8)
    ax = axes[7]
    s = result["summary"].get("shards")
    if s and "shard_open_per_shard_s" in s["figures"]:
        ax.loglog(s["sizes"], s["figures"]["manifest_build_s"], "s--", label="manifest build")
        ax.loglog(s["sizes"], [p["shard_opens"]["seconds"] for p in result["points"]
                               if p["kind"] == "shards"], "^-", label="open every shard")
        ax.set_xlabel("shards")
        ax.legend(fontsize=8)
    ax.set_title("sharded sets (s)", fontsize=10)
    fig.suptitle(f"fastload scale curve ({result['machine']['cpu']}, {result['git']})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_before": os.getloadavg()}


def library_tree() -> dict:
    """Which fastload is measured: its folder and commit (``FASTLOAD_TREE_REV`` names the
    commit of a snapshot that is not a git checkout) and whether its library files differ."""
    import fastload

    tree = Path(fastload.__file__).resolve().parent.parent
    rev = os.environ.get("FASTLOAD_TREE_REV", "")
    dirty = None
    if not rev:
        git = ["git", "-C", str(tree)]
        rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = bool(subprocess.run([*git, "status", "--porcelain", "--", "fastload",
                                     "pipelines"], capture_output=True, text=True).stdout.strip())
    return {"git": rev or "unknown", "library": str(tree), "library_dirty": dirty}


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=ints, default=[10_000],
                        help="record counts of the single-LMDB sets (comma-separated)")
    parser.add_argument("--shards", type=ints, default=[1_000],
                        help="shard counts of the sharded sets (comma-separated)")
    parser.add_argument("--per-shard", type=int, default=10, help="records per shard")
    parser.add_argument("--worlds", type=ints, default=list(WORLDS),
                        help="world sizes of the simulated rank orders")
    parser.add_argument("--max-ranks", type=int, default=512,
                        help="ranks computed per world size (an even sample above it)")
    parser.add_argument("--steady", type=int, default=20, help="batches after the first, timed")
    parser.add_argument("--repeats", type=int, default=1, help="fresh-process opens per set")
    parser.add_argument("--verify-sample", type=int, default=64, help="decodes per verify")
    parser.add_argument("--verify-shards-max", type=int, default=100_000,
                        help="verify sharded sets up to this many shards")
    parser.add_argument("--shard-open-budget-s", type=float, default=120.0,
                        help="stop opening every shard after this long (extrapolated)")
    parser.add_argument("--jpegs", type=int, default=256, help="distinct JPEGs the records cycle")
    parser.add_argument("--workdir", default=None, help="where the sets are written (a temp "
                        "folder by default; always deleted)")
    parser.add_argument("--out", default="scale-curve.json", help="JSON out (and .png beside)")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--keep-from", default=None, metavar="JSON",
                        help="reuse the points of an earlier run's JSON (same kinds and "
                             "sizes) instead of measuring them again")
    parser.add_argument("--in-process", action="store_true",
                        help="measure in this process (a smoke test: RSS is not per set)")
    args = parser.parse_args(argv)
    IN_PROCESS[0] = args.in_process

    work = Path(tempfile.mkdtemp(prefix="fastload-scale-", dir=args.workdir))
    os.environ["FASTLOAD_KEY_DIR"] = str(work / "key")  # the attestation key of these sets
    from scale_sets import small_jpegs

    started = time.time()
    result = {"command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
              "machine": machine(), "python": platform.python_version(),
              **library_tree(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "batch_size": BATCH,
              "per_shard": args.per_shard, "points": []}
    kept = {}
    if args.keep_from:
        earlier = json.loads(Path(args.keep_from).read_text())
        kept = {(p["kind"], p["size"]): p for p in earlier["points"]}
        result["kept_from"] = {"file": args.keep_from, "date": earlier.get("date"),
                               "points": sorted(f"{k}/{s}" for k, s in kept)}
    try:
        jpegs = small_jpegs(args.jpegs)
        result["jpeg_bytes_mean"] = sum(len(j[0]) for j in jpegs) / len(jpegs)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        for kind, sizes in (("records", args.records), ("shards", args.shards)):
            for size in sizes:
                if (kind, size) in kept:
                    result["points"].append(kept[(kind, size)])
                    continue
                try:
                    result["points"].append(run_point(kind, size, args, jpegs, work))
                except Exception as exc:  # noqa: BLE001 - recorded; the other points go on
                    result.setdefault("failed", []).append(
                        {"kind": kind, "size": size, "error": f"{type(exc).__name__}: {exc}"})
                    print(f"[{kind} {size}] FAILED: {exc}", flush=True)
                out.write_text(json.dumps(result, indent=1, default=str) + "\n")  # so far
                shutil.rmtree(work / f"{kind}-{size}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_after"] = os.getloadavg()
    result["seconds"] = time.time() - started
    result["summary"] = summarise(result["points"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if not args.no_chart:
        chart(result, out.with_suffix(".png"))
    print(f"wrote {out} in {result['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
