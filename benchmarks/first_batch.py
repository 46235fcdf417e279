"""Time to the first batch: fastload.DataLoader beside torch's DataLoader(num_workers=2) (issue 41).

    python benchmarks/first_batch.py --images 10000 --repeats 5 \\
        --out docs/benchmarks/results/first-batch.json

The same small real JPEGs (32-64 px crops of the photos in ``fastload.data.pictures``) as an
ImageFolder tree and as a fastload LMDB written with fastload's writer (``scale_sets``),
under a temporary folder deleted afterwards. Each row runs in a fresh process
(``call_in_fresh_process``, spawned) and times, with ``time.perf_counter``:

* ``import``: ``import torch, torchvision`` (+ ``fastload``, ``fastload.DataLoader``);
* ``construct``: the dataset (``ImageFolder`` lists the tree; ``LMDBDataset`` opens the set)
  and the loader;
* ``iter``: ``iter(loader)`` (torch: starts its worker processes; fastload: imports DALI,
  the first time in the process, and builds the graph and its threads);
* ``first``: the first ``next()``;
* then ``--warm-batches`` more batches, the iterator dropped, and the next epoch's ``iter()``
  and first ``next()`` (warm: the same process, the graph or the workers' imports made).

Cold is ``import + construct + iter + first`` of the fresh process (the files are in the
page cache: they were just written, as on a machine that read them recently); "from the
constructor" and "from iter()" drop the first terms. Rows are interleaved (every row once,
then again, ``--repeats`` times, the order rotated) and reported as medians with min-max.

Loaders: torch's ``DataLoader(dataset, batch_size, shuffle=True, num_workers=2)`` and
``fastload.DataLoader`` with the same arguments, over the folder and the LMDB. Transforms:

* ``rrc``: ``RandomResizedCrop(32), RandomHorizontalFlip, ToTensor, Normalize``: fastload
  builds a DALI graph that decodes (the region) and resamples with torch;
* ``padcrop``: ``Resize(36), RandomCrop(32, padding=4), ToTensor``: the resize, the padded
  crop and the conversion all run inside the DALI graph (a bigger graph to build);
* ``pil-first``: a ``Lambda`` on the PIL image first: fastload builds no graph and falls
  back to torch's DataLoader (``FallbackWarning``), so the row is fastload's own cost on
  that path.
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
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

TRANSFORMS = ("rrc", "padcrop", "pil-first")
LOADERS = ("torch", "fastload")
SOURCES = ("folder", "lmdb")


def _identity_image(image):
    return image


def make_transform(name: str):
    from torchvision import transforms as T

    if name == "rrc":
        return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    if name == "padcrop":
        return T.Compose([T.Resize(36), T.RandomCrop(32, padding=4), T.ToTensor()])
    if name == "pil-first":
        return T.Compose([T.Lambda(_identity_image), T.Resize(36), T.CenterCrop(32),
                          T.ToTensor()])
    raise ValueError(f"transform should be one of {TRANSFORMS}, but got {name!r}")


def run_row(loader_kind: str, source: str, transform_name: str, folder: str, lmdb: str,
            batch_size: int, warm_batches: int) -> dict:
    """One row in this (fresh) process: the phases' seconds, cold then warm."""
    import multiprocessing

    # A spawned child inherits "spawn" as its default start method; a script run on Linux
    # has "fork", which torch's workers then use (spawned workers would import torch again).
    multiprocessing.set_start_method("fork", force=True)
    t0 = time.perf_counter()
    import torch
    import torchvision  # noqa: F401

    if loader_kind == "fastload" or source == "lmdb":
        import fastload
    if loader_kind == "fastload":
        from fastload import DataLoader
    else:
        from torch.utils.data import DataLoader
    out = {"import": time.perf_counter() - t0}
    torch.manual_seed(0)
    transform = make_transform(transform_name)
    t = time.perf_counter()
    if source == "folder":
        from torchvision.datasets import ImageFolder

        dataset = ImageFolder(folder, transform)
    else:
        dataset = fastload.LMDBDataset(lmdb, transform=transform)
    out["dataset"] = time.perf_counter() - t
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2)
    out["construct"] = time.perf_counter() - t
    out["fallback"] = any("running torch.utils.data.DataLoader" in str(w.message)
                          for w in caught)
    plan = getattr(loader, "plan", None)
    out["plan"] = str(plan) if plan is not None else "torch.utils.data.DataLoader"
    t = time.perf_counter()
    it = iter(loader)
    out["iter"] = time.perf_counter() - t
    t = time.perf_counter()
    images, _ = next(it)
    out["first"] = time.perf_counter() - t
    out["shape"] = list(images.shape)
    for _ in range(warm_batches):
        next(it)
    del it
    t = time.perf_counter()
    it = iter(loader)
    out["warm_iter"] = time.perf_counter() - t
    t = time.perf_counter()
    next(it)
    out["warm_first"] = time.perf_counter() - t
    del it
    if hasattr(loader, "close"):
        loader.close()
    out["cold_from_import"] = out["import"] + out["construct"] + out["iter"] + out["first"]
    out["cold_from_construct"] = out["construct"] + out["iter"] + out["first"]
    out["cold_from_iter"] = out["iter"] + out["first"]
    out["warm_from_iter"] = out["warm_iter"] + out["warm_first"]
    return out


