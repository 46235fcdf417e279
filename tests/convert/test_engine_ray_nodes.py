"""`convert --engine ray` on a two-node Ray cluster started on this machine as a real one is:
``ray start --head`` and a second ``ray start --address`` with its own temp dir, 1 CPU each.
The driver is the ``fastload convert`` command in a process of its own; the set equals the
serial one, verifies, and its shard tasks ran on both nodes.

Ray 2.x rewrites ``--node-ip-address 127.0.0.1`` (and an ``--address`` of 127.0.0.1) to the
machine's own address, and its GCS and raylets listen on every interface: the nodes therefore
run with token authentication (a random ``RAY_AUTH_TOKEN`` in the environment of every
process of the test), never with the user's ``~/.ray/auth_token``. The nodes are stopped by
their process sessions (each ``ray start`` runs in a new one, which every process it starts
inherits, Ray's workers included): ``ray stop`` would stop every Ray of this user, other
tests' local clusters under pytest-xdist among them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
psutil = pytest.importorskip("psutil")

from fastload.data.sets.verify import verify_set  # noqa: E402

RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]
TASK_NAME = "fastload_convert_shard"  # the name fastload.data.convert.engines.on_ray gives
TASK_MARK = f":task_name:{TASK_NAME}"  # what a Ray worker writes to its log per task it runs

# Polls the cluster from a process of its own (this one never calls ray.init) until both
# nodes are alive and their CPUs are free; prints one line per node: id, CPUs, temp dir.
_WAIT_FOR_NODES = """
import json, sys, time, ray
ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[2])
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) == 2 and ray.available_resources().get("CPU") == 2:
        break
    if time.monotonic() > deadline:
        sys.exit(f"alive nodes after {sys.argv[2]} s: {nodes}")
    time.sleep(0.2)
