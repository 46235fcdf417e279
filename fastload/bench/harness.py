"""``fastload bench``: loaders side by side on the same files, in interleaved rounds.

Each row (see :mod:`fastload.bench.rows`) runs in its own spawned process, so its peak RSS
is its own. All row processes are started and set up first; then the harness asks them for
one epoch at a time in interleaved rounds (a, b, c, ..., a, b, c, ...), so drift of a
shared machine hits every row alike. The first ``warmup_epochs`` rounds are not measured.

Per row: images/s (median over measured epochs, with min–max), ratio to row (a), share of
row (f) (the decode ceiling) and of row (i) (the entropy-decode floor) when they run, the
peak memory of the row's process tree (the row process and its workers: PSS and USS summed
over the tree, and the summed RSS, which counts shared pages once per process; sampled by a
thread of the harness, :class:`fastload.utils.memory.TreeMemory`) and CPU use (process-tree
CPU seconds over wall seconds of the measured epochs; 200% = two cores busy).

An epoch's time runs from ``iter()`` to its last batch, plus any work the row's processes
keep doing after that batch (DALI decodes ahead across the epoch boundary): the row process
waits until its tree is idle and charges that tail to the epoch, so no row works for free
while another is measured, and every epoch costs one epoch of work.
"""

from __future__ import annotations

import dataclasses
import datetime
import multiprocessing
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastload.bench.process import RowProcess
from fastload.bench.recipes import recipe
from fastload.bench.report import format_table, machine_info, write_json, write_plot
from fastload.bench.rows import (
    ROW_KEYS,
    RowSpec,
    folder_samples,
    row_label,
    row_unavailable,
)
from fastload.data.convert.ensure import ensure_lmdb
from fastload.data.format.constants import META_FILE
from fastload.data.sets.manifest import is_sharded_set
from fastload.utils.checks import check_positive_int, check_share, file_on_path
from fastload.utils.memory import TreeMemory

__all__ = [
    "BenchConfig",
    "BenchReport",
    "RowResult",
    "format_table",
    "prepare_data",
    "run_bench",
    "run_recipes",
    "write_json",
    "write_plot",
]

