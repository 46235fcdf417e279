"""Opening a sharded set keeps a few bytes per shard, not its parsed manifest (issue 41: about
1 KB per shard, 107 MB per rank at 100,000 shards). The entries are checked in bulk and kept
as arrays; every open-time check still runs, and a manifest the bulk check does not take is
checked entry by entry as before. Real sets written by `fastload convert`; the many-shard
set has empty shard folders (opening reads only the manifest and the labels)."""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import tracemalloc

import numpy as np
import pytest

from fastload.data.format.reader import LMDBReader
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.schema import ShardEntry
from fastload.data.sets.shards import ShardedReader

SHARDS = [shard_name(k, 3) for k in range(3)]  # 20, 20 and 21 records of 61


@pytest.fixture
def work(sharded_set, tmp_path):
    shutil.copytree(sharded_set, tmp_path / "set")
    return tmp_path / "set"


def manifest_of(root) -> dict:
    return json.loads((root / MANIFEST_FILE).read_text())


def write_manifest(root, manifest: dict) -> None:
    (root / MANIFEST_FILE).write_text(json.dumps(manifest))


def many_shards(template, root, count: int):
    """A ``count``-shard set of 2 records a shard whose folders are empty, its manifest made
    from ``template``'s (the same fields, as fastload writes them)."""
    manifest = {key: value for key, value in manifest_of(template).items()
                if key not in ("shards", "jpeg_check", "jpeg_check_attestation")}
    names = [shard_name(k, count) for k in range(count)]
    manifest.update(num_shards=count, count=2 * count, shards=[
        {"path": name, "count": 2, "start": 2 * k, "stop": 2 * k + 2, "skipped": 0,
         "source_range": [2 * k, 2 * k + 2], "checksum_file": f"{name}/checksums.crc32",
         "checksum_file_crc32": k} for k, name in enumerate(names)])
    root.mkdir()
    for name in names:
        (root / name).mkdir()
    write_manifest(root, manifest)
    np.zeros(2 * count, dtype="<i4").tofile(root / "labels.i32")
    return root


def test_opening_a_set_keeps_a_few_bytes_per_shard_not_its_manifest(sharded_set, tmp_path):
    count = 10_000
    root = many_shards(sharded_set, tmp_path / "many", count)
    ShardedReader(root)  # imports and caches warm
    gc.collect()
    tracemalloc.start()
    try:
        reader = ShardedReader(root)
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 32 * count  # 12 B of ranges and CRC-32s, 1 B of first-read checks
    assert "shards" not in reader.meta and reader.num_shards == count
    assert len(pickle.dumps(reader)) < 16 * count + 4096  # what a worker process gets
    assert reader.entries[count - 1] == ShardEntry(
        count - 1, shard_name(count - 1, count),
        os.path.join(os.path.realpath(root), shard_name(count - 1, count)),
        2, 2 * count - 2, 2 * count, count - 1)


def test_entries_are_the_manifests_built_when_read(work):
    reader = ShardedReader(work)
    listed = manifest_of(work)["shards"]
    expected = [ShardEntry(k, e["path"], os.path.realpath(work / e["path"]), e["count"],
                           e["start"], e["stop"], e["checksum_file_crc32"])
                for k, e in enumerate(listed)]
    assert list(reader.entries) == expected and reader.entries[-1] == expected[2]
    assert reader.entries[1:] == expected[1:] and len(reader.entries) == 3
    with pytest.raises(IndexError):
        reader.entries[3]
    assert reader.entries.ranges().tolist() == [[0, 20], [20, 40], [40, 61]]
    assert reader.entries.starts.tolist() == [0, 20, 40]
    assert [reader.locate(i) for i in (0, 19, 20, 39, 40, 60, -1)] == [
        (0, 0), (0, 19), (1, 0), (1, 19), (2, 0), (2, 20), (2, 20)]
    assert reader.key(20) == f"{SHARDS[1]}/00000000".encode()
    copy = pickle.loads(pickle.dumps(reader))
    assert list(copy.entries) == expected and bytes(copy.record(45)) == bytes(reader.record(45))


@pytest.mark.parametrize("edit, error", [
    (lambda m: m["shards"][1].update(count=True), r"shards\[1\]\.count should be an integer"),
    (lambda m: m["shards"][1].update(start=20.0), r"shards\[1\]\.start should be an integer"),
    (lambda m: m["shards"][2].update(checksum_file_crc32=2**64),
     r"shards\[2\]\.checksum_file_crc32 should be an integer"),
    (lambda m: m["shards"][2].pop("skipped"), r"shards\[2\]\.skipped should be an integer"),
    (lambda m: m["shards"][1].update(stop=41), r"shards\[1\]\.stop is 41, but start=20"),
    (lambda m: m["shards"].__setitem__(1, [1, 2]), r"shards\[1\] should be an object"),
    (lambda m: m["shards"][1].update(path=SHARDS[1] + "/"), "not a normalised relative path"),
    (lambda m: m["shards"][0].update(checksum_file="x"), r"shards\[0\]\.checksum_file"),
])
def test_an_entry_the_bulk_check_refuses_is_named_by_the_entry_by_entry_check(work, edit,
                                                                                error):
    manifest = manifest_of(work)
    edit(manifest)
    write_manifest(work, manifest)
    with pytest.raises(ValueError, match=error):
        ShardedReader(work)


def test_a_missing_shard_folder_is_refused_at_open(work):
    shutil.rmtree(work / SHARDS[1])
    with pytest.raises(FileNotFoundError, match=r"shards\[1\]\.path names .*not a folder"):
        ShardedReader(work)


def test_a_set_naming_its_shards_otherwise_opens_and_reads_as_before(work, sharded_set):
    (work / "extra").mkdir()
    (work / SHARDS[1]).rename(work / "extra" / "part-1")  # a nested path
    (work / SHARDS[2]).rename(work / "real-2")
    (work / SHARDS[2]).symlink_to("real-2")  # a symlink inside the set
    manifest = manifest_of(work)
    manifest["shards"][1].update(path="extra/part-1",
                                 checksum_file="extra/part-1/checksums.crc32")
    write_manifest(work, manifest)
    reader, original = ShardedReader(work), ShardedReader(sharded_set)
    real = os.path.realpath(work)
    assert [entry.folder for entry in reader.entries] == [
        os.path.join(real, SHARDS[0]), os.path.join(real, "extra", "part-1"),
        os.path.join(real, "real-2")]
    assert reader.key(25) == b"extra/part-1/00000005"
    assert all(bytes(reader.image_bytes(i)[0]) == bytes(original.image_bytes(i)[0])
               for i in range(len(reader)))


def test_a_shard_folder_made_a_symlink_after_open_is_refused_at_its_first_read(work):
    reader = ShardedReader(work)
    outside = work.parent / "outside"
    shutil.copytree(work / SHARDS[1], outside)
    shutil.rmtree(work / SHARDS[1])
    (work / SHARDS[1]).symlink_to(outside)
    with pytest.raises(ValueError, match="outside the set's folder"):
        reader.image_bytes(20)
    assert bytes(reader.image_bytes(0)[0]) == bytes(
        LMDBReader(work / SHARDS[0]).image_bytes(0)[0])  # the other shards read on
