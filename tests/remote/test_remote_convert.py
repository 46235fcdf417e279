"""``fastload convert SRC s3://...`` on a real S3 server (SeaweedFS): shards staged locally
and uploaded, the manifest last; a rerun skips what is uploaded intact and redoes the rest;
``--shard-size``; ``fastload verify s3://...``."""

from __future__ import annotations

import json
import time

import pytest
from seaweed import BUCKET, client

import fastload
from fastload.data.convert.folder import convert_folder, shards_for_size
from fastload.data.sets.manifest import load_manifest
from fastload.tools.cli import main as cli


@pytest.fixture(scope="module")
def source(sharded_set):
    """The 61 tiny JPEGs the session's 3-shard set was converted from."""
    return sharded_set.parent / "src"


def records(dataset) -> list[bytes]:
    return [dataset.reader.record(i) for i in range(len(dataset))]


@pytest.mark.slow
def test_convert_to_s3_uploads_the_set_a_local_conversion_makes(s3_env, s3_server, source,
                                                                sharded_set, tmp_path):
    url = f"s3://{BUCKET}/convert/full.set"
    report = convert_folder(source, url, shards=3, workers=1, progress=False,
                            staging=tmp_path / "staging")
    assert report.manifest["num_shards"] == 3 and report.stored == 61
    assert records(fastload.LMDBDataset(url)) == records(fastload.LMDBDataset(sharded_set))
    manifest = json.loads(client(s3_server).cat_file(
        f"{BUCKET}/convert/full.set/fastload-set.json"))
    local = load_manifest(sharded_set)
    assert {k: v for k, v in manifest.items() if k != "created"} == {
        k: v for k, v in local.items() if k != "created"}
    assert list((tmp_path / "staging").iterdir()) == []  # each shard removed once uploaded,
    # and the set's lock file once the manifest is; the folder itself is the user's


def test_a_finished_upload_leaves_no_staging_folder_in_the_cache(s3_env, source):
    url = f"s3://{BUCKET}/convert/unstaged.set"
    convert_folder(source, url, shards=2, workers=1, progress=False)
    assert len(fastload.LMDBDataset(url)) == 61
    staging = s3_env / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []


def test_a_rerun_skips_the_shards_uploaded_intact_and_finishes_the_rest(s3_env, s3_server,
                                                                       source, tmp_path):
    url = f"s3://{BUCKET}/convert/resumed.set"
    for k in (0, 1):  # two of three shard processes finished; then the upload of 1 died
        convert_folder(source, url, shards=3, shard_index=k, workers=1, progress=False)
    client(s3_server).rm(f"{BUCKET}/convert/resumed.set/shard-00001-of-00003/fastload.json")
    report = convert_folder(source, url, shards=3, workers=1, progress=False)
    assert report.finished_shards == [0]
    assert report.seen == 61 - 61 // 3  # shards 1 and 2 converted again, not shard 0
    assert report.manifest["count"] == 61 and len(fastload.LMDBDataset(url)) == 61


def test_a_rerun_uploads_again_a_shard_whose_data_is_cut_short_on_the_server(
        s3_env, s3_server, source):
    url = f"s3://{BUCKET}/convert/cut.set"
    convert_folder(source, url, shards=3, workers=1, progress=False)
    fs = client(s3_server)
    key = f"{BUCKET}/convert/cut.set/shard-00002-of-00003/data.mdb"
    fs.pipe_file(key, fs.cat_file(key)[:4096])
    fs.rm(f"{BUCKET}/convert/cut.set/fastload-set.json")  # as if the manifest never went up
    report = convert_folder(source, url, shards=3, workers=1, progress=False)
    assert report.finished_shards == [0, 1] and report.manifest is not None
    assert fastload.LMDBDataset(url).reader.record(60)


