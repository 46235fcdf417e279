"""One rank's epoch order at 10 M-100 M records: the keyed permutation against the whole-set
``torch.randperm`` draw it replaces there (issue 41, scale-curve fix 1 (c)).

For each set size and world size, both draws run in turns in this process (``--rounds``
rounds, the median and the range reported): seconds for ``EpochSampler.indices()`` of the
last rank, and how far the process's resident memory rose above where it stood before
the draw (its peak, ``VmHWM`` after resetting it through ``/proc/self/clear_refs``): what
a rank holds while it draws, torch's allocations included. No data set is needed: the
order depends on the record count only. Linux only.

    python benchmarks/keyed_order.py --records 10000000,100000000 --ranks 1,8,512,4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from fastload.loader.sampling import EpochSampler


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def one_draw(records: int, ranks: int, keyed: bool, epoch: int) -> tuple[float, int]:
    """Seconds of the last rank's ``indices()``, and bytes its peak RSS rose meanwhile."""
    sampler = EpochSampler(records, shuffle=True, seed=0, num_replicas=ranks, rank=ranks - 1)
    sampler.keyed = keyed  # the size picks the keyed order; False draws as below the line
    sampler.set_epoch(epoch)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")  # the peak RSS (VmHWM) starts again from the current RSS
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    indices = sampler.indices()
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    assert len(indices) == sampler.num_samples
    del indices
    return seconds, (peak - before) * 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="10000000,100000000")
    parser.add_argument("--ranks", default="1,8,512,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = []
    print("| records | ranks | draw | s per rank (median, range) | peak MB per rank |")
    print("|---:|---:|---|---|---:|")
    for records in map(int, args.records.split(",")):
        for ranks in map(int, args.ranks.split(",")):
            runs: dict[bool, list[tuple[float, int]]] = {True: [], False: []}
            for epoch in range(args.rounds):
                for keyed in (True, False) if epoch % 2 == 0 else (False, True):
                    runs[keyed].append(one_draw(records, ranks, keyed, epoch))
            for keyed in (False, True):
                seconds = [s for s, _ in runs[keyed]]
                peak = max(p for _, p in runs[keyed])
                name = "keyed" if keyed else "randperm"
                rows.append({"records": records, "ranks": ranks, "draw": name,
                             "seconds": seconds, "peak_bytes": peak})
                print(f"| {records:,} | {ranks:,} | {name} | {statistics.median(seconds):.4f} "
                      f"({min(seconds):.4f}-{max(seconds):.4f}) | {peak / 2**20:,.1f} |",
                      flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
