"""Conversion throughput: keep-bytes and ``--max-side 256``, 1 vs 2 workers, beside ``tar cf``.

``tar cf`` of the same folder is the I/O reference: it reads every file and writes one
archive. Target: keep-bytes conversion with ``check="markers"`` takes at most 1.5x the time
of ``tar cf``. ``test_strict_check_cost`` measures the default ``check="decode"`` (a strict
1/8-scale decode of every JPEG) against it, in threads and in worker processes. The
ratio is measured side by side (alternating runs) and printed at the end as the ratio of the
best times and as the median (and range) of the ratios within each round, against plain
``tar cf`` and against ``tar cf`` plus an fsync of the archive (fastload flushes the
finished database to disk before declaring it complete; tar does not).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time

import pytest

from fastload.data.convert.folder import convert_folder

ROUNDS = 3
RATIO_ROUNDS = 15  # alternating runs for the ratio (a run of each takes ~0.1 s)


def _folder_bytes(tree) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())


def _quiesce(output) -> None:
    """Untimed: remove the previous run's output and flush every dirty page to disk.

    Without it, each timed run would pay for the writeback (and truncation) of whatever
    ran before it: a tar after a conversion starts clean, a conversion after a tar shares
    the disk with 95 MB of the archive's dirty pages, and the order decides the ratio.
    """
    if os.path.isdir(output):
        shutil.rmtree(output)
    elif os.path.exists(output):
        os.remove(output)
    os.sync()


def _tar(tree, out) -> float:
    _quiesce(out)
    start = time.perf_counter()
    subprocess.run(["tar", "cf", str(out), "-C", str(tree), "."], check=True)
    return time.perf_counter() - start


def _tar_fsync(tree, out) -> float:
    _quiesce(out)
    start = time.perf_counter()
    subprocess.run(["tar", "cf", str(out), "-C", str(tree), "."], check=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def _convert(tree, dst, **options) -> float:
    _quiesce(dst)
    start = time.perf_counter()
    convert_folder(tree, dst, progress=False, **options)
    return time.perf_counter() - start


def test_tar_cf_reference(benchmark, convert_tree, tmp_path):
    out = tmp_path / "tree.tar"
    benchmark.pedantic(_tar, args=(convert_tree, out), rounds=ROUNDS, iterations=1)
    benchmark.extra_info["bytes"] = _folder_bytes(convert_tree)
    assert out.stat().st_size >= _folder_bytes(convert_tree)


@pytest.mark.parametrize("check", ["markers", "decode"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("max_side", [None, 256], ids=["keep-bytes", "max-side-256"])
def test_convert_throughput(benchmark, convert_tree, bench_image_count, tmp_path, max_side,
                            workers, check):
    dst = tmp_path / "db"
    benchmark.extra_info.update(images=bench_image_count, bytes=_folder_bytes(convert_tree))
    benchmark.pedantic(
        convert_folder, args=(convert_tree, dst),
        kwargs={"workers": workers, "max_side": max_side, "progress": False, "check": check},
        setup=lambda: shutil.rmtree(dst, ignore_errors=True),  # untimed
        rounds=ROUNDS if max_side is None else 2, iterations=1,
    )
    assert (dst / "fastload.json").exists()


def test_keep_bytes_vs_tar_ratio(benchmark, convert_tree, bench_image_count, tmp_path,
                                 request):
    """Alternate ``tar cf`` and keep-bytes conversions; record best-of and per-round ratios."""
    runs = {"tar": [], "tar+fsync": [], "keep w1": [], "keep w2": [], "keep w1 decode-check": []}
    rounds = 1 if request.config.getoption("benchmark_disable") else RATIO_ROUNDS
    for round_index in range(rounds):
        runs["tar"].append(_tar(convert_tree, tmp_path / "a.tar"))
        runs["tar+fsync"].append(_tar_fsync(convert_tree, tmp_path / "b.tar"))
        runs["keep w1"].append(_convert(convert_tree, tmp_path / "db1", workers=1,
                                        check="markers"))
        runs["keep w2"].append(_convert(convert_tree, tmp_path / "db2", workers=2,
                                        check="markers"))
        if round_index < 2:  # a decode per image: slow, and two rounds show it
            runs["keep w1 decode-check"].append(
                _convert(convert_tree, tmp_path / "db3", workers=1, check="decode"))
    best = {name: min(times) for name, times in runs.items()}
    lines = {}
    for name, seconds in best.items():
        if name.startswith("keep"):
            for reference in ("tar", "tar+fsync"):
                ratio = seconds / best[reference]
                # within a round the runs are seconds apart: the host's phase cancels out
                per_round = [a / b for a, b in zip(runs[name], runs[reference], strict=False)]
                benchmark.extra_info[f"{name} / {reference}"] = ratio
                benchmark.extra_info[f"{name} / {reference} per round"] = per_round
                lines[f"{name} / {reference}"] = (
                    f"{ratio:.2f}x  ({seconds:.3f} s vs {best[reference]:.3f} s, "
                    f"{bench_image_count} images, {seconds and bench_image_count / seconds:.0f} img/s); "
                    f"per round {statistics.median(per_round):.2f}x "
                    f"[{min(per_round):.2f}-{max(per_round):.2f}] over {len(per_round)}"
                )
    benchmark.extra_info.update({f"{k}_s": v for k, v in best.items()})
    request.config._fastload_convert_ratios = lines
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the numbers live in extra_info
    assert all(seconds > 0 for seconds in best.values())


def _convert_cpu(tree, dst, **options) -> tuple[float, float]:
    """``(wall seconds, CPU seconds of this process and its finished children)``."""
    import resource

    _quiesce(dst)
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    start = time.perf_counter()
    convert_folder(tree, dst, progress=False, **options)
    wall = time.perf_counter() - start
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime
              for a, b in zip(after, before, strict=True))
    return wall, cpu


def test_strict_check_cost(benchmark, convert_tree, bench_image_count, tmp_path, request,
                           monkeypatch):
    """Keep-bytes conversion with ``check="markers"`` against the default strict check, the
    latter in threads of the main process (the default) and in the worker processes (with
    everything that needs Pillow), rounds alternating: img/s and CPU ms per image."""
    import fastload.data.convert.database as convert

    ways = {"markers w1": (1, "markers", True), "markers w2": (2, "markers", True),
            "strict w1": (1, "decode", True), "strict w2 threads": (2, "decode", True),
            "strict w2 processes": (2, "decode", False)}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    rounds = 1 if request.config.getoption("benchmark_disable") else ROUNDS + 2
    for _ in range(rounds):
        for name, (workers, check, threaded) in ways.items():
            monkeypatch.setattr(convert, "_THREADED_STRICT", threaded)
            runs[name].append(_convert_cpu(convert_tree, tmp_path / "db", workers=workers,
                                           check=check))
    lines = {}
    for name, times in runs.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        benchmark.extra_info[f"{name} img/s median"] = bench_image_count / wall
        benchmark.extra_info[f"{name} cpu ms/img median"] = 1e3 * cpu / bench_image_count
        lines[name] = (f"{bench_image_count / wall:.0f} img/s (best "
                       f"{bench_image_count / min(w for w, _ in times):.0f}), "
                       f"{1e3 * cpu / bench_image_count:.3f} CPU ms/img; medians of {rounds}")
    request.config._fastload_convert_ratios = {
        **getattr(request.config, "_fastload_convert_ratios", {}), **lines}
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the numbers live in extra_info
    assert all(w > 0 for times in runs.values() for w, _ in times)
