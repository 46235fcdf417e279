"""Faults of a remote set on a real S3 server (SeaweedFS): a truncated object, a shard whose
checksum file is not the manifest's, a damaged cache entry, the server killed mid-epoch
(and coming back), refused credentials."""

from __future__ import annotations

import random
import shutil
import threading

import pytest
from seaweed import ACCESS_KEY, SECRET_KEY, upload_tree

import fastload
from fastload.data.remote import fetch
from fastload.data.remote.cache import MARKER

SHARD1 = "shard-00001-of-00003"


@pytest.fixture(scope="module")
def remote_set(s3_sharded_set):
    return s3_sharded_set


def damaged_copy(s3_server, sharded_set, tmp_path, prefix, damage) -> str:
    """A copy of the set with ``damage(shard 1's folder)`` applied, uploaded: its URL."""
    copy = tmp_path / "copy"
    shutil.copytree(sharded_set, copy)
    damage(copy / SHARD1)
    return upload_tree(s3_server, copy, prefix)


@pytest.fixture()
def quick_retries(monkeypatch):
    monkeypatch.setattr(fetch, "DEFAULT_RETRY", fetch.Retry(attempts=3, first_backoff_s=0.05))


@pytest.fixture()
def restarts(s3_server):
    """Kill the server inside a test; it is running again afterwards whatever happened."""
    yield s3_server
    if s3_server.process is None:
        s3_server.start()


def test_a_truncated_object_on_the_server_is_refused_naming_its_url(s3_env, s3_server,
                                                                   sharded_set, tmp_path):
    def cut(folder):
        data = (folder / "data.mdb").read_bytes()
        (folder / "data.mdb").write_bytes(data[:len(data) // 2])

    url = damaged_copy(s3_server, sharded_set, tmp_path, "faults/truncated.set", cut)
    reader = fastload.LMDBDataset(url).reader
    with pytest.raises(ValueError, match=rf"{url}/{SHARD1} is damaged: .*truncated"):
        reader.record(reader.entries[1].start)
    assert not list(s3_env.glob(f"shards/{SHARD1}-*"))  # never installed in the cache
    assert reader.record(0) == fastload.LMDBDataset(sharded_set).reader.record(0)


@pytest.fixture(scope="module")
def crc_set(s3_server, sharded_set, tmp_path_factory):
    """A copy of the set whose shard 1 has a checksum file other than the manifest's."""
    def flip(folder):
        sums = bytearray((folder / "checksums.crc32").read_bytes())
        sums[0] ^= 0xFF
        (folder / "checksums.crc32").write_bytes(bytes(sums))

    return damaged_copy(s3_server, sharded_set, tmp_path_factory.mktemp("crc"),
                        "faults/crc.set", flip)


def test_a_shard_whose_checksum_file_is_not_the_manifests_is_refused_naming_its_url(
        s3_env, crc_set):
    reader = fastload.LMDBDataset(crc_set).reader
    with pytest.raises(ValueError, match=rf"{crc_set}/{SHARD1} does not match the set's "
                                         r"manifest: its checksums.crc32 differs .*CRC-32"):
        reader.record(reader.entries[1].start)


def test_verify_of_a_url_reports_the_shard_that_does_not_match_and_fails(s3_env, crc_set,
                                                                        capsys):
    from fastload.tools.cli import main as cli

    assert cli(["verify", crc_set]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{crc_set}: FAILED: 1 problem(s): 41/61 records in 3 shards")  # 61 - shard 1's 20
    assert f"bad {SHARD1}: shard 1 downloaded from {crc_set}/{SHARD1} does not match" in out


def test_a_shard_cut_short_in_the_cache_is_fetched_again(s3_env, remote_set, sharded_set):
    first = fastload.LMDBDataset(remote_set).reader
    first.record(first.entries[1].start)
    first.close()
    (cached,) = s3_env.glob(f"shards/{SHARD1}-*/data.mdb")
    cached.write_bytes(cached.read_bytes()[:1000])
    reader = fastload.LMDBDataset(remote_set).reader
    local = fastload.LMDBDataset(sharded_set).reader
    entry = reader.entries[1]
    assert [reader.record(i) for i in range(entry.start, entry.stop)] == [
        local.record(i) for i in range(entry.start, entry.stop)]
    assert reader.cache.downloads == 1


def test_a_server_killed_mid_epoch_is_retried_then_raised_naming_the_url(
        s3_env, remote_set, restarts, quick_retries):
    reader = fastload.LMDBDataset(remote_set).reader
    reader.record(0)  # shard 0 is in the cache; the server dies before shard 1 is read
    restarts.kill()
    with pytest.raises(fetch.RemoteError, match=rf"{remote_set}/{SHARD1} failed 3 times"):
        reader.record(reader.entries[1].start)
    assert reader.record(1) is not None  # what the cache holds is still read


@pytest.mark.slow
def test_a_read_resumes_when_the_server_comes_back_within_the_retries(
        s3_env, remote_set, sharded_set, restarts, monkeypatch):
    monkeypatch.setattr(fetch, "DEFAULT_RETRY", fetch.Retry(attempts=30, first_backoff_s=0.2,
                                                            max_backoff_s=0.5))
    reader = fastload.LMDBDataset(remote_set).reader
    reader.record(0)
    restarts.kill()
    comeback = threading.Timer(1.0, restarts.start)
    comeback.start()
    start = reader.entries[1].start
    assert reader.record(start) == fastload.LMDBDataset(sharded_set).reader.record(start)
    comeback.join()


def test_prefetch_retries_leave_the_global_random_generator_alone(
        s3_env, remote_set, restarts, quick_retries):
    reader = fastload.LMDBDataset(remote_set).reader
    restarts.kill()
    state = random.getstate()
    (future,) = reader.prefetch([2])
    with pytest.raises(fetch.RemoteError, match=f"{remote_set}/shard-00002-of-00003"):
        future.result(timeout=60)
    assert random.getstate() == state
    assert not list(s3_env.glob(f"shards/shard-00002-of-00003-*/{MARKER}"))


def test_a_wrong_secret_is_refused_naming_the_url_and_where_credentials_go(
        s3_env, remote_set, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(PermissionError, match=rf"{remote_set} was refused .*AWS_ACCESS_KEY_ID"):
        fastload.LMDBDataset(remote_set)  # raised at once: no retry changes a credential


def test_credentials_given_as_storage_options_are_used_without_the_environment(
        s3_env, s3_server, remote_set, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    with pytest.raises(PermissionError, match="needs credentials|was refused"):
        fastload.LMDBDataset(remote_set, storage_options={"endpoint_url": s3_server.endpoint})
    dataset = fastload.LMDBDataset(remote_set, storage_options={
        "endpoint_url": s3_server.endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY})
    assert len(dataset) == 61 and dataset.reader.record(60)
