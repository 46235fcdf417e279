"""A sharded conversion run as tasks of an engine (Ray, Dask, Spark): plan, shard tasks, finish.

The **driver** plans once (:func:`plan_shard_jobs`): it lists and fingerprints the source
and names the identity exactly as a conversion without an engine does
(:func:`fastload.data.convert.plan.plan_conversion`), claims the set under its lock (one
shard count per folder, a finished set only with ``overwrite``) and makes one small
picklable :class:`ShardJob` per unfinished shard: that shard's slice of the source, its
identity, the options and the destination folder.

A **task** (:func:`run_shard`, around :func:`convert_shard`) converts one shard and may run
any number of times, at once or one after another, on any machine that sees the folder:

* a shard already finished with this identity returns ``"done"``, never an error;
* otherwise it converts into a folder of its own, ``DST/.attempt-<shard>-<uuid>``, and
  publishes it with one ``rename`` to ``DST/shard-k-of-N``: a half shard never has the
  shard's name, and ``fastload.json`` (written last) says complete before the rename. Two
  attempts that both finish write the same records; the first rename wins, the second
  finds the finished shard, checks it, removes its own copy and returns ``"done"``;
* an attempt killed mid-shard leaves its folder unlocked: the next attempt takes it over
  and resumes it (the ``flock`` of :mod:`fastload.data.convert.dst_lock` died with the
  killed process);
* an attempt that finds the shard held by a live writer (another attempt's folder, or a
  conversion without an engine writing the shard in place) raises :class:`ShardBusy`.

**The retry rule.** :class:`ShardBusy` is the one retryable error, and engines retry it
(and lost workers, which are not exceptions); :func:`run_shard` returns every other error
as a ``"failed"`` :class:`ShardResult` (a strict conversion's
:class:`~fastload.data.convert.database.ConvertError`, a finished shard of another
conversion, a full disk), so an engine that retries whatever a task raises (Dask, Spark)
retries exactly what Ray's ``retry_exceptions=[ShardBusy]`` does. An unreadable image is
no error: it is skipped and listed in the shard's ``errors.json``, as without an engine.

The driver then **finishes** (:func:`fastload.data.convert.engine_run.finish_shards`): it
checks every shard of the plan against its identity whatever results came back (a lost or duplicated result changes
nothing: the report is read from the shards' own sidecars), removes the attempt folders
of finished shards, and writes the labels and manifest last
(:func:`fastload.data.sets.manifest.complete_manifest`, built from the shards' sidecars).
A shard that did not finish leaves the set without a manifest and resumable: the same
call again keeps the finished shards and converts the rest.

**Overwrite.** With ``overwrite`` a finished set stays whole and readable while its
replacement is converted: a task publishes a shard the set holds as that shard's
replacement (``DST/shard-k-of-N/.fastload-replacement``), and the driver, once every
replacement is finished, moves them in together
(:func:`fastload.data.convert.shards.move_set_in`).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fastload.data.convert.database import ConvertError, convert_one, is_complete
from fastload.data.convert.destination import REPLACEMENT, prepare_destination
from fastload.data.convert.dst_lock import lock_destination, set_lock, unlock_destination
from fastload.data.convert.plan import ConversionPlan
from fastload.data.convert.shards import (
    check_set_folder,
    claim_shard_count,
    finished_shard,
    identity_of_shard,
    remove_shard,
)
from fastload.data.format.atomic import sync_directory
from fastload.data.sets.manifest import LOCK_FILE, MANIFEST_FILE, shard_bounds, shard_name

__all__ = ["ATTEMPT_PREFIX", "CONVERTED", "DEFAULT_RETRIES", "DONE", "FAILED", "ShardBusy",
           "ShardJob", "ShardPlan", "ShardResult", "attempt_folders", "claim_attempt",
           "convert_shard", "failed_result", "plan_shard_jobs", "remove_abandoned",
           "require_engine", "run_shard", "shard_job", "shard_layout"]

ATTEMPT_PREFIX = ".attempt-"  # DST/.attempt-shard-00001-of-00008-<uuid>: one task's folder
DEFAULT_RETRIES = 3  # an engine's retries of a shard task (lost worker, ShardBusy)
DONE, CONVERTED, FAILED = "done", "converted", "failed"  # ShardResult.state


class ShardBusy(ConvertError):
    """Another attempt is writing this shard right now (the retryable error)."""


@dataclass(frozen=True)
class ShardJob:
    """One shard task: small and picklable (the shard's records, not the source's)."""

    dst: str  # the set's folder, absolute, seen alike by every worker
    index: int
    count: int
    samples: object  # this shard's slice of the source: a list or a RecordTable view
    identity: dict  # the shard's sidecar identity (identity_of_shard)
    total_bytes: int  # this shard's share of the source's bytes (the map's first size)
    run: tuple  # the writer loop's settings, progress off
    # published as the replacement of the finished shard of the set it overwrites
    replaces: bool = field(default=False, kw_only=True)

    @property
    def name(self) -> str:
        return shard_name(self.index, self.count)

    def convert(self) -> ShardResult:
        """Convert this shard (:func:`convert_shard`); a job of another destination kind
        overrides it (:class:`fastload.data.remote.engine_tasks.UrlShardJob`)."""
        return convert_shard(self)


@dataclass(frozen=True)
class ShardResult:
    """What one attempt of a shard task did: ``state`` is ``"converted"``, ``"done"``
    (found finished: an earlier run's or another attempt's) or ``"failed"`` (``error``
    says why; ``error_type`` names the exception's class)."""

    index: int
    state: str
    resumed_from: int = 0  # records an earlier, killed attempt had written
    error: str = ""
    error_type: str = ""


@dataclass
class ShardPlan:
    """The driver's plan: every shard's identity, the jobs of the unfinished ones.
    ``dst_path`` is the set's folder, or None when ``location`` (a URL) holds the set."""

    dst_path: Path | None
    count: int
    bounds: list[tuple[int, int]]
    identities: list[dict]
    jobs: list[ShardJob]
    finished_before: list[int] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    location: object | None = None
    identity: dict = field(default_factory=dict)  # the set's (the shards' add their range)
    replaced: set[int] = field(default_factory=set)  # shards whose jobs write replacements
    replacing: bool = False  # the jobs replace a finished set, moved in by the driver


def plan_shard_jobs(plan: ConversionPlan, *, overwrite: bool = False,
                    workers: int | None = None) -> ShardPlan:
    """Claim the set at ``plan.dst_path`` under its lock and make the shard jobs (module
    docstring). ``workers``: processes of one task (default 1: the engine runs the tasks
    side by side). With ``overwrite`` every shard is converted again: a finished set stays
    whole until the driver moves the new shards in (``shards.move_set_in``); anything else
    (a partial set, attempts) is removed first."""
    if plan.dst_path is None or plan.shards is None:
        raise ValueError("an engine converts a sharded set into a folder: pass shards=N and "
                         "a local or shared destination")
    dst, count = plan.dst_path, plan.shards
    check_set_folder(dst, len(plan.source.samples), count)
    bounds, identities = shard_layout(plan)
    jobs, finished = [], []
    with set_lock(dst, LOCK_FILE):
        # a finished set stays whole until every new shard is: each is published as the
        # replacement of the shard it replaces, and the driver moves them in together
        replacing = overwrite and (dst / MANIFEST_FILE).exists()
        claim_shard_count(dst, count, None, overwrite, keep_until_replaced=replacing)
        if overwrite:
            for folder in attempt_folders(dst):
                shutil.rmtree(folder, ignore_errors=True)
        for k, (begin, stop) in enumerate(bounds):
            folder = dst / shard_name(k, count)
            replaces = replacing and is_complete(folder)
            if overwrite:  # every shard converted again: a replacement's leftovers too
                old = folder / REPLACEMENT if replaces else folder
                if old.is_dir():
                    remove_shard(old)
            elif finished_shard(folder, identities[k], stop - begin):
                finished.append(k)
                continue
            jobs.append(shard_job(ShardJob, plan, str(dst), k, bounds, identities, workers,
                                  replaces=replaces))
    return ShardPlan(dst_path=dst, count=count, bounds=bounds, identities=identities,
                     jobs=jobs, finished_before=finished, classes=list(plan.source.classes),
                     identity=plan.identity, replacing=replacing,
                     replaced={job.index for job in jobs if job.replaces})


def shard_layout(plan: ConversionPlan) -> tuple[list[tuple[int, int]], list[dict]]:
    """The ``[begin, stop)`` source range of each of ``plan``'s shards and the identity
    its sidecar records."""
    count = plan.shards
    bounds = shard_bounds(len(plan.source.samples), count)
    return bounds, [identity_of_shard(plan.identity, k, count, bounds) for k in range(count)]


def shard_job(job_class: type[ShardJob], plan: ConversionPlan, dst: str, k: int,
              bounds: list[tuple[int, int]], identities: list[dict], workers: int | None,
              **fields) -> ShardJob:
    """Shard ``k``'s job of ``job_class``: its slice of the source, its identity, its share
    of the source's bytes and the writer's settings with ``workers`` processes (default 1)
    and progress off; ``fields``: the job class's own."""
    begin, stop = bounds[k]
    share = plan.total_bytes * (stop - begin) // max(1, len(plan.source.samples))
    run = (workers or 1, *plan.run[1:6], False, plan.run[7])
    return job_class(dst, k, plan.shards, plan.source.samples[begin:stop], identities[k],
                     share, run, **fields)


def attempt_folders(dst: Path, name: str = "shard-") -> list[Path]:
    """The attempt folders in ``dst`` of shards whose names start with ``name``."""
    prefix = f"{ATTEMPT_PREFIX}{name}"
    try:
        return sorted(Path(e.path) for e in os.scandir(dst)
                      if e.name.startswith(prefix) and e.is_dir())
    except FileNotFoundError:
        return []


# (set folder, shard) converting in this process: a second thread of a worker is refused
_ACTIVE: set[tuple[str, int]] = set()
_ACTIVE_LOCK = threading.Lock()


def run_shard(job: ShardJob) -> ShardResult:
    """The task an engine runs: ``job.convert()`` (:func:`convert_shard` for a folder),
    with every error but :class:`ShardBusy` returned as a ``"failed"`` result (the retry
    rule)."""
    try:
        return job.convert()
    except ShardBusy:
        raise
    except Exception as exc:  # not retried: reported by the driver
        return failed_result(job.index, exc)


def failed_result(index: int, exc: BaseException) -> ShardResult:
    """A ``"failed"`` result of shard ``index`` for ``exc``."""
    return ShardResult(index, FAILED, error=str(exc) or repr(exc),
                       error_type=type(exc).__name__)


def convert_shard(job: ShardJob) -> ShardResult:
    """Convert one shard, idempotently (module docstring); raises :class:`ShardBusy` when
    a live writer holds the shard."""
    dst = Path(job.dst)
    final = dst / job.name / REPLACEMENT if job.replaces else dst / job.name
    files = len(job.samples)
    if finished_shard(final, job.identity, files):
        return ShardResult(job.index, DONE)
    key = (os.path.realpath(dst), job.index)
    with _ACTIVE_LOCK:
        if key in _ACTIVE:
            raise ShardBusy(f"shard {str(final)!r} is being converted by another thread of "
                            "this process; retry once it is done")
        _ACTIVE.add(key)
    try:
        if final.exists():  # a partial written in place by a conversion without an engine
            return _convert_in_place(job, final, files)
        folder, progress = claim_attempt(job, dst, files)
        resumed = 0
        if progress is not None:
            report = convert_one(job.samples, folder, job.identity, job.total_bytes, False,
                                 job.run, progress)
            resumed = report.resumed_from if report.resumed else 0
        return _publish(job, folder, final, files, resumed)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(key)


def _busy(where: Path) -> ShardBusy:
    return ShardBusy(f"another attempt is writing {str(where)!r} right now; retry once it "
                     "has finished or died")


def _convert_in_place(job: ShardJob, final: Path, files: int) -> ShardResult:
    try:
        lock_destination(final)
    except FileExistsError:
        raise _busy(final) from None
    try:
        progress = prepare_destination(final, job.identity, overwrite=False)
    except FileExistsError:  # finished since the check above
        if finished_shard(final, job.identity, files):
            return ShardResult(job.index, DONE)
        raise
    report = convert_one(job.samples, final, job.identity, job.total_bytes, False, job.run,
                         progress)
    return ShardResult(job.index, CONVERTED,
                       resumed_from=report.resumed_from if report.resumed else 0)


def claim_attempt(job: ShardJob, dst: Path, files: int, *,
                  discard_others: bool = False) -> tuple[Path, dict | None]:
    """A locked attempt folder of ``job`` in ``dst`` and its progress (None: it is finished,
    to publish): an abandoned attempt's folder when there is one (its writer died: resume
    it), else a new one. An attempt folder locked by a live writer raises
    :class:`ShardBusy`. An abandoned attempt of another conversion (another source or
    other options) is refused, or with ``discard_others`` (a worker's staging folder, a
    cache: the set is at the URL) removed."""
    busy = None
    for folder in attempt_folders(dst, f"{job.name}-"):
        try:
            lock_destination(folder)
        except FileExistsError:
            busy = folder
            continue
        except OSError:  # removed meanwhile
            continue
        try:
            if is_complete(folder) and finished_shard(folder, job.identity, files):
                return folder, None  # its writer died between the sidecar and the rename
            return folder, prepare_destination(folder, job.identity, overwrite=False)
        except (ValueError, FileExistsError):
            unlock_destination(folder)
            if not discard_others:
                raise
            shutil.rmtree(folder, ignore_errors=True)
        except BaseException:
            unlock_destination(folder)
            raise
    if busy is not None:
        raise _busy(busy)
    folder = dst / f"{ATTEMPT_PREFIX}{job.name}-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    try:
        return folder, prepare_destination(folder, job.identity, overwrite=False)
    except FileExistsError:  # taken over by another attempt before we locked it
        raise _busy(folder) from None


def _publish(job: ShardJob, folder: Path, final: Path, files: int,
             resumed: int) -> ShardResult:
    """Rename the finished attempt ``folder`` to the shard's name; when another attempt
    published first, check its shard and remove ours."""
    unlock_destination(folder)
    try:
        os.rename(folder, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
        if not finished_shard(final, job.identity, files):
            raise _busy(final) from None  # written in place by a conversion without engine
        shutil.rmtree(folder, ignore_errors=True)  # the same records, published by another
        return ShardResult(job.index, DONE)
    sync_directory(final.parent)
    return ShardResult(job.index, CONVERTED, resumed_from=resumed)


def remove_abandoned(folder: Path) -> None:
    """Remove an attempt folder no live writer holds (a late duplicate keeps its own)."""
    try:
        lock_destination(folder)
    except (FileExistsError, OSError):
        return
    unlock_destination(folder)
    shutil.rmtree(folder, ignore_errors=True)


def require_engine(module: str, extra: str):
    """Import an engine's ``module`` or raise ImportError naming fastload's extra for it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"engine={extra!r} needs {module.split('.')[0]}, which is not "
                          f"installed here ({exc}); pip install 'fastload-dali[{extra}]' "
                          "(and the same on every worker)") from None