for n in nodes:
    print(json.dumps({"id": n["NodeID"], "cpus": n["Resources"].get("CPU"),
                      "socket": n["RayletSocketName"]}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class TwoNodes:
    """A head and a second node of one Ray cluster on this machine."""

    root: Path  # holds head/ and node2/: each node's --temp-dir and its `ray start` log
    address: str  # 127.0.0.1:<GCS port>, for --engine-address
    env: dict  # the environment of every process that talks to the cluster (the token)
    sessions: list[int] = field(default_factory=list)  # one per `ray start`
    nodes: dict = field(default_factory=dict)  # node id -> its temp dir ("head", "node2")

    def ray_start(self, name: str, *args: str) -> None:
        folder = self.root / name
        folder.mkdir()
        log = folder.with_suffix(".log")
        with open(log, "wb") as out:  # a file: Ray's daemons may keep what they inherit
            proc = subprocess.Popen(
                [*RAY_CLI, "start", *args, "--temp-dir", str(folder), "--num-cpus", "1",
                 "--dashboard-agent-listen-port", str(_free_port()), "--disable-usage-stats",
                 "--log-style", "record", "--log-color", "false"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.sessions.append(proc.pid)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "timeout"
        assert code == 0, f"ray start {name} ({code}):\n{log.read_text()[-3000:]}"

    def processes(self, since: float) -> list:
        """Every live process of the nodes' sessions (started after ``since``)."""
        found = []
        for proc in psutil.process_iter(["create_time"]):
            try:
                if os.getsid(proc.pid) in self.sessions and \
                        proc.info["create_time"] >= since - 1:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    def stop(self, since: float) -> None:
        """Stop the nodes' processes only, in `ray stop`'s order: raylets, the rest, GCS;
        SIGTERM, then SIGKILL what is left after a few seconds."""
        procs = self.processes(since)

        def named(proc) -> str:
            try:
                return proc.name()
            except psutil.Error:
                return ""

        names = {proc: named(proc) for proc in procs}
        for group in ([p for p in procs if names[p] == "raylet"],
                      [p for p in procs if names[p] not in ("raylet", "gcs_server")],
                      [p for p in procs if names[p] == "gcs_server"]):
            for proc in group:
                try:
                    proc.send_signal(signal.SIGTERM)
                except psutil.Error:
                    pass
            _, alive = psutil.wait_procs(group, timeout=5)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=5)

    def idle_workers(self, since: float) -> dict:
        """Node temp dir name ("head", "node2") -> its raylet's idle Python workers."""
        found = {}
        for proc in self.processes(since):
            try:
                if proc.name() != "raylet":
                    continue
                folder = next(arg.split("=", 1)[1] for arg in proc.cmdline()
                              if arg.startswith("--temp_dir="))
                found[Path(folder).name] = sum(
                    1 for child in proc.children() if child.cmdline()[:1] == ["ray::IDLE"])
            except (psutil.Error, StopIteration):
                continue
        return found

    def tasks_per_node(self) -> dict:
        """Node id -> how many shard tasks its workers started (from their logs)."""
        return {node: sum(log.read_text(errors="replace").count(TASK_MARK)
                          for log in (self.root / folder).rglob("worker-*.out"))
                for node, folder in self.nodes.items()}


def _both_warm(idle: dict) -> bool:
    return idle.get("head", 0) >= 1 and idle.get("node2", 0) >= 1


@pytest.fixture(scope="module")
def two_nodes():
    """A head node and a second node on this machine (``ray start``, 1 CPU each, no
    dashboard), both alive; stopped, and their temp dirs removed, at the end."""
    since = time.time()
    # short: Ray's unix sockets live under the temp dir (107 characters at most)
    root = Path(tempfile.mkdtemp(prefix="flray-", dir="/tmp" if os.path.isdir("/tmp")
                                 else None))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
               RAY_USAGE_STATS_ENABLED="0",
               RAY_enable_worker_prestart="1")  # each raylet starts 1 idle worker per CPU
    port = _free_port()
    cluster = TwoNodes(root=root, address=f"127.0.0.1:{port}", env=env)
    try:
        cluster.ray_start("head", "--head", "--node-ip-address", "127.0.0.1", "--port",
                          str(port), "--include-dashboard=false", "--dashboard-port",
                          str(_free_port()))
        cluster.ray_start("node2", "--address", cluster.address)
        waited = subprocess.run([sys.executable, "-c", _WAIT_FOR_NODES, cluster.address, "60"],
                                env=env, capture_output=True, text=True, timeout=120)
        assert waited.returncode == 0, waited.stderr[-3000:]
        for line in waited.stdout.splitlines():
            node = json.loads(line)
            assert node["cpus"] == 1, node  # one shard task at a time on each node
            folder = Path(node["socket"]).relative_to(root).parts[0]
            cluster.nodes[node["id"]] = folder
        assert sorted(cluster.nodes.values()) == ["head", "node2"], cluster.nodes
        deadline = time.monotonic() + 60  # both nodes warm: see the test's docstring
        while not _both_warm(idle := cluster.idle_workers(since)) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert _both_warm(idle), f"idle Ray workers per node: {idle}"
        yield cluster
    finally:
        cluster.stop(since)
        left = cluster.processes(since)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"Ray processes left behind: {left}"


@pytest.mark.slow
def test_a_two_node_cluster_gives_the_serial_set_with_shards_on_both_nodes(
        two_nodes, slow_engine_source, same_set, tmp_path):
    """Both nodes run shard tasks, deterministically enough: each node has 1 CPU and an idle
    worker already started (the fixture waits for both), each shard task asks for 1 CPU
    (on_ray's ``num_cpus``) and the driver submits the 4 tasks at once. The driver joins the
    head, which gives the first task its one CPU until the task returns; the next task's
    lease is spilled to the second node, whose free CPU and warm worker take it at once,
    while the head's worker is still importing fastload and converting its shard. (With a
    cold worker on the second node only, the head's warm one ran all 4 shards while the
    second node started a worker: 2 runs in 12 on a loaded 2-core machine.)"""
    src, serial = slow_engine_source
    dst = tmp_path / "set"
    command = [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
               "--shards", "4", "--max-side", "64", "--no-progress",
               "--engine", "ray", "--engine-address", two_nodes.address]
    done = subprocess.run(command, env=two_nodes.env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "24 records in 4 shards" in done.stdout + done.stderr
    same_set(dst, serial)
    assert verify_set(dst, full=True).ok
    tasks = two_nodes.tasks_per_node()
    assert sum(tasks.values()) >= 4, tasks  # a retried task may start twice
    assert all(count >= 1 for count in tasks.values()), f"shard tasks per node: {tasks}"
