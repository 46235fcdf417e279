"""An LMDB record's Datum size is a claim of whoever wrote the set: where the set is not one
this user converted (no attestation), the loader reads the JPEG's own header before any
decoder sees the bytes, and a record whose Datum says another size is its sample's error,
named by key, as ``fastload verify --full`` reports it."""

from __future__ import annotations

import io
import warnings

import lmdb
import numpy as np
import pytest
import torchvision.transforms as T
from PIL import Image

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.format.constants import crc32, record_key
from fastload.data.format.datum import datum_fields, encode_datum
from fastload.loader.sample_sources import SampleError

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


def _jpeg(height: int, width: int) -> bytes:
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([(x * 2) % 256, (y * 3) % 256, (x + y) % 256], -1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture()
def database(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "src" / name).mkdir(parents=True)
        for k in range(4):
            (tmp_path / "src" / name / f"{k}.jpg").write_bytes(_jpeg(96, 128))
    convert_folder(tmp_path / "src", tmp_path / "db", workers=1, progress=False)
    return tmp_path / "db"


def _rewrite_record(db, index: int, jpeg: bytes | None, height: int, width: int) -> None:
    """Record ``index`` rewritten with this Datum size (and JPEG, None: its own), its CRC-32
    kept right, as another tool or machine would write it."""
    env = lmdb.open(str(db), subdir=True, map_size=1 << 30)
    with env.begin(write=True) as txn:
        own, label, *_ = datum_fields(txn.get(record_key(index)))
        value = encode_datum(bytes(own) if jpeg is None else jpeg, label, height, width)
        txn.put(record_key(index), value)
    env.close()
    checksums = np.fromfile(db / "checksums.crc32", dtype="<u4")
    checksums[index] = crc32(value)
    checksums.tofile(db / "checksums.crc32")


@pytest.mark.parametrize("jpeg, datum", [
    (None, (48, 64)),               # the record's own 96x128 JPEG, a smaller claim
    (None, (0, 0)),                 # no size, as Caffe's encoded Datums
    (_jpeg(300, 200), (96, 128)),   # a larger image than the claim
])
def test_a_record_whose_datum_size_is_not_its_jpegs_is_its_samples_error(database, jpeg, datum):
    _rewrite_record(database, 0, jpeg, *datum)
    loader = fastload.DataLoader(fastload.LMDBDataset(database, SMALL), batch_size=4)
    with pytest.raises(SampleError, match=f"but its Datum says {datum[0]}x{datum[1]}") as err:
        next(iter(loader))
    assert "LMDB key" in str(err.value) and "fastload verify --full" in str(err.value)


def test_skip_drops_a_record_whose_datum_size_is_wrong_and_keeps_its_batch(database):
    _rewrite_record(database, 1, None, 0, 0)
    loader = fastload.DataLoader(fastload.LMDBDataset(database, SMALL), batch_size=4,
                                 on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seen = [i for _ in loader for i in loader.last_batch_indices]
    assert seen == [0, 2, 3, 4, 5, 6, 7] and len(loader.skipped) == 1


def test_a_record_whose_datum_size_is_right_reads_as_the_dataset_does(database):
    _rewrite_record(database, 0, _jpeg(40, 72), 40, 72)
    dataset = fastload.LMDBDataset(database, SMALL)
    batch, _ = next(iter(fastload.DataLoader(dataset, batch_size=4)))
    assert (batch[0] - dataset[0][0]).abs().mean() < 0.01
