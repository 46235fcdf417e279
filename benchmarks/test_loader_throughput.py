"""Loader throughput: one epoch of each ``fastload bench`` row, as pytest-benchmark rounds.

The same rows as ``fastload bench`` (see ``fastload.bench.rows``), run in this process on
the generated tree of ``benchmarks/conftest.py`` (``convert_tree``): torchvision's loader
(a), torch over the LMDB (b), fastload on the folder (c), the LMDB (d) and a
``--max-side 256`` LMDB (e), the Pillow decode ceiling (f), the hand-written DALI graph (g)
and FFCV (h, skipped unless installed). Train transforms, 224 px, all cores.

``pytest benchmarks/ --benchmark-disable`` runs each row for one epoch on a dozen small
images: a smoke test that every loader works. A measurement (``pytest benchmarks/``)
takes 5 rounds after 1 warm-up round per row; ``extra_info`` holds images/s. For the
side-by-side table with ratios, peak RSS and CPU use, run ``fastload bench`` instead:
these rounds are not interleaved across rows and share one process.
"""

from __future__ import annotations

import os

import pytest

from fastload.bench.harness import BenchConfig, prepare_data
from fastload.bench.rows import make_row, row_unavailable

ROWS = "abcdefgh"


@pytest.fixture(scope="module")
def loader_spec(convert_tree, request, tmp_path_factory):
    """The shared RowSpec: LMDBs converted once (full and ``--max-side 256``)."""
    smoke = bool(request.config.getoption("benchmark_disable", default=False))
    config = BenchConfig(
        data=convert_tree,
        rows=ROWS,
        batch_size=8 if smoke else 64,
        transforms="train",
        workdir=tmp_path_factory.mktemp("loader_bench"),
        device="cpu",
    )
    spec, count = prepare_data(config, log=lambda message: None)
    return spec, count, smoke


@pytest.mark.parametrize("row", list(ROWS))
def test_loader_epoch(benchmark, loader_spec, row):
    reason = row_unavailable(row)
    if reason:
        pytest.skip(reason)
    spec, count, smoke = loader_spec
    runner = make_row(row, spec)
    runner.setup()
    try:
        benchmark.group = f"loader epoch, {count} images, {spec.threads} threads"
        images = benchmark.pedantic(runner.run_epoch, rounds=1 if smoke else 5,
                                    warmup_rounds=0 if smoke else 1)
        assert images == count
        if benchmark.enabled:
            benchmark.extra_info["images_per_s"] = round(count / benchmark.stats["median"], 1)
            benchmark.extra_info["cores"] = len(os.sched_getaffinity(0))
    finally:
        runner.close()
