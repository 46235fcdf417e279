"""The C extensions' arithmetic is defined on the inputs that once broke it: each saved
regression of tests/fuzz/regressions replays cleanly under AddressSanitizer and
UndefinedBehaviorSanitizer (a sanitizer build in build/fuzz, as ``make fuzz`` makes it),
and the fuzz harness itself says what it needs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "fuzz" / "run.py"
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"
LIBASAN = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                         text=True).stdout.strip() if shutil.which("gcc") else ""


def _harness(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HARNESS), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def replayed() -> dict[str, str]:
    """Each regression's line of one replay under the sanitizer build (built if needed)."""
    if not os.path.isabs(LIBASAN) or not os.path.exists(LIBASAN):
        pytest.skip("gcc's libasan is not installed: no sanitizer build")
    build = subprocess.run(
        [sys.executable, "setup.py", "--quiet", "build_ext", "--build-lib", "build/fuzz",
         "--build-temp", "build/fuzz-temp"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "FASTLOAD_SANITIZE": "1"}, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    run = _harness("--replay", str(REGRESSIONS), "--out", str(ROOT / "build" / "fuzz-pytest"))
    lines = {}
    for line in run.stdout.splitlines():
        found = re.match(r"(ok|FAIL)\s+(\S+): (.*)", line)
        if found:
            lines[Path(found.group(2)).name] = f"{found.group(1)} {found.group(3)}"
    return lines | {"_output": run.stdout[-6000:] + run.stderr[-3000:]}


@pytest.mark.parametrize("regression", sorted(p.name for p in REGRESSIONS.iterdir()
                                              if (p / "case.json").exists()))
def test_regression_runs_without_a_sanitizer_report(replayed, regression):
    # sharpen-plane-size-overflow: a heap-buffer-overflow before issue 35; the region,
    # DC-prediction, affine and grid size ones: signed overflows; the blend, sharpen,
    # truncate and grid NaN ones: float-to-int conversions of NaN and inf. Each failed under
    # the sanitizers before issue 35 and now returns or raises ValueError.
    assert replayed.get(regression, "missing").startswith("ok"), replayed["_output"]


def test_harness_without_a_sanitizer_build_says_how_to_make_one(tmp_path):
    run = _harness("--build", str(tmp_path), "--seconds", "1")
    assert run.returncode == 2
    assert "run make fuzz" in run.stderr and str(tmp_path) in run.stderr


def test_dc_prediction_past_int_max_decodes_as_libjpeg_turbo_does():
    _jpegroi = pytest.importorskip("fastload.pipelines._jpegroi")
    sys.path.insert(0, str(HARNESS.parent))
    try:
        import corpus
    finally:
        sys.path.remove(str(HARNESS.parent))
    data = corpus.dc_overflow_jpeg()
    outs = []
    for mode in (2, 1):
        out = np.zeros((256, 257, 3), np.uint8)
        assert _jpegroi.decode_region(data, 1, 0, 0, 256, 257, out, mode) == (0, 257)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


@pytest.mark.slow
@pytest.mark.parametrize("what, said", [("crash", "asan: SEGV"), ("hang", "hang"),
                                        ("finding", "finding: selftest")])
def test_harness_catches_a_crash_a_hang_and_a_broken_promise(replayed, tmp_path, what, said):
    folder = tmp_path / what
    folder.mkdir()
    (folder / "case.json").write_text(f'{{"kind": "selftest", "do": "{what}"}}\n')
    run = _harness("--replay", str(folder), "--timeout", "3", "--out", str(tmp_path / "out"))
    assert run.returncode == 1, run.stdout
    assert said in run.stdout and "replay: 1 cases, 1 failed" in run.stdout
