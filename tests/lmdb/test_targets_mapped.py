"""``targets`` of an LMDB set is its ``labels.i32`` memory-mapped (fastload.data.format.targets),
read as ImageFolder's list of ints is read; real converted sets."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from fastload.data.format.dataset import LMDBDataset
from fastload.data.format.targets import Labels


@pytest.fixture(scope="module")
def dataset(sharded_set):
    return LMDBDataset(sharded_set)


def test_targets_are_the_labels_file_mapped_read_only_not_a_list(dataset, sharded_set):
    array = np.asarray(dataset.targets)
    assert not isinstance(dataset.targets, list)
    assert array.dtype == np.int32 and not array.flags.writeable
    assert isinstance(array.base, np.memmap) or isinstance(array, np.memmap)
    assert array.tolist() == np.fromfile(sharded_set / "labels.i32", dtype="<i4").tolist()


def test_targets_read_as_imagefolders_list_of_ints(dataset):
    as_list = np.fromfile(dataset.path / "labels.i32", dtype="<i4").tolist()
    targets = dataset.targets
    assert targets == as_list and as_list == targets and targets != as_list[:-1]
    assert len(targets) == len(as_list) == len(dataset)
    assert type(targets[3]) is int and targets[-1] == as_list[-1]
    assert targets[2:9] == as_list[2:9] and type(targets[2:9]) is list
    assert list(targets) == as_list and targets.count(0) == as_list.count(0)
    assert (2 in targets) and (7 not in targets) and ("a" not in targets)
    assert torch.tensor(targets).tolist() == as_list
    assert np.bincount(targets).tolist() == np.bincount(as_list).tolist()
    with pytest.raises(IndexError):
        targets[len(as_list)]


def test_targets_combine_and_index_as_a_list_does(dataset):
    as_list = np.fromfile(dataset.path / "labels.i32", dtype="<i4").tolist()
    targets = dataset.targets
    # combining two sets' targets (a ConcatDataset's sampler weights), each a new list
    assert targets + [7] == as_list + [7] and [7] + targets == [7] + as_list
    assert targets + targets == as_list + as_list and type(targets + targets) is list
    assert targets * 2 == as_list * 2 == 2 * targets
    assert targets != tuple(as_list) and targets != range(len(as_list))  # as a list answers
    assert targets[np.int64(3)] == targets[torch.tensor(3)] == as_list[3]
    for index in ("1", 1.0, None):
        with pytest.raises(TypeError, match="list indices must be integers or slices"):
            targets[index]
        with pytest.raises(TypeError):
            as_list[index]
    with pytest.raises(IndexError):
        targets[-len(as_list) - 1]


def test_targets_cannot_be_changed_in_place(dataset):
    with pytest.raises(TypeError):
        dataset.targets[0] = 1
    with pytest.raises(ValueError):
        np.asarray(dataset.targets)[0] = 1


def test_a_pickled_dataset_maps_its_labels_again_instead_of_carrying_them(dataset):
    copy = pickle.loads(pickle.dumps(dataset))
    assert isinstance(copy.targets, Labels) and copy.targets.path == dataset.targets.path
    assert copy.targets == dataset.targets
    assert len(pickle.dumps(dataset.targets)) < 300


def test_the_shards_read_the_sets_mapping_of_labels(dataset):
    reader = dataset.reader
    for shard in range(reader.num_shards):
        view = reader.shard_reader(shard).targets
        assert np.shares_memory(view.array, reader.targets.array)
        entry = reader.entries[shard]
        assert view == reader.targets[entry.start:entry.stop]


def test_a_loader_over_the_mapped_labels_gives_int64_labels(dataset, sharded_set):
    import torchvision.transforms as T

    import fastload

    loader = fastload.DataLoader(str(sharded_set), batch_size=8,
                                 transform=T.Compose([T.Resize((8, 8)), T.ToTensor()]),
                                 device="cpu")
    labels = torch.cat([labels for _, labels in loader])
    assert labels.dtype == torch.int64 and labels.tolist() == list(dataset.targets)
