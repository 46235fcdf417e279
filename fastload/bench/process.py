"""The process side of ``fastload bench``: one fresh process per row (the runner is
:mod:`fastload.utils.process`), and what the harness measures about it (process-tree CPU
time, the post-epoch tail; its memory is sampled by :class:`fastload.utils.memory.TreeMemory`).

Protocol over the runner's pipe: the row process answers ``("ready", setup_s)``,
then each ``"epoch"`` with ``("epoch", images, seconds, cpu_seconds, tail_seconds)``, and
``"close"`` with ``("closed",)``; any exception becomes ``("error", message, traceback)``.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback

import psutil

from fastload.bench.rows import RowSpec, make_row
from fastload.utils.process import FreshProcess

__all__ = ["RowProcess"]

_SETTLE_WINDOW_S = 0.05  # an idle window: the tree used at most _SETTLE_IDLE_CPU_S in it
_SETTLE_IDLE_CPU_S = 0.01  # one clock tick: CPU times count in 10 ms steps
_SETTLE_MAX_S = 30.0


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for proc in _tree(pid):
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def _settle(pid: int, t0: float) -> float:
    """Wait until the tree of ``pid`` stops working; return seconds since ``t0`` until then.

    A loader that keeps decoding after its epoch's last batch (DALI prefetches across the
    epoch boundary) would otherwise do that work for free while the next row is measured,
    and start its next epoch with batches ready. Charging the tail to the epoch that caused
    it keeps every row's epoch at one epoch of work. A row with no tail adds nothing.
    """
    end = time.perf_counter()
    cpu = _tree_cpu_seconds(pid)
    deadline = end + _SETTLE_MAX_S
    while time.perf_counter() < deadline:
        time.sleep(_SETTLE_WINDOW_S)
        now_cpu = _tree_cpu_seconds(pid)
        if now_cpu - cpu <= _SETTLE_IDLE_CPU_S:
            return end - t0
        cpu = now_cpu
        end = time.perf_counter()
    return end - t0


def _row_main(conn, key: str, spec: RowSpec) -> None:
    """Body of a row process: set up, then answer "epoch" requests until "close"."""
    # A spawned process inherits "spawn" as its default start method; give loaders the
    # platform default a user's script gets (fork on Linux), or row (a) pays re-imports.
    multiprocessing.set_start_method(None, force=True)
    try:
        start = time.perf_counter()
        row = make_row(key, spec)
        row.setup()
        conn.send(("ready", time.perf_counter() - start))
        while conn.recv() == "epoch":
            cpu0 = _tree_cpu_seconds(os.getpid())
            t0 = time.perf_counter()
            images = row.run_epoch()
            foreground = time.perf_counter() - t0
            seconds = _settle(os.getpid(), t0)
            cpu = _tree_cpu_seconds(os.getpid()) - cpu0
            conn.send(("epoch", images, seconds, cpu, max(0.0, seconds - foreground)))
        row.close()
        conn.send(("closed",))
    except BaseException as exc:  # report anything, the harness decides
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))


class RowProcess(FreshProcess):
    """A row's fresh process (:class:`fastload.utils.process.FreshProcess`) running
    :func:`_row_main`; the harness asks it ``"epoch"`` and ``"close"``."""

    def __init__(self, key: str, spec: RowSpec, context) -> None:
        self.key = key
        super().__init__(_row_main, (key, spec), name=f"fastload-bench-{key}", context=context)
