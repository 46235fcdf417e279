"""A URL (`s3://bucket/set`) is refused with one sentence by every entry point, never written
or read as a local folder named `s3:`, until a URL scheme is supported."""

from __future__ import annotations

import pytest

import fastload
from fastload.data.convert import convert_folder
from fastload.data.ensure import ensure_lmdb
from fastload.data.set_verify import verify_set
from fastload.data.verify import verify_lmdb
from fastload.tools.cli import main as cli

URL = "s3://bucket/set"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_convert_to_a_url_is_refused_and_writes_no_local_folder(synth_root, in_tmp, capsys):
    with pytest.raises(ValueError, match=r"destination 's3://bucket/set' is a URL \(s3://\)"):
        convert_folder(synth_root / "val", URL, workers=1, progress=False)
    assert cli(["convert", str(synth_root / "val"), URL, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "DST 's3://bucket/set' is a URL" in err and len(err.strip().splitlines()) == 1
    assert list(in_tmp.iterdir()) == []


def test_convert_from_a_url_is_refused(in_tmp):
    with pytest.raises(ValueError, match="source 'gs://bucket/images' is a URL"):
        convert_folder("gs://bucket/images", in_tmp / "db", progress=False)
    with pytest.raises(ValueError, match="is a URL"):
        ensure_lmdb("gs://bucket/images", in_tmp / "db")


@pytest.mark.parametrize("open_it", [
    lambda: fastload.DataLoader(URL, batch_size=2),
    lambda: fastload.LMDBDataset(URL),
    lambda: verify_lmdb(URL),
    lambda: verify_set(URL),
])
def test_reading_a_url_is_refused_even_beside_a_local_folder_named_like_it(
        synth_root, in_tmp, open_it):
    convert_folder(synth_root / "val", "./s3:/bucket/set", workers=1, progress=False)
    with pytest.raises(ValueError, match="is a URL .* local folders only"):
        open_it()


def test_verify_of_a_url_is_a_usage_error(in_tmp, capsys):
    assert cli(["verify", URL]) == 2
    assert "DST 's3://bucket/set' is a URL" in capsys.readouterr().err


def test_a_folder_named_like_a_scheme_is_read_when_written_as_a_relative_path(synth_root,
                                                                            in_tmp):
    convert_folder(synth_root / "val", "./s3:/bucket/set", workers=1, progress=False)
    assert len(fastload.LMDBDataset("./s3:/bucket/set")) == 16
