"""Dependencies: the DALI seam accepts only the release pyproject allows, and the core install
works without the extras."""

from __future__ import annotations

import pytest

from fastload.pipelines.seams.dali_backend import TESTED_DALI, check_dali_version


def test_dali_seam_accepts_the_installed_release_and_pyproject_allows_only_its_major(
        dependency_ranges):
    import importlib.metadata

    # the DALI build this environment has (the core dependency's, or an extra's); each
    # flavour's range in pyproject.toml is the seam's tested major
    flavours = [name for name in dependency_ranges if name.startswith("nvidia-dali-cuda")]
    assert {"nvidia-dali-cuda120", "nvidia-dali-cuda130"} <= set(flavours)
    installed_flavours = []
    for name in flavours:
        try:
            installed_flavours.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            pass
    flavour, installed = installed_flavours[0]
    assert check_dali_version() == installed  # nvidia.dali.__version__ of this environment
    major, minor = (int(p) for p in installed.split(".")[:2])
    assert (major, minor) >= TESTED_DALI and major == TESTED_DALI[0]
    assert dependency_ranges[flavour] == (TESTED_DALI, (TESTED_DALI[0] + 1, 0))


def test_dali_seam_refuses_an_untested_major_version_naming_it():
    with pytest.raises(RuntimeError, match=r"nvidia-dali 9\.0\.0 is installed.*dali_backend\.py"):
        check_dali_version("9.0.0")


# Runs in a fresh interpreter whose imports of the optional extras fail, as after a core-only
# `pip install fastload-dali`: the loader, convert and verify work; `fastload finetune` names its extra.
_CORE_ONLY = r'''
import json, sys
BLOCKED = {"timm", "safetensors", "matplotlib", "psutil", "pytest_benchmark", "torchao",
           "pyarrow", "datasets", "webdataset", "braceexpand", "fsspec", "s3fs"}

class BlockExtras:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, BlockExtras())
import pathlib
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.format.verify import verify_lmdb
from fastload.tools.cli import main

root = pathlib.Path(sys.argv[1])
for label in ("a", "b"):
    (root / "train" / label).mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (40, 30), (60 * i, 100, 30)).save(root / "train" / label / f"{i}.jpg")
dataset = ImageFolder(str(root / "train"), T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]))
loader = fastload.DataLoader(dataset, batch_size=4, num_workers=1)
shapes = [list(images.shape) for images, _ in loader]
report = convert_folder(root / "train", root / "train.lmdb", workers=1, progress=False)
ok = verify_lmdb(root / "train.lmdb").ok
code = main(["finetune", str(root), "--device", "cpu"])
print(json.dumps({"shapes": shapes, "stored": report.stored, "verified": ok, "finetune": code,
                  "loaded": sorted(m for m in BLOCKED if m in sys.modules)}))
'''


@pytest.mark.slow
def test_core_install_without_extras_loads_converts_verifies_and_names_the_train_extra(tmp_path):
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CORE_ONLY, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"shapes": [[4, 3, 16, 16], [2, 3, 16, 16]], "stored": 6, "verified": True,
                      "finetune": 2, "loaded": []}
    errors = [line for line in done.stderr.splitlines() if line.startswith("fastload finetune:")]
    assert errors == ["fastload finetune: error: this command needs timm, which the [train] extra "
                      "installs: pip install 'fastload-dali[train]'"]
