"""fastload.DataLoader beside torch's on the corners torch's contract defines: the order of
outcomes and errors, the dataset's own ``__len__``, index types, empty batches, label
containers, Pillow's pixel limit and files Pillow reads that are not JPEGs."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import default_collate
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# a torch suffix whose tail writes every sample into the batch (labels collated on their own)
WITH_TAIL = T.Compose([T.Resize(16), T.CenterCrop(16), T.TrivialAugmentWide(), T.PILToTensor(),
                       T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)])


def outcomes(loader, limit: int = 12) -> list:
    """What each ``next()`` of one epoch gives: ``("batch", images, labels)``, the type of
    the exception it raised, or ``"stop"`` (then nothing more)."""
    it = iter(loader)
    seen = []
    for _ in range(limit):
        try:
            images, labels = next(it)
        except StopIteration:
            seen.append("stop")
            break
        except Exception as err:  # noqa: BLE001 - the test compares exception types
            seen.append(type(err))
        else:
            seen.append(("batch", images, labels))
    return seen


def assert_same_outcomes(ours: list, theirs: list, atol: float = 0.02) -> None:
    """Same sequence of batches and exception types; labels equal (and of the same
    container type), images within ``atol`` mean absolute difference (resize rounding)."""
    shape = [o if not isinstance(o, tuple) else "batch" for o in ours]
    assert shape == [o if not isinstance(o, tuple) else "batch" for o in theirs]
    for mine, want in zip(ours, theirs, strict=True):
        if isinstance(mine, tuple):
            assert type(mine[2]) is type(want[2])
            if isinstance(want[2], torch.Tensor):
                assert torch.equal(mine[2].cpu(), want[2])
            else:
                assert mine[2] == want[2]
            assert mine[1].shape == want[1].shape
            assert (mine[1].cpu() - want[1]).abs().mean() <= atol


def make_folder(root, images: dict[str, bytes]) -> None:
    """An image folder: ``{"class/name.jpg": encoded bytes}``."""
    for name, data in images.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def encode(pixels: np.ndarray, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def val(synth_root):
    """The generated validation split: 16 images, 4 classes of 4, in class order."""
    dataset = ImageFolder(synth_root / "val", SMALL)
    assert dataset.targets == [k for k in range(4) for _ in range(4)]
    return dataset


@pytest.fixture()
def squares(tmp_path):
    """A folder of six 64x64 JPEGs in two classes."""
    rng = np.random.default_rng(3)
    make_folder(tmp_path / "squares", {
        f"c{i % 2}/{i}.jpg": encode(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "JPEG")
        for i in range(6)})
    return tmp_path / "squares"


# ---------------------------------------------------------------- order of outcomes and errors

def test_a_sampler_index_out_of_range_raises_at_its_batch_and_the_next_batch_follows(val):
    sampler = [*range(8), 999, *range(8, 16)]
    theirs = outcomes(TorchDataLoader(val, batch_size=4, sampler=sampler))
    assert theirs[2] is IndexError and len(theirs) == 6
    assert_same_outcomes(outcomes(fastload.DataLoader(val, batch_size=4, sampler=sampler,
                                                      num_workers=2)), theirs)


def _pairs(batch):
    return default_collate(batch)


@pytest.mark.parametrize("collate_fn", [None, _pairs], ids=["default", "custom"])
def test_a_target_transform_error_on_batch_3_comes_after_batches_0_to_2(synth_root, collate_fn):
    def labels(target):
        if target == 3:
            raise KeyError(f"no name for class {target}")
        return target

    dataset = ImageFolder(synth_root / "val", SMALL, target_transform=labels)
    sampler = [*range(16), *range(4)]  # batch 3 is class 3; batch 4 is class 0 again
    theirs = outcomes(TorchDataLoader(dataset, batch_size=4, sampler=sampler,
                                      collate_fn=collate_fn))
    assert theirs[3] is KeyError and theirs[5] == "stop"
    assert_same_outcomes(outcomes(fastload.DataLoader(dataset, batch_size=4, sampler=sampler,
                                                      collate_fn=collate_fn)), theirs)


def test_a_sampler_that_raises_mid_epoch_delivers_the_batches_before_it_then_stops(val):
    class Breaks:
        def __iter__(self):
            yield from range(6)
            raise RuntimeError("the sampler broke")

        def __len__(self):
            return 16

    theirs = outcomes(TorchDataLoader(val, batch_size=4, sampler=Breaks()))
    assert theirs[1] is RuntimeError and theirs[2] == "stop"
    assert_same_outcomes(outcomes(fastload.DataLoader(val, batch_size=4, sampler=Breaks())),
                         theirs)


def test_a_random_crop_larger_than_one_image_raises_at_that_batchs_turn(tmp_path):
    rng = np.random.default_rng(5)
    sides = [64, 64, 40, 64, 64, 64]  # batch 1 holds the image smaller than the crop
    make_folder(tmp_path / "sizes", {
        f"c/{i}.jpg": encode(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "JPEG")
        for i, side in enumerate(sides)})
    dataset = ImageFolder(tmp_path / "sizes", T.Compose([T.RandomCrop(50), T.ToTensor()]))
    theirs = outcomes(TorchDataLoader(dataset, batch_size=2))
    assert theirs[1] is ValueError and len(theirs) == 4
    ours = outcomes(fastload.DataLoader(dataset, batch_size=2))
    assert [o if isinstance(o, str | type) else o[1].shape for o in ours] == \
        [o if isinstance(o, str | type) else o[1].shape for o in theirs]  # crops differ


# ---------------------------------------------------------------- the dataset's __len__

def test_an_lmdb_dataset_subclass_len_limits_the_epoch_as_torchs_samplers_do(synth_lmdb):
    class FirstTen(fastload.LMDBDataset):
        def __len__(self):
            return 10

    dataset = FirstTen(synth_lmdb, transform=SMALL)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert loader.fallback_reason is None and len(loader) == 3
    assert_same_outcomes(outcomes(loader), outcomes(TorchDataLoader(dataset, batch_size=4)))
    shuffled = fastload.DataLoader(dataset, batch_size=4, shuffle=True, seed=1)
    seen = [i for _ in shuffled for i in shuffled.last_batch_indices]
    assert sorted(seen) == list(range(10))


def test_an_image_folder_subclass_len_is_honoured_on_the_dali_path(synth_root):
    class FirstTen(ImageFolder):
        def __len__(self):
            return 10

    dataset = FirstTen(synth_root / "val", SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastload.FallbackWarning)
        loader = fastload.DataLoader(dataset, batch_size=4)
    assert len(loader) == 3
    assert_same_outcomes(outcomes(loader), outcomes(TorchDataLoader(dataset, batch_size=4)))


# ---------------------------------------------------------------- index types

@pytest.mark.parametrize("kind", ["folder", "lmdb"])
def test_a_float_index_raises_typeerror_and_integer_types_are_taken_as_torch_takes_them(
        synth_root, synth_lmdb, kind):
    dataset = (ImageFolder(synth_root / "train", SMALL) if kind == "folder"
               else fastload.LMDBDataset(synth_lmdb, transform=SMALL))
    sampler = [0, 2.5, np.int64(3), torch.tensor(4), -1, np.float64(5.0), torch.tensor(6.0), 7]
    theirs = outcomes(TorchDataLoader(dataset, batch_size=1, sampler=sampler))
    assert theirs[1] is TypeError and theirs[5] is TypeError and theirs[6] is TypeError
    assert_same_outcomes(outcomes(fastload.DataLoader(dataset, batch_size=1, sampler=sampler)),
                         theirs)


# ---------------------------------------------------------------- empty batches

def test_an_empty_batch_from_a_batch_sampler_raises_default_collates_error_at_its_turn(val):
    batch_sampler = [[0, 1], [], [2, 3]]
    theirs = outcomes(TorchDataLoader(val, batch_sampler=batch_sampler))
    assert theirs[1] is IndexError and theirs[3] == "stop"  # default_collate([]) raises
    assert_same_outcomes(outcomes(fastload.DataLoader(val, batch_sampler=batch_sampler)), theirs)


def test_an_empty_batch_from_a_batch_sampler_goes_to_a_custom_collate_fn_as_in_torch(val):
    batch_sampler = [[0, 1], [], [2, 3]]
    theirs = list(TorchDataLoader(val, batch_sampler=batch_sampler, collate_fn=list))
    ours = list(fastload.DataLoader(val, batch_sampler=batch_sampler, collate_fn=list))
    assert [len(b) for b in ours] == [len(b) for b in theirs] == [2, 0, 2]
    assert [[y for _, y in b] for b in ours] == [[y for _, y in b] for b in theirs]


# ---------------------------------------------------------------- label containers

@pytest.mark.parametrize("transform", [SMALL, WITH_TAIL], ids=["dali", "suffix-tail"])
def test_string_labels_come_in_the_container_torchs_default_collate_gives(synth_root, transform):
    dataset = ImageFolder(synth_root / "val", transform, target_transform=str)
    _, theirs = next(iter(TorchDataLoader(dataset, batch_size=4)))
    _, ours = next(iter(fastload.DataLoader(dataset, batch_size=4, seed=0)))
    assert type(theirs) is tuple and type(ours) is tuple and ours == theirs


# ---------------------------------------------------------------- Pillow's pixel limit

@pytest.fixture()
def small_limit(monkeypatch):
    """``set(n)``: Pillow's MAX_IMAGE_PIXELS is ``n`` until the test ends."""
    return lambda n: monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", n)


