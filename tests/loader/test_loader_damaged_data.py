"""Corrupt image data never reaches a batch silently: it raises naming the sample, or is
skipped with one warning and nothing spilled on stderr."""

from __future__ import annotations

import os
import shutil
import time
import warnings

import lmdb
import pytest
import torchvision.transforms as T
from damage import scramble_scan
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.format.constants import record_key
from fastload.data.format.reader import LMDBReader
from fastload.data.format.verify import verify_lmdb
from fastload.loader.sample_sources import SampleError

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
# Upscales the 64-160 px images: decoded by DALI, not at reduced DCT scale.
LARGE = T.Compose([T.Resize(176), T.CenterCrop(176), T.ToTensor()])
# Padding after the resize: DALI resizes, so files are checked before DALI decodes them.
PADDED = T.Compose([T.Resize(16), T.RandomCrop(16, padding=2), T.ToTensor()])
# Every path: a first epoch decodes SMALL's and LARGE's files strictly (at reduced scale
# for SMALL, full size for LARGE; DALI from the second epoch on); PADDED's get the check.
BOTH = pytest.mark.parametrize("transform", [SMALL, LARGE, PADDED],
                               ids=["scaled", "dali", "dali-resize"])


@pytest.fixture()
def folder(synth_root, tmp_path):
    """A writable copy of the generated validation split (16 images, 4 classes)."""
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return root


def _scramble_file(path) -> None:
    path.write_bytes(scramble_scan(path.read_bytes()))


@BOTH
def test_folder_jpeg_with_scrambled_scan_raises_naming_its_path(folder, transform):
    dataset = ImageFolder(folder, transform)
    bad = dataset.samples[6][0]
    _scramble_file(folder / bad)
    loader = fastload.DataLoader(dataset, batch_size=4)
    it = iter(loader)
    next(it)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        next(it)
    assert err.value.names == [f"file '{bad}'"]
    assert next(it)[0].shape[0] == 4


@BOTH
def test_skip_drops_a_scrambled_jpeg_with_one_warning_and_a_quiet_stderr(folder, capfd, transform):
    dataset = ImageFolder(folder, transform)
    _scramble_file(folder / dataset.samples[2][0])
    _scramble_file(folder / dataset.samples[9][0])
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = []
        for _ in loader:
            seen += loader.last_batch_indices
    assert seen == [i for i in range(16) if i not in (2, 9)]
    assert len([w for w in caught if "skipped" in str(w.message)]) == 1
    err = capfd.readouterr().err
    assert "Corrupt JPEG" not in err and "[ERROR]" not in err


@BOTH
def test_raise_names_the_first_bad_sample_in_order(folder, transform):
    dataset = ImageFolder(folder, transform)
    _scramble_file(folder / dataset.samples[1][0])  # found only when decoding
    (folder / dataset.samples[3][0]).write_bytes(b"not an image")  # found when reading
    loader = fastload.DataLoader(dataset, batch_size=4)
    with pytest.raises(SampleError) as err:
        next(iter(loader))
    assert err.value.names[0] == f"file '{dataset.samples[1][0]}'"


def test_damaged_jpegs_checked_in_threads_before_dali_raise_in_order_and_stay_quiet(
        folder, capfd):
    dataset = ImageFolder(folder, PADDED)
    for index in (5, 6, 13):
        _scramble_file(folder / dataset.samples[index][0])
    loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2)
    assert loader._decoder_for(8).resampler == "dali"  # DALI resizes: no strict decode
    it = iter(loader)
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        next(it)
    assert err.value.names == [f"file '{dataset.samples[5][0]}'"]
    with pytest.raises(SampleError, match="Corrupt JPEG data") as err:
        next(it)
    assert err.value.names == [f"file '{dataset.samples[13][0]}'"]
    assert "Corrupt JPEG" not in capfd.readouterr().err


def test_other_stderr_output_still_reaches_stderr_while_iterating(folder, capfd):
    loader = fastload.DataLoader(ImageFolder(folder, SMALL), batch_size=4)
    for _ in loader:
        os.write(2, b"a line of the user's own\n")
        os.write(2, b"progress 10%\r")
    assert capfd.readouterr().err.count("a line of the user's own") == 4


