"""Elastic resume under real torchrun (gloo, CPU) over a 3-shard set: a 3-rank job stopped
mid-epoch is finished by a 2-rank job from one rank's state, and 2 -> 3, every sample once;
the shard-aware order of the 3-rank job is finished by one process."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import fastload
from fastload.loader.sampling import EpochSampler

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "set_worker.py"
N, BATCH, STOP = 61, 4, 2


def torchrun(ranks: int, out: pathlib.Path, *args: str, env: dict | None = None) -> list[dict]:
    out.mkdir()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={ranks}", str(SCRIPT), *args[:1], str(out),
                           *args[1:]], capture_output=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


@pytest.fixture(scope="module")
def stopped(sharded_set, tmp_path_factory):
    """``stopped(W)``: a W-rank job stopped after STOP batches of epoch 0 (run once per W)."""
    runs = {}

    def run(world: int):
        if world not in runs:
            out = tmp_path_factory.mktemp("elastic") / f"stop{world}"
            runs[world] = out, torchrun(world, out, str(sharded_set), "stop", str(STOP))
        return runs[world]

    return run


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second"), [(3, 2), (2, 3)])
def test_a_job_stopped_mid_epoch_finishes_at_another_world_size_exactly_once(
        sharded_set, stopped, tmp_path, first, second):
    out, records = stopped(first)
    before = [i for rec in records for i in rec["epochs"][0]]
    assert len(before) == len(set(before)) == STOP * BATCH * first
    resumed = torchrun(second, tmp_path / "resume", str(sharded_set), "resume",
                       str(out / f"state{first - 1}.pt"))  # any rank's state: take the last
    after = [i for rec in resumed for i in rec["epochs"][0]]
    assert not set(before) & set(after)
    assert set(before) | set(after) == set(range(N))
    assert len(after) - len(set(after)) <= second - 1  # the resumed run's padding only
    for rank, rec in enumerate(resumed):  # the next epoch: the plain order at the new size
        sampler = EpochSampler(N, shuffle=True, seed=5, num_replicas=second, rank=rank)
        sampler.set_epoch(1)
        assert rec["epochs"][1] == sampler.indices().tolist()


def test_a_user_distributed_sampler_state_is_refused_at_another_world_size(
        sharded_set, stopped):
    import torchvision.transforms as T
    from torch.utils.data import DistributedSampler

    out, _ = stopped(3)
    state = torch.load(out / "user_sampler_state.pt", weights_only=True)
    dataset = fastload.LMDBDataset(sharded_set, T.Compose([T.Resize((8, 8)), T.ToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=4, device="cpu", strict=True,
                                 sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
    with pytest.raises(ValueError, match="world_size=3 job.*cannot re-shard"):
        loader.load_state_dict(state)


def test_the_shard_order_stopped_mid_epoch_finishes_at_another_world_size_exactly_once(
        sharded_set, stopped):
    import torchvision.transforms as T

    from fastload.loader.shard_order import ShardShuffleSampler

    out, records = stopped(3)  # the same ranks also ran the shard order (set_worker.py)
    before = [i for rec in records for i in rec["shard_epochs"][0]]
    reader = fastload.LMDBDataset(sharded_set).reader
    # 24 samples of 20-sample shards read one shard at a time: from two shards, not three
    assert len({reader.locate(i)[0] for i in before}) == 2
    with pytest.warns(UserWarning, match="class order"):  # converted from an ImageFolder
        loader = fastload.DataLoader(str(sharded_set), batch_size=BATCH, shuffle=True, seed=5,
                                     order="shards", shard_window=1, device="cpu", strict=True,
                                     transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
    loader.load_state_dict(torch.load(out / "shard_state0.pt", weights_only=True))
    epochs = []
    for _ in range(2):  # the rest of the saved epoch, then the next one
        epochs.append([i for _batch in loader for i in loader.last_batch_indices])
    assert len(before) == len(set(before)) and not set(before) & set(epochs[0])
    assert sorted(before + epochs[0]) == list(range(N))  # every sample once, at world size 1
    sampler = ShardShuffleSampler(reader, 1, 0, True, 5, shard_window=1)
    sampler.set_epoch(1)
    assert epochs[1] == list(sampler)  # the next epoch: the shard order at the new size
