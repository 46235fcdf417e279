"""``verify_set``'s decode sample is drawn once over the whole set (issue 41: each shard's
share was rounded up, so a set decoded at least one image per shard: 10,000 decodes for
``--sample 64`` over 10 k shards). Real LMDB files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format.verify import verify_lmdb
from fastload.data.sets.manifest import shard_name
from fastload.data.sets.verify import verify_set

SHARDS, IMAGES = 30, 60


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    root = tmp_path_factory.mktemp("vs_src") / "src"
    rng = np.random.default_rng(2)
    for i in range(IMAGES):
        folder = root / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    dst = tmp_path_factory.mktemp("vs_set") / "set"
    convert_folder(root, dst, workers=1, progress=False, shards=SHARDS)
    return dst


def test_a_sample_smaller_than_the_shard_count_decodes_that_many(sharded):
    report = verify_set(sharded, sample=5)
    assert report.ok and report.found == IMAGES and report.checksums_checked == IMAGES
    assert report.decoded == 5


@pytest.mark.parametrize(("sample", "decoded"), [(0, 0), (1, 1), (59, 59), (500, IMAGES)])
def test_the_sample_is_capped_by_the_set_not_rounded_up_per_shard(sharded, sample, decoded):
    assert verify_set(sharded, sample=sample, seed=3).decoded == decoded
    assert verify_set(sharded, full=True).decoded == IMAGES


def test_verify_lmdb_decodes_the_records_it_is_given(sharded):
    shard = sharded / shard_name(0, SHARDS)
    assert verify_lmdb(shard, decode=[1]).decoded == 1
    assert verify_lmdb(shard, decode=[]).decoded == 0
    assert verify_lmdb(shard, decode=[0, 1, 7]).decoded == 2  # 7 is outside: ignored
    assert verify_lmdb(shard, decode=[], full=True).decoded == 2
