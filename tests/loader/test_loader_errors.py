"""Unreadable samples name their file or key; fallback to torch warns once or, strict, raises."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import TensorDataset
from torchvision.datasets import ImageFolder

import fastload
from fastload.loader.dataloader import FallbackWarning, SampleError

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture()
def folder(synth_root, tmp_path):
    """A writable copy of the generated validation split (16 images, 4 classes)."""
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return root


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_corrupt_file_raises_naming_its_path_and_the_next_batch_still_comes(folder):
    dataset = ImageFolder(folder, SMALL)
    bad = dataset.samples[5][0]
    truncate(folder / bad)
    loader = fastload.DataLoader(dataset, batch_size=4)
    it = iter(loader)
    assert next(it)[0].shape[0] == 4
    with pytest.raises(SampleError, match=bad) as err:
        next(it)
    assert err.value.names == [f"file '{bad}'"]
    assert next(it)[0].shape[0] == 4 and loader.last_batch_indices == [8, 9, 10, 11]


def test_a_corrupt_file_is_caught_where_torchs_loader_error_is(folder):
    dataset = ImageFolder(folder, SMALL)
    truncate(folder / dataset.samples[5][0])
    with pytest.raises(OSError):  # Pillow's error, through torch's loader
        list(TorchDataLoader(dataset, batch_size=4))
    with pytest.raises(OSError) as err:  # the same handler catches fastload's
        list(fastload.DataLoader(dataset, batch_size=4))
    assert isinstance(err.value, SampleError) and isinstance(err.value, ValueError)


def test_on_error_skip_drops_unreadable_samples_and_warns_once(folder):
    dataset = ImageFolder(folder, SMALL)
    truncate(folder / dataset.samples[1][0])
    (folder / dataset.samples[14][0]).write_bytes(b"not an image")
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            seen = []
            for images, labels in loader:
                assert images.shape[0] == labels.shape[0] == len(loader.last_batch_indices)
                seen += loader.last_batch_indices
            assert seen == [i for i in range(16) if i not in (1, 14)]
    skips = [w for w in caught if "skipped" in str(w.message)]
    assert len(skips) == 1 and dataset.samples[1][0] in str(skips[0].message)
    assert sum(dataset.samples[14][0] in name for name in loader.skipped) == 2


def test_missing_file_raises_filenotfounderror_naming_its_path(folder):
    dataset = ImageFolder(folder, SMALL)
    gone = dataset.samples[2][0]
    (folder / gone).unlink()
    with pytest.raises(FileNotFoundError, match=gone):
        list(fastload.DataLoader(dataset, batch_size=8))


def test_untranslatable_transform_falls_back_with_one_warning_and_torchs_batches(folder):
    transform = T.Compose([T.Lambda(lambda x: x), T.Resize(16), T.CenterCrop(16), T.ToTensor()])
    dataset = ImageFolder(folder, transform)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = fastload.DataLoader(dataset, batch_size=5, shuffle=True, seed=2)
        ours = list(loader)
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1 and "Lambda" in str(fallbacks[0].message)
    assert "Lambda" in loader.fallback_reason
    theirs = list(TorchDataLoader(dataset, batch_size=5, shuffle=True,
                                  generator=torch.Generator().manual_seed(2)))
    assert len(loader) == len(ours) == len(theirs) == 4
    for (images, labels), (t_images, t_labels) in zip(ours, theirs, strict=True):
        assert torch.equal(images, t_images) and torch.equal(labels, t_labels)
    with pytest.raises(ValueError, match="state_dict"):
        loader.state_dict()


def test_strict_raises_instead_of_falling_back(folder):
    dataset = ImageFolder(folder, T.Compose([T.Lambda(lambda x: x), T.ToTensor()]))
    with pytest.raises(ValueError, match="Lambda.*strict=True"):
        fastload.DataLoader(dataset, strict=True)


@pytest.mark.parametrize("kwargs, words", [
    (dict(batch_size=None), "batch_size=None"),
    (dict(num_workers=1, worker_init_fn=print), "worker_init_fn"),
])
def test_arguments_that_cannot_apply_fall_back_naming_the_argument(folder, kwargs, words):
    dataset = ImageFolder(folder, SMALL)
    with pytest.warns(FallbackWarning, match=words):
        loader = fastload.DataLoader(dataset, **kwargs)
    first = next(iter(loader))
    expected = next(iter(TorchDataLoader(dataset, **kwargs)))
    assert type(first) is type(expected) and len(first) == len(expected)


def test_worker_init_fn_without_workers_changes_nothing_so_no_fallback(folder):
    loader = fastload.DataLoader(ImageFolder(folder, SMALL), worker_init_fn=print)
    assert loader.fallback_reason is None


def test_other_datasets_fall_back_to_torch(folder):
    dataset = TensorDataset(torch.arange(10.0), torch.arange(10))
    with pytest.warns(FallbackWarning, match="TensorDataset"):
        loader = fastload.DataLoader(dataset, batch_size=4)
    assert [b[1].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_custom_image_loader_falls_back(folder):
    from PIL import Image

    def rgb_loader(path):
        return Image.open(path).convert("RGB")

    with pytest.warns(FallbackWarning, match="loader=rgb_loader"):
        fastload.DataLoader(ImageFolder(folder, SMALL, loader=rgb_loader))


def test_wrong_dataset_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        fastload.DataLoader(str(tmp_path / "nowhere"), transform=SMALL)
