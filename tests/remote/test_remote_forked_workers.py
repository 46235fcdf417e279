"""An ``s3://`` set opened and read in a process, then read by torch ``DataLoader`` worker
processes forked from it (Linux's default start method): every record arrives as in the
local set, no read waits on a connection the parent opened (two processes reading one
inherited socket take each other's responses: a wrong body, or a wait for the read timeout),
and two workers that miss the same shard at once download it once, the second reading the
first's copy while the first holds it."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch

import fastload
from fastload.data.remote.cache import MARKER

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="the fork start method only")


class RawRecords(torch.utils.data.Dataset):
    """A set's records by index, as bytes (what a worker process reads)."""

    def __init__(self, dataset: fastload.LMDBDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> bytes:
        return bytes(self.dataset.reader.record(index)[0])


def test_forked_torch_workers_read_a_set_the_parent_has_read_like_the_local_set(
        s3_env, s3_sharded_set, sharded_set, monkeypatch):
    from fastload.data.remote import cache

    monkeypatch.setattr(cache, "LOCK_WAIT_S", 20.0)  # the workers' (forked) too
    local = fastload.LMDBDataset(sharded_set)
    want = [bytes(local.reader.record(i)[0]) for i in range(len(local))]
    remote = fastload.LMDBDataset(s3_sharded_set)
    assert bytes(remote.reader.record(0)[0]) == want[0]  # the parent's connections are open
    assert len(list(s3_env.glob(f"shards/shard-*/{MARKER}"))) == 1
    loader = torch.utils.data.DataLoader(RawRecords(remote), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    for epoch in range(2):  # the second epoch: fresh workers, shards in the cache
        start = time.perf_counter()
        assert list(loader) == want, f"epoch {epoch}"
        assert time.perf_counter() - start < 15, f"epoch {epoch} waited on a read"
        # the other two shards were downloaded by the workers
        assert len(list(s3_env.glob(f"shards/shard-*/{MARKER}"))) == 3


def test_forked_torch_workers_read_a_single_lmdb_at_a_url_the_parent_opened(
        s3_env, s3_server, sharded_set):
    from seaweed import upload_tree

    folder = sharded_set / "shard-00002-of-00003"  # one ordinary fastload LMDB
    url = upload_tree(s3_server, folder, "forked/one.lmdb")
    local = fastload.LMDBDataset(folder)
    want = [bytes(local.reader.record(i)[0]) for i in range(len(local))]
    remote = fastload.LMDBDataset(url)
    assert bytes(remote.reader.record(0)[0]) == want[0]
    loader = torch.utils.data.DataLoader(RawRecords(remote), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    start = time.perf_counter()
    assert list(loader) == want
    assert time.perf_counter() - start < 15
