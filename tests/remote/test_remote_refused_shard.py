"""One refused shard of a URL set on a real S3 server (SeaweedFS) costs only its own records
(issue 36): with shard 2 of 6 replaced on the server by another set's shard 2, ``"raise"``
raises for exactly that shard's batches and every other batch arrives in order; ``"skip"``
delivers every record of the other shards."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
import torch
from seaweed import upload_tree
from torchvision import transforms as T

import fastload

SHARDS, PER_SHARD, BATCH = 6, 6, 3
REFUSED = 2


def tiny_set(base, seed: int):
    """36 tiny JPEGs (3 classes) converted into a 6-shard set at ``base/set``."""
    from PIL import Image

    from fastload.data.convert.folder import convert_folder

    rng = np.random.default_rng(seed)
    for i in range(SHARDS * PER_SHARD):
        folder = base / "src" / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(
            folder / f"{i:03d}.jpg", quality=85)
    convert_folder(base / "src", base / "set", workers=1, progress=False, shards=SHARDS)
    return base / "set"


@pytest.fixture(scope="module")
def refused_set(s3_server, tmp_path_factory):
    """``(URL of the set with shard 2 replaced by another set's, the intact local set)``."""
    good = tiny_set(tmp_path_factory.mktemp("six"), seed=5)
    other = tiny_set(tmp_path_factory.mktemp("other"), seed=6)
    copy = tmp_path_factory.mktemp("refused") / "set"
    shutil.copytree(good, copy)
    name = f"shard-{REFUSED:05d}-of-{SHARDS:05d}"
    shutil.rmtree(copy / name)
    shutil.copytree(other / name, copy / name)
    return upload_tree(s3_server, copy, "refused/six.set"), good


def loader(url, on_error: str):
    return fastload.DataLoader(url, batch_size=BATCH, shuffle=False, shard_window=1,
                               on_error=on_error, strict=True,
                               transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))


def test_raise_raises_for_exactly_the_refused_shards_batches_and_the_rest_arrive_in_order(
        s3_env, refused_set):
    url, good = refused_set
    targets = torch.as_tensor(np.array(fastload.LMDBDataset(good).targets))
    batches = loader(url, "raise")
    it = iter(batches)
    arrived, raised = [], []
    for position in range(len(batches)):
        try:
            _, labels = next(it)
        except Exception as exc:  # noqa: BLE001 - what the loader raises for the shard
            raised.append(position)
            assert "does not match the set's manifest" in str(exc)
            continue
        arrived.append(position)
        assert torch.equal(labels, targets[position * BATCH:(position + 1) * BATCH])
    with pytest.raises(StopIteration):
        next(it)
    per_shard = PER_SHARD // BATCH
    assert raised == list(range(REFUSED * per_shard, (REFUSED + 1) * per_shard))
    assert arrived == [p for p in range(len(batches)) if p not in raised]


def test_skip_delivers_every_record_of_the_other_shards(s3_env, refused_set):
    url, good = refused_set
    targets = np.asarray(fastload.LMDBDataset(good).targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        labels = torch.cat([labels for _, labels in loader(url, "skip")])
    kept = [i for i in range(len(targets)) if i // PER_SHARD != REFUSED]
    assert labels.tolist() == targets[kept].tolist()
