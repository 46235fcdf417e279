"""Shard leases within one process and across processes, on a real S3 server (SeaweedFS):
a process never waits on a lock it holds itself, prefetch threads never keep it alive, and
every lease ends released (issue 43)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import fastload
from fastload.data.remote import leases

SHARD1 = "shard-00001-of-00003"


def lock_file(reader, shard: int) -> Path:
    folder = Path(reader.entries[shard].folder)
    return folder.parent / ".locks" / f"{folder.name}.lock"


def flocks_of_this_process(path: Path) -> int:
    """How many ``flock`` locks this process holds on the file ``path`` (``/proc/locks``)."""
    inode = os.stat(path).st_ino
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields or fields[1] != "FLOCK":
            continue  # a waiter's line, or another kind of lock
        if int(fields[4]) == os.getpid() and int(fields[5].rsplit(":", 1)[1]) == inode:
            count += 1
    return count


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with this test's environment (the server, the cache);
    a child still running after ``timeout`` seconds fails the test (and is killed)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture()
def holder():
    """Start a process that holds lock files exclusively (as another rank's download of
    that shard would), or with ``shared=True`` shared (as another rank reading it would),
    until the test ends."""
    started: list[subprocess.Popen] = []

    def hold(*paths: Path, shared: bool = False) -> None:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
        code = ("import fcntl, os, sys, time\n"
                "mode = getattr(fcntl, sys.argv[1])\n"
                "for p in sys.argv[2:]:\n"
                "    fcntl.flock(os.open(p, os.O_RDWR | os.O_CREAT), mode)\n"
                "print('held', flush=True)\n"
                "time.sleep(600)\n")
        mode = "LOCK_SH" if shared else "LOCK_EX"
        child = subprocess.Popen([sys.executable, "-c", code, mode, *map(str, paths)],
                                 stdout=subprocess.PIPE, text=True)
        started.append(child)
        assert child.stdout.readline().strip() == "held"

    yield hold
    for child in started:
        child.kill()
        child.wait(timeout=30)


def test_two_readers_of_one_shard_in_one_process_share_one_lock(s3_env, s3_sharded_set):
    first = fastload.LMDBDataset(s3_sharded_set).reader
    second = fastload.LMDBDataset(s3_sharded_set).reader
    start = first.entries[1].start
    assert first.record(start) == second.record(start)
    lock = lock_file(first, 1)
    assert flocks_of_this_process(lock) == 1  # one description: it never waits on itself
    assert leases.held_here()[str(lock)] == 2
    first.close()
    assert leases.held_here()[str(lock)] == 1 and second.record(start + 1)
    second.close()
    assert str(lock) not in leases.held_here() and flocks_of_this_process(lock) == 0


def test_a_prefetch_of_a_shard_this_process_leases_reuses_the_lease(s3_env, s3_sharded_set):
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    reader.record(reader.entries[1].start)  # leased here
    (future,) = reader.prefetch([1])
    assert future.result(timeout=30) is True
    assert flocks_of_this_process(lock_file(reader, 1)) == 1
    assert reader.cache.downloads == 1
    reader.close()


def test_a_prefetch_of_a_leased_shard_changed_on_disk_raises_instead_of_waiting_on_itself(
        s3_env, s3_sharded_set):
    code = f"""
        import glob, os
        from fastload.data.remote import open_any
        reader = open_any({s3_sharded_set!r})
        reader.record(reader.entries[1].start)  # leased by this process
        (data,) = glob.glob(os.path.join({str(s3_env)!r}, "shards", "{SHARD1}-*", "data.mdb"))
        with open(data, "ab") as handle:
            handle.write(b"x")  # its files no longer have their installed sizes
        (future,) = reader.prefetch([1])
        print(type(future.exception(timeout=30)).__name__, future.exception())
        """
    done = run_child(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OSError") and "changed on disk while this process" in \
        done.stdout


@pytest.mark.slow
def test_a_process_exits_at_once_while_its_prefetch_waits_for_another_process(
        s3_env, s3_sharded_set, holder):
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    holder(lock_file(reader, 1), lock_file(reader, 2))  # "another rank" fetching them
    code = f"""
        import fastload
        from torchvision import transforms as T
        loader = fastload.DataLoader({s3_sharded_set!r}, batch_size=4, shuffle=False,
                                     shard_window=1, strict=True,
                                     transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
        for step, (images, labels) in enumerate(loader):
            if step == 2:
                break  # shard 0 read; the prefetch of shards 1 and 2 waits on their locks
        print("broke out", flush=True)
        """
    done = run_child(code, timeout=90)  # the old prefetch pool kept it alive for 10 minutes
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "broke out"


def test_an_abandoned_iterator_stops_its_prefetches_waiting_on_another_process(
        s3_env, s3_sharded_set, holder):
    import threading
    import time

    from torchvision import transforms as T

    reader = fastload.LMDBDataset(s3_sharded_set).reader
    holder(lock_file(reader, 1), lock_file(reader, 2))  # "another rank" fetching them
    loader = fastload.DataLoader(s3_sharded_set, batch_size=4, shuffle=False, shard_window=1,
                                 transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]))
    it = iter(loader)
    for _ in range(3):
        next(it)  # shard 0 read; the prefetch of shards 1 and 2 waits on their locks
    it.close()
    deadline = time.monotonic() + 10  # far below the prefetch's own wait for a lock
    while time.monotonic() < deadline and any(
            t.name.startswith("fastload-prefetch") for t in threading.enumerate()):
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("fastload-prefetch")]


def test_a_prefetch_waiting_on_another_process_gives_up_naming_the_shard(
        s3_env, s3_sharded_set, holder, monkeypatch):
    from fastload.data.remote import sets

    monkeypatch.setattr(sets, "PREFETCH_WAIT_S", 0.5)
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    holder(lock_file(reader, 2))
    (future,) = reader.prefetch([2])
    name = Path(reader.entries[2].folder).name
    with pytest.raises(TimeoutError, match=f"waiting for the shard '{name}'.*another process"):
        future.result(timeout=30)
    reader.close()


def test_closing_a_reader_cancels_its_queued_prefetches(s3_env, s3_sharded_set, holder):
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    holder(lock_file(reader, 0), lock_file(reader, 1), lock_file(reader, 2))
    futures = reader.prefetch([0, 1, 2])
    reader.close()
    for future in futures:  # not started: cancelled; under way: stopped waiting
        assert future.cancelled() or isinstance(future.exception(timeout=30), leases.Cancelled)


STRESS = """
    import random, sys, threading, warnings
    from fastload.data.remote import leases, open_any
    warnings.simplefilter("ignore")
    url, seed = sys.argv[1], int(sys.argv[2])
    errors = []

    def work(k):
        rng = random.Random(seed * 10 + k)
        reader = open_any(url, cache_bytes={bound})
        try:
            for _ in range(25):
                shard = rng.randrange(reader.num_shards)
                if rng.random() < 0.3:
                    reader.prefetch([rng.randrange(reader.num_shards)])
                reader.record(reader.entries[shard].start + rng.randrange(5))
                if rng.random() < 0.7:
                    reader.release_shard(shard)
        except BaseException as exc:
            errors.append(repr(exc))
        finally:
            reader.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("errors", errors, "held", leases.held_here(), flush=True)
    """


def test_200_acquires_from_4_threads_in_2_processes_with_evictions_end_with_every_lease_released(
        s3_env, s3_sharded_set, sharded_set):
    one_shard = sum(f.stat().st_size for f in (sharded_set / SHARD1).iterdir())
    code = textwrap.dedent(STRESS.format(bound=int(one_shard * 1.5)))
    children = [subprocess.Popen([sys.executable, "-c", code, s3_sharded_set, str(seed)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for seed in (1, 2)]
    outputs = [child.communicate(timeout=240) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "errors [] held {}", out
    for lock in (s3_env / "shards" / ".locks").iterdir():  # nobody holds any shard now
        fd = leases.try_exclusive(lock)
        assert fd is not None, lock
        leases.close_lock(fd)
    assert not list((s3_env / "shards").glob(".part-*"))


def test_a_shard_another_process_installs_while_this_one_waits_to_fetch_it_is_read_at_once(
        s3_env, s3_sharded_set, sharded_set, holder, tmp_path, monkeypatch):
    """A process that found the shard missing waits to fetch it; another process installs it
    meanwhile and reads it (holding it shared for as long as it does): the waiting process
    reads that copy, instead of waiting for the exclusive lock until the reader closes it."""
    from fastload.data.remote import cache, cache_layout

    monkeypatch.setattr(cache, "LOCK_WAIT_S", 20.0)
    elsewhere = fastload.LMDBDataset(s3_sharded_set, cache_dir=tmp_path / "elsewhere").reader
    elsewhere.record(elsewhere.entries[1].start)  # the other process's download, done aside
    downloaded = Path(elsewhere.entries[1].folder)
    elsewhere.close()
    reader = fastload.LMDBDataset(s3_sharded_set).reader
    target = Path(reader.entries[1].folder)
    holder(lock_file(reader, 1), shared=True)  # the other process reads the shard
    found_missing = threading.Event()
    valid = cache_layout.valid

    def watched_valid(folder, fingerprint) -> bool:
        ok = valid(folder, fingerprint)
        if not ok and Path(folder) == target:
            found_missing.set()
        return ok

    monkeypatch.setattr(cache_layout, "valid", watched_valid)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(reader.record(reader.entries[1].start)))
    thread.start()
    assert found_missing.wait(30)  # it looked under the shared lock and will fetch the shard
    os.rename(downloaded, target)  # the other process's download lands in this cache
    thread.join(10)
    assert not thread.is_alive(), "still waiting for the exclusive lock"
    assert got == [fastload.LMDBDataset(sharded_set).reader.record(reader.entries[1].start)]
    assert reader.cache.downloads == 0
    reader.close()
