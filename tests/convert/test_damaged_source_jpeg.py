"""A source JPEG whose scan data is damaged (libjpeg decodes it with only a warning) is never
delivered silently after conversion: ``convert`` refuses it by default, and the records of a
set converted without that check are checked by the loader and by ``fastload verify``."""

from __future__ import annotations

import json
import warnings

import pytest
import torchvision.transforms as T
from damage import scrambled_copy
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.convert.folder import ConvertError, convert_folder
from fastload.data.format.constants import META_FILE
from fastload.data.format.reader import LMDBReader
from fastload.data.format.verify import verify_lmdb
from fastload.data.sets.shards import ShardedReader
from fastload.loader.datasets import make_source
from fastload.loader.sample_sources import SampleError
from fastload.tools.cli import main as cli

BAD = 6  # the scrambled file's index in the folder (and its record's key when stored)
SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
# Each of the loader's paths (see tests/test_hardening_loader.py): a strict decode at reduced
# scale, a strict decode at full size, the strict check before DALI decodes and resizes.
PATHS = pytest.mark.parametrize("transform", [
    SMALL,
    T.Compose([T.Resize(176), T.CenterCrop(176), T.ToTensor()]),
    T.Compose([T.Resize(16), T.RandomCrop(16, padding=2), T.ToTensor()]),
], ids=["scaled", "dali", "dali-resize"])


@pytest.fixture()
def folder(synth_root, tmp_path):
    """The generated validation split (16 images, 4 classes) with file ``BAD`` scrambled:
    markers intact, Pillow decodes it without an error."""
    return scrambled_copy(synth_root / "val", tmp_path / "val", BAD)


@pytest.fixture()
def markers_db(folder, tmp_path):
    """``folder`` converted with ``check="markers"``: record ``BAD`` holds the scrambled JPEG
    under a correct CRC-32, and the sidecar does not say the records were checked strictly."""
    dst = tmp_path / "markers.lmdb"
    report = convert_folder(folder, dst, workers=1, progress=False, check="markers")
    assert report.stored == 16
    return dst


def _errors(dst) -> list[dict]:
    return json.loads((dst / "errors.json").read_text())["skipped"]


@pytest.mark.parametrize("workers", [1, 2])
def test_default_conversion_reports_a_scrambled_jpeg_and_does_not_store_it(folder, tmp_path,
                                                                           workers):
    dst = tmp_path / "db"
    report = convert_folder(folder, dst, workers=workers, progress=False)
    bad = ImageFolder(folder).samples[BAD][0]
    assert (report.stored, report.skipped) == (15, 1)
    [error] = _errors(dst)
    assert error["path"] == bad and error["index"] == BAD
    assert error["reason"].startswith("damaged JPEG data, the decoder reports 'Corrupt JPEG data")
    assert len(LMDBReader(dst)) == 15


def test_default_conversion_says_in_its_sidecar_that_the_records_passed_the_strict_check(
        folder, tmp_path):
    convert_folder(folder, tmp_path / "db", workers=1, progress=False)
    convert_folder(folder, tmp_path / "m", workers=1, progress=False, check="markers")
    assert json.loads((tmp_path / "db" / META_FILE).read_text())["jpeg_check"] == "strict"
    assert "jpeg_check" not in json.loads((tmp_path / "m" / META_FILE).read_text())


def test_strict_conversion_stops_at_a_scrambled_jpeg_naming_it(folder, tmp_path, capsys):
    bad = ImageFolder(folder).samples[BAD][0]
    with pytest.raises(ConvertError, match="Corrupt JPEG data") as err:
        convert_folder(folder, tmp_path / "db", workers=2, progress=False, strict=True)
    assert bad in str(err.value)
    assert cli(["convert", str(folder), str(tmp_path / "db2"), "--strict", "--no-progress"]) == 1
    assert bad in capsys.readouterr().err


def test_a_scrambled_jpeg_to_resize_is_reported_not_reencoded(folder, tmp_path):
    dst = tmp_path / "db"
    report = convert_folder(folder, dst, workers=2, progress=False, max_side=32)
    assert (report.stored, report.skipped, report.reencoded) == (15, 1, 15)
    assert "Corrupt JPEG data" in _errors(dst)[0]["reason"]


@PATHS
def test_loader_over_a_markers_checked_set_raises_naming_the_damaged_record(markers_db,
                                                                           transform):
    LMDBReader(markers_db).record(BAD)  # its CRC-32 is right: only a decode can tell
    loader = fastload.DataLoader(fastload.LMDBDataset(markers_db, transform=transform),
                                 batch_size=4)
    it = iter(loader)
    next(it)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        next(it)
    assert err.value.names == [f"LMDB key '{BAD:08d}' in '{markers_db}'"]
    assert f"{BAD:08d}" in str(err.value)


@PATHS
def test_loader_over_a_markers_checked_set_skips_and_counts_the_damaged_record(markers_db,
                                                                              transform):
    loader = fastload.DataLoader(fastload.LMDBDataset(markers_db, transform=transform),
                                 batch_size=4, on_error="skip")
    with pytest.warns(RuntimeWarning, match=f"{BAD:08d}.*Corrupt JPEG data"):
        first = [i for _ in loader for i in loader.last_batch_indices]
    second = [i for _ in loader for i in loader.last_batch_indices]  # never marked intact
    assert first == second == [i for i in range(16) if i != BAD]
    assert loader.skipped == [f"LMDB key '{BAD:08d}' in '{markers_db}'"] * 2


def test_records_of_a_markers_checked_set_are_checked_once_and_a_strict_set_not_at_all(
        markers_db, folder, tmp_path):
    strict_db = tmp_path / "strict.lmdb"
    convert_folder(folder, strict_db, workers=1, progress=False)
    strict = make_source(fastload.LMDBDataset(strict_db, transform=SMALL))
    assert all(strict.unchecked(i) is None for i in range(15))
    dataset = fastload.LMDBDataset(markers_db, transform=SMALL)
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    assert all(loader._source.unchecked(i) for i in range(16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(loader)
    still = [i for i in range(16) if loader._source.unchecked(i)]
    assert still == [BAD]


def test_sharded_set_says_strict_only_when_its_shards_do_and_its_damage_is_found(folder,
                                                                                tmp_path):
    convert_folder(folder, tmp_path / "strict", workers=1, progress=False, shards=2)
    convert_folder(folder, tmp_path / "markers", workers=1, progress=False, shards=2,
                   check="markers")
    assert ShardedReader(tmp_path / "strict").meta["jpeg_check"] == "strict"
    assert "jpeg_check" not in ShardedReader(tmp_path / "markers").meta
    loader = fastload.DataLoader(fastload.LMDBDataset(tmp_path / "markers", transform=SMALL),
                                 batch_size=4)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        list(loader)
    assert f"/{BAD:08d}'" in err.value.names[0]


def test_verify_reports_damaged_jpeg_data_in_a_record_it_decodes(markers_db, capsys):
    report = verify_lmdb(markers_db, full=True)
    assert [key for key, _ in report.bad] == [f"{BAD:08d}"]
    assert "Corrupt JPEG data" in report.bad[0][1]
    assert cli(["verify", str(markers_db), "--full"]) == 1
    assert f"{BAD:08d}" in capsys.readouterr().out