def graph_build(transform_name: str, batch_size: int) -> dict:
    """What fastload's first ``iter()`` in a process does, apart: import DALI (the loader
    imports it there, not at ``import fastload``), then build the graph (``BatchDecoder``,
    as ``iter()`` makes it)."""
    t0 = time.perf_counter()
    from fastload.pipelines import BatchDecoder, split_transform

    imported = time.perf_counter() - t0
    split = split_transform(make_transform(transform_name), "cpu")
    t = time.perf_counter()
    import nvidia.dali.fn  # noqa: F401  (what build_pipeline imports)

    dali = time.perf_counter() - t
    t = time.perf_counter()
    decoder = BatchDecoder(split.prefix, max_batch_size=batch_size, num_threads=2,
                           device="cpu", queue_depth=2)
    built = time.perf_counter() - t
    resampler = decoder.resampler
    decoder.close()
    return {"import_pipelines": imported, "import_dali": dali, "build": built,
            "resampler": resampler}


PHASES = ("import", "construct", "iter", "first", "warm_iter", "warm_first",
          "cold_from_import", "cold_from_construct", "cold_from_iter", "warm_from_iter")


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=10_000, help="images in the set")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per row")
    parser.add_argument("--warm-batches", type=int, default=4,
                        help="batches after the first before the next epoch")
    parser.add_argument("--transforms", default=",".join(TRANSFORMS))
    parser.add_argument("--workdir", default=None, help="parent of the temp folder")
    parser.add_argument("--out", default="first-batch.json")
    args = parser.parse_args(argv)
    transforms = [t for t in args.transforms.split(",") if t]

    from scale_curve import library_tree, machine
    from scale_sets import small_jpegs, write_folder, write_lmdb

    from fastload.utils.process import call_in_fresh_process

    work = Path(tempfile.mkdtemp(prefix="fastload-first-", dir=args.workdir))
    os.environ["FASTLOAD_KEY_DIR"] = str(work / "key")
    rows = [(lk, src, tf) for tf in transforms for src in SOURCES for lk in LOADERS]
    runs: dict[str, list[dict]] = {f"{lk}/{src}/{tf}": [] for lk, src, tf in rows}
    result = {"command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
              "machine": machine(), **library_tree(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "images": args.images,
              "batch_size": args.batch_size, "repeats": args.repeats}
    started = time.time()
    try:
        jpegs = small_jpegs(256)
        folder = write_folder(work / "folder", args.images, jpegs)
        lmdb = work / "lmdb"
        write_lmdb(lmdb, args.images, jpegs)
        result["graph_build"] = {tf: call_in_fresh_process(graph_build, tf, args.batch_size,
                                                           name="first-batch-graph")
                                 for tf in transforms if tf != "pil-first"}
        for rep in range(args.repeats):
            shift = rep % len(rows)
            for lk, src, tf in rows[shift:] + rows[:shift]:
                row = call_in_fresh_process(run_row, lk, src, tf, str(folder), str(lmdb),
                                            args.batch_size, args.warm_batches,
                                            name=f"first-batch-{lk}-{src}-{tf}",
                                            timeout_s=600)
                runs[f"{lk}/{src}/{tf}"].append(row)
                print(f"rep {rep} {lk}/{src}/{tf}: cold {row['cold_from_import']:.2f}s "
                      f"(iter+first {row['cold_from_iter']:.2f}s), warm "
                      f"{row['warm_from_iter']:.2f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["rows"] = {}
    for key, values in runs.items():
        if not values:
            continue
        result["rows"][key] = {
            "plan": values[0]["plan"], "fallback": values[0]["fallback"],
            "shape": values[0]["shape"],
            **{phase: stats([v[phase] for v in values]) for phase in PHASES}}
    ratios = {}
    for tf in transforms:
        for src in SOURCES:
            fl = result["rows"].get(f"fastload/{src}/{tf}")
            th = result["rows"].get(f"torch/{src}/{tf}")
            if fl and th:
                ratios[f"{src}/{tf}"] = {
                    phase: fl[phase]["median"] / th[phase]["median"]
                    for phase in ("cold_from_import", "cold_from_construct", "cold_from_iter",
                                  "warm_from_iter")}
    result["fastload_over_torch"] = ratios
    result["machine"]["load_after"] = os.getloadavg()
    result["seconds"] = time.time() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out} in {result['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
