"""The `fastload` logger (issue 39, item 6): debug records for the plan, the shard cache,
downloads and retries, and convert's keep/resume/restart decisions, under loggers named
after their modules (children of "fastload").

As every Python library's, its records propagate to whatever logging the application sets
up (a root logger at DEBUG gets them); with logging left unconfigured nothing is printed:
fastload's NullHandler keeps Python's last-resort handler quiet. `fastload -v` shows them.
Real loaders, real LMDB files, a real cache folder; no mocks.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest


def _messages(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(prefix)]


@pytest.mark.slow
def test_unconfigured_logging_prints_nothing_from_a_loader_and_a_convert(synth_root, tmp_path):
    code = f"""
import fastload, torchvision.transforms as T
from fastload.data.convert.folder import convert_folder
convert_folder({str(synth_root / "val")!r}, {str(tmp_path / "db")!r}, workers=1, progress=False)
loader = fastload.DataLoader({str(tmp_path / "db")!r}, batch_size=4,
                             transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
assert sum(1 for _ in loader) == 4
import logging
assert logging.getLogger("fastload").getEffectiveLevel() == logging.WARNING
print("done")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n" and done.stderr == ""


def test_a_root_logger_at_debug_gets_the_plan_of_each_loader(synth_lmdb, caplog):
    import torchvision.transforms as T

    import fastload

    caplog.set_level(logging.DEBUG)  # the application's root logger, as basicConfig sets it
    loader = fastload.DataLoader(synth_lmdb, batch_size=4,
                                 transform=T.Compose([T.Resize(40), T.CenterCrop(32),
                                                      T.ToTensor()]))
    loader.close()
    records = [r for r in caplog.records if r.name == "fastload.loader.dataloader"]
    assert len(records) == 1 and records[0].levelno == logging.DEBUG
    assert "plan of a DataLoader over" in records[0].getMessage()
    assert "DALI on cpu" in records[0].getMessage()  # what runs where, from loader.plan
    with pytest.warns(fastload.FallbackWarning):
        fastload.DataLoader(synth_lmdb, batch_size=None, transform=T.ToTensor())
    assert "fallback: batch_size=None" in _messages(caplog, "fastload.loader")[-1]


def test_cache_records_say_miss_install_eviction_and_hit(tmp_path, caplog):
    from fastload.data.remote.cache import ShardCache

    caplog.set_level(logging.DEBUG, logger="fastload")
    cache = ShardCache(tmp_path / "cache", max_bytes=250)
    store = cache.shard_store()

    def fill(part, files):
        for name, size in files.items():
            (part / name).write_bytes(b"x" * size)

    for name in ("s0", "s0", "s1"):
        assert cache.acquire(store / name, {"v": name}, lambda: {"a.bin": 200}, fill,
                             keep=False) is True
    got = _messages(caplog, "fastload.data.remote.cache")
    assert got[0].startswith("cache miss: s0 (1 files, 200 bytes)")
    assert got[1].startswith("cache: s0 fetched and installed")
    assert got[2].startswith("cache hit: s0")
    assert got[3].startswith("cache miss: s1")
    assert got[4].startswith("cache eviction: s0 (200 bytes, least recently used) to make "
                             "room for s1")
    assert got[5].startswith("cache: s1 fetched and installed")


def test_retry_records_each_try_its_backoff_and_the_give_up(caplog):
    from fastload.data.remote.fetch import RemoteError, Retry, retrying

    caplog.set_level(logging.DEBUG, logger="fastload")
    tries = []

    def flaky():
        tries.append(1)
        raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(RemoteError):
        retrying(flaky, "s3://bucket/train.set/shard-0/data.mdb", "downloading",
                 Retry(attempts=2, first_backoff_s=0.01, budget_s=5))
    got = _messages(caplog, "fastload.data.remote.fetch")
    assert len(tries) == 2
    assert got[0] == "downloading s3://bucket/train.set/shard-0/data.mdb: try 1 of 2"
    assert "try 1 failed (ConnectionResetError" in got[1] and "retrying in 0.0" in got[1]
    assert got[2].endswith("try 2 of 2")
    assert "giving up after 2 tries" in got[3]

    caplog.clear()
    with pytest.raises(FileNotFoundError):
        retrying(lambda: (_ for _ in ()).throw(FileNotFoundError("no such key")),
                 "s3://bucket/missing", "reading", Retry(attempts=3))
    got = _messages(caplog, "fastload.data.remote.fetch")
    assert got[-1] == "reading s3://bucket/missing: FileNotFoundError is not transient: not retried"


def test_convert_records_fresh_start_restart_and_kept_shards(synth_root, tmp_path, caplog):
    from fastload.data.convert.folder import convert_folder

    caplog.set_level(logging.DEBUG, logger="fastload")
    dst = tmp_path / "db"
    convert_folder(synth_root / "val", dst, workers=1, progress=False)
    assert _messages(caplog, "fastload.data.convert") == [f"convert {dst}: fresh start"]
    caplog.clear()
    convert_folder(synth_root / "val", dst, workers=1, progress=False, overwrite=True)
    assert _messages(caplog, "fastload.data.convert")[0].startswith(
        f"convert {dst}: replace (overwrite=True writes the replacement of a finished database "
        "of 16 records beside it)")

    caplog.clear()
    sharded = tmp_path / "set"
    convert_folder(synth_root / "val", sharded, workers=1, progress=False, shards=2,
                   shard_index=0)
    convert_folder(synth_root / "val", sharded, workers=1, progress=False, shards=2)
    kept = [m for m in _messages(caplog, "fastload.data.convert") if ": keep (" in m]
    assert len(kept) == 1 and "shard" in kept[0], _messages(caplog, "fastload.data.convert")


def test_fastload_v_shows_the_records_on_stderr_and_default_does_not(synth_root, tmp_path):
    def convert(*flags, dst):
        return subprocess.run([sys.executable, "-m", "fastload", *flags, "convert",
                               str(synth_root / "val"), str(dst), "--workers", "1",
                               "--no-progress"], capture_output=True, text=True, timeout=300)

    quiet = convert(dst=tmp_path / "a")
    assert quiet.returncode == 0 and "DEBUG" not in quiet.stderr
    loud = convert("-v", dst=tmp_path / "b")
    assert loud.returncode == 0, loud.stderr
    assert f"DEBUG fastload.data.convert.destination: convert {tmp_path / 'b'}: fresh start" \
        in loud.stderr
