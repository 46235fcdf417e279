"""`convert --engine ray` on a real local Ray cluster (started once for this module): the set
equals the serial one, a task SIGKILLed mid-shard is retried by Ray into the same set, and a
driver killed mid-run is finished by the same command run again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
psutil = pytest.importorskip("psutil")

from fastload.data.convert.folder import convert_folder  # noqa: E402
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name  # noqa: E402
from fastload.data.sets.verify import verify_set  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray of 2 CPUs on loopback; its address, for drivers in other processes."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             _node_ip_address="127.0.0.1")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.mark.slow
def test_ray_gives_the_serial_set(ray_cluster, engine_source, serial_engine_set, same_set,
                                  tmp_path):
    dst = tmp_path / "set"
    report = convert_folder(engine_source, dst, shards=4, progress=False, engine="ray")
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    assert report.manifest["num_shards"] == 4 and report.finished_shards == []
    same_set(dst, serial_engine_set)
    assert verify_set(dst, full=True).ok
    again = convert_folder(engine_source, tmp_path / "set2", shards=4, progress=False,
                           engine="ray", engine_address=ray_cluster)  # joined, not restarted
    assert again.manifest["count"] == 24


def _attempt_writer(dst, name: str):
    """The Ray worker process writing shard ``name``'s attempt folder, once one is."""
    for proc in psutil.process_iter(["cmdline"]):
        if not any("ray::" in part for part in proc.info["cmdline"] or []):
            continue
        try:
            if any(f"/.attempt-{name}-" in f.path and f.path.startswith(str(dst))
                   for f in proc.open_files()):
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


@contextlib.contextmanager
def sigkill_when_writing(folder, name: str):
    """SIGKILL, once, the Ray worker writing shard ``name``'s attempt folder in ``folder``
    as soon as one is seen (within 120 s); yields the list of the pids killed."""
    killed: list[int] = []
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed and not done.is_set():
            proc = _attempt_writer(folder, name)
            if proc is not None:
                proc.send_signal(signal.SIGKILL)
                killed.append(proc.pid)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield killed
    finally:
        done.set()
        watcher.join()


@pytest.mark.slow
def test_a_task_sigkilled_mid_shard_is_retried_into_the_serial_set(
        ray_cluster, slow_engine_source, same_set, tmp_path):
    src, serial = slow_engine_source
    dst = tmp_path / "set"
    with sigkill_when_writing(dst, shard_name(3, 4)) as killed:
        report = convert_folder(src, dst, shards=4, progress=False, max_side=64,
                                commit_every=1, engine="ray")
    assert killed, "shard 3's worker was never seen writing"
    assert report.manifest["num_shards"] == 4
    assert sorted(p.name for p in dst.iterdir() if p.name.startswith("shard-")) == [
        shard_name(k, 4) for k in range(4)]
    same_set(dst, serial)


@pytest.mark.slow
def test_the_same_command_after_the_driver_is_killed_finishes_the_set(
        ray_cluster, slow_engine_source, same_set, tmp_path):
    src, serial = slow_engine_source
    dst = tmp_path / "set"
    command = [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
               "--shards", "4", "--max-side", "64", "--commit-every", "1", "--no-progress",
               "--engine", "ray", "--engine-address", ray_cluster]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            p.name.startswith(".attempt-shard-00003") for p in dst.glob(".attempt-*")):
        time.sleep(0.01)
    os.kill(driver.pid, signal.SIGKILL)  # mid-run: shard 3 (slow) has started, not finished
    driver.wait(timeout=60)
    assert not (dst / MANIFEST_FILE).exists()
    report = convert_folder(src, dst, shards=4, progress=False, max_side=64, commit_every=1,
                            engine="ray")
    assert report.manifest["count"] == 24
    same_set(dst, serial)


# The same on a URL destination: the real S3 server of the remote tests (SeaweedFS). The
# driver passes the server's storage options, which travel with each task to its worker.

@pytest.fixture()
def s3_dst(s3_options, download_set, tmp_path):
    """``(url_of(name), storage options, staging folder, download(url))``."""
    from seaweed import BUCKET

    return ((lambda name: f"s3://{BUCKET}/ray/{name}"), s3_options, tmp_path / "staging",
            download_set)


@pytest.mark.slow
def test_a_task_sigkilled_mid_shard_on_s3_is_retried_into_the_serial_set(
        ray_cluster, slow_engine_source, same_set, s3_dst):
    url_of, options, staging, download = s3_dst
    src, serial = slow_engine_source
    url = url_of("killed.set")
    with sigkill_when_writing(staging, shard_name(3, 4)) as killed:
        report = convert_folder(src, url, shards=4, progress=False, max_side=64,
                                commit_every=1, engine="ray", storage_options=options,
                                staging=staging)
    assert killed, "shard 3's worker was never seen writing"
    assert report.manifest["num_shards"] == 4
    same_set(download(url), serial)  # exactly the 4 shards, no partial, the same manifest
    assert not list(staging.glob(".attempt-*"))
    assert verify_set(url, full=True, storage_options=options).ok


@pytest.mark.slow
def test_the_same_call_after_the_driver_is_killed_finishes_the_set_on_s3(
        ray_cluster, slow_engine_source, same_set, s3_dst):
    url_of, options, staging, download = s3_dst
    src, serial = slow_engine_source
    url = url_of("driver.set")
    call = (f"from fastload.data.convert.folder import convert_folder; "
            f"convert_folder({str(src)!r}, {url!r}, shards=4, progress=False, max_side=64, "
            f"commit_every=1, engine='ray', engine_address={ray_cluster!r}, "
            f"storage_options={options!r}, staging={str(staging)!r})")
    driver = subprocess.Popen([sys.executable, "-c", call], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(staging.glob(".attempt-shard-00003*")):
        time.sleep(0.01)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    report = convert_folder(src, url, shards=4, progress=False, max_side=64, commit_every=1,
                            engine="ray", storage_options=options, staging=staging)
    assert report.manifest["count"] == 24
    same_set(download(url), serial)
