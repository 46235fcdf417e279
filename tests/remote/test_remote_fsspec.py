"""Any fsspec URL, not only ``s3://``: a set on fsspec's in-memory file system
(``memory://``, a second real backend that needs no network or server) is written by
``fastload convert``, checked by ``fastload verify`` and read by the DataLoader through the
shard cache, as the same set on S3 is."""

from __future__ import annotations

import pytest
import torch
from torchvision import transforms as T

import fastload
from fastload.tools.cli import main as cli

URL = "memory://fastload-tests/fsspec.set"


@pytest.fixture(scope="module")
def memory_set(sharded_set, tmp_path_factory):
    """The session's 61 source JPEGs converted straight to ``URL`` in 3 shards; the
    in-memory file system is emptied afterwards (it lives as long as the process)."""
    fsspec = pytest.importorskip("fsspec")
    staging = tmp_path_factory.mktemp("memory-staging")
    assert cli(["convert", str(sharded_set.parent / "src"), URL, "--shards", "3",
                "--workers", "1", "--staging", str(staging), "--no-progress"]) == 0
    yield URL
    fsspec.filesystem("memory").rm("/fastload-tests", recursive=True)


@pytest.fixture()
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_fastload_verify_checks_every_shard_of_a_set_at_a_memory_url(memory_set, cache,
                                                                      capsys):
    capsys.readouterr()
    assert cli(["verify", memory_set]) == 0
    assert capsys.readouterr().out.startswith(f"{memory_set}: OK: 61/61 records in 3 shards")
    assert len(list(cache.rglob("data.mdb"))) == 3  # each shard fetched into the cache


def test_the_loader_given_a_memory_url_makes_the_batches_of_the_local_set(memory_set, cache,
                                                                          sharded_set):
    transform = T.Compose([T.Resize((8, 8)), T.ToTensor()])
    batches = [list(fastload.DataLoader(path, batch_size=16, transform=transform, strict=True,
                                        device="cpu"))
               for path in (memory_set, sharded_set)]
    assert len(batches[0]) == len(batches[1]) == 4
    for (images, labels), (want_images, want_labels) in zip(*batches, strict=True):
        assert torch.equal(labels, want_labels) and torch.equal(images, want_images)


def test_an_overwrite_copies_the_new_set_in_only_where_the_file_system_copies_objects(
        sharded_set, tmp_path):
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    from fastload.data.remote.fetch import copies_objects
    from fastload.data.remote.replace import manifest_object
    from fastload.data.remote.url import RemoteLocation

    class NoCopy(MemoryFileSystem):  # a file system without its own copy, as FTP's
        protocol = "nocopy"

        def cp_file(self, path1, path2, **kwargs):
            raise NotImplementedError

    fsspec.register_implementation("nocopy", NoCopy, clobber=True)
    source = str(sharded_set.parent / "src")
    argv = ["--shards", "2", "--workers", "1", "--no-progress", "--staging", str(tmp_path)]
    try:
        for url in ("memory://fastload-tests/copied.set", "nocopy://fastload-tests/kept.set"):
            assert cli(["convert", source, url, *argv]) == 0
            location = RemoteLocation(url)  # memory:// copies objects, nocopy:// does not
            assert copies_objects(location, *manifest_object(location)) == (url[0] == "m")
            assert cli(["convert", source, url, *argv, "--overwrite", "--max-side", "6"]) == 0
            assert cli(["verify", url]) == 0
            fs = fsspec.filesystem(url.split(":")[0])
            assert not [p for p in fs.find(url.split("://")[1]) if "/.fastload-" in p]
            dataset = fastload.LMDBDataset(url)
            assert len(dataset) == 61 and max(dataset[60][0].size) <= 6  # the new set's
    finally:
        for protocol, path in (("memory", "/fastload-tests/copied.set"),
                               ("nocopy", "/fastload-tests/kept.set")):
            if fsspec.filesystem(protocol).exists(path):
                fsspec.filesystem(protocol).rm(path, recursive=True)


def test_an_overwrite_at_a_url_that_stores_no_file_keeps_the_finished_set(sharded_set,
                                                                         tmp_path, capsys):
    import fsspec

    source, unreadable = str(sharded_set.parent / "src"), tmp_path / "unreadable"
    for k in range(2):
        (unreadable / f"c{k}").mkdir(parents=True)
        (unreadable / f"c{k}" / "x.jpg").write_bytes(b"not an image")
    url = "memory://fastload-tests/kept-when-empty.set"
    argv = ["--shards", "2", "--workers", "1", "--no-progress", "--staging", str(tmp_path / "s")]
    try:
        assert cli(["convert", source, url, *argv]) == 0
        capsys.readouterr()
        for _ in range(2):  # and the same command again: nothing left for it to move in
            assert cli(["convert", str(unreadable), url, *argv, "--overwrite"]) == 1
            assert "the finished set there is kept as it was" in capsys.readouterr().err
        assert cli(["verify", url]) == 0
        assert len(fastload.LMDBDataset(url)) == 61
    finally:
        if fsspec.filesystem("memory").exists("/fastload-tests/kept-when-empty.set"):
            fsspec.filesystem("memory").rm("/fastload-tests/kept-when-empty.set", recursive=True)
