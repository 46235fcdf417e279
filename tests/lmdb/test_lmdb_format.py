"""The fastload LMDB format: keys, sidecars, LMDBReader, and DALI reading it natively."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest

from fastload.data.format.constants import (
    CHECKSUM_FILE,
    LABELS_FILE,
    META_FILE,
    PARTIAL_FILE,
    record_key,
)
from fastload.data.format.datum import encode_datum
from fastload.data.format.reader import LMDBReader


def test_record_keys_are_zero_padded_and_sort_in_index_order():
    keys = [record_key(i) for i in (0, 7, 10, 99, 12345678, 99999999)]
    assert keys[0] == b"00000000" and keys[-1] == b"99999999"
    assert sorted(keys) == keys
    with pytest.raises(ValueError, match="index=-1"):
        record_key(-1)
    with pytest.raises(ValueError, match="index=100000000"):
        record_key(10**8)


def test_sidecars_describe_the_records(synth_lmdb, synth_root):
    meta = json.loads((synth_lmdb / META_FILE).read_text())
    assert meta["state"] == "complete" and meta["format"] == "fastload-lmdb"
    assert meta["version"] == 1 and meta["count"] == 48
    assert meta["classes"] == sorted(p.name for p in (synth_root / "train").iterdir())
    assert meta["checksum_file"] == CHECKSUM_FILE and meta["labels_file"] == LABELS_FILE
    assert meta["options"] == {"max_side": None, "quality": 90, "check": "decode"}
    assert meta["jpeg_check"] == "strict"  # every JPEG passed the strict decode
    assert len(np.fromfile(synth_lmdb / CHECKSUM_FILE, dtype="<u4")) == 48
    assert len(np.fromfile(synth_lmdb / LABELS_FILE, dtype="<i4")) == 48
    assert not (synth_lmdb / PARTIAL_FILE).exists()


def test_reader_gives_records_labels_and_sizes(synth_lmdb):
    from PIL import Image

    reader = LMDBReader(synth_lmdb)
    assert len(reader) == 48 and len(reader.targets) == 48
    assert reader.class_to_idx == {name: i for i, name in enumerate(reader.classes)}
    data, label, (height, width) = reader.image_bytes(5)
    assert label == reader.targets[5]
    assert bytes(data[:2]) == b"\xff\xd8"
    with Image.open(__import__("io").BytesIO(bytes(data))) as image:
        assert image.size == (width, height)
    assert reader.key(-1) == b"00000047"
    assert reader.record(47) == reader.record(-1)
    with pytest.raises(IndexError, match="out of range"):
        reader.record(48)


def test_reader_pickles_without_its_environment_and_reopens(synth_lmdb):
    reader = LMDBReader(synth_lmdb)
    first = reader.record(0)
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._env is None
    assert clone.record(0) == first and clone.targets == reader.targets


def test_reader_names_a_missing_record_key(synth_lmdb, tmp_path):
    import lmdb

    db = tmp_path / "db"
    shutil.copytree(synth_lmdb, db)
    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        txn.put(b"stray", txn.get(record_key(3)))  # same entry count as the sidecar says
        txn.delete(record_key(3))
    with pytest.raises(KeyError, match="00000003"):
        LMDBReader(db).record(3)


def test_reader_refuses_a_database_with_fewer_records_than_its_sidecar(synth_lmdb, tmp_path):
    import lmdb

    db = tmp_path / "db"
    shutil.copytree(synth_lmdb, db)
    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        txn.delete(record_key(3))
    with pytest.raises(OSError, match="holds 47 records but its fastload.json says count=48"):
        LMDBReader(db)


def test_reader_errors_name_the_path_and_the_fix(tmp_path, synth_lmdb):
    with pytest.raises(FileNotFoundError, match="fastload convert SRC"):
        LMDBReader(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a fastload LMDB directory"):
        LMDBReader(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no fastload.json"):
        LMDBReader(tmp_path / "empty")
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / PARTIAL_FILE).write_text("{}")
    with pytest.raises(ValueError, match="partial conversion; rerun the same"):
        LMDBReader(partial)
    future = tmp_path / "future"
    shutil.copytree(synth_lmdb, future)
    meta = json.loads((future / META_FILE).read_text())
    (future / META_FILE).write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(ValueError, match="format version 99"):
        LMDBReader(future)


def test_dali_caffe_reader_reads_the_database_natively(synth_lmdb):
    from nvidia.dali import fn, pipeline_def, types

    reader = LMDBReader(synth_lmdb)
    count = len(reader)

    @pipeline_def(batch_size=count, num_threads=1, device_id=None, seed=0)
    def caffe_pipeline():
        jpegs, labels = fn.readers.caffe(path=str(synth_lmdb), random_shuffle=False,
                                         name="caffe")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        return jpegs, images, labels

    pipe = caffe_pipeline()
    pipe.build()
    assert pipe.epoch_size("caffe") == count
    jpegs, images, labels = pipe.run()
    for i in range(count):
        data, label, (height, width) = reader.image_bytes(i)
        assert np.array(jpegs.at(i)).tobytes() == bytes(data)
        assert int(np.array(labels.at(i)).reshape(-1)[0]) == label == reader.targets[i]
        assert np.array(images.at(i)).shape == (height, width, 3)


def test_records_are_datums_not_pickles(synth_lmdb):
    reader = LMDBReader(synth_lmdb)
    data, label, (height, width) = reader.image_bytes(0)
    assert reader.record(0) == encode_datum(bytes(data), label, height, width, 3)
    assert not reader.record(0).startswith(b"\x80")  # no pickle protocol header
