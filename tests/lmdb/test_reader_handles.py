"""A database's LMDB handle: opened once however many threads make the first reads, freed
at ``del``, and never shared with a database converted again at the same path; real
converted databases."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format import envs
from fastload.data.format.dataset import LMDBDataset


def _tree(root, seed: int, count: int = 12):
    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:02d}.jpg", quality=95)
    return root


def _open_files_under(folder) -> list[str]:
    root = os.path.realpath(folder) + os.sep
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root):
            held.append(target)
    return held


def _users(folder) -> int:
    real = os.path.realpath(folder)
    return sum(entry[2] for key, entry in envs._ENVS.items() if key[0] == real)


@pytest.fixture()
def database(tmp_path):
    db = tmp_path / "one.lmdb"
    convert_folder(_tree(tmp_path / "src", seed=0), db, workers=1, progress=False)
    return db


def _first_reads_at_once(dataset, threads: int) -> tuple[list, list]:
    """Samples 0..threads-1 read by as many threads released together: (labels, errors)."""
    start = threading.Barrier(threads)
    labels, errors = [], []

    def read(index: int) -> None:
        start.wait()
        try:
            labels.append(dataset[index][1])
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    running = [threading.Thread(target=read, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return labels, errors


def test_first_reads_from_many_threads_open_one_handle_freed_at_del(database):
    for _round in range(5):
        dataset = LMDBDataset(database)
        labels, errors = _first_reads_at_once(dataset, 8)
        assert errors == [] and sorted(labels) == sorted(dataset.targets[:8])
        assert _users(database) == 1
        del dataset
        gc.collect()
        assert _users(database) == 0 and _open_files_under(database) == []


def test_a_database_converted_again_at_its_path_is_read_anew_beside_an_old_reader(tmp_path,
                                                                                  database):
    old = LMDBDataset(database)
    old_pixels = np.asarray(old[0][0])
    convert_folder(_tree(tmp_path / "other", seed=1), database, workers=1, progress=False,
                   overwrite=True)
    new = LMDBDataset(database)
    expected = np.asarray(Image.open(tmp_path / "other" / "class_0" / "00.jpg").convert("RGB"))
    assert np.array_equal(np.asarray(new[0][0]), expected)  # not the old file's mapping
    assert np.array_equal(np.asarray(old[0][0]), old_pixels)  # the old reader keeps its own
    del old, new
    gc.collect()
    assert _users(database) == 0 and _open_files_under(database) == []


def test_a_path_from_the_home_folder_as_torchvision_takes_it(tmp_path, monkeypatch, database):
    monkeypatch.setenv("HOME", str(tmp_path))
    dataset = LMDBDataset("~/one.lmdb")
    assert dataset.path == database and len(dataset) == 12
    convert_folder(tmp_path / "src", tmp_path / "set", workers=1, progress=False, shards=2)
    assert len(LMDBDataset("~/set")) == 12
