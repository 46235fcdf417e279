"""A set's ``"jpeg_check": "strict"`` claim is trusted only where this user's key attests it
(``fastload.data.sets.attest``): a set converted here skips the loader's check of each record;
one converted under another key, stripped of its attestation, or whose sidecar claims a
check it never had, gets the check, and its damaged record never reaches a decoder. Keys
live in ``tmp_path`` folders (``FASTLOAD_KEY_DIR``), never in the user's home."""

from __future__ import annotations

import json
import os

import pytest
import torchvision.transforms as T
from damage import scrambled_copy

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.format.constants import META_FILE, META_JPEG_ATTESTATION
from fastload.data.format.reader import LMDBReader
from fastload.data.sets.attest import KEY_FILE, trusted_jpeg_check
from fastload.data.sets.manifest import MANIFEST_FILE
from fastload.loader.datasets import make_source
from fastload.loader.sample_sources import SampleError

BAD = 6  # the scrambled file's index in the damaged folder (and its record's key)
SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture()
def here(tmp_path, monkeypatch):
    """This machine's key folder for the test (made by the first conversion)."""
    monkeypatch.setenv("FASTLOAD_KEY_DIR", str(tmp_path / "key-here"))
    return tmp_path / "key-here"


def elsewhere(monkeypatch, tmp_path):
    """Convert as another machine would: under a key of its own (undone by ``back``)."""
    monkeypatch.setenv("FASTLOAD_KEY_DIR", str(tmp_path / "key-elsewhere"))


def back(monkeypatch, here):
    monkeypatch.setenv("FASTLOAD_KEY_DIR", str(here))


@pytest.fixture()
def damaged(synth_root, tmp_path):
    """The generated validation split (16 images) with file ``BAD``'s scan data scrambled:
    markers intact, a correct CRC-32 once stored, only a strict decode tells."""
    return scrambled_copy(synth_root / "val", tmp_path / "val", BAD)


def _source(path):
    return make_source(fastload.LMDBDataset(path, transform=SMALL))


def _all_unchecked(source) -> bool:
    return all(source.unchecked(i) for i in range(len(source)))


def _edit(path, **changes) -> None:
    meta = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    path.write_text(json.dumps(meta))


def _convert(src, dst, **options):
    return convert_folder(src, dst, workers=1, progress=False, **options).path


