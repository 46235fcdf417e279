"""A URL (`zz://bucket/set`) whose scheme fastload cannot serve is refused with one sentence
by every entry point, never written or read as a local folder named `zz:`; a supported
scheme without what it needs (`s3://` without shards, `gs://` without gcsfs) is refused
just as early. Sets at supported URLs: tests/test_remote_*.py."""

from __future__ import annotations

import pytest

import fastload
from fastload.data.convert.ensure import ensure_lmdb
from fastload.data.convert.folder import convert_folder
from fastload.data.format.verify import verify_lmdb
from fastload.data.sets.verify import verify_set
from fastload.tools.cli import main as cli

URL = "zz://bucket/set"  # a scheme fsspec does not know


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_convert_to_a_url_of_an_unknown_scheme_is_refused_and_writes_no_local_folder(
        synth_root, in_tmp, capsys):
    with pytest.raises(ValueError, match=r"destination 'zz://bucket/set' is a URL of a scheme "
                                         r"fsspec does not know \(zz://\)"):
        convert_folder(synth_root / "val", URL, workers=1, progress=False)
    assert cli(["convert", str(synth_root / "val"), URL, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "DST 'zz://bucket/set' is a URL of a scheme" in err and len(err.strip().splitlines()) == 1
    assert list(in_tmp.iterdir()) == []


def test_convert_to_s3_without_shards_is_refused_and_writes_no_local_folder(synth_root,
                                                                           in_tmp, capsys):
    with pytest.raises(ValueError, match="is a URL, where fastload writes sharded sets only: "
                                         "pass shards=N or shard_size_mb=MB"):
        convert_folder(synth_root / "val", "s3://bucket/set", workers=1, progress=False)
    assert cli(["convert", str(synth_root / "val"), "s3://bucket/set", "--no-progress"]) == 2
    assert "pass --shards N or --shard-size MB" in capsys.readouterr().err
    assert list(in_tmp.iterdir()) == []


def test_convert_from_a_url_is_refused(in_tmp):
    with pytest.raises(ValueError, match="source 'gs://bucket/images' is a URL"):
        convert_folder("gs://bucket/images", in_tmp / "db", progress=False)
    with pytest.raises(ValueError, match="is a URL"):
        ensure_lmdb("gs://bucket/images", in_tmp / "db")


def test_a_scheme_whose_fsspec_backend_is_missing_names_the_package(in_tmp):
    pytest.importorskip("fsspec")
    with pytest.raises(ImportError, match="gs:// URL, whose fsspec backend is not installed: "
                                          ".*gcsfs"):
        fastload.LMDBDataset("gs://bucket/set")


@pytest.mark.parametrize("open_it", [
    lambda: fastload.DataLoader(URL, batch_size=2),
    lambda: fastload.LMDBDataset(URL),
    lambda: verify_lmdb(URL),
    lambda: verify_set(URL),
])
def test_reading_a_url_of_an_unknown_scheme_is_refused_even_beside_a_local_folder_named_like_it(
        synth_root, in_tmp, open_it):
    convert_folder(synth_root / "val", "./zz:/bucket/set", workers=1, progress=False)
    with pytest.raises(ValueError, match="is a URL of a scheme fsspec does not know"):
        open_it()


def test_verify_of_a_url_of_an_unknown_scheme_is_a_usage_error(in_tmp, capsys):
    assert cli(["verify", URL]) == 2
    assert "DST 'zz://bucket/set' is a URL of a scheme" in capsys.readouterr().err


def test_a_folder_named_like_a_scheme_is_read_when_written_as_a_relative_path(synth_root,
                                                                            in_tmp):
    convert_folder(synth_root / "val", "./s3:/bucket/set", workers=1, progress=False)
    assert len(fastload.LMDBDataset("./s3:/bucket/set")) == 16


def test_a_file_url_is_read_as_the_local_path_it_names(synth_root, in_tmp):
    convert_folder(synth_root / "val", in_tmp / "val.lmdb", workers=1, progress=False)
    assert len(fastload.LMDBDataset(f"file://{in_tmp / 'val.lmdb'}")) == 16
