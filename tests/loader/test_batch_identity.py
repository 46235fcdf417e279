"""The same (seed, epoch, batch) is the same batch, bit for bit, in every process: which
decoder makes a batch's pixels depends on its files and the transform only, never on
whether this process has checked those files before (loader/damage.py's strict decode)."""

from __future__ import annotations

import io
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.pictures.photos import native_mosaic

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "mixed_batches.py"
TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
LARGE, SMALL = (800, 1000), (300, 400)
# batch 0: large, small, large, large (sequential JPEGs, a small one among them: DALI's
# path); batch 1: progressive large, large, small, large
LAYOUT = [(LARGE, False), (SMALL, False), (LARGE, False), (LARGE, False),
          (LARGE, True), (LARGE, False), (SMALL, False), (LARGE, False)]


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory) -> pathlib.Path:
    """One class of eight photographs (native-resolution mosaics of real photos) laid out as
    :data:`LAYOUT`: two batches of 4 that mix large, small and progressive JPEGs."""
    root = tmp_path_factory.mktemp("mixed")
    (root / "a").mkdir()
    for i, ((h, w), progressive) in enumerate(LAYOUT):
        picture = native_mosaic(np.random.default_rng(i), h, w)
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=90, progressive=progressive)
        (root / "a" / f"{i}.jpg").write_bytes(buffer.getvalue())
    return root


def _loader(folder: pathlib.Path) -> fastload.DataLoader:
    return fastload.DataLoader(ImageFolder(folder, TRAIN), batch_size=4, seed=3, device="cpu")


def _epoch(loader) -> list[torch.Tensor]:
    return [images for images, _ in loader]


def _same(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.slow  # a fresh process imports torch and DALI: about 10 s on 2 busy cores
def test_a_mixed_batch_is_bitwise_the_same_uninterrupted_resumed_and_in_a_fresh_process(
        mixed_folder, tmp_path):
    uninterrupted = _loader(mixed_folder)
    _epoch(uninterrupted)  # epoch 0 checks every file: epoch 1 decodes them unchecked
    state = uninterrupted.state_dict()
    expected = _epoch(uninterrupted)
    assert len(expected) == 2

    resumed = _loader(mixed_folder)  # a new loader: its files are unchecked again
    resumed.load_state_dict(state)
    assert _same(_epoch(resumed), expected)

    broken = _loader(mixed_folder)  # a `break` after one batch, then the next iterator
    for _ in broken:
        break
    assert _same(_epoch(broken), expected)

    subprocess.run([sys.executable, str(SCRIPT), str(mixed_folder), "1", str(tmp_path / "out.pt")],
                   check=True, timeout=120)
    assert _same(torch.load(tmp_path / "out.pt", weights_only=True), expected)
