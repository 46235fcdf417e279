"""A bad copy in the shard cache heals, on a real S3 server (SeaweedFS): a cached shard that
fails a check, or a record of it that fails its CRC-32, is fetched again once; a fresh copy
that still fails says what differs, the URL and the cache folder; a refused shard is not
fetched again for each of its records, and naming a record fetches nothing (issue 36)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from seaweed import BUCKET, CountingRelay, client, upload_tree

import fastload
from fastload.data.format.constants import record_key
from fastload.data.format.reader import CorruptRecord
from fastload.data.remote.sets import ShardRefused

SHARD1 = "shard-00001-of-00003"


def cached(cache, name: str):
    (path,) = cache.glob(f"shards/{SHARD1}-*/{name}")
    return path


def flip_a_record_byte(data_mdb, record: bytes) -> None:
    """Flip one byte in the middle of ``record``'s bytes inside ``data_mdb`` (same size)."""
    blob = bytearray(data_mdb.read_bytes())
    offset = blob.find(record)
    assert offset > 0
    blob[offset + len(record) // 2] ^= 0x55
    data_mdb.write_bytes(bytes(blob))


@pytest.fixture()
def warm(s3_env, s3_sharded_set, sharded_set):
    """Shard 1 read once into a fresh cache (then closed); ``(url, local reader)``."""
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    reader.record(reader.entries[1].start)
    reader.close()
    return s3_sharded_set, fastload.LMDBDataset(sharded_set).reader


def test_a_cached_shard_whose_labels_no_longer_match_is_fetched_again(s3_env, warm):
    url, local = warm
    labels = cached(s3_env, "labels.i32")
    values = np.fromfile(labels, dtype="<i4")
    values[0] = (values[0] + 1) % 3  # same size, same range: only the check sees it
    values.tofile(labels)
    reader = fastload.LMDBDataset(url).reader
    entry = reader.entries[1]
    assert [reader.record(i) for i in range(entry.start, entry.stop)] == [
        local.record(i) for i in range(entry.start, entry.stop)]
    assert reader.cache.downloads == 1


def test_a_record_failing_its_crc_in_a_cached_shard_has_the_shard_fetched_again(s3_env, warm):
    url, local = warm
    start = local.entries[1].start
    flip_a_record_byte(cached(s3_env, "data.mdb"), local.record(start + 3))
    reader = fastload.LMDBDataset(url).reader
    assert reader.image_bytes(start + 3)[1] == local.image_bytes(start + 3)[1]
    assert reader.record(start + 3) == local.record(start + 3)
    assert reader.cache.downloads == 1


def test_a_fresh_copy_that_still_fails_names_the_url_and_cache_folder_then_heals_once_fixed(
        s3_env, s3_server, sharded_set, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(sharded_set, copy)
    local = fastload.LMDBDataset(sharded_set).reader
    start = local.entries[1].start
    flip_a_record_byte(copy / SHARD1 / "data.mdb", local.record(start + 2))
    url = upload_tree(s3_server, copy, "heal/bad-object.set")
    reader = fastload.LMDBDataset(url).reader
    assert reader.record(start) == local.record(start)  # the other records read
    with pytest.raises(CorruptRecord) as refused:
        reader.record(start + 2)
    message = str(refused.value)
    folder = reader.entries[1].folder
    assert f"fetched again from {url}/{SHARD1} into the cache folder '{folder}'" in message
    assert "upload the set again" in message and "delete that cache folder" in message
    assert reader.cache.downloads == 2  # once, and once again: not per read
    reader.close()
    client(s3_server).put_file(str(sharded_set / SHARD1 / "data.mdb"),
                               f"{BUCKET}/heal/bad-object.set/{SHARD1}/data.mdb")
    fixed = fastload.LMDBDataset(url).reader  # a new run: the bad copy is fetched again
    assert fixed.record(start + 2) == local.record(start + 2)


def test_a_refused_shard_raises_for_each_record_without_another_download(
        s3_env, s3_server, sharded_set, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(sharded_set, copy)
    other = sorted(sharded_set.glob("shard-*"))[2]
    shutil.rmtree(copy / SHARD1)
    shutil.copytree(other, copy / SHARD1)  # another shard's files in its place
    url = upload_tree(s3_server, copy, "heal/refused.set")
    with CountingRelay(s3_server) as relay:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
        reader = fastload.LMDBDataset(url).reader
        entry = reader.entries[1]
        for index in range(entry.start, entry.stop):
            with pytest.raises(ShardRefused, match=rf"{url}/{SHARD1} does not match"):
                reader.record(index)
        assert reader.record(0) and reader.record(entry.stop)  # the other shards read
        assert len(relay.gets(f"/{SHARD1}/data.mdb")) == 1


def test_naming_a_record_fetches_nothing(s3_env, s3_sharded_set, monkeypatch, s3_server):
    with CountingRelay(s3_server) as relay:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
        reader = fastload.LMDBDataset(s3_sharded_set).reader
        before = len(relay.gets())
        assert reader.key(reader.entries[1].start + 4) == f"{SHARD1}/".encode() + record_key(4)
        assert len(relay.gets()) == before and not reader.opened_shards


def test_a_url_sets_damaged_labels_are_reported_with_the_url_not_the_cache_folder(
        s3_env, s3_server, sharded_set, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(sharded_set, copy)
    labels = np.fromfile(copy / "labels.i32", dtype="<i4")
    labels[5] = 7  # outside the 3 classes
    labels.tofile(copy / "labels.i32")
    url = upload_tree(s3_server, copy, "heal/labels.set")
    with pytest.raises(ValueError, match=rf"holds label 7 .*the set at {url} is damaged") as bad:
        fastload.LMDBDataset(url)
    assert "--repair` to rebuild" not in str(bad.value)
