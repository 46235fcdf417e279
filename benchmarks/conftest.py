"""Benchmark fixtures: generated photo trees sized for a real run or a quick smoke run.

``pytest benchmarks/`` measures on a few hundred ImageNet-like JPEGs;
``pytest benchmarks/ --benchmark-disable`` runs every benchmark once on a dozen small
images, as a smoke test. ``FASTLOAD_BENCH_IMAGES=N`` sets the number of images.
"""

from __future__ import annotations

import os
import shutil

import pytest

UNIQUE_PHOTOS = 80  # generated photos; the rest of the tree repeats them under new names


def _benchmark_disabled(config) -> bool:
    return bool(config.getoption("benchmark_disable", default=False))


@pytest.fixture(scope="session")
def bench_image_count(request) -> int:
    """Images in ``convert_tree``: 1200 (about 95 MB) for a measurement, 12 for a smoke run."""
    if os.environ.get("FASTLOAD_BENCH_IMAGES"):
        return int(os.environ["FASTLOAD_BENCH_IMAGES"])
    return 12 if _benchmark_disabled(request.config) else 1200


@pytest.fixture(scope="session")
def convert_tree(bench_image_count, request, tmp_path_factory):
    """An ImageFolder tree of ``bench_image_count`` generated photos in 4 classes.

    Full size (300-800 px, about 80 KB each) for a measurement; 64-160 px for a smoke run.
    """
    from fastload.data.pictures.synth import synthesize

    smoke = _benchmark_disabled(request.config)
    unique = min(bench_image_count, UNIQUE_PHOTOS)
    base = tmp_path_factory.mktemp("bench_photos")
    sizes = {"min_side": 64, "max_side": 160} if smoke else {}
    synthesize(base, train=unique, val=0, classes=4, seed=0, **sizes)
    tree = base / "train"
    originals = sorted(tree.rglob("*.jpg"))
    copy = 0
    while len(originals) * (copy + 1) < bench_image_count:
        copy += 1
        for path in originals[: bench_image_count - len(originals) * copy]:
            shutil.copyfile(path, path.with_name(f"copy{copy}_{path.name}"))
    return tree


def pytest_terminal_summary(terminalreporter):
    ratios = getattr(terminalreporter.config, "_fastload_convert_ratios", None)
    if ratios:
        terminalreporter.section("fastload convert vs tar cf (same folder, same run)")
        for name, line in ratios.items():
            terminalreporter.write_line(f"{name}: {line}")
