"""Memory of process trees, counted so that loaders with and without worker processes compare.

RSS summed over a process and its workers counts every shared page once per process: the
torch libraries and the interpreter's copy-on-write heap, mapped by each of a torch
DataLoader's workers, are counted ``workers + 1`` times. PSS (proportional set size) splits
each shared page among the processes that map it, so the PSS summed over a tree is the
memory the tree holds; USS (unique set size: private clean + private dirty pages) is what
the tree would free if it exited. Both come from ``/proc/<pid>/smaps_rollup`` (Linux 4.14+).

Reading smaps_rollup walks the page tables: measured 20-50 ms for a 700 MB process on a
busy 2-core machine, against microseconds for RSS. :class:`TreeMemory` therefore reads RSS
every ``interval_s`` and smaps_rollup as often as ``max_share`` of one core allows
(by default 2%: a pass that took 30 ms waits 1.5 s before the next), and at least once
after each :meth:`TreeMemory.watch`; the peaks it reports are over the passes it made.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["TreePeak", "TreeMemory", "process_memory", "tree_pids"]

_FIELDS = {"Rss:": "rss", "Pss:": "pss", "Private_Clean:": "uss", "Private_Dirty:": "uss"}


def process_memory(pid: int) -> dict[str, int] | None:
    """``{"rss", "pss", "uss"}`` of process ``pid`` in bytes, from its smaps_rollup; None
    when the process is gone or the file cannot be read (not Linux, another user's)."""
    out = {"rss": 0, "pss": 0, "uss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            for line in handle:
                parts = line.split()
                key = _FIELDS.get(parts[0]) if parts else None
                if key is not None:
                    out[key] += int(parts[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return out


def tree_pids(roots: dict[str, int]) -> dict[str, list[int]]:
    """For each key, its root pid and every descendant (one scan of ``/proc``)."""
    import psutil

    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc.pid)
    out = {}
    for key, root in roots.items():
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        out[key] = tree
    return out


@dataclass
class TreePeak:
    """Peaks of one watched tree, in bytes. ``pss``/``uss`` are None when no smaps_rollup
    pass read them (not Linux, or the tree ended before the first pass)."""

    rss: int = 0  # summed RSS: counts shared pages once per process
    pss: int | None = None
    uss: int | None = None
    passes: int = 0  # smaps_rollup passes that read this tree
    processes: int = 0  # most processes seen in the tree at once


class TreeMemory(threading.Thread):
    """A daemon thread sampling the memory of watched process trees (each a root pid and
    its descendants, re-listed every ``refresh_s``); :attr:`peaks` maps each key to its
    :class:`TreePeak`. ``start()`` it, ``watch()`` roots, ``stop()`` for the final figures."""

    def __init__(self, interval_s: float = 0.05, max_share: float = 0.02,
                 refresh_s: float = 0.5) -> None:
        super().__init__(name="fastload-memory", daemon=True)
        self.interval_s, self.max_share, self.refresh_s = interval_s, max_share, refresh_s
        self.peaks: dict[str, TreePeak] = {}
        self._roots: dict[str, int] = {}
        self._members: dict[str, list] = {}
        self._listed = 0.0
        self._next_pass = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()

    def watch(self, key: str, pid: int) -> None:
        """Sample the tree rooted at ``pid`` under ``key`` (from the next sample on)."""
        with self._lock:
            self._roots[key] = pid
            self.peaks.setdefault(key, TreePeak())
            self._listed = 0.0
            self._next_pass = 0.0  # a first smaps_rollup pass soon

    def unwatch(self, key: str) -> None:
        """Stop sampling ``key``; its peaks stay."""
        with self._lock:
            self._roots.pop(key, None)
            self._members.pop(key, None)

    def _list(self) -> None:
        import psutil

        with self._lock:
            roots = dict(self._roots)
        members = {}
        for key, pids in tree_pids(roots).items():
            old = {p.pid: p for p in self._members.get(key, ())}
            procs = []
            for pid in pids:
                try:
                    procs.append(old.get(pid) or psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
            members[key] = procs
        self._members = members
        self._listed = time.monotonic()

    def sample(self) -> None:
        """One RSS sample of every tree, and a smaps_rollup pass when one is due."""
        import psutil

        if time.monotonic() - self._listed > self.refresh_s:
            self._list()
        for key, procs in list(self._members.items()):
            rss = 0
            for proc in procs:
                try:
                    rss += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peak = self.peaks.setdefault(key, TreePeak())
            peak.rss = max(peak.rss, rss)
            peak.processes = max(peak.processes, len(procs))
        if time.monotonic() >= self._next_pass:
            self._smaps_pass()

    def _smaps_pass(self) -> None:
        start = time.perf_counter()
        for key, procs in list(self._members.items()):
            readings = [process_memory(proc.pid) for proc in procs]
            readings = [r for r in readings if r is not None]
            if not readings:
                continue
            peak = self.peaks.setdefault(key, TreePeak())
            pss, uss = sum(r["pss"] for r in readings), sum(r["uss"] for r in readings)
            peak.pss = pss if peak.pss is None else max(peak.pss, pss)
            peak.uss = uss if peak.uss is None else max(peak.uss, uss)
            peak.passes += 1
        took = time.perf_counter() - start
        self._next_pass = time.monotonic() + max(self.interval_s, took / self.max_share)

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        """End the thread after one last sample and smaps_rollup pass."""
        self._done.set()
        if self.is_alive():
            self.join()
        self._list()
        self.sample()
        self._smaps_pass()