@pytest.mark.parametrize("kind", ["folder", "lmdb"])
def test_an_image_over_twice_pillows_pixel_limit_raises_decompressionbomberror_like_torch(
        squares, tmp_path, small_limit, kind):
    dataset = _squares_dataset(squares, tmp_path, kind)
    loader = fastload.DataLoader(dataset, batch_size=3)
    small_limit(1000)  # set by the user after the loader was built: 64x64 is over 2x
    with pytest.raises(Image.DecompressionBombError):
        next(iter(TorchDataLoader(dataset, batch_size=3)))
    with pytest.raises(Image.DecompressionBombError, match="MAX_IMAGE_PIXELS"):
        next(iter(loader))


@pytest.mark.parametrize("kind", ["folder", "lmdb"])
def test_an_image_over_pillows_pixel_limit_warns_as_torch_and_is_delivered(
        squares, tmp_path, small_limit, kind):
    dataset = _squares_dataset(squares, tmp_path, kind)
    small_limit(3000)  # 4096 pixels: over the limit, under twice it
    for loader in (TorchDataLoader(dataset, batch_size=3), fastload.DataLoader(dataset, 3)):
        with pytest.warns(Image.DecompressionBombWarning):
            images, _ = next(iter(loader))
        assert images.shape == (3, 3, 16, 16)