def test_a_set_converted_here_is_trusted_and_its_records_go_unchecked(synth_root, here,
                                                                      tmp_path):
    db = _convert(synth_root / "val", tmp_path / "db")
    source = _source(db)
    assert all(source.unchecked(i) is None for i in range(len(source)))
    assert (here / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert here.stat().st_mode & 0o777 == 0o700


def test_a_set_attested_under_another_key_gets_each_record_checked(synth_root, here,
                                                                   tmp_path, monkeypatch):
    _convert(synth_root / "val", tmp_path / "mine")  # makes this machine's key
    elsewhere(monkeypatch, tmp_path)
    theirs = _convert(synth_root / "val", tmp_path / "theirs")
    back(monkeypatch, here)
    assert json.loads((theirs / META_FILE).read_text())[META_JPEG_ATTESTATION]
    assert _all_unchecked(_source(theirs))
    assert _source(tmp_path / "mine").unchecked(0) is None


def test_a_set_without_its_attestation_gets_each_record_checked(synth_root, here, tmp_path):
    db = _convert(synth_root / "val", tmp_path / "db")
    _edit(db / META_FILE, **{META_JPEG_ATTESTATION: None})
    assert _all_unchecked(_source(db))


def test_a_sidecar_claiming_a_strict_check_it_never_had_is_checked_and_its_damage_caught(
        synth_root, damaged, here, tmp_path):
    strict = _convert(synth_root / "val", tmp_path / "strict")
    markers = _convert(damaged, tmp_path / "markers", check="markers")
    LMDBReader(markers).record(BAD)  # its CRC-32 is right: only a decode can tell
    borrowed = json.loads((strict / META_FILE).read_text())[META_JPEG_ATTESTATION]
    _edit(markers / META_FILE, jpeg_check="strict", **{META_JPEG_ATTESTATION: borrowed})
    loader = fastload.DataLoader(fastload.LMDBDataset(markers, transform=SMALL), batch_size=4)
    it = iter(loader)
    next(it)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        next(it)
    assert err.value.names == [f"LMDB key '{BAD:08d}' in '{markers}'"]


def test_the_attestation_binds_the_record_count_and_every_checksum(synth_root, here, tmp_path):
    reader = LMDBReader(_convert(synth_root / "val", tmp_path / "db"))
    checksums = reader.checksums.copy()
    assert trusted_jpeg_check(reader.meta, checksums)
    checksums[3] ^= 1
    assert not trusted_jpeg_check(reader.meta, checksums)
    assert not trusted_jpeg_check({**reader.meta, "count": len(checksums) - 1}, checksums[:-1])


def test_a_key_file_others_can_read_is_not_used(synth_root, here, tmp_path):
    db = _convert(synth_root / "val", tmp_path / "db")
    os.chmod(here / KEY_FILE, 0o644)
    assert _all_unchecked(_source(db))
    with pytest.warns(UserWarning, match="cannot use its key .*check each record"):
        _convert(synth_root / "val", tmp_path / "db2")
    assert META_JPEG_ATTESTATION not in json.loads((tmp_path / "db2" / META_FILE).read_text())


def test_a_sharded_set_is_trusted_only_with_its_manifest_attestation(synth_root, here,
                                                                      tmp_path):
    root = _convert(synth_root / "val", tmp_path / "set", shards=2)
    assert _source(root).unchecked(0) is None
    _edit(root / MANIFEST_FILE, **{META_JPEG_ATTESTATION: None})
    assert _all_unchecked(_source(root))


def test_a_manifest_over_a_shard_converted_elsewhere_is_not_attested(synth_root, here,
                                                                      tmp_path, monkeypatch):
    elsewhere(monkeypatch, tmp_path)
    _convert(synth_root / "val", tmp_path / "set", shards=2, shard_index=0)
    back(monkeypatch, here)
    root = _convert(synth_root / "val", tmp_path / "set", shards=2, shard_index=1)
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["jpeg_check"] == "strict" and META_JPEG_ATTESTATION not in manifest
    assert _all_unchecked(_source(root))


@pytest.fixture()
def memory_url(monkeypatch, tmp_path):
    """A ``memory://`` folder (fsspec's in-memory file system: a URL set without a server)
    and a fresh shard cache; emptied afterwards."""
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setenv("FASTLOAD_CACHE", str(tmp_path / "cache"))
    url = f"memory://fastload-trust-{os.getpid()}/{tmp_path.name}"
    yield url
    fsspec.filesystem("memory").rm(url.split("://", 1)[1].split("/")[0], recursive=True)


def test_a_url_set_claiming_a_strict_check_it_never_had_is_checked_and_its_damage_caught(
        damaged, here, tmp_path, memory_url):
    import fsspec

    root = _convert(damaged, tmp_path / "set", shards=2, check="markers")
    _edit(root / MANIFEST_FILE, jpeg_check="strict", **{META_JPEG_ATTESTATION: "hmac-sha256-v1:0"})
    fsspec.filesystem("memory").put(str(root), memory_url.split("://", 1)[1], recursive=True)
    loader = fastload.DataLoader(memory_url, batch_size=4, transform=SMALL, device="cpu")
    assert _all_unchecked(loader._source)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        list(loader)
    assert f"/{BAD:08d}'" in err.value.names[0]


def test_a_url_set_converted_here_is_trusted(synth_root, here, tmp_path, memory_url):
    _convert(synth_root / "val", memory_url, shards=2, staging=tmp_path / "staging")
    loader = fastload.DataLoader(memory_url, batch_size=4, transform=SMALL, device="cpu")
    assert loader._source.unchecked(0) is None
