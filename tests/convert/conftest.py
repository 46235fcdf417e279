"""Fixtures of the engine tests (tests/convert/test_engine_*.py): one tiny source, its serial
sharded conversion, and the comparison of two sets record for record."""

from __future__ import annotations

import json

import pytest

ENGINE_SHARDS = 4


def _make_images(root, count: int = 24, classes: int = 4, seed: int = 3, big_from=None):
    """``count`` tiny JPEGs in ``classes`` folders; from class ``big_from`` on, 1200 px
    PNGs instead (slow to re-encode: a shard that is still converting when a test looks)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        if big_from is not None and i % classes >= big_from:
            pixels = rng.integers(0, 256, (1200, 1100, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png", compress_level=1)
        else:
            pixels = rng.integers(0, 256, (10 + i % 5, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    return root


@pytest.fixture(scope="session")
def engine_source(tmp_path_factory):
    """24 tiny JPEGs in 4 class folders: the source every engine test converts."""
    return _make_images(tmp_path_factory.mktemp("engine") / "src")


@pytest.fixture(scope="session")
def serial_engine_set(engine_source):
    """``engine_source`` converted without an engine into 4 shards (do not modify)."""
    from fastload.data.convert.folder import convert_folder

    dst = engine_source.parent / "serial"
    convert_folder(engine_source, dst, workers=1, progress=False, shards=ENGINE_SHARDS)
    return dst


@pytest.fixture(scope="session")
def slow_engine_source(tmp_path_factory):
    """24 images whose last two classes (shards 2 and 3) are 1200 px PNGs, and its serial
    4-shard conversion with max_side=64: ``(source, serial set)``."""
    from fastload.data.convert.folder import convert_folder

    src = _make_images(tmp_path_factory.mktemp("engine_slow") / "src", big_from=2)
    dst = src.parent / "serial"
    convert_folder(src, dst, workers=1, progress=False, shards=ENGINE_SHARDS, max_side=64)
    return src, dst


def _without_times(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "created"}


def set_contents(path) -> dict:
    """Everything a set holds but timestamps: records, labels, errors, sidecars, manifest."""
    from fastload.data.format.dataset import LMDBDataset
    from fastload.data.sets.manifest import MANIFEST_FILE, shard_name

    reader = LMDBDataset(path).reader
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    shards = {}
    for k in range(manifest["num_shards"]):
        folder = path / shard_name(k, manifest["num_shards"])
        shards[folder.name] = {
            "meta": _without_times(json.loads((folder / "fastload.json").read_text())),
            "errors": json.loads((folder / "errors.json").read_text()),
            "checksums": (folder / "checksums.crc32").read_bytes(),
        }
    return {
        "records": [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
                    for i in range(len(reader))],
        "labels": (path / "labels.i32").read_bytes(),
        "manifest": _without_times(manifest),
        "shards": shards,
        "names": sorted(p.name for p in path.iterdir() if not p.name.startswith(".")),
        "hidden": sorted(p.name for p in path.iterdir()
                         if p.name.startswith(".") and p.name != ".fastload-set.lock"),
    }


@pytest.fixture
def same_set():
    """``same_set(a, b)``: assert the sets at ``a`` and ``b`` are equal but for timestamps
    (and neither keeps an attempt folder)."""
    def check(a, b) -> None:
        ours, theirs = set_contents(a), set_contents(b)
        assert ours["hidden"] == [] and theirs["hidden"] == []
        for key in ("names", "labels", "manifest", "shards", "records"):
            assert ours[key] == theirs[key], key
    return check


@pytest.fixture()
def s3_options(s3_server, s3_env) -> dict:
    """The storage options a cluster's driver passes so that every worker reaches the
    session's S3 server (with a fresh shard cache for the test)."""
    from seaweed import ACCESS_KEY, SECRET_KEY

    return {"endpoint_url": s3_server.endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY}


@pytest.fixture()
def download_set(s3_server, tmp_path):
    """``download_set(url)``: the set at ``url`` as a local folder (what ``aws s3 sync``
    would give), for ``same_set``."""
    from seaweed import client

    def download(url: str):
        folder = tmp_path / "down" / url.rsplit("/", 1)[-1]
        client(s3_server).get(url.removeprefix("s3://") + "/", str(folder), recursive=True)
        return folder
    return download
