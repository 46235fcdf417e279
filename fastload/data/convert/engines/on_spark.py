"""Shard jobs on Spark: ``sc.parallelize(jobs, len(jobs)).map(run_shard).collect()``, one
partition (so one task) per shard.

Runs on the active ``SparkSession`` and sets nothing in it but a job tag on this thread
(``addJobTag``, removed after) so that Ctrl-C cancels our jobs only; retries are the
session's own (``spark.task.maxFailures``; ``local[n]`` never retries, ``local[n,r]``
does). With no active session a local one is made (``address`` as its master, default
``local[<cores>,<retries + 1>]``, on 127.0.0.1, no UI, this Python on the workers) and
stopped at the end, with the JVM pyspark launched for it; what starting it changed in this
process (its SIGINT handler, environment variables, ``sys.path``) is put back. Results arrive together when the job ends (Spark's UI shows its
tasks); a failed job is reported as a failure of every shard it did not finish.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from fastload.data.convert.engine import failed_result, require_engine, run_shard
from fastload.data.convert.engines.reach import check_reachable
from fastload.utils.process_state import process_state_restored

__all__ = ["run_jobs"]

PYTHON_ENV = "PYSPARK_PYTHON"


def run_jobs(jobs, on_result, *, address: str | None, retries: int, cpus: int) -> None:
    sql = require_engine("pyspark.sql", "spark")
    session = sql.SparkSession.getActiveSession()
    if session is not None:
        _run_on(session, jobs, on_result)
        return
    from pyspark import SparkContext

    if address:  # a standalone master that does not answer: said before the JVM starts
        check_reachable("Spark", address, ("spark",))
    launched = SparkContext._gateway is None  # the JVM is ours to stop (else kept, as found)
    with process_state_restored():
        master = address or f"local[{max(1, (os.cpu_count() or 1) // cpus)},{retries + 1}]"
        # pyspark reads the workers' Python from PYSPARK_PYTHON when the context starts
        os.environ.setdefault(PYTHON_ENV, sys.executable)
        try:
            session = (sql.SparkSession.builder.master(master).appName("fastload convert")
                       .config("spark.ui.enabled", "false")
                       .config("spark.ui.showConsoleProgress", "false")  # fastload's own bar
                       .config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1")
                       .getOrCreate())
            try:
                _run_on(session, jobs, on_result)
            finally:
                session.stop()
        finally:
            if launched and SparkContext._gateway is not None:  # also when the start failed
                _stop_gateway(SparkContext)


def _run_on(session, jobs, on_result) -> None:
    sc = session.sparkContext
    tag = f"fastload-convert-{uuid.uuid4().hex[:8]}"
    sc.addJobTag(tag)
    try:
        try:
            results = sc.parallelize(jobs, len(jobs)).map(run_shard).collect()
        except KeyboardInterrupt:
            sc.cancelJobsWithTag(tag)
            raise
        except Exception as exc:  # the job failed (a task's retries spent)
            results = [failed_result(job.index, exc) for job in jobs]
        for result in results:
            on_result(result)
    finally:
        sc.removeJobTag(tag)


def _stop_gateway(context_class, wait_s: float = 30.0) -> None:
    """End the JVM pyspark launched for our session (``stop()`` keeps it for the next one):
    its gateway closes when its stdin does; a later session launches another."""
    gateway = context_class._gateway
    context_class._gateway = context_class._jvm = None
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    if process is None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
