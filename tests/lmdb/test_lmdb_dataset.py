"""LMDBDataset behaves like torchvision's ImageFolder over the converted folder."""

from __future__ import annotations

import operator
import pickle
import shutil

import numpy as np
import pytest
import torch
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.format.constants import record_key
from fastload.data.format.datum import encode_datum


def _small():
    return T.Compose([T.Resize((24, 24)), T.PILToTensor()])


def test_dataset_matches_imagefolder_pixels_labels_and_classes(synth_lmdb, synth_root):
    dataset = fastload.LMDBDataset(synth_lmdb)
    folder = ImageFolder(synth_root / "train")
    assert len(dataset) == len(folder) == 48
    assert dataset.classes == folder.classes
    assert dataset.class_to_idx == folder.class_to_idx
    assert dataset.targets == folder.targets
    for i in range(len(folder)):
        (image, label), (expected, expected_label) = dataset[i], folder[i]
        assert image.mode == "RGB" and label == expected_label
        assert np.array_equal(np.asarray(image), np.asarray(expected))
    assert dataset.path == synth_lmdb and dataset.reader.path == synth_lmdb


@pytest.mark.parametrize("path", [123, None, ["a.lmdb"]])
def test_a_path_that_is_not_one_is_named_with_what_it_should_be(path):
    with pytest.raises(TypeError, match=r"path should be the folder of a fastload database or "
                                        r"set, or its URL, but got path="):
        fastload.LMDBDataset(path)


def test_dataset_applies_transform_and_target_transform(synth_lmdb):
    dataset = fastload.LMDBDataset(synth_lmdb, transform=T.ToTensor(),
                                   target_transform=lambda y: y + 100)
    image, label = dataset[3]
    assert isinstance(image, torch.Tensor) and image.dtype == torch.float32
    assert image.shape[0] == 3 and label == dataset.targets[3] + 100


def test_dataset_takes_the_integer_indices_a_list_takes(synth_lmdb):
    dataset = fastload.LMDBDataset(synth_lmdb)
    expected = np.asarray(dataset[3][0])
    for index in (np.int64(3), torch.tensor(3), 3 - len(dataset)):
        assert np.array_equal(np.asarray(dataset[index][0]), expected)
    for index, error in ((3.0, TypeError), (torch.tensor(3.0), TypeError), (True, TypeError),
                         (len(dataset), IndexError)):
        with pytest.raises(error, match="record index"):
            dataset[index]


def test_dataset_pickles_without_the_lmdb_handle(synth_lmdb):
    dataset = fastload.LMDBDataset(synth_lmdb, transform=_small())
    before = dataset[0]
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone.reader._env is None
    assert torch.equal(clone[0][0], before[0]) and clone[0][1] == before[1]


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataset_under_dataloader_with_two_workers(synth_lmdb, synth_root, context):
    # A picklable transform that needs no torchvision keeps spawned workers quick to start.
    shrink = operator.methodcaller("resize", (24, 24))
    dataset = fastload.LMDBDataset(synth_lmdb, transform=shrink)
    dataset[0]  # the parent opens the environment before the workers start
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=8, num_workers=2, multiprocessing_context=context, collate_fn=list
    )
    samples = [sample for batch in loader for sample in batch]
    expected = ImageFolder(synth_root / "train", transform=shrink)
    assert len(samples) == len(expected) == 48
    for (image, label), (expected_image, expected_label) in zip(samples, expected, strict=True):
        assert label == expected_label
        assert np.array_equal(np.asarray(image), np.asarray(expected_image))


def test_dataset_names_the_key_of_an_undecodable_record(synth_lmdb, tmp_path):
    import lmdb

    db = tmp_path / "db"
    shutil.copytree(synth_lmdb, db)
    with lmdb.open(str(db)) as env, env.begin(write=True) as txn:
        txn.put(record_key(2), encode_datum(b"\xff\xd8 not really a jpeg", 1, 10, 10))
    with pytest.raises(OSError, match="record 00000002"):
        fastload.LMDBDataset(db)[2]


def test_dataset_on_a_missing_path_says_to_convert_first(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `fastload convert SRC"):
        fastload.LMDBDataset(tmp_path / "missing")
