"""Reading a sharded set from a real S3 server (SeaweedFS) through the local shard cache:
the same records as the local set, a warm cache that downloads nothing, the byte bound and
its LRU order, shards in use kept, prefetching, and two processes downloading a shard once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from seaweed import upload_tree
from torchvision import transforms as T

import fastload
from fastload.data.remote.cache import MARKER, CacheOverBoundWarning
from fastload.data.remote.sets import SHARD_FILES

SCRIPTS = Path(__file__).parents[1] / "scripts"


@pytest.fixture(scope="module")
def remote_set(s3_sharded_set):
    """``sharded_set`` on the S3 server (uploaded once per session): its URL."""
    return s3_sharded_set


def shard_bytes(sharded_set: Path, k: int) -> int:
    folder = sorted(sharded_set.glob("shard-*"))[k]
    return sum((folder / name).stat().st_size for name in SHARD_FILES)


def installed(cache: Path) -> set[str]:
    return {p.parent.name.rsplit("-", 1)[0] for p in cache.glob(f"shards/shard-*/{MARKER}")}


def test_a_set_read_from_s3_equals_the_local_set_record_for_record(s3_env, remote_set,
                                                                   sharded_set):
    remote, local = fastload.LMDBDataset(remote_set), fastload.LMDBDataset(sharded_set)
    assert (len(remote), remote.classes, remote.targets) == (
        len(local), local.classes, local.targets)
    assert [remote.reader.record(i) for i in range(len(local))] == [
        local.reader.record(i) for i in range(len(local))]
    assert remote.root == remote_set and remote.reader.cache.downloads == 3


def test_the_loader_given_an_s3_url_makes_the_batches_of_the_local_set(s3_env, remote_set,
                                                                       sharded_set):
    transform = T.Compose([T.Resize((8, 8)), T.ToTensor()])
    batches = [list(fastload.DataLoader(path, batch_size=16, transform=transform, strict=True))
               for path in (remote_set, sharded_set)]
    assert len(batches[0]) == len(batches[1]) == 4
    for (images, labels), (want_images, want_labels) in zip(*batches, strict=True):
        assert torch.equal(labels, want_labels) and torch.equal(images, want_images)


def test_a_warm_cache_serves_a_second_open_without_downloading(s3_env, remote_set):
    first = fastload.LMDBDataset(remote_set)
    records = [first.reader.record(i) for i in range(len(first))]
    inodes = {p: p.stat().st_ino for p in s3_env.glob("shards/shard-*/data.mdb")}
    second = fastload.LMDBDataset(remote_set)
    assert [second.reader.record(i) for i in range(len(second))] == records
    assert second.reader.cache.downloads == 0
    assert {p: p.stat().st_ino for p in s3_env.glob("shards/shard-*/data.mdb")} == inodes


def test_the_cache_stays_within_cache_bytes_evicting_the_least_recently_used_shard(
        s3_env, remote_set, sharded_set):
    sizes = [shard_bytes(sharded_set, k) for k in range(3)]
    bound = sum(sizes) - 1  # two shards fit, three do not
    reader = fastload.LMDBDataset(remote_set, cache_bytes=bound).reader
    for k in (0, 1, 0, 2):  # shard 0 read again after 1: shard 1 is the least recent
        reader.record(reader.entries[k].start)
        reader.release_shard(k)
        assert reader.cache.usage() <= bound
    assert installed(s3_env) == {"shard-00000-of-00003", "shard-00002-of-00003"}


def test_a_shard_another_reader_holds_is_never_evicted(s3_env, remote_set, sharded_set):
    sizes = [shard_bytes(sharded_set, k) for k in range(3)]
    holder = fastload.LMDBDataset(remote_set).reader
    holder.record(0)  # holds shard 0 open
    reader = fastload.LMDBDataset(remote_set, cache_bytes=sizes[0] + max(sizes[1:])).reader
    for i in range(len(reader)):  # shards 1 and 2 cannot both stay beside shard 0
        reader.record(i)
    assert "shard-00000-of-00003" in installed(s3_env)
    assert reader.opened_shards == [2] and holder.record(0) == reader.record(0)
    assert reader.cache.usage() <= sizes[0] + max(sizes[1:])


def test_a_read_past_a_bound_full_of_held_shards_warns_as_python_shows_by_default(
        s3_env, remote_set, sharded_set):
    bound = shard_bytes(sharded_set, 0) + shard_bytes(sharded_set, 1)
    holders = [fastload.LMDBDataset(remote_set, cache_bytes=bound).reader for _ in range(3)]
    holders[0].record(0)
    holders[1].record(holders[1].entries[1].start)  # shards 0 and 1 held: the bound is full
    with pytest.warns(CacheOverBoundWarning, match=r"is full of shards in use .* goes over the "
                                                   r"bound; pass a larger cache_bytes"):
        holders[2].record(holders[2].entries[2].start)
    assert issubclass(CacheOverBoundWarning, UserWarning)  # not ignored as ResourceWarning is


def test_prefetched_shards_are_read_without_another_download(s3_env, remote_set):
    reader = fastload.LMDBDataset(remote_set).reader
    assert [reader.is_cached(k) for k in range(3)] == [False, False, False]
    assert [future.result(timeout=60) for future in reader.prefetch([1, 2])] == [True, True]
    assert reader.cache.downloads == 2 and reader.opened_shards == []
    assert [reader.is_cached(k) for k in range(3)] == [False, True, True]
    for k in (1, 2):
        reader.record(reader.entries[k].start)
    assert reader.cache.downloads == 2
    reader.close()


def test_a_prefetch_that_does_not_fit_beside_the_shards_in_use_is_not_started(
        s3_env, remote_set, sharded_set):
    sizes = [shard_bytes(sharded_set, k) for k in range(3)]
    reader = fastload.LMDBDataset(remote_set, cache_bytes=sizes[0] + sizes[1]).reader
    reader.record(0)
    reader.record(reader.entries[1].start)  # shards 0 and 1 open: the cache is full
    assert reader.prefetch([2])[0].result(timeout=60) is False
    assert installed(s3_env) == {"shard-00000-of-00003", "shard-00001-of-00003"}


def test_two_processes_sharing_the_cache_download_each_shard_once(s3_env, remote_set,
                                                                 tmp_path):
    go = tmp_path / "go"
    workers = [subprocess.Popen([sys.executable, str(SCRIPTS / "remote_reader.py"), remote_set,
                                 str(go)], stdout=subprocess.PIPE, text=True, env=os.environ)
               for _ in range(2)]
    go.touch()  # both wait for it, then read every record at once
    results = [json.loads(worker.communicate(timeout=120)[0]) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0]
    assert results[0]["digest"] == results[1]["digest"]
    assert results[0]["downloads"] + results[1]["downloads"] == 3


def test_a_single_lmdb_at_a_url_reads_like_the_local_one(s3_env, s3_server, sharded_set):
    folder = sharded_set / "shard-00001-of-00003"  # one ordinary fastload LMDB
    url = upload_tree(s3_server, folder, "read/one.lmdb")
    remote, local = fastload.LMDBDataset(url), fastload.LMDBDataset(folder)
    assert remote.root == url and remote.targets == local.targets
    assert [remote.reader.record(i) for i in range(len(local))] == [
        local.reader.record(i) for i in range(len(local))]



def test_a_shuffled_loader_on_an_s3_set_streams_by_shards_and_prefetches_them(s3_env,
                                                                             remote_set):
    transform = T.Compose([T.Resize((8, 8)), T.ToTensor()])
    with pytest.warns(UserWarning, match="class order"):  # converted from an ImageFolder
        loader = fastload.DataLoader(remote_set, batch_size=4, transform=transform,
                                     shuffle=True, seed=1, shard_window=1)
    assert loader.order == "shards"
    seen = []
    for _ in loader:
        seen.extend(loader.last_batch_indices)
    reader = loader.dataset.reader
    assert sorted(seen) == list(range(len(loader.dataset)))  # every record once
    starts = [reader.locate(i)[0] for i in seen]
    assert starts == sorted(starts, key=starts.index)  # one shard after the other
    assert reader.cache.downloads == reader.num_shards  # each shard fetched once
