"""Cost of fastload.StallMeter: what wrapping a loader adds per batch.

An in-memory "loader" of ready batches makes the wrapper's own overhead the whole
difference. Rounds alternate bare and wrapped iteration so drift hits both alike; the
test prints the median added time per batch (``-s`` shows it) and stores it in
``extra_info``. A real epoch's batches take milliseconds, so a few hundred nanoseconds
per batch is what "cheap enough to leave on" means here.
"""

from __future__ import annotations

import statistics
import time

import torch

import fastload

BATCHES = 20_000
ROUNDS = 7


def _epoch(iterable) -> float:
    start = time.perf_counter()
    for _ in iterable:
        pass
    return time.perf_counter() - start


def test_stall_meter_cost_per_batch(benchmark):
    batches = [(torch.empty(64, 3, 8, 8), torch.zeros(64, dtype=torch.long))] * BATCHES
    meter = fastload.StallMeter(batches)
    added = []
    for _ in range(ROUNDS):
        bare = _epoch(batches)
        wrapped = _epoch(meter)
        added.append((wrapped - bare) / BATCHES)
    median_ns = 1e9 * statistics.median(added)
    benchmark.extra_info["added_ns_per_batch_median"] = median_ns
    benchmark.extra_info["added_ns_per_batch_range"] = [1e9 * min(added), 1e9 * max(added)]
    benchmark(_epoch, meter)
    print(f"\nStallMeter adds {median_ns:.0f} ns per batch (median of {ROUNDS} alternating "
          f"rounds; range {1e9 * min(added):.0f}-{1e9 * max(added):.0f} ns)")
    assert meter.stats[-1].batches == BATCHES