def _squares_dataset(squares, tmp_path, kind):
    if kind == "folder":
        return ImageFolder(squares, SMALL)
    from fastload.data.convert.folder import convert_folder

    convert_folder(squares, tmp_path / "squares.lmdb", workers=1, progress=False)
    return fastload.LMDBDataset(tmp_path / "squares.lmdb", transform=SMALL)


# ---------------------------------------------------------------- files that are not JPEGs

def test_a_gif_and_a_16_bit_png_named_jpg_give_torchs_pixels(tmp_path):
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    wide = (rng.integers(0, 256, (20, 24)) * 257).astype(np.uint16)  # Pillow's "I;16"
    make_folder(tmp_path / "mixed", {
        "a/0.jpg": encode(rgb, "JPEG", quality=95),
        "a/1.jpg": encode(rgb, "GIF"),
        "a/2.jpg": encode(wide, "PNG"),
        "a/3.jpg": encode(rgb, "PNG"),
        "a/4.jpg": encode(rgb[..., 0], "PNG"),
    })
    dataset = ImageFolder(tmp_path / "mixed", T.PILToTensor())
    theirs, _ = next(iter(TorchDataLoader(dataset, batch_size=5)))
    ours = next(iter(fastload.DataLoader(dataset, batch_size=5)))[0].cpu()
    assert ours.shape == theirs.shape == (5, 3, 20, 24)
    assert torch.equal(ours[1:], theirs[1:])  # exactly Pillow's convert("RGB")
    assert (ours[0].int() - theirs[0].int()).abs().max() <= 2  # the JPEG: two decoders


# ---------------------------------------------------------------- when an epoch's work starts

def _recording_folder(synth_root, seen: list) -> ImageFolder:
    def label(target):
        seen.append(target)  # called where the batch is made (the maker thread on the CPU)
        return target

    return ImageFolder(synth_root / "val", SMALL, target_transform=label)


def test_with_workers_the_first_batches_are_made_from_iter_as_torchs_workers_start_there(
        synth_root):
    import time

    seen: list = []
    loader = fastload.DataLoader(_recording_folder(synth_root, seen), batch_size=4,
                                 num_workers=2)
    it = iter(loader)
    deadline = time.monotonic() + 30
    while len(seen) < 4 and time.monotonic() < deadline:  # no next() yet
        time.sleep(0.01)
    assert len(seen) >= 4
    images, labels = next(it)
    assert labels.tolist() == [0, 0, 0, 0] and images.shape == (4, 3, 16, 16)


def test_without_workers_nothing_is_made_before_the_first_next(synth_root):
    import time

    seen: list = []
    loader = fastload.DataLoader(_recording_folder(synth_root, seen), batch_size=4)
    it = iter(loader)
    time.sleep(0.5)
    assert seen == []
    next(it)
    assert len(seen) >= 4


class _CountingSampler:
    """Indices 0..n-1 in order, counting how many were taken."""

    def __init__(self, n: int) -> None:
        self.n, self.taken = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.taken += 1
            yield i

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_iter_takes_as_many_indices_from_a_users_sampler_as_torchs_loader(val, workers):
    import time

    counts = []
    for loader_class in (TorchDataLoader, fastload.DataLoader):
        sampler = _CountingSampler(len(val))
        it = iter(loader_class(val, batch_size=2, sampler=sampler, num_workers=workers))
        time.sleep(0.3)  # the maker thread, had it pulled more, would have by now
        counts.append(sampler.taken)
        next(it)
        del it
    assert counts[1] == counts[0]
