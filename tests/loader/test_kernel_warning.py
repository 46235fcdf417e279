"""A loader whose plan would run a missing C kernel says so once per process (issue 39, item 4).

Each case runs in a fresh interpreter in which the kernel's module is made unimportable
(``sys.modules[name] = None`` before fastload is imported), as a wheel built without a C
compiler would be, and reads a real LMDB file with a real loader.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys, warnings
for name in {missing!r}:
    sys.modules["fastload.pipelines." + name] = None
import torch
import torchvision.transforms as T
import fastload

TRANSFORMS = {{
    "val": T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(),
                      T.Normalize([0.5] * 3, [0.2] * 3)]),
    "trivial": T.Compose([T.RandomResizedCrop(64), T.TrivialAugmentWide(), T.PILToTensor()]),
}}
out = {{"warnings": [], "sums": []}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in {transforms!r}:
        loader = fastload.DataLoader({path!r}, batch_size=4, transform=TRANSFORMS[name],
                                     shuffle=True, seed=0)
        assert loader.fallback_reason is None, loader.fallback_reason
        images, labels = next(iter(loader))
        out["sums"].append(float(images.double().sum()))
        loader.close()
for w in caught:
    if issubclass(w.category, fastload.FallbackWarning):
        out["warnings"].append({{"category": w.category.__name__, "message": str(w.message),
                                 "filename": w.filename}})
print(json.dumps(out))
"""


def _run(path, missing: list[str], transforms: list[str]) -> dict:
    code = SCRIPT.format(missing=missing, transforms=transforms, path=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def with_kernels(synth_lmdb):
    return _run(synth_lmdb, [], ["trivial", "val"])


@pytest.mark.slow
def test_a_missing_kernel_the_plan_runs_gets_one_fallback_warning_naming_it_and_the_fix(
        synth_lmdb, with_kernels):
    got = _run(synth_lmdb, ["_augment"], ["trivial", "trivial"])
    assert len(got["warnings"]) == 1, got["warnings"]  # once per process, not per loader
    warning = got["warnings"][0]
    message = warning["message"]
    assert warning["category"] == "FallbackWarning"
    assert "fastload.pipelines._augment" in message and "TrivialAugmentWide" in message
    assert "instead, torch ops" in message and "same values" in message
    assert "fastload doctor" in message and "C compiler" in message
    assert "--no-binary fastload-dali fastload-dali" in message
    assert warning["filename"] == "<string>"  # it points at the user's DataLoader(...) line
    # the fallback gives the same batches
    assert got["sums"][0] == with_kernels["sums"][0]


@pytest.mark.slow
def test_each_missing_kernel_is_named_once_and_jpegroi_names_libjpeg_turbo(synth_lmdb,
                                                                           with_kernels):
    got = _run(synth_lmdb, ["_normalize", "_jpegroi"], ["val", "val"])
    named = sorted(m["message"].split("fastload.pipelines.")[1].split(",")[0]
                   for m in got["warnings"])
    assert named == ["_jpegroi", "_normalize"], got["warnings"]
    jpeg = next(m["message"] for m in got["warnings"] if "_jpegroi" in m["message"])
    assert "libjpeg-turbo" in jpeg
    assert got["sums"] == [with_kernels["sums"][1]] * 2


@pytest.mark.slow
def test_a_missing_kernel_the_plan_does_not_run_and_a_full_install_stay_silent(synth_lmdb,
                                                                               with_kernels):
    # timm's affine kernel: no timm transform here
    assert _run(synth_lmdb, ["_affine"], ["val", "trivial"])["warnings"] == []
    assert with_kernels["warnings"] == []


def test_kernels_used_reads_the_plan():
    import torchvision.transforms as T

    from fastload.pipelines import kernels_used, split_transform

    val = split_transform(T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(),
                                     T.Normalize([0.5] * 3, [0.2] * 3)]), "cpu")
    assert set(kernels_used(val, "cpu")) == {"_normalize", "_jpegroi"}
    assert set(kernels_used(val, "cpu", scaled_decode="off")) == {"_normalize"}
    assert kernels_used(val, "cuda") == {}
    uint8 = split_transform(T.Compose([T.RandomResizedCrop(64), T.PILToTensor()]), "cpu")
    assert "_augment" not in kernels_used(uint8, "cpu")
    assert set(kernels_used(uint8, "cpu", batch_mix=True)) >= {"_augment"}
