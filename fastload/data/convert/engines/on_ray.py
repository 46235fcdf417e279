"""Shard jobs as plain Ray tasks: one per shard, ``max_retries`` for lost workers and
``retry_exceptions=[ShardBusy]`` (every other error comes back as a failed result).

Joins the Ray this process already initialised, else the cluster at ``address`` (or
``RAY_ADDRESS``), else starts a local one (``num_cpus`` = this machine's cores, no
dashboard, on 127.0.0.1) and disconnects (stopping it) at the end. Ray's logging setup is
left as the user has it (``configure_logging=False``), and what ``ray.init`` changed in this
process (its SIGTERM handler, ``faulthandler``, ``PYTHONBREAKPOINT`` and other environment
variables, the ``ray`` logger's handlers) is put back after ``ray.shutdown()``.
Ctrl-C cancels the tasks (``ray.cancel(force=True)``): their attempt folders stay, and a
rerun resumes them.
"""

from __future__ import annotations

import os

from fastload.data.convert.engine import ShardBusy, failed_result, require_engine, run_shard
from fastload.data.convert.engines.reach import check_reachable
from fastload.utils.process_state import process_state_restored

__all__ = ["run_jobs"]


def run_jobs(jobs, on_result, *, address: str | None, retries: int, cpus: int) -> None:
    ray = require_engine("ray", "ray")
    if ray.is_initialized():
        _run_on(ray, jobs, on_result, retries=retries, cpus=cpus)
        return
    with process_state_restored():
        if address or os.environ.get("RAY_ADDRESS"):
            check_reachable("Ray", address or os.environ["RAY_ADDRESS"], ("ray",))
            ray.init(address=address, configure_logging=False)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False,
                     configure_logging=False, _node_ip_address="127.0.0.1")
        try:
            _run_on(ray, jobs, on_result, retries=retries, cpus=cpus)
        finally:
            ray.shutdown()


def _run_on(ray, jobs, on_result, *, retries: int, cpus: int) -> None:
    task = ray.remote(run_shard).options(
        name="fastload_convert_shard", num_cpus=cpus, max_retries=retries,
        retry_exceptions=[ShardBusy])
    refs = {task.remote(job): job for job in jobs}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:  # retries spent, or the task lost
                    result = failed_result(refs[ref].index, getattr(exc, "cause", None) or exc)
                on_result(result)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
