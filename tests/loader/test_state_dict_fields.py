"""`load_state_dict` checks every field of the state (type and range) with one sentence
naming it, before anything is resumed, on a loader over a real converted set."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T

import fastload

SMALL = T.Compose([T.Resize((8, 8)), T.ToTensor()])


@pytest.fixture
def loader(sharded_set):
    return fastload.DataLoader(str(sharded_set), batch_size=4, transform=SMALL, device="cpu")


def _remaining(indices, sizes):
    return {"indices": torch.tensor(indices), "batch_sizes": torch.tensor(sizes)}


@pytest.mark.parametrize("field, value, error, words", [
    ("epoch_offset", -5, ValueError, r"epoch_offset should be an integer in \[0, 61\]"),
    ("epoch_offset", 10**6, ValueError, r"epoch_offset should be an integer in \[0, 61\]"),
    ("epoch_offset", 2.0, TypeError, "epoch_offset should be an integer, but got"),
    ("samples_consumed", -10, ValueError, r"samples_consumed should be an integer in \[0, 61\]"),
    ("batch_size", 0, ValueError, "batch_size should be an integer >= 1"),
    ("world_size", 0, ValueError, "world_size should be an integer >= 1"),
    ("rank", -1, ValueError, "rank should be a non-negative integer"),
    ("rank", "0", TypeError, "rank should be an integer, but got"),
    ("drop_last", "no", TypeError, "drop_last should be True or False"),
    ("shuffle", 1, TypeError, "shuffle should be True, False or None"),
    ("remaining", "abc", TypeError, "remaining should be None or"),
    ("remaining", {"indices": [0, 1]}, TypeError, "remaining should be None or"),
    ("remaining", _remaining([0.5], [1]), TypeError, r"remaining\['indices'\] should be a 1-D"),
    ("remaining", _remaining([[0, 1]], [2]), TypeError, r"remaining\['indices'\] should be a 1-D"),
    ("remaining", _remaining([0, 1, 2], [2]), ValueError, "sums to 2, but .* holds 3 indices"),
    ("remaining", _remaining([0, 99], [2]), ValueError, r"index 99, outside the dataset's \[0, 61\)"),
    ("remaining", _remaining([0, -1], [2]), ValueError, "index -1"),
    ("remaining", _remaining([0, 1], [3, -1]), ValueError, "negative batch size"),
])
def test_load_state_dict_rejects_each_bad_field_naming_it(loader, field, value, error, words):
    state = loader.state_dict()
    state[field] = value
    with pytest.raises(error, match=words):
        loader.load_state_dict(state)


def test_remaining_given_as_lists_resumes_those_batches(loader):
    state = loader.state_dict()
    state.update(epoch=0, batches_yielded=1, remaining={"indices": [5, 6, 7],
                                                        "batch_sizes": [2, 1]})
    loader.load_state_dict(state)
    assert [labels.tolist() for _, labels in loader] == [
        [loader.dataset.targets[5], loader.dataset.targets[6]], [loader.dataset.targets[7]]]
