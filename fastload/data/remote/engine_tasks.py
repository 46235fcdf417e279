"""A sharded conversion to a URL as tasks of an engine: the contract of
:mod:`fastload.data.convert.engine`, with an upload where a folder has a ``rename``.

The **driver** (:func:`plan_url_shard_jobs`) claims the set at the URL as a conversion
without an engine does (one shard count, a finished set only with ``overwrite``) and makes
one :class:`UrlShardJob` per shard not already uploaded intact.

A **task** (:func:`convert_url_shard`) may run any number of times, at once or one after
another, on any machine that reaches the URL:

* a shard already uploaded intact with this identity returns ``"done"`` and writes
  nothing;
* otherwise it converts into an attempt folder of its own in the worker's local staging
  folder (``--staging``, else the cache's ``staging/``; an abandoned attempt of a killed
  task on the same machine is taken over and resumed), uploads it with the sidecar last
  (the remote sidecar removed first), checks the uploaded shard against its own copy and
  removes the attempt folder. A remote shard whose sidecar says complete therefore has all
  its files;
* two attempts that finish at once upload the same records. Each object is replaced
  whole, so the files left are each a whole file of one of them; records, checksums and
  labels are the same in both, so any mix is a valid shard. The attempt whose own check
  then fails (the other's files are there) raises
  :class:`~fastload.data.convert.engine.ShardBusy`, whose retry finds the shard intact and
  returns ``"done"``.

The driver **finishes** (:func:`finish_url_shards`): it checks every shard at the URL
whatever results came back and uploads the labels and manifest last, built from the
uploaded sidecars, as :func:`fastload.data.remote.upload.convert_to_url` does.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, replace

import fastload.data.remote.fetch as fetch
from fastload.data.convert.database import ConvertReport, convert_one
from fastload.data.convert.dst_lock import unlock_destination
from fastload.data.convert.engine import (
    CONVERTED,
    DEFAULT_RETRIES,
    DONE,
    ShardBusy,
    ShardJob,
    ShardPlan,
    ShardResult,
    claim_attempt,
    shard_job,
    shard_layout,
)
from fastload.data.convert.engine_run import (
    RunJobs,
    add_shard_report,
    raise_unfinished,
    run_shard_plan,
)
from fastload.data.convert.plan import ConversionPlan
from fastload.data.format.constants import ERRORS_FILE, META_FILE
from fastload.data.format.limits import MAX_META_BYTES
from fastload.data.remote.replace import replace_url_set
from fastload.data.remote.upload import (
    claim_url_set,
    clear_staging,
    complete_url_set,
    shard_uploaded,
    staging_folder,
    upload_shard,
)
from fastload.data.remote.url import RemoteLocation
from fastload.data.sets.manifest import shard_bounds, shard_name

__all__ = ["UrlShardJob", "convert_url_on_engine", "convert_url_shard", "finish_url_shards",
           "plan_url_shard_jobs"]


@dataclass(frozen=True)
class UrlShardJob(ShardJob):
    """A shard task whose set is at a URL: ``dst`` is the URL (for messages),
    ``location`` where the shard goes, ``staging`` the local folder its attempts are
    written in (None: each worker's cache ``staging/`` folder for this URL)."""

    location: RemoteLocation | None = None
    staging: str | None = None

    def convert(self) -> ShardResult:
        return convert_url_shard(self)


def plan_url_shard_jobs(plan: ConversionPlan, *, overwrite: bool = False,
                        workers: int | None = None) -> ShardPlan:
    """Claim the set at ``plan.location`` and make a job for every shard not uploaded
    intact (module docstring); ``overwrite`` removes a finished set's manifest and every
    shard first. The jobs stage in ``plan.staging`` (None: each worker's cache)."""
    location = plan.location
    if location is None or plan.shards is None:
        raise ValueError("plan_url_shard_jobs converts a sharded set to a URL: plan it with "
                         "shards=N and a URL destination")
    count = plan.shards
    bounds, identities = shard_layout(plan)
    claim_url_set(location, count, overwrite)
    if overwrite:
        present = set(fetch.listing(location, folders=True))
        for k in range(count):
            if shard_name(k, count) in present:
                fetch.remove(location.child(shard_name(k, count)))
    staged_at = None if plan.staging is None else str(plan.staging)
    jobs, finished = [], []
    for k, (begin, stop) in enumerate(bounds):
        if not overwrite and shard_uploaded(location.child(shard_name(k, count)),
                                            identities[k], stop - begin, None):
            finished.append(k)
            continue
        jobs.append(shard_job(UrlShardJob, plan, location.url, k, bounds, identities, workers,
                              location=location, staging=staged_at))
    return ShardPlan(dst_path=None, count=count, bounds=bounds, identities=identities,
                     jobs=jobs, finished_before=finished, classes=list(plan.source.classes),
                     location=location, identity=plan.identity)


def convert_url_shard(job: UrlShardJob) -> ShardResult:
    """Convert and upload one shard, idempotently (module docstring); raises
    :class:`~fastload.data.convert.engine.ShardBusy` when another attempt holds its
    attempt folder here, or uploaded beside this one."""
    remote = job.location.child(job.name)
    files = len(job.samples)
    if shard_uploaded(remote, job.identity, files, None):
        return ShardResult(job.index, DONE)
    folder, progress = claim_attempt(job, staging_folder(job.location, job.staging), files,
                                     discard_others=True)
    try:
        resumed = 0
        if progress is not None:
            report = convert_one(job.samples, folder, job.identity, job.total_bytes, False,
                                 job.run, progress)
            resumed = report.resumed_from if report.resumed else 0
        listed = fetch.listing(remote)
        if shard_uploaded(remote, job.identity, files, None, listed):  # another's, meanwhile
            state = DONE
        else:
            upload_shard(folder, remote, META_FILE in listed)
            state = CONVERTED if shard_uploaded(remote, job.identity, files, folder) else None
    except BaseException:
        unlock_destination(folder)  # kept: the next attempt here resumes or uploads it
        raise
    unlock_destination(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if state is None:  # files of another attempt's upload replaced some of ours
        raise ShardBusy(f"another attempt uploaded {remote.url} at the same time; retry to "
                        "check the shard it left")
    return ShardResult(job.index, state, resumed_from=resumed if state == CONVERTED else 0)


def finish_url_shards(plan: ShardPlan, results: list[ShardResult],
                      staging: str | os.PathLike | None = None) -> ConvertReport:
    """Check every shard at the URL, upload the labels and manifest; the report of the
    shards converted in this run, read from their uploaded sidecars. A shard not uploaded
    raises as :func:`fastload.data.convert.engine_run.finish_shards` does; the set then
    has no manifest and the same call again finishes it. ``staging``: the local folder
    the manifest is built in (None: the cache's)."""
    location, count = plan.location, plan.count
    listings = [fetch.listing(location.child(shard_name(k, count))) for k in range(count)]
    unfinished = [k for k, (begin, stop) in enumerate(plan.bounds)
                  if not shard_uploaded(location.child(shard_name(k, count)),
                                        plan.identities[k], stop - begin, None, listings[k])]
    raise_unfinished(plan, results, unfinished)
    total = ConvertReport(path=location.url, stored=0, skipped=0, seen=0,  # type: ignore[arg-type]
                          finished_shards=list(plan.finished_before),
                          classes=list(plan.classes))
    for k in range(count):
        if k in plan.finished_before:
            continue
        remote = location.child(shard_name(k, count))
        add_shard_report(total, plan, results, k, _small_json(remote, META_FILE, listings[k]),
                         _small_json(remote, ERRORS_FILE, listings[k]))
    total.manifest = complete_url_set(location, staging_folder(location, staging), count,
                                      plan.identity, plan.bounds, set(range(count)), {})
    if total.manifest is not None:
        clear_staging(location, staging)
    return total


def _small_json(remote: RemoteLocation, name: str, listed: dict[str, int]) -> dict:
    """The JSON sidecar ``name`` of ``remote`` (``{}`` when missing or over the sidecar
    bound: a shard that passed :func:`shard_uploaded` has a bounded ``fastload.json``)."""
    size = listed.get(name)
    if size is None or size > MAX_META_BYTES:
        return {}
    loaded = json.loads(fetch.read_bytes(remote.child(name), size))
    return loaded if isinstance(loaded, dict) else {}


def convert_url_on_engine(plan: ConversionPlan, run_jobs: RunJobs, address: str | None = None,
                          *, overwrite: bool = False, workers: int | None = None,
                          retries: int = DEFAULT_RETRIES) -> ConvertReport:
    """:func:`fastload.data.convert.engine_run.convert_on_engine` for a URL destination:
    plan, run every job through ``run_jobs``, finish (module docstring). An overwrite of a
    finished set converts the new one beside it and moves it in once whole
    (:func:`fastload.data.remote.replace.replace_url_set`)."""
    if overwrite:
        replaced = replace_url_set(
            plan.location, plan.identity, shard_bounds(len(plan.source.samples), plan.shards),
            lambda replacement: convert_url_on_engine(
                replace(plan, location=replacement), run_jobs, address, overwrite=True,
                workers=workers, retries=retries))
        if replaced is not None:
            return replaced
    shard_plan = plan_url_shard_jobs(plan, overwrite=overwrite, workers=workers)
    results = run_shard_plan(shard_plan, run_jobs, address, progress=plan.run[6],
                             retries=retries, cpus=workers or 1)
    return finish_url_shards(shard_plan, results, plan.staging)