def test_convert_cli_with_shard_size_then_verify_of_the_url(s3_env, source, capsys):
    from fastload.data.convert.source_list import list_source

    url = f"s3://{BUCKET}/convert/sized.set"
    _, total = list_source(source, workers=1).fingerprint()
    shards = shards_for_size(total, 61, 0.015)
    assert 1 < shards < 61
    assert cli(["convert", str(source), url, "--shard-size", "0.015", "--workers", "1",
                "--no-progress"]) == 0
    assert f"manifest written (61 records in {shards} shards)" in capsys.readouterr().out
    assert cli(["verify", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{url}: OK: 61/61 records in {shards} shards")


def test_convert_to_a_url_without_shards_is_refused_before_anything_is_written(
        s3_env, s3_server, source):
    with pytest.raises(ValueError, match="is a URL, where fastload writes sharded sets only"):
        convert_folder(source, f"s3://{BUCKET}/convert/none.set", progress=False)
    assert not client(s3_server).exists(f"{BUCKET}/convert/none.set")


def test_shards_upload_behind_the_conversion_each_sidecar_after_its_files_manifest_last(
        s3_env, s3_server, source, monkeypatch):
    from seaweed import CountingRelay

    prefix = f"/{BUCKET}/convert/order.set/"
    with CountingRelay(s3_server) as relay:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
        report = convert_folder(source, f"s3://{BUCKET}/convert/order.set", shards=3,
                                workers=2, progress=False)
        puts = [path[len(prefix):] for method, path in relay.requests
                if method == "PUT" and path.startswith(prefix)]
    assert report.manifest["num_shards"] == 3
    assert puts[-1] == "fastload-set.json" and puts.count("fastload-set.json") == 1
    for k in range(3):
        shard = f"shard-{k:05d}-of-00003/"
        mine = [p[len(shard):] for p in puts if p.startswith(shard)]
        assert mine[-1] == "fastload.json" and mine.count("fastload.json") == 1
        assert {"data.mdb", "checksums.crc32", "labels.i32"} <= set(mine)
    assert puts.index("shard-00002-of-00003/fastload.json") < puts.index("fastload-set.json")


def test_a_failed_shard_upload_stops_the_conversion_without_a_manifest_and_a_rerun_ends_it(
        s3_env, s3_server, source, tmp_path, monkeypatch):
    import fastload.data.remote.fetch as fetch

    url = f"s3://{BUCKET}/convert/failed.set"
    real = fetch.upload_files

    def failing(local, names, folder, retry=None):
        if local.name == "shard-00001-of-00003":
            raise fetch.RemoteError(f"uploading to {folder.url} failed (the test's)")
        return real(local, names, folder, retry)

    monkeypatch.setattr(fetch, "upload_files", failing)
    with pytest.raises(fetch.RemoteError, match="the test's"):
        convert_folder(source, url, shards=3, workers=1, progress=False,
                       staging=tmp_path / "staging")
    fs = client(s3_server)
    root = f"{BUCKET}/convert/failed.set"
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/fastload-set.json")
    assert not fs.exists(f"{root}/shard-00001-of-00003/fastload.json")
    assert fs.exists(f"{root}/shard-00000-of-00003/fastload.json")
    assert not fs.exists(f"{root}/shard-00002-of-00003/fastload.json")  # none after the failure
    assert (tmp_path / "staging" / "shard-00001-of-00003" / "fastload.json").is_file()
    monkeypatch.setattr(fetch, "upload_files", real)
    report = convert_folder(source, url, shards=3, workers=1, progress=False,
                            staging=tmp_path / "staging")
    assert report.finished_shards == [0, 1, 2]  # uploaded, or finished in staging
    assert report.seen == 0 and report.manifest["count"] == 61
    assert len(fastload.LMDBDataset(url)) == 61
    assert not list((tmp_path / "staging").glob("*shard-*"))


def test_a_fresh_conversion_lists_no_shard_folder_before_uploading_it(s3_env, s3_server,
                                                                      source, monkeypatch):
    from seaweed import CountingRelay

    with CountingRelay(s3_server) as relay:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
        convert_folder(source, f"s3://{BUCKET}/convert/fresh.set", shards=3, workers=1,
                       progress=False)
        requests = [(method, path + "?" + query)
                    for (method, path), query in zip(relay.requests, relay.queries, strict=True)]
    for k in range(3):  # the set's own listing names no shard; each shard's PUTs come first
        shard = f"shard-{k:05d}-of-00003"
        first = next((method, target) for method, target in requests if shard in target)
        assert first[0] == "PUT", f"{shard}: first request {first}"


@pytest.mark.parametrize("shards", [3, 2])  # the same shard count, and another
def test_an_overwrite_keeps_the_finished_set_at_the_url_until_the_new_one_is_whole(
        s3_env, s3_server, source, sharded_set, tmp_path, shards):
    from fastload.data.convert.folder import ConvertError

    url = f"s3://{BUCKET}/convert/overwritten-{shards}.set"
    key = f"{BUCKET}/convert/overwritten-{shards}.set"
    convert_folder(source, url, shards=3, workers=1, progress=False)
    fs = client(s3_server)
    before = fs.cat_file(f"{key}/fastload-set.json")
    broken = tmp_path / "broken"
    for path in sorted(source.rglob("*.jpg")):
        (broken / path.parent.name).mkdir(parents=True, exist_ok=True)
        (broken / path.parent.name / path.name).write_bytes(path.read_bytes())
    sorted(broken.rglob("*.jpg"))[-1].write_bytes(b"not a jpeg")  # in the last shard
    with pytest.raises(ConvertError, match="unreadable image"):
        convert_folder(broken, url, shards=shards, workers=1, progress=False, strict=True,
                       overwrite=True)
    fs.invalidate_cache()
    assert fs.cat_file(f"{key}/fastload-set.json") == before
    assert records(fastload.LMDBDataset(url)) == records(fastload.LMDBDataset(sharded_set))
    resized = tmp_path / "resized"
    convert_folder(source, resized, shards=shards, workers=1, progress=False, max_side=6)
    report = convert_folder(source, url, shards=shards, workers=1, progress=False, max_side=6,
                            overwrite=True)
    assert report.path == url and report.manifest["num_shards"] == shards
    fs.invalidate_cache()
    # the objects there (SeaweedFS keeps a removed object's folder: real S3 has none)
    assert {p[len(key) + 1:].split("/")[0] for p in fs.find(key)} == {
        "fastload-set.json", "labels.i32", *(f"shard-{k:05d}-of-{shards:05d}"
                                             for k in range(shards))}
    assert records(fastload.LMDBDataset(url)) == records(fastload.LMDBDataset(resized))


def test_an_overwrite_whose_move_stopped_is_finished_by_the_same_command(
        s3_env, s3_server, source, tmp_path):
    url = f"s3://{BUCKET}/convert/moved.set"
    key = f"{BUCKET}/convert/moved.set"
    convert_folder(source, url, shards=3, workers=1, progress=False)
    # the new set whole beside it, the move stopped after the manifest and shard 0's sidecar
    convert_folder(source, f"{url}/.fastload-replacement", shards=3, workers=1,
                   progress=False, max_side=6)
    fs = client(s3_server)
    fs.rm(f"{key}/fastload-set.json")
    fs.rm(f"{key}/shard-00000-of-00003/fastload.json")
    report = convert_folder(source, url, shards=3, workers=1, progress=False, max_side=6,
                            overwrite=True)
    assert report.stored == 0 and report.finished_shards == [0, 1, 2]  # nothing converted
    resized = tmp_path / "resized"
    convert_folder(source, resized, shards=3, workers=1, progress=False, max_side=6)
    assert records(fastload.LMDBDataset(url)) == records(fastload.LMDBDataset(resized))
    fs.invalidate_cache()
    assert not [p for p in fs.find(key) if "/.fastload-replacement/" in p]
    # stopped after the manifest's copy, before the replacement was removed: removed only
    before = {p: info["LastModified"] for p, info in fs.find(key, detail=True).items()}
    for path in before:
        fs.copy(path, path.replace(key, f"{key}/.fastload-replacement", 1))
    time.sleep(1.1)  # S3 times have whole seconds: a copy would show
    report = convert_folder(source, url, shards=3, workers=1, progress=False, max_side=6,
                            overwrite=True)
    assert report.stored == 0
    fs.invalidate_cache()
    assert {p: info["LastModified"] for p, info in fs.find(key, detail=True).items()} == before
