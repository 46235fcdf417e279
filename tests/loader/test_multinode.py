"""Two torchrun agents on this machine (--nnodes 2, c10d rendezvous on 127.0.0.1), 2
processes each (gloo), over a 3-shard set: every index once per epoch across the 4 ranks."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
from collections import Counter

import pytest

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "set_worker.py"
NODES, PER_NODE, N = 2, 2, 61


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_agents_of_two_ranks_see_every_index_once_per_epoch(sharded_set, tmp_path):
    port = free_port()
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", f"--nnodes={NODES}",
         f"--node_rank={node}", f"--nproc_per_node={PER_NODE}", "--rdzv-backend=c10d",
         f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=fastload-multinode",
         "--max-restarts=0", str(SCRIPT), str(sharded_set), str(tmp_path), "epochs", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for node in range(NODES)]
    logs = [agent.communicate(timeout=300)[0].decode(errors="replace") for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], logs
    world = NODES * PER_NODE
    records = sorted((json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)),
                     key=lambda rec: rec["rank"])
    assert [rec["world_size"] for rec in records] == [world] * world
    per_rank = -(-N // world)  # 16: the order is padded by wrapping round to 64
    orders = []
    for epoch in range(2):
        shards = [rec["epochs"][epoch] for rec in records]
        assert [len(s) for s in shards] == [per_rank] * world
        order = [shards[k % world][k // world] for k in range(per_rank * world)]
        assert sorted(set(order)) == list(range(N))
        assert order[N:] == order[: per_rank * world - N]  # the padding rule
        assert max(Counter(order[:N]).values()) == 1
        orders.append(order)
    assert orders[0] != orders[1]  # set_epoch reshuffles the global order
    assert all(rec["opened"] == [0, 1, 2] for rec in records)  # a shuffled rank reads all
