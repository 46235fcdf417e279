"""The private names fastload uses are checked against the installed releases.

The installed versions are read from the environment (importlib.metadata), not from the
constants under test, so these fail when an install moves outside what the seams and
pyproject.toml state, or when a release drops one of the names.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from fastload.pipelines.seams import torch_private as torch_seams
from fastload.pipelines.seams.torch_private import SEAMS, SUPPORTED, UncheckedVersionError


@pytest.mark.parametrize("package", sorted(SUPPORTED))
def test_the_installed_release_is_one_the_seams_were_checked_on(package):
    version = importlib.metadata.version(package)
    assert torch_seams.check_version(package, version) == version
    low, high = SUPPORTED[package]
    assert torch_seams._release(version) == high, (
        f"{package} {version} is installed but the seams were checked on {high}")


@pytest.mark.parametrize("package", sorted(SUPPORTED))
def test_pyproject_allows_exactly_the_seams_range(package, dependency_ranges):
    low, high = SUPPORTED[package]
    assert dependency_ranges[package] == (low, (high[0], high[1] + 1))


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.path)
def test_every_private_name_resolves_on_the_installed_release(seam):
    if seam.package == "timm":
        pytest.importorskip("timm")
    torch_seams.resolve.cache_clear()
    assert torch_seams.resolve(seam.path) is not None
    assert seam.checked == ".".join(map(str, SUPPORTED[seam.package][1]))


def test_a_release_above_the_checked_one_is_refused_naming_the_range_and_the_fix():
    with pytest.raises(UncheckedVersionError,
                       match=r"torchvision 0\.30\.0 is installed.*checked on torchvision 0\.29"
                             r".*torchvision>=0\.16,<0\.30.*torch_seams\.py"):
        torch_seams.check_version("torchvision", "0.30.0")
    assert issubclass(UncheckedVersionError, ImportError)  # the loader falls back on it


def test_a_missing_private_name_is_named_with_its_package_and_use(monkeypatch):
    import torchvision.transforms.v2._utils as utils

    monkeypatch.delattr(utils, "_get_fill")
    torch_seams.resolve.cache_clear()
    try:
        with pytest.raises(UncheckedVersionError,
                           match=r"torchvision .* has no torchvision\.transforms\.v2\._utils"
                                 r"\._get_fill .*a v2 fill for one input type"):
            torch_seams.resolve("torchvision.transforms.v2._utils._get_fill")
    finally:
        torch_seams.resolve.cache_clear()


_UNCHECKED = r'''
import json, sys, warnings
import torchvision
torchvision.__version__ = "0.30.0"
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
import fastload

root = sys.argv[1]
import os
os.makedirs(f"{root}/a", exist_ok=True)
Image.new("RGB", (20, 16)).save(f"{root}/a/0.jpg")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = fastload.DataLoader(ImageFolder(root, T.Compose([T.CenterCrop(8), T.ToTensor()])),
                                 batch_size=1)
    images, _ = next(iter(loader))
print(json.dumps({"warned": [str(w.message) for w in caught
                             if w.category.__name__ == "FallbackWarning"],
                  "shape": list(images.shape)}))
'''


def test_the_loader_falls_back_with_one_warning_naming_an_unchecked_torchvision(tmp_path):
    done = subprocess.run([sys.executable, "-c", _UNCHECKED, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["warned"]) == 1 and "torchvision 0.30.0 is installed" in result["warned"][0]
    assert result["shape"] == [1, 3, 8, 8]
