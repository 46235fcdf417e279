"""Engine adapters for :mod:`fastload.data.convert.engine`: each runs the shard jobs as tasks
of one engine and hands every result to the driver as it arrives.

An adapter is one function ``run_jobs(jobs, on_result, *, address, retries, cpus)``: it
joins the engine at ``address`` (or the one already running in this process, or starts a
local one and stops it after), runs :func:`~fastload.data.convert.engine.run_shard` once
per job with ``retries`` for lost workers and :class:`~fastload.data.convert.engine.ShardBusy`
only, calls ``on_result`` with each :class:`~fastload.data.convert.engine.ShardResult` (an
engine's own failure as a ``"failed"`` one) and cancels its tasks on Ctrl-C.
"""

from __future__ import annotations

__all__ = ["runner"]


def runner(engine: str):
    """The ``run_jobs`` of ``engine`` (``"ray"``, ``"dask"`` or ``"spark"``); ImportError
    with the extra to install when the engine is not installed."""
    if engine == "ray":
        from fastload.data.convert.engines.on_ray import run_jobs
    elif engine == "dask":
        from fastload.data.convert.engines.on_dask import run_jobs
    elif engine == "spark":
        from fastload.data.convert.engines.on_spark import run_jobs
    else:
        raise ValueError(f"engine should be 'ray', 'dask' or 'spark', but got engine={engine!r}")
    return run_jobs

