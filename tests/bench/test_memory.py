"""Process-tree memory: PSS and USS summed over a tree, so forked workers count once."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np

from fastload.utils.memory import TreeMemory, process_memory

_MB = 1 << 20
SHARED = 64 * _MB


def _parent_of_a_forked_child(ready, done) -> None:
    """Touch SHARED bytes, fork a child that keeps them mapped (copy-on-write), wait."""
    block = np.ones(SHARED, np.uint8)  # touched: resident and private until the fork
    pid = os.fork()
    if pid == 0:  # the child only waits; the block stays shared with the parent
        done.wait()
        os._exit(0)
    ready.set()
    done.wait()
    os.waitpid(pid, 0)
    del block


def test_process_memory_reads_rss_pss_and_uss_of_this_process():
    reading = process_memory(os.getpid())
    assert reading is not None
    assert 0 < reading["uss"] <= reading["pss"] <= reading["rss"]
    assert process_memory(2 ** 22 + 12345) is None  # no such process


def test_tree_pss_counts_pages_a_forked_child_shares_once_and_rss_twice():
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Event()
    proc = context.Process(target=_parent_of_a_forked_child, args=(ready, done))
    proc.start()
    try:
        assert ready.wait(60)
        memory = TreeMemory()
        memory.watch("tree", proc.pid)
        memory.sample()  # lists the tree, reads RSS, makes the first smaps_rollup pass
        peak = memory.peaks["tree"]
    finally:
        done.set()
        proc.join(30)
    assert peak.processes == 2 and peak.passes == 1
    assert peak.rss - peak.pss > 0.7 * SHARED  # RSS counts the shared block in both
    assert peak.pss - peak.uss > 0.7 * SHARED  # it is nobody's private memory
    assert peak.pss > SHARED  # but the tree holds it once
