"""The driver's side of a conversion on an engine: run the shard jobs of a
:class:`~fastload.data.convert.engine.ShardPlan` through an engine adapter, then check every
shard and write the labels and manifest last (the module docstring of
:mod:`fastload.data.convert.engine` states the contract of both sides).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from fastload.data.convert.database import ConvertError, ConvertReport, stored_nothing
from fastload.data.convert.destination import REPLACEMENT
from fastload.data.convert.dst_lock import remove_lone_lock
from fastload.data.convert.engine import (
    CONVERTED,
    DEFAULT_RETRIES,
    FAILED,
    ShardBusy,
    ShardPlan,
    ShardResult,
    attempt_folders,
    plan_shard_jobs,
    remove_abandoned,
)
from fastload.data.convert.image_check import KEPT
from fastload.data.convert.plan import ConversionPlan
from fastload.data.convert.shards import finished_shard, move_set_in, newest_shard
from fastload.data.format.constants import ERRORS_FILE, META_FILE
from fastload.data.sets.manifest import LOCK_FILE as SET_LOCK_FILE
from fastload.data.sets.manifest import complete_manifest, shard_name

__all__ = ["RunJobs", "add_shard_report", "convert_on_engine", "finish_shards",
           "raise_unfinished", "run_shard_plan"]

# Exceptions a failed result is raised as again on the driver (others: ConvertError).
_RAISED_AS = {cls.__name__: cls for cls in (
    ConvertError, ValueError, OSError, FileExistsError, FileNotFoundError, PermissionError,
    ShardBusy)}


def finish_shards(plan: ShardPlan, results: list[ShardResult]) -> ConvertReport:
    """Check every shard of ``plan``, remove finished shards' attempt folders, write the
    labels and manifest; the report of the shards converted in this run, read from their
    sidecars. A shard that did not finish raises the error its task reported (or a
    :class:`ConvertError` saying the set is resumable); the set then has no manifest."""
    dst, count = plan.dst_path, plan.count
    unfinished = [k for k, (begin, stop) in enumerate(plan.bounds)
                  if not _finished(plan, dst / shard_name(k, count), k, stop - begin)]
    for k in set(range(count)) - set(unfinished):
        for folder in attempt_folders(dst, f"{shard_name(k, count)}-"):
            remove_abandoned(folder)
    raise_unfinished(plan, results, unfinished)
    total = ConvertReport(path=dst, stored=0, skipped=0, seen=0,
                          finished_shards=list(plan.finished_before),
                          classes=list(plan.classes))
    for k in range(count):
        if k in plan.finished_before:
            continue
        folder = newest_shard(dst / shard_name(k, count))  # a replacement, until moved in
        with open(folder / META_FILE, encoding="utf-8") as handle:
            meta = json.load(handle)
        with open(folder / ERRORS_FILE, encoding="utf-8") as handle:
            errors = json.load(handle)
        add_shard_report(total, plan, results, k, meta, errors)
    if plan.replacing and stored_nothing(total.seen, total.stored):
        total.kept_old = True  # every file skipped: the finished set stays as it was
        return total
    if plan.replacing and not move_set_in(dst, plan.identities,
                                          [stop - begin for begin, stop in plan.bounds]):
        raise ConvertError(f"another process is writing a shard of {str(dst)!r}; rerun the "
                           "same command once it has finished (finished shards are kept)")
    total.manifest = complete_manifest(dst, count)
    return total


def _finished(plan: ShardPlan, folder: Path, k: int, files: int) -> bool:
    """Whether shard ``k`` is finished: the replacement of a shard the plan replaces (the
    shard it replaces is not this run's, whatever its identity)."""
    if k in plan.replaced:
        return finished_shard(folder / REPLACEMENT, plan.identities[k], files)
    return finished_shard(folder, plan.identities[k], files)


def raise_unfinished(plan: ShardPlan, results: list[ShardResult],
                     unfinished: list[int]) -> None:
    """Raise, when ``unfinished`` names shards, the error the first failed one's task
    reported, else a :class:`ConvertError` saying the set is resumable."""
    if not unfinished:
        return
    count = plan.count
    failures = {r.index: r for r in results if r.state == FAILED and r.index in unfinished}
    names = ", ".join(shard_name(k, count) for k in unfinished[:3]) + \
        (", ..." if len(unfinished) > 3 else "")
    if failures:
        first = failures[min(failures)]
        cls = _RAISED_AS.get(first.error_type, ConvertError)
        message = first.error if cls is not ConvertError or first.error_type == \
            "ConvertError" else f"{first.error_type}: {first.error}"
        raise cls(f"{message} ({len(unfinished)} of {count} shards unfinished: {names})")
    raise ConvertError(f"{len(unfinished)} of {count} shards did not finish ({names}); "
                       "rerun the same command to convert them (finished shards are kept)")


def add_shard_report(total: ConvertReport, plan: ShardPlan, results: list[ShardResult],
                     k: int, meta: dict, errors: dict) -> None:
    """Add shard ``k``'s counts and skipped files (its sidecar ``meta`` and its
    ``errors.json``) to ``total``."""
    begin = plan.bounds[k][0]
    kept = int((meta.get("counts") or {}).get(KEPT, 0))
    total.stored += int(meta["count"])
    total.skipped += int(meta["skipped"])
    total.seen += int(meta["seen"])
    total.kept += kept
    total.reencoded += int(meta["count"]) - kept
    total.errors += [{**e, "index": e["index"] + begin} for e in errors.get("skipped", [])]
    resumed = next((r.resumed_from for r in results if r.index == k and
                    r.state == CONVERTED and r.resumed_from), 0)
    if resumed and not total.resumed:
        total.resumed, total.resumed_from = True, begin + resumed


RunJobs = Callable[..., None]  # run_jobs(jobs, on_result, *, address, retries, cpus)


def convert_on_engine(plan: ConversionPlan, run_jobs: RunJobs, address: str | None = None,
                      *, overwrite: bool = False, workers: int | None = None,
                      retries: int = DEFAULT_RETRIES) -> ConvertReport:
    """Plan, run every shard job through ``run_jobs`` (an engine adapter of
    :mod:`fastload.data.convert.engines`), finish. Progress as shards finish goes to
    stderr when ``plan.run`` says progress (a bar on a terminal, a line per shard
    otherwise). Ctrl-C reaches the adapter, which cancels its tasks; the set stays
    resumable. Where the engine gave no result (it did not start, or stopped first) and
    nothing else was written, the destination is left as it was found: the folder this call
    made, or the set's lock file it added, removed again."""
    found = _entries(plan.dst_path)
    shard_plan = plan_shard_jobs(plan, overwrite=overwrite, workers=workers)
    results: list[ShardResult] = []
    try:
        results = run_shard_plan(shard_plan, run_jobs, address, progress=plan.run[6],
                                 retries=retries, cpus=workers or 1)
    finally:
        if not results:
            _undo_claim(shard_plan.dst_path, found)
    return finish_shards(shard_plan, results)


def _entries(folder: Path | None) -> set[str] | None:
    """The names in ``folder``, or None where it is no folder."""
    return {entry.name for entry in folder.iterdir()} if folder and folder.is_dir() else None


def _undo_claim(folder: Path, found: set[str] | None) -> None:
    """Take back what planning added to ``folder`` (found holding ``found``, or absent:
    None) where that is all that changed: the set's lock file, and the folder itself."""
    if found is not None and SET_LOCK_FILE in found:
        return
    if remove_lone_lock(folder, SET_LOCK_FILE, found or ()) and found is None:
        with contextlib.suppress(OSError):  # another conversion wrote into it meanwhile
            folder.rmdir()


def run_shard_plan(shard_plan: ShardPlan, run_jobs: RunJobs, address: str | None, *,
                   progress: bool, retries: int, cpus: int) -> list[ShardResult]:
    """Run ``shard_plan``'s jobs through ``run_jobs``; the results as they came back."""
    results: list[ShardResult] = []
    shown = _Progress(len(shard_plan.jobs), progress)
    try:
        if shard_plan.jobs:
            run_jobs(shard_plan.jobs, lambda result: (results.append(result), shown(result)),
                     address=address, retries=retries, cpus=cpus)
    finally:
        shown.close()
    return results


class _Progress:
    """Shards as they finish: a tqdm bar on a terminal, else one line each (stderr)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.bar, self.enabled = total, 0, None, enabled and total
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="shard", desc="convert", dynamic_ncols=True)

    def __call__(self, result: ShardResult) -> None:
        if not self.enabled:
            return
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            return
        what = f"failed: {result.error}" if result.state == FAILED else result.state
        print(f"fastload convert: shard {result.index} {what} ({self.done}/{self.total})",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