@pytest.fixture()
def db(synth_lmdb, tmp_path):
    """A private copy of the converted synth database, free to damage."""
    copy = tmp_path / "db"
    shutil.copytree(synth_lmdb, copy)
    return copy


def _scramble_record(db, index: int) -> None:
    """Scramble record ``index``'s scan in place, framing intact, checksum file untouched."""
    data = bytes(LMDBReader(db, checksums=False).image_bytes(index)[0])
    damaged = scramble_scan(data)
    raw = (db / "data.mdb").read_bytes()
    offset = raw.find(data)
    assert offset > 0
    (db / "data.mdb").write_bytes(raw[:offset] + damaged + raw[offset + len(data):])


def test_lmdb_record_with_scrambled_bytes_raises_naming_its_key_within_seconds(db):
    _scramble_record(db, 21)
    loader = fastload.DataLoader(fastload.LMDBDataset(db, transform=SMALL), batch_size=8)
    start = time.monotonic()
    with pytest.raises(SampleError, match="CRC-32") as err:
        for _ in loader:
            pass
    assert time.monotonic() - start < 30
    assert "00000021" in str(err.value) and loader.last_batch_indices == list(range(8, 16))


def test_lmdb_record_with_scrambled_bytes_is_skipped_on_skip(db):
    _scramble_record(db, 5)
    loader = fastload.DataLoader(fastload.LMDBDataset(db, transform=SMALL), batch_size=8,
                                 on_error="skip")
    with pytest.warns(RuntimeWarning, match="00000005"):
        seen = [i for _ in loader for i in loader.last_batch_indices]
    assert seen == [i for i in range(48) if i != 5]


def test_torch_loader_over_a_damaged_record_raises_oserror_naming_the_key(db):
    _scramble_record(db, 3)
    with pytest.raises(OSError, match="record 00000003"):
        fastload.LMDBDataset(db)[3]


def test_hostile_lmdb_of_pickles_is_a_format_error_and_never_runs_the_payload(db, tmp_path):
    import pickle
    import zlib

    import numpy as np

    witness = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(witness), "w"))

    value = pickle.dumps(Payload())
    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        for i in range(48):
            txn.put(record_key(i), value)
    np.full(48, zlib.crc32(value), dtype="<u4").tofile(db / "checksums.crc32")
    with pytest.raises(ValueError, match="record 00000000 .* is corrupt"):
        fastload.LMDBDataset(db)[0]
    loader = fastload.DataLoader(fastload.LMDBDataset(db, transform=SMALL), batch_size=4)
    with pytest.raises(SampleError, match="00000000"):
        next(iter(loader))
    report = verify_lmdb(db)
    assert len(report.bad) == 48
    assert "not a valid Datum" in report.bad[0][1]
    assert not witness.exists()


def test_the_first_read_check_finds_each_damaged_sample_whatever_the_threads():
    """DamageCheck.find hands each thread a share of the batch (two files decoded at once in
    each): the damaged samples are reported at their own positions, the intact ones
    remembered, with one thread or several."""
    import io

    import numpy as np
    from damage import scramble_scan
    from PIL import Image

    from fastload.loader.damage import DamageCheck

    def jpeg(seed: int) -> bytes:
        pixels = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=90)
        return out.getvalue()

    class Marks:  # the source's bookkeeping of samples found intact
        def __init__(self) -> None:
            self.intact: dict[int, object] = {}

        def mark_checked(self, index: int, stamp: object) -> None:
            self.intact[index] = stamp

    encoded = [jpeg(seed) for seed in range(9)]
    damaged_at = {2, 5, 6}
    for j in damaged_at:
        encoded[j] = scramble_scan(encoded[j])
    pending = [(j, 100 + j, f"stamp {j}") for j in range(len(encoded))]
    for threads in (1, 2, 3):
        check, marks = DamageCheck(threads), Marks()
        try:
            found = check.find(marks, encoded, pending)
        finally:
            check.close()
        assert set(found) == damaged_at
        assert all(report.startswith("Corrupt JPEG data") for report in found.values())
        assert marks.intact == {100 + j: f"stamp {j}" for j in range(9) if j not in damaged_at}
