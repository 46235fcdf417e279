"""A run resumed from a loader state fetches only what its shard cache lacks, on a real S3
server (SeaweedFS): at another world size (a real 2-rank gloo group, then one process),
through another endpoint (a relay that records every request) and another spelling of the
set's URL, or reading a copy of the set. The cache names shards by what the manifest says
of them, not by URL or endpoint."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager

import pytest
from seaweed import CountingRelay
from torchvision import transforms as T

import fastload
from fastload.data.remote.cache import MARKER

SMALL = T.Compose([T.Resize((8, 8)), T.ToTensor()])
PEER = ("import sys, torch.distributed as dist; dist.init_process_group('gloo', "
        "init_method=sys.argv[1], rank=1, world_size=2); dist.barrier(); "
        "dist.destroy_process_group()")


@contextmanager
def rank_zero_of_two():
    """This process as rank 0 of a real 2-rank gloo group (rank 1: a process that only
    joins it), so a loader made inside sees world size 2."""
    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    peer = subprocess.Popen([sys.executable, "-c", PEER, address])
    try:
        dist.init_process_group("gloo", init_method=address, rank=0, world_size=2)
        try:
            yield
            dist.barrier()
        finally:
            dist.destroy_process_group()
        assert peer.wait(timeout=60) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def shard_names(paths) -> set[str]:
    """``shard-0000k-of-00003`` of each path that lies in (or names) a shard folder."""
    names = set()
    for path in paths:
        for part in str(path).split("/"):
            if part.startswith("shard-") and "-of-" in part:
                names.add("-".join(part.split("-")[:4]))
    return names


@pytest.mark.filterwarnings("ignore:the labels of .* run in class order:UserWarning")
def test_a_run_resumed_at_another_world_size_through_another_endpoint_fetches_only_uncached_shards(
        s3_env, s3_server, s3_sharded_set):
    def loader(url, **options):
        return fastload.DataLoader(url, batch_size=4, shuffle=True, seed=3, shard_window=1,
                                   transform=SMALL, device="cpu", strict=True, **options)

    with rank_zero_of_two():
        first = loader(s3_sharded_set)  # the endpoint of the environment (AWS_ENDPOINT_URL)
        batches = iter(first)
        for _ in range(2):
            next(batches)
        state = first.state_dict()
        assert state["world_size"] == 2
        del batches
        reader = first.dataset.reader  # the rest prefetched, and its downloads settled
        assert all(f.result(timeout=60) for f in reader.prefetch(range(reader.num_shards)))
        reader.close()
    installed = {shard_names([p]).pop(): p.parent for p in s3_env.rglob(MARKER)}
    last = f"shard-{int(state['shard_order'][-1]):05d}-of-00003"  # the epoch's last window
    assert len(installed) == 3
    shutil.rmtree(installed.pop(last))  # evicted since (another job needed the room)
    cached = set(installed)

    spelling = s3_sharded_set.replace("s3://", "s3a://") + "/"
    with CountingRelay(s3_server) as relay:
        second = loader(spelling, storage_options={"endpoint_url": relay.endpoint})
        second.load_state_dict(state)
        rest = [i for _ in second for i in second.last_batch_indices]
    reader = second.dataset.reader
    read = {reader.entries[reader.locate(i)[0]].path for i in rest}
    assert cached | {last} == read  # the resumed run read the shards the cache held...
    assert shard_names(relay.gets()) == {last}  # ...and fetched only the one it lacked
    assert reader.cache.downloads == 1
    assert relay.gets("train.set/labels.i32") == []  # nor the set's labels
    assert len(relay.gets("/fastload-set.json")) == 1  # one GET of the manifest


def test_a_copy_of_the_set_under_another_prefix_reads_the_cached_shards(
        s3_env, s3_server, s3_sharded_set, sharded_set):
    from seaweed import upload_tree

    fastload.LMDBDataset(s3_sharded_set).reader.record(0)  # shard 0 into the cache
    copy = upload_tree(s3_server, sharded_set, "resume/copy.set")
    with CountingRelay(s3_server) as relay:
        reader = fastload.LMDBDataset(copy, storage_options={
            "endpoint_url": relay.endpoint}).reader
        assert reader.record(0) == fastload.LMDBDataset(sharded_set).reader.record(0)
    assert shard_names(relay.gets()) == set() and reader.cache.downloads == 0
    assert relay.gets("copy.set/labels.i32") == []  # the same manifest: its labels too
    assert [p.parent.name[:20] for p in s3_env.rglob(MARKER)] == ["shard-00000-of-00003"]

