"""A process keeps a bounded number of a sharded set's shards open (issue 41: a global-order
epoch over 100 k shards used to open every shard and fail with "Too many open files").
Real LMDB files, a real lowered RLIMIT_NOFILE in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format.constants import META_FILE
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.manifest import shard_name
from fastload.data.sets.shards import ShardedReader

SHARDS = 40


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("bound_src") / "src"
    rng = np.random.default_rng(1)
    for i in range(2 * SHARDS):
        folder = root / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (8 + i % 5, 12, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    out = tmp_path_factory.mktemp("bound_sets")
    convert_folder(root, out / "set", workers=1, progress=False, shards=SHARDS)
    convert_folder(root, out / "one.lmdb", workers=1, progress=False)
    return out / "set", LMDBDataset(out / "one.lmdb").reader


def _fds_under(folder, name: str = "") -> int:
    """This process's open file descriptors on files under ``folder`` (named ``name``)."""
    root, held = os.path.realpath(folder), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        held += target.startswith(root + os.sep) and target.endswith(name)
    return held


def test_a_shuffled_epoch_keeps_at_most_the_bound_open(sets):
    folder, one = sets
    reader = ShardedReader(folder, max_open_shards=3)
    order = np.random.default_rng(0).permutation(len(reader))
    peak = peak_data = 0
    for _epoch in range(2):  # the second epoch reopens shards that passed their checks
        for i in order:
            data, label, size = reader.image_bytes(int(i))
            assert (bytes(data), label, size) == (bytes(one.image_bytes(int(i))[0]),
                                                  *one.image_bytes(int(i))[1:])
            assert len(reader.opened_shards) <= 3
            peak = max(peak, _fds_under(folder))
            peak_data = max(peak_data, _fds_under(folder, "/data.mdb"))
    assert peak_data == 3  # one per open shard's data.mdb
    assert peak <= 2 * 3 + 1  # and its mapped sidecars, and the set's labels file
    assert bool(reader._checked.all())  # every shard passed its checks once
    reader.close()
    assert reader.opened_shards == [] and _fds_under(folder, "/data.mdb") == 0


def test_a_reopened_shard_is_still_refused_when_it_names_another_shard(sets, tmp_path):
    import shutil

    folder, _ = sets
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    reader = ShardedReader(copy, max_open_shards=1)
    reader.image_bytes(0)  # shard 0 passes its checks
    reader.image_bytes(len(reader) - 1)  # shard 0 closed to stay within the bound
    assert reader.opened_shards == [SHARDS - 1]
    a, b = copy / shard_name(0, SHARDS) / META_FILE, copy / shard_name(1, SHARDS) / META_FILE
    a.write_bytes(b.read_bytes())
    with pytest.raises(ValueError, match="shards swapped"):
        reader.image_bytes(0)


def test_a_bound_must_be_a_positive_int(sets):
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_open_shards"):
            ShardedReader(sets[0], max_open_shards=bad)


def test_an_epoch_over_more_shards_than_open_files_allowed_reads_every_record(sets):
    folder, _ = sets
    script = textwrap.dedent(f"""
        import os, resource
        import numpy as np
        from fastload.data.format.dataset import LMDBDataset
        base = len(os.listdir("/proc/self/fd"))
        limit = base + 30  # fewer than the set's {SHARDS} shards
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        ds = LMDBDataset({str(folder)!r})
        order = np.random.default_rng(0).permutation(len(ds))
        for epoch in range(2):
            for i in order:
                ds.reader.image_bytes(int(i))
        print("ok", ds.reader.max_open_shards, len(ds.reader.opened_shards), limit)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ok, bound, opened, limit = done.stdout.split()
    assert ok == "ok" and int(opened) <= int(bound) <= max(8, int(limit) // 8)


def test_a_record_view_taken_before_its_shard_is_closed_stays_valid(sets):
    import gc

    folder, one = sets
    reader = ShardedReader(folder, max_open_shards=1)
    view, label, _ = reader.image_bytes(0)
    record = reader.record(1)
    reader.image_bytes(len(reader) - 1)  # shard 0 closed to stay within the bound
    gc.collect()
    assert reader.opened_shards == [SHARDS - 1]
    assert _fds_under(folder / shard_name(0, SHARDS), "/data.mdb") == 0  # its map is gone
    assert bytes(view) == bytes(one.image_bytes(0)[0]) and label == one.image_bytes(0)[1]
    assert record == one.record(1)  # copied out of the map: nothing of it is freed


def test_a_shard_being_read_is_closed_when_its_read_ends_not_under_it(sets):
    from fastload.data.sets.open_shards import OpenShards

    folder, _ = sets
    table, reader = OpenShards(), LMDBDataset(folder / shard_name(0, SHARDS)).reader
    reader.open()
    table.add(0, reader)
    table.pin(reader)  # a read of shard 0 is under way on another thread
    assert table.idle_victim(keep=1) is None  # not one to close for room
    table.remove(0)  # released meanwhile (release_shard, close)
    assert len(table) == 0 and reader._env is not None  # out of the table, still open
    assert reader.image_bytes(1)[0]
    table.unpin(reader)  # the read ends: now it is closed
    assert reader._env is None


def test_reads_from_several_threads_give_every_record_within_the_bound(sets):
    import threading

    folder, one = sets
    expected = [(bytes(one.image_bytes(i)[0]), one.image_bytes(i)[1]) for i in range(len(one))]
    reader = ShardedReader(folder, max_open_shards=2)
    threads, errors, peak = 8, [], [0]

    def read(seed: int) -> None:
        try:
            for i in np.random.default_rng(seed).integers(0, len(reader), 400):
                data, label, _ = reader.image_bytes(int(i))
                if (bytes(data), label) != expected[i]:
                    errors.append(f"record {i} differs")
                peak[0] = max(peak[0], len(reader.opened_shards))
        except Exception as exc:  # noqa: BLE001 - the test's finding
            errors.append(repr(exc))

    workers = [threading.Thread(target=read, args=(seed,)) for seed in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: reads interleave at every step
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and not any(worker.is_alive() for worker in workers)
    assert peak[0] <= 2 + threads  # the bound, and the shards being read meanwhile
    assert len(reader.opened_shards) <= 2 and _fds_under(folder, "/data.mdb") <= 2
    reader.close()
    assert _fds_under(folder, "/data.mdb") == 0


def test_a_child_forked_while_another_thread_holds_the_lock_reads(sets):
    import signal
    import threading
    import time

    folder, one = sets
    reader = ShardedReader(folder, max_open_shards=2)
    reader.image_bytes(0)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with reader._open.lock:  # e.g. a loader thread opening a shard at the fork
            held.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: the holder thread does not exist here
        signal.alarm(20)
        ok = all(bytes(reader.image_bytes(i)[0]) == bytes(one.image_bytes(i)[0])
                 for i in (0, 5, len(reader) - 1))
        os._exit(0 if ok else 1)
    done.set()
    holder.join()
    deadline = time.monotonic() + 30
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert waited[0] == pid and os.waitstatus_to_exitcode(waited[1]) == 0