_MIB = 1 << 20


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. ``data`` is an ImageFolder tree or a folder holding ``train/`` and
    ``val/`` (as ``fastload synth`` writes); the split matching ``transforms`` is used."""

    data: Path
    rows: str = ROW_KEYS
    batch_size: int = 64
    image_size: int = 224
    transforms: str = "train"  # "train" or "val"
    epochs: int = 3  # measured epochs per row
    warmup_epochs: int = 1  # unmeasured epochs per row, run first
    threads: int | None = None  # workers / DALI threads per row (default: all cores)
    max_side: int = 256  # stored long side for row (e)
    workdir: Path | None = None  # cache for LMDBs and subsets (default: next to data)
    limit: int | None = None  # use this many images, spread over all classes
    device: str = "cpu"  # "cpu" or "gpu"
    hw_decoder_load: float = 0.65
    seed: int = 0
    epoch_timeout_s: float = 3600.0
    recipe: str | None = None  # a fastload.bench.recipes name (rows a-e use its transform)

    def __post_init__(self) -> None:
        for name in ("batch_size", "image_size", "epochs", "max_side"):
            check_positive_int(name, getattr(self, name))
        if self.warmup_epochs < 0:
            raise ValueError(f"warmup_epochs should be >= 0, but got warmup_epochs={self.warmup_epochs}")
        check_positive_int("threads", self.threads, allow_none=True)
        check_positive_int("limit", self.limit, allow_none=True)
        if self.transforms not in ("train", "val"):
            raise ValueError(f"transforms should be 'train' or 'val', but got transforms={self.transforms!r}")
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"device should be 'cpu' or 'gpu', but got device={self.device!r}")
        check_share("hw_decoder_load", self.hw_decoder_load)  # as fastload.DataLoader's
        blocking = None if self.workdir is None else file_on_path(self.workdir)
        if blocking is not None and blocking == os.path.abspath(self.workdir):
            raise ValueError(f"workdir should be a folder (made if missing), but "
                             f"workdir={str(self.workdir)!r} is a file; pass a folder path")
        if blocking is not None:
            raise ValueError(f"workdir={str(self.workdir)!r} cannot be made: {blocking!r} on "
                             "its path is a file, not a folder; pass another path")
        bad = [key for key in self.rows if key not in ROW_KEYS]
        if bad or not self.rows or len(set(self.rows)) != len(self.rows):
            raise ValueError(
                f"rows should be distinct letters from {ROW_KEYS!r}, but got rows={self.rows!r}"
            )


@dataclass
class RowResult:
    """One row of the table. ``status`` is "ok", "skipped" or "failed" (``note`` says why)."""

    row: str
    loader: str
    status: str = "ok"
    note: str = ""
    images_per_epoch: int = 0
    epoch_images_per_s: list[float] = field(default_factory=list)
    images_per_s: float | None = None  # median over measured epochs
    spread_min: float | None = None
    spread_max: float | None = None
    ratio_to_a: float | None = None
    share_of_f: float | None = None
    share_of_i: float | None = None  # share of row (i), the entropy-decode floor
    peak_pss_mib: float | None = None  # the row's process tree, PSS summed (smaps_rollup)
    peak_uss_mib: float | None = None  # the same tree, private pages only
    peak_rss_mib: float | None = None  # the same tree, RSS summed (shared pages counted per process)
    cpu_percent: float | None = None
    setup_s: float | None = None


@dataclass
class BenchReport:
    config: dict
    machine: dict
    rows: list[RowResult]
    started: str
    seconds: float


def _split_folder(data: Path, transforms: str) -> tuple[Path, str]:
    if not data.is_dir():
        raise FileNotFoundError(
            f"data {str(data)!r} is not a directory; pass an ImageFolder tree or a folder "
            "with train/ and val/ (make one with `fastload synth OUT`)"
        )
    if (data / META_FILE).is_file() or is_sharded_set(data):
        raise FileNotFoundError(
            f"data {str(data)!r} is a fastload database; bench reads the ImageFolder tree it "
            "was converted from (and converts its own copy for the fastload rows)")
    split = "train" if transforms == "train" else "val"
    if (data / split).is_dir():
        return data / split, split
    return data, data.name


def _subset_tree(folder: Path, limit: int, dst: Path) -> Path:
    """An ImageFolder tree of symlinks to ``limit`` images of ``folder``, evenly spread."""
    samples = folder_samples(folder)
    if limit >= len(samples):
        return folder
    step = len(samples) / limit
    chosen = [samples[int(i * step)][0] for i in range(limit)]
    wanted = sorted(os.path.relpath(p, folder) for p in chosen)
    if dst.is_dir() and sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*.*")) == wanted:
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    partial = dst.with_name(dst.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for rel in wanted:
        link = partial / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.abspath(folder / rel))
    partial.rename(dst)
    return dst


def prepare_data(config: BenchConfig, log: Callable[[str], None] = print) -> tuple[RowSpec, int]:
    """Resolve the images, build the subset / LMDB caches the chosen rows need, and return
    the :class:`RowSpec` all rows share plus the number of images per epoch."""
    data = Path(config.data)
    folder, tag = _split_folder(data, config.transforms)
    workdir = Path(config.workdir) if config.workdir else data.parent / f"{data.name}.fastload-bench"
    workdir.mkdir(parents=True, exist_ok=True)
    if config.limit is not None:
        tag = f"{tag}-limit{config.limit}"
        folder = _subset_tree(folder, config.limit, workdir / tag)
    count = len(folder_samples(folder))
    if count == 0:
        raise ValueError(f"data {str(data)!r} holds no images under {str(folder)!r}")
    threads = config.threads or len(os.sched_getaffinity(0))
    if config.device == "gpu":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device='gpu' needs CUDA, but torch.cuda.is_available() is False; "
                             "use device='cpu'")
    lmdb = lmdb_small = None
    if set(config.rows) & set("bd"):
        lmdb = workdir / f"{tag}.lmdb"
        ensure_lmdb(folder, lmdb, workers=threads, log=log)
    if "e" in config.rows:
        lmdb_small = workdir / f"{tag}-max{config.max_side}.lmdb"
        ensure_lmdb(folder, lmdb_small, max_side=config.max_side, workers=threads, log=log)
    spec = RowSpec(
        folder=str(folder),
        lmdb=str(lmdb) if lmdb else None,
        lmdb_small=str(lmdb_small) if lmdb_small else None,
        beton=str(workdir / f"{tag}.beton"),
        batch_size=config.batch_size,
        image_size=config.image_size,
        transforms=config.transforms,
        threads=threads,
        device=config.device,
        hw_decoder_load=config.hw_decoder_load,
        max_side=config.max_side,
        seed=config.seed,
        recipe=config.recipe,
    )
    return spec, count


def _fail(result: RowResult, answer: tuple, log: Callable[[str], None]) -> None:
    result.status, result.note = "failed", answer[1]
    log(f"row ({result.row}) failed: {answer[1]}\n{answer[2] if len(answer) > 2 else ''}")


def run_bench(config: BenchConfig, log: Callable[[str], None] = print) -> BenchReport:
    """Run the configured rows in interleaved rounds and return the filled-in report."""
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    spec, count = prepare_data(config, log)
    results = {key: RowResult(key, row_label(key, config.max_side), images_per_epoch=count)
               for key in config.rows}
    context = multiprocessing.get_context("spawn")
    sampler = TreeMemory()
    sampler.start()
    procs: dict[str, RowProcess] = {}
    cpu: dict[str, list[float]] = {key: [0.0, 0.0] for key in config.rows}
    try:
        for key in config.rows:
            reason = row_unavailable(key)
            if reason:
                results[key].status, results[key].note = "skipped", reason
                log(f"row ({key}) {reason}")
                continue
            log(f"row ({key}) setting up: {results[key].loader}")
            proc = RowProcess(key, spec, context)
            sampler.watch(key, proc.proc.pid)
            answer = proc.answer(config.epoch_timeout_s)
            if answer[0] != "ready":
                _fail(results[key], answer, log)
                proc.stop()
                continue
            results[key].setup_s = answer[1]
            procs[key] = proc
        for round_index in range(config.warmup_epochs + config.epochs):
            measured = round_index >= config.warmup_epochs
            for key in list(procs):
                answer = procs[key].ask("epoch", config.epoch_timeout_s)
                if answer[0] != "epoch":
                    _fail(results[key], answer, log)
                    procs.pop(key).stop()
                    continue
                _, images, seconds, cpu_seconds, tail = answer
                rate = images / seconds
                log(f"round {round_index + 1}{'' if measured else ' (warm-up)'} row ({key}): "
                    f"{images} images in {seconds:.2f} s = {rate:.0f} img/s"
                    + (f" (incl. {tail:.2f} s of work after the last batch)" if tail >= 0.005 else ""))
                if images != count:
                    results[key].note = f"delivered {images} of {count} images per epoch"
                if measured:
                    results[key].epoch_images_per_s.append(rate)
                    cpu[key][0] += cpu_seconds
                    cpu[key][1] += seconds
        for key in list(procs):
            answer = procs[key].ask("close", 60)
            if answer[0] == "error":
                log(f"row ({key}) did not close cleanly: {answer[1]}")
            procs.pop(key).stop()
    finally:
        for proc in procs.values():  # only left after an exception: do not wait long
            proc.stop(wait_s=0)
        sampler.stop()
    for key, result in results.items():
        peak = sampler.peaks.get(key)
        if peak is not None:
            result.peak_rss_mib = peak.rss / _MIB if peak.rss else None
            result.peak_pss_mib = None if peak.pss is None else peak.pss / _MIB
            result.peak_uss_mib = None if peak.uss is None else peak.uss / _MIB
        if result.epoch_images_per_s and result.status == "ok":
            rates = result.epoch_images_per_s
            result.images_per_s = statistics.median(rates)
            result.spread_min, result.spread_max = min(rates), max(rates)
            result.cpu_percent = 100.0 * cpu[key][0] / cpu[key][1]
    _relate(results)
    config_dict = {k: (str(v) if isinstance(v, Path) else v)
                   for k, v in dataclasses.asdict(config).items()}
    config_dict.update(threads=spec.threads, images_per_epoch=count, folder=spec.folder)
    return BenchReport(config_dict, machine_info(config.device), list(results.values()),
                       started.isoformat(timespec="seconds"), time.perf_counter() - t_start)


def run_recipes(names: list[str], log: Callable[[str], None] = print,
                **config: Any) -> tuple[str, list]:
    """Rows (a) and (c) for each recipe, side by side in one run; ``(table, reports)``."""
    reports, lines = [], []
    for name in names:
        recipe(name, 8, 2)  # validates the name before anything runs
    for name in names:
        log(f"recipe {name}")
        split = "val" if name in ("eval", "timm_eval") else "train"
        report = run_bench(BenchConfig(**{**config, "rows": "ac", "recipe": name,
                                          "transforms": split}), log=log)
        log(format_table(report))
        reports.append(report)
        speeds = {r.row: r.images_per_s for r in report.rows}
        ratio = (speeds["c"] / speeds["a"]) if speeds.get("a") and speeds.get("c") else None
        lines.append((name, speeds.get("a"), speeds.get("c"), ratio))
    width = max(len("recipe"), *(len(n) for n in names))
    out = [f"{'recipe':<{width}}  {'torch img/s':>11}  {'fastload img/s':>14}  {'× torch':>7}"]
    for name, a, c, ratio in lines:
        cells = [f"{v:,.0f}" if v is not None else "-" for v in (a, c)]
        out.append(f"{name:<{width}}  {cells[0]:>11}  {cells[1]:>14}  "
                   f"{(f'{ratio:.2f}' if ratio is not None else '-'):>7}")
    return "\n".join(out), reports


def _relate(results: dict[str, RowResult]) -> None:
    base = results.get("a")
    ceiling = results.get("f")
    floor = results.get("i")
    for result in results.values():
        if result.images_per_s is None:
            continue
        if base is not None and base.images_per_s:
            result.ratio_to_a = result.images_per_s / base.images_per_s
        if ceiling is not None and ceiling.images_per_s:
            result.share_of_f = result.images_per_s / ceiling.images_per_s
        if floor is not None and floor.images_per_s:
            result.share_of_i = result.images_per_s / floor.images_per_s
