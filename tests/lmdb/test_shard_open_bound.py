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
