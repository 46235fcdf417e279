"""The process side of ``fastload bench``: one fresh process per row (the runner is
:mod:`fastload.utils.process`), and what the harness measures about it (process-tree CPU
time, peak RSS, the post-epoch tail).

Protocol over the runner's pipe: the row process answers ``("ready", setup_s)``,
then each ``"epoch"`` with ``("epoch", images, seconds, cpu_seconds, tail_seconds)``, and
``"close"`` with ``("closed",)``; any exception becomes ``("error", message, traceback)``.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import traceback

import psutil

from fastload.bench.rows import RowSpec, make_row
from fastload.utils.process import FreshProcess

__all__ = ["PeakRss", "RowProcess"]

_SAMPLE_EVERY_S = 0.05
_TREE_REFRESH_S = 0.5  # how often the sampler re-lists each row's processes
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


class PeakRss(threading.Thread):
    """Samples the summed RSS of each watched process tree; keeps the peak per key.

    Listing a tree walks every process of the machine (~2 ms), so the member lists are
    refreshed only every ``_TREE_REFRESH_S`` (loaders keep their workers); reading the RSS
    of the known members every 50 ms costs microseconds, keeping the sampler off the
    cores it measures.
    """

    def __init__(self) -> None:
        super().__init__(name="fastload-bench-rss", daemon=True)
        self.peaks: dict[str, int] = {}
        self._pids: dict[str, int] = {}
        self._members: dict[str, list[psutil.Process]] = {}
        self._refreshed = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()

    def watch(self, key: str, pid: int) -> None:
        with self._lock:
            self._pids[key] = pid
            self._refreshed = 0.0

    def _refresh(self) -> None:
        with self._lock:
            pids = dict(self._pids)
        children: dict[int, list[int]] = {}
        for proc in psutil.process_iter(["ppid"]):
            children.setdefault(proc.info["ppid"], []).append(proc.pid)
        members = {}
        for key, root in pids.items():
            tree, todo = [], [root]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo.extend(children.get(pid, ()))
            old = {proc.pid: proc for proc in self._members.get(key, ())}
            procs = []
            for pid in tree:
                try:
                    procs.append(old.get(pid) or psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
            members[key] = procs
        self._members = members
        self._refreshed = time.monotonic()

    def sample(self) -> None:
        if time.monotonic() - self._refreshed > _TREE_REFRESH_S:
            self._refresh()
        for key, procs in self._members.items():
            rss = 0
            for proc in procs:
                try:
                    rss += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            if rss:
                self.peaks[key] = max(self.peaks.get(key, 0), rss)

    def run(self) -> None:
        while not self._done.wait(_SAMPLE_EVERY_S):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()
        self.sample()


class RowProcess(FreshProcess):
    """A row's fresh process (:class:`fastload.utils.process.FreshProcess`) running
    :func:`_row_main`; the harness asks it ``"epoch"`` and ``"close"``."""

    def __init__(self, key: str, spec: RowSpec, context) -> None:
        self.key = key
        super().__init__(_row_main, (key, spec), name=f"fastload-bench-{key}", context=context)
