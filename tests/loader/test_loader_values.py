"""Batch values side by side with torch's DataLoader: folders, LMDB, paths, labels, devices."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Subset
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.format.dataset import LMDBDataset

EVAL = T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor()])


def assert_same_batches(ours, theirs, tolerance=0.01):
    """Same number of batches, same labels, images within ``tolerance`` mean absolute
    difference per image, same dtype and shape."""
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs) > 0
    for (images, labels), (t_images, t_labels) in zip(ours, theirs, strict=True):
        assert torch.equal(labels, t_labels) and labels.dtype == t_labels.dtype
        assert images.dtype == t_images.dtype and images.shape == t_images.shape
        diff = (images.double() - t_images.double()).abs().flatten(1).mean(1)
        assert diff.max() <= tolerance, diff


def test_eval_transform_batches_match_torchvision_per_image(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL)
    assert_same_batches(fastload.DataLoader(dataset, batch_size=6),
                        TorchDataLoader(dataset, batch_size=6))


def test_pil_to_tensor_gives_uint8_batches_like_torch(synth_root):
    dataset = ImageFolder(synth_root / "val", T.Compose([T.CenterCrop(48), T.PILToTensor()]))
    assert_same_batches(fastload.DataLoader(dataset, batch_size=8),
                        TorchDataLoader(dataset, batch_size=8), tolerance=2.0)


def test_threads_and_prefetch_do_not_change_the_batches(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL)
    single = list(fastload.DataLoader(dataset, batch_size=4))
    threaded = list(fastload.DataLoader(dataset, batch_size=4, num_workers=2, prefetch_factor=4))
    for (a, la), (b, lb) in zip(single, threaded, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_batches_are_fresh_tensors_the_caller_may_keep(synth_root):
    loader = fastload.DataLoader(ImageFolder(synth_root / "val", EVAL), batch_size=4)
    kept = list(loader)
    copies = [(images.clone(), labels.clone()) for images, labels in kept]
    list(loader)  # another epoch through the same decoder
    assert len({images.data_ptr() for images, _ in kept}) == len(kept)
    for (images, labels), (c_images, c_labels) in zip(kept, copies, strict=True):
        assert torch.equal(images, c_images) and torch.equal(labels, c_labels)


def test_lmdb_dataset_batches_match_torch_over_the_same_records(synth_lmdb):
    dataset = LMDBDataset(synth_lmdb, transform=EVAL)
    ours = fastload.DataLoader(dataset, batch_size=16)
    assert ours.fallback_reason is None
    assert_same_batches(ours, TorchDataLoader(dataset, batch_size=16))
    assert "00000003" in ours._source.name(3) and str(synth_lmdb) in ours._source.name(3)


def test_paths_load_as_imagefolder_or_lmdb(synth_root, synth_lmdb):
    folder = fastload.DataLoader(str(synth_root / "val"), batch_size=8, transform=EVAL)
    assert isinstance(folder.dataset, ImageFolder) and folder.fallback_reason is None
    assert_same_batches(folder, TorchDataLoader(ImageFolder(synth_root / "val", EVAL), 8))
    lmdb = fastload.DataLoader(synth_lmdb, batch_size=8, transform=EVAL,
                               target_transform=lambda t: t + 100)
    assert isinstance(lmdb.dataset, LMDBDataset) and len(lmdb.dataset) == 48
    labels = torch.cat([labels for _, labels in lmdb])
    assert labels.tolist() == [t + 100 for t in lmdb.dataset.targets]


def test_target_transform_and_subset_give_torchs_labels(synth_root):
    dataset = ImageFolder(synth_root / "train", EVAL, target_transform=lambda t: 3 - t)
    subset = Subset(dataset, [40, 2, 17, 17, 33, 8, 0])
    assert_same_batches(fastload.DataLoader(subset, batch_size=3),
                        TorchDataLoader(subset, batch_size=3))


class _IndexedSubset(Subset):
    """A split with its own sample form, as scripts write on top of ``random_split``."""

    def __getitem__(self, i):
        image, label = self.dataset[self.indices[i]]
        return image * 2 - 1, label + 100, i

    def __getitems__(self, indices):
        return [self[i] for i in indices]


class _BatchedFolder(ImageFolder):
    """An ImageFolder whose ``__getitems__`` (torch's loader calls it for a batch) differs."""

    def __getitems__(self, indices):
        return [(self[i][0], -1) for i in indices]


@pytest.mark.parametrize("make", [
    lambda root: _IndexedSubset(ImageFolder(root, EVAL), [5, 3, 9, 1, 7]),
    lambda root: _BatchedFolder(root, EVAL),
], ids=["subset subclass", "folder with __getitems__"])
def test_a_dataset_that_reads_its_own_samples_gets_torchs_batches_with_a_warning(synth_root,
                                                                                  make):
    from fastload.utils.fallback import FallbackWarning

    dataset = make(synth_root / "val")
    with pytest.warns(FallbackWarning, match="overrides __getite"):
        loader = fastload.DataLoader(dataset, batch_size=2)
    ours, theirs = list(loader), list(TorchDataLoader(dataset, batch_size=2))
    assert len(ours) == len(theirs) > 0
    for batch, expected in zip(ours, theirs, strict=True):
        assert len(batch) == len(expected)
        assert all(torch.equal(a, b) for a, b in zip(batch, expected, strict=True))


def _without_adobe_marker(data: bytes) -> bytes:
    """A JPEG with its APP14 (Adobe) segment cut out, every other byte kept."""
    at = data.index(b"\xff\xee")
    return data[:at] + data[at + 2 + int.from_bytes(data[at + 2:at + 4], "big"):]


@pytest.mark.parametrize("adobe", [True, False], ids=["adobe marker", "no adobe marker"])
def test_a_cmyk_jpeg_gives_the_colours_torchvision_reads(tmp_path, adobe):
    import io

    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([200 + x % 50, 40 + y * 2, 30 + (x + y) % 60], -1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert("CMYK").save(out, "JPEG", quality=95)
    data = out.getvalue() if adobe else _without_adobe_marker(out.getvalue())
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "cmyk.jpg").write_bytes(data)
    dataset = ImageFolder(tmp_path, EVAL)
    assert_same_batches(fastload.DataLoader(dataset, batch_size=1),
                        TorchDataLoader(dataset, batch_size=1), tolerance=0.005)


@pytest.mark.gpu
def test_cuda_device_gives_cuda_batches_close_to_the_cpu_graph(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL)
    gpu = list(fastload.DataLoader(dataset, batch_size=8, device="cuda"))
    assert all(images.is_cuda and labels.is_cuda for images, labels in gpu)
    cpu = fastload.DataLoader(dataset, batch_size=8, device="cpu", pin_memory=True)
    for (images, labels), (c_images, c_labels) in zip(gpu, cpu, strict=True):
        assert c_images.is_pinned() and c_labels.is_pinned()
        assert torch.equal(labels.cpu(), c_labels)
        assert (images.cpu() - c_images).abs().mean() < 0.01


def test_image_sizes_from_headers_match_pillow(synth_root, tmp_path):
    import io

    import numpy as np
    from PIL import Image

    from fastload.loader.image_headers import image_size, jpeg_size

    for path in sorted((synth_root / "val").rglob("*.jpg")):
        with Image.open(path) as img:
            assert jpeg_size(path.read_bytes()) == (img.height, img.width)
    pixels = np.zeros((37, 53, 3), dtype=np.uint8)
    for fmt, options in (("JPEG", {"progressive": True}), ("PNG", {})):
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, fmt, **options)
        assert image_size(np.frombuffer(buf.getvalue(), np.uint8)) == (37, 53)
    assert jpeg_size(b"\xff\xd8\xff") is None and image_size(b"not an image") is None
