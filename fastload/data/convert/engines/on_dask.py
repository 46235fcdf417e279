"""Shard jobs on Dask: ``client.map(run_shard, jobs, retries=N)``, one future per shard.

Dask retries whatever a task raises; :func:`~fastload.data.convert.engine.run_shard`
raises only :class:`~fastload.data.convert.engine.ShardBusy` and returns every other
error as a failed result, so the retry rule is Ray's. Uses the scheduler at ``address``
(a ``Client`` closed at the end; an address where nothing answers is said at once, not
after Dask's 30 s connect timeout), else the ``Client`` this process already has, else a
``LocalCluster`` (one single-threaded worker process per core, on 127.0.0.1, no
dashboard) closed at the end; what starting it changed in this process (``OMP_NUM_THREADS``
and other environment variables for its workers) is put back. Ctrl-C cancels the futures.
"""

from __future__ import annotations

import contextlib
import os
import uuid

from fastload.data.convert.engine import failed_result, require_engine, run_shard
from fastload.data.convert.engines.reach import check_reachable
from fastload.utils.process_state import process_state_restored

__all__ = ["run_jobs"]


def run_jobs(jobs, on_result, *, address: str | None, retries: int, cpus: int) -> None:
    distributed = require_engine("distributed", "dask")
    if not address:
        try:
            client = distributed.get_client()
        except ValueError:  # no client in this process: a local cluster of our own
            pass
        else:
            _run_on(distributed, client, jobs, on_result, retries=retries)
            return
    with process_state_restored(), contextlib.ExitStack() as owned:  # closed client first
        if address:
            check_reachable("Dask", address, ("tcp", "tls"))
            client = owned.enter_context(distributed.Client(address))
        else:
            cluster = owned.enter_context(distributed.LocalCluster(
                n_workers=max(1, (os.cpu_count() or 1) // cpus), threads_per_worker=1,
                processes=True, host="127.0.0.1", dashboard_address=None))
            client = owned.enter_context(distributed.Client(cluster))
        _run_on(distributed, client, jobs, on_result, retries=retries)


def _run_on(distributed, client, jobs, on_result, *, retries: int) -> None:
    tag = uuid.uuid4().hex[:8]
    futures = client.map(run_shard, jobs, retries=retries, pure=False,
                         key=[f"fastload-{job.name}-{tag}" for job in jobs])
    index = {future.key: job.index for future, job in zip(futures, jobs, strict=True)}
    try:
        for future in distributed.as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:  # retries spent (ShardBusy), or a lost worker
                result = failed_result(index[future.key], exc)
            on_result(result)
    except KeyboardInterrupt:
        client.cancel(futures)
        raise
