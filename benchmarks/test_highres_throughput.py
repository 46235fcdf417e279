"""High-resolution photos: fastload vs torchvision's tuned loader, RRC-224 and val, side by side.

Rows, one epoch each, interleaved round by round in one process (a, c, c0, i, a, ...):
(a) torchvision ImageFolder + torch DataLoader as the usual advice tunes it, (c) fastload on
the folder (scaled JPEG decode where it applies), (c0) the same fastload loader with the
scaled decode off (the DALI path), (i) the entropy-decode floor (each file at 1/8 DCT
scale on all cores, ``fastload bench``'s row (i)). Each round gives the ratios c/a, c0/a,
c/i and c0/i; the table shows their medians and ranges, and the median img/s per row.

    python benchmarks/test_highres_throughput.py --images 64 --rounds 7   # a measurement
    pytest benchmarks/test_highres_throughput.py --benchmark-disable      # smoke: 4 images

The measurement makes ``--images`` 2100x1680 q90 collages of crops of real photographs
(``fastload synth --photos --size 2100x1680``; ``--generated`` for ``fastload synth``'s
pictures) once under ``--workdir``. Timings from a loaded machine are ratios only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import pytest

from fastload.bench.rows import RowSpec, make_row
from fastload.pipelines.decode import scaled as scaled_decode

SIZE = (1680, 2100)  # (height, width) of the generated photos
ROWS = ("a", "c", "c0", "i")
LABELS = {"a": "torchvision tuned loader", "c": "fastload (scaled decode)",
          "c0": "fastload, scaled decode off", "i": "entropy-decode floor"}


def highres_tree(root: Path, images: int, size: tuple[int, int] = SIZE,
                 photos: bool = True) -> Path:
    """``root/train`` and ``root/val`` of ``images`` camera-sized pictures each (made once):
    collages of real photographs, or with ``photos=False`` generated pictures."""
    from fastload.data.pictures.photos import photo_tree
    from fastload.data.pictures.synth import synthesize

    kind = "photos" if photos else "generated"
    marker = root / f".done-{kind}-{images}-{size[0]}x{size[1]}"
    if not marker.exists():
        make = photo_tree if photos else synthesize
        make(root, train=images, val=images, classes=4, seed=0, size=size)
        marker.touch()
    return root


def measure(root: Path, transforms: str, rounds: int, threads: int = 2,
            batch_size: int = 16) -> dict:
    """Interleaved epochs of rows a, c, c0 on ``root/<split>``: per-row img/s and per-round
    ratios to row (a)."""
    folder = root / ("train" if transforms == "train" else "val")
    spec = RowSpec(folder=str(folder), batch_size=batch_size, transforms=transforms,
                   threads=threads, device="cpu")
    runners = {"a": make_row("a", spec), "c": make_row("c", spec), "c0": make_row("c", spec),
               "i": make_row("i", spec)}
    rates: dict[str, list[float]] = {key: [] for key in ROWS}
    saved = scaled_decode.MIN_PIXELS
    try:
        for runner in runners.values():
            runner.setup()
        for key, runner in runners.items():  # warm-up epoch (worker start, graph build)
            scaled_decode.MIN_PIXELS = saved if key != "c0" else float("inf")
            runner.run_epoch()
        for _ in range(rounds):
            for key, runner in runners.items():
                scaled_decode.MIN_PIXELS = saved if key != "c0" else float("inf")
                start = time.perf_counter()
                count = runner.run_epoch()
                rates[key].append(count / (time.perf_counter() - start))
    finally:
        scaled_decode.MIN_PIXELS = saved
        for runner in runners.values():
            runner.close()
    ratios = {key: [r / a for r, a in zip(rates[key], rates["a"], strict=True)]
              for key in ("c", "c0")}
    floor = {key: [r / f for r, f in zip(rates[key], rates["i"], strict=True)]
             for key in ("c", "c0")}
    return {"rates": rates, "ratios": ratios, "floor": floor}


def table(results: dict[str, dict]) -> str:
    """One line per transform and row: median img/s, and ratio to (a) median [min-max]."""
    lines = [f"{'transforms':<10} {'row':<30} {'img/s':>7}  {'ratio to (a), median [range]':<28}"
             "  share of the floor (i), median [range]"]
    for transforms, result in results.items():
        for key in ROWS:
            rate = statistics.median(result["rates"][key])
            ratio = share = ""
            if key in ("c", "c0"):
                r = result["ratios"][key]
                ratio = f"{statistics.median(r):.2f}x [{min(r):.2f}-{max(r):.2f}]"
                f = result["floor"][key]
                share = f"{statistics.median(f):.0%} [{min(f):.0%}-{max(f):.0%}]"
            lines.append(f"{transforms:<10} {LABELS[key]:<30} {rate:7.1f}  {ratio:<28}  {share}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def highres_root(request, tmp_path_factory) -> Path:
    """48 2100x1680 photos per split for a measurement; 4 of 1400x1100 for a smoke run."""
    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    images = int(os.environ.get("FASTLOAD_HIGHRES_IMAGES", 4 if smoke else 48))
    size = (1100, 1400) if smoke else SIZE  # still over MIN_PIXELS: the scaled path runs
    return highres_tree(tmp_path_factory.mktemp("highres"), images, size)


@pytest.mark.slow
@pytest.mark.parametrize("transforms", ["train", "val"])
def test_highres_ratios_to_torchvision(benchmark, transforms, highres_root, capsys):
    smoke = not benchmark.enabled
    root = highres_root
    result = benchmark.pedantic(measure, args=(root, transforms, 1 if smoke else 5),
                                kwargs={"batch_size": 2 if smoke else 16}, rounds=1)
    assert all(len(v) == (1 if smoke else 5) for v in result["rates"].values())
    if benchmark.enabled:
        benchmark.extra_info.update({k: round(statistics.median(v), 2)
                                     for k, v in result["ratios"].items()})
        with capsys.disabled():
            print("\n" + table({transforms: result}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=64, help="photos per split (64)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (7)")
    parser.add_argument("--batch-size", type=int, default=16, help="images per batch (16)")
    parser.add_argument("--threads", type=int, default=2, help="workers / threads per row (2)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastload-highres"),
                        help="where the photos are made once")
    parser.add_argument("--generated", action="store_true",
                        help="fastload synth's generated pictures instead of real photographs")
    args = parser.parse_args()
    root = highres_tree(args.workdir, args.images, photos=not args.generated)
    results = {t: measure(root, t, args.rounds, args.threads, args.batch_size)
               for t in ("train", "val")}
    print(table(results))


if __name__ == "__main__":
    main()
