"""Permanent errors of a remote set fail at once with their own fix, and the retries of the
rest are bounded in time, on a real S3 server (SeaweedFS) and a real socket that never
answers (issue 36): a wrong ``storage_options`` key, a full cache disk (a real tmpfs), a
black-hole server."""

from __future__ import annotations

import shutil
import socket
import threading

import pytest

import fastload
from fastload.data.remote import fetch
from fastload.data.remote.url import RemoteLocation


@pytest.fixture()
def black_hole():
    """A loopback server that accepts every connection and never answers: its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True, name="black-hole").start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for connection in held:
        connection.close()


def test_a_wrong_storage_options_key_is_raised_at_once_naming_storage_options(
        s3_env, s3_sharded_set):
    with pytest.raises(TypeError, match=r"endpointurl.*check the keys of storage_options"):
        fastload.LMDBDataset(s3_sharded_set, storage_options={"endpointurl": "http://x"})


@pytest.mark.slow
def test_a_server_that_never_answers_fails_within_the_stated_bound(s3_env, black_hole,
                                                                   monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", black_hole)
    with pytest.raises(fetch.RemoteError, match=r"failed 2 times in .* s \(the retries' bound: "
                                                r"6 tries within 30 s\).*ReadTimeoutError"):
        fastload.LMDBDataset("s3://fastload-test/session/train.set")


def test_storage_options_set_the_time_one_try_may_take():
    assert RemoteLocation("s3://b/set").attempt_bound_s() == 15.0  # 5 s connect + 10 s read
    mine = RemoteLocation("s3://b/set", {"config_kwargs": {
        "connect_timeout": 2, "read_timeout": 20, "retries": {"max_attempts": 1}}})
    assert mine.attempt_bound_s() == 44.0  # two tries of botocore's own: one try of ours
    assert mine.storage_options["config_kwargs"]["read_timeout"] == 20


def test_a_full_cache_disk_says_so_and_leaves_no_partial_download(s3_env, s3_sharded_set,
                                                                  small_disk):
    cache = small_disk.path / "cache"
    reader = fastload.LMDBDataset(s3_sharded_set, cache_dir=cache, cache_bytes=10**9).reader
    with open(small_disk.path / "filler", "wb") as filler:  # leave about 8 KiB free
        free = shutil.disk_usage(small_disk.path).free
        filler.write(b"\0" * max(0, free - 8192))
    with pytest.raises(OSError, match=r"the cache disk is full: free space or lower "
                                      r"cache_bytes") as full:
        reader.record(reader.entries[1].start)
    assert "failed" not in str(full.value) and str(cache) in str(full.value)  # not retried
    assert not list((cache / "shards").glob(".part-*"))
    (small_disk.path / "filler").unlink()
    assert reader.record(reader.entries[1].start)  # room again: read
