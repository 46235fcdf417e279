"""An error belongs to its sample: wherever a sample fails (the first check of its JPEG data,
the region decoder, DALI, Pillow, its shard refused), ``on_error="raise"`` raises once, for
the batch it is in, and the next ``next()`` goes on with the next batch (batches made before
it come first, in order); ``on_error="skip"`` drops it with one warning and the epoch
delivers every other sample. The error path never opens what it reports again."""

from __future__ import annotations

import io
import os
import shutil
import warnings

import numpy as np
import pytest
import torchvision.transforms as T
from damage import scramble_scan
from hang_guard import within
from PIL import Image
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.sets.shards import ShardedReader
from fastload.loader.sample_sources import SampleError

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
# Padding after the resize: DALI resizes, so unchecked files get the 1/8-scale check first.
PADDED = T.Compose([T.Resize(16), T.RandomCrop(16, padding=2), T.ToTensor()])
LIMIT = 30.0  # seconds for one epoch: far above a real one, far below a hang


def outcomes(loader) -> list:
    """One epoch of ``loader``: each ``next()``'s batch indices, or the exception it raised
    (the epoch goes on after it), under a watchdog."""
    got: list = []

    def run() -> None:
        it = iter(loader)
        for _ in range(4 * len(loader) + 4):
            try:
                next(it)
            except StopIteration:
                return
            except Exception as err:  # noqa: BLE001 - what the test inspects
                got.append(err)
            else:
                got.append(list(loader.last_batch_indices))

    within(run, LIMIT, "the epoch hung")
    return got


def batches(count: int, size: int) -> list[list[int]]:
    return [list(range(k, min(k + size, count))) for k in range(0, count, size)]


def assert_isolated(got: list, count: int, size: int, bad: set[int]) -> None:
    """Each batch holding a sample of ``bad`` raised, naming one; every other arrived, all
    in their order."""
    expected = batches(count, size)
    assert len(got) == len(expected), got
    for want, outcome in zip(expected, got, strict=True):
        if bad & set(want):
            assert isinstance(outcome, SampleError), (want, got)
        else:
            assert outcome == want, got


def skip_epoch(loader) -> tuple[list[int], list]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = outcomes(loader)
    assert all(isinstance(o, list) for o in got), got
    return [i for batch in got for i in batch], [w for w in caught if "skipped" in str(w.message)]


@pytest.fixture()
def folder(synth_root, tmp_path):
    """A writable copy of the generated validation split (16 images, 4 classes)."""
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return root


# ---------------------------------------------------------------- folder samples
def _scramble(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(scramble_scan(data))


def _damage_after_check(path: str) -> None:
    """Break the file's JPEG markers in place, keeping its length and modification time:
    the loader, which found it intact in an earlier epoch, hands it to DALI unchecked."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"\0\0\0\0")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _unreadable_gif(path: str) -> None:
    """A GIF (decoded by Pillow, not DALI) cut short after its header."""
    out = io.BytesIO()
    Image.open(path).convert("RGB").save(out, format="GIF")
    with open(path, "wb") as f:
        f.write(out.getvalue()[:60])


PLACES = {
    # damaged scan data found by the strict decode of a file's first epoch (scaled path)
    "first-check-strict": (SMALL, _scramble, False),
    # ... by the 1/8-scale check before DALI sees it (a plan that resizes in DALI)
    "first-check-before-dali": (PADDED, _scramble, False),
    # DALI's decoder throws on a file found intact in the epoch before
    "dali": (SMALL, _damage_after_check, True),
    # Pillow cannot decode a non-JPEG file
    "pillow": (SMALL, _unreadable_gif, False),
}


def _folder_loader(folder, place: str, on_error: str, bad: list[int]):
    transform, damage, after_an_epoch = PLACES[place]
    dataset = ImageFolder(folder, transform)
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2, on_error=on_error)
    if after_an_epoch:
        assert [i for o in outcomes(loader) for i in o] == list(range(16))
    for i in bad:
        damage(dataset.samples[i][0])
    return dataset, loader


@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_bad_folder_sample_raises_for_its_batch_only_and_the_epoch_goes_on(folder, place):
    bad = [1, 2, 9]  # two in the first batch, one in the third
    dataset, loader = _folder_loader(folder, place, "raise", bad)
    got = outcomes(loader)
    assert_isolated(got, 16, 4, set(bad))
    assert got[0].names[0] == f"file '{dataset.samples[1][0]}'"  # the first in order
    assert got[2].names == [f"file '{dataset.samples[9][0]}'"]


@pytest.mark.parametrize("place", sorted(PLACES))
def test_skip_drops_each_bad_folder_sample_and_delivers_every_other(folder, place):
    bad = [1, 2, 9]
    dataset, loader = _folder_loader(folder, place, "skip", bad)
    seen, warned = skip_epoch(loader)
    assert seen == [i for i in range(16) if i not in bad]
    assert len(warned) <= 1 and sorted(loader.skipped) == sorted(
        f"file '{dataset.samples[i][0]}'" for i in bad)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_sample_the_region_decoder_refuses_costs_only_itself(big_folder, tmp_path, on_error):
    root = tmp_path / "big"
    shutil.copytree(big_folder, root)
    dataset = ImageFolder(root, SMALL)
    bad = [1, 6]
    for i in bad:
        _scramble(dataset.samples[i][0])
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, on_error=on_error)
    if on_error == "raise":
        assert_isolated(outcomes(loader), 8, 2, set(bad))
    else:
        assert skip_epoch(loader)[0] == [0, 2, 3, 4, 5, 7]
    assert loader._decoder.scaled_batches > 0  # the batches did take the scaled path


# ---------------------------------------------------------------- a refused shard
@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    """Two 6-shard sets of 60 tiny JPEGs each (10 records per shard), from different images."""
    from fastload.data.convert.folder import convert_folder

    base = tmp_path_factory.mktemp("two_sets")
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        for i in range(60):
            folder = base / f"src_{name}" / f"class_{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
        convert_folder(base / f"src_{name}", base / f"{name}.set", workers=1, progress=False,
                       shards=6)
    return base


def _shard_refused(two_sets, tmp_path, how: str):
    """Set a with its shard 2 (records 20-29) replaced by set b's shard 2 (``"foreign"``),
    its ``data.mdb`` cut in half (``"truncated"``) or a byte of its ``labels.i32`` flipped
    (``"labels"``)."""
    work = tmp_path / "work.set"
    shutil.copytree(two_sets / "a.set", work)
    victim = sorted(p for p in work.iterdir() if p.is_dir())[2]
    if how == "foreign":
        shutil.rmtree(victim)
        shutil.copytree(two_sets / "b.set" / victim.name, victim)
    elif how == "truncated":
        data = (victim / "data.mdb").read_bytes()
        (victim / "data.mdb").write_bytes(data[: len(data) // 2])
    else:
        labels = bytearray((victim / "labels.i32").read_bytes())
        labels[0] ^= 1
        (victim / "labels.i32").write_bytes(bytes(labels))
    return work


@pytest.fixture()
def one_shard_foreign(two_sets, tmp_path):
    return _shard_refused(two_sets, tmp_path, "foreign")


TINY = T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()])
REFUSED = set(range(20, 30))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_refused_shard_raises_for_its_batches_only_and_the_others_arrive_in_order(
        one_shard_foreign, num_workers):
    loader = fastload.DataLoader(str(one_shard_foreign), transform=TINY, batch_size=5,
                                 num_workers=num_workers)
    got = outcomes(loader)
    assert_isolated(got, 60, 5, REFUSED)
    assert "shard 2" in str(got[4]) and "does not match the manifest" in str(got[4])
    assert got[4].names == [f"LMDB key 'shard-00002-of-00006/00000000' in "
                            f"'{one_shard_foreign}'"]


@pytest.mark.parametrize("how", ["truncated", "labels"])
def test_a_damaged_shard_raises_for_its_batches_only(two_sets, tmp_path, how):
    work = _shard_refused(two_sets, tmp_path, how)
    got = outcomes(fastload.DataLoader(str(work), transform=TINY, batch_size=5, num_workers=2))
    expected = batches(60, 5)
    assert [o for o in got if isinstance(o, list)] == expected[:4] + expected[6:]
    assert all("shard-00002-of-00006" in str(o) for o in got[4:6]), got[4:6]


def test_skip_delivers_every_record_of_the_other_shards_with_one_warning(one_shard_foreign):
    loader = fastload.DataLoader(str(one_shard_foreign), transform=TINY, batch_size=5,
                                 num_workers=2, on_error="skip")
    seen, warned = skip_epoch(loader)
    assert seen == [i for i in range(60) if i not in REFUSED]
    assert len(warned) == 1 and "shard 2" in str(warned[0].message)
    assert len(loader.skipped) == 10 and all("shard-00002" in n for n in loader.skipped)


def test_a_refused_shard_is_opened_once_per_epoch(one_shard_foreign, monkeypatch):
    opened: list[str] = []
    original = ShardedReader._open_shard

    def counting(self, entry):
        opened.append(entry.path)
        return original(self, entry)

    monkeypatch.setattr(ShardedReader, "_open_shard", counting)
    loader = fastload.DataLoader(str(one_shard_foreign), transform=TINY, batch_size=5,
                                 on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(2):  # each epoch checks the refused shard again, once
            assert len(skip_epoch(loader)[0]) == 50
            assert opened.count("shard-00002-of-00006") == epoch + 1


def test_naming_a_record_of_a_refused_shard_opens_nothing(one_shard_foreign):
    reader = ShardedReader(one_shard_foreign)
    with pytest.raises(ValueError, match="does not match the manifest"):
        reader.image_bytes(21)
    assert reader.key(21) == b"shard-00002-of-00006/00000001"
    assert reader.opened_shards == []


def test_a_failing_name_lookup_never_ends_the_epoch(folder):
    dataset = ImageFolder(folder, SMALL)
    os.unlink(dataset.samples[5][0])
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2, on_error="skip")

    named = loader._source.name

    def name(i: int) -> str:
        if i == 5:
            raise RuntimeError(f"no name for sample {i}")
        return named(i)

    loader._source.name = name  # naming the bad sample fails too (a fault of its own)
    seen, warned = skip_epoch(loader)
    assert seen == [i for i in range(16) if i != 5]
    assert loader.skipped == ["sample 5"] and len(warned) == 1


RRC = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])


def _shrink_in_place(path: str, factor: float) -> None:
    """Re-encode the image ``factor`` times smaller, padded to its old length, its
    modification time kept: the loader still trusts its cached size, so some of the random
    crops drawn for it lie outside the decoded image (DALI fails its batch), some not."""
    st = os.stat(path)
    image = Image.open(path).convert("RGB")
    width, height = image.size
    image.resize((int(width * factor), int(height * factor))).save(path, format="JPEG",
                                                                    quality=50)
    with open(path, "ab") as f:
        f.write(b"\0" * (st.st_size - os.path.getsize(path)))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("factor", [0.7, 0.8])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_files_shrunk_after_their_first_check_cost_only_themselves(folder, factor, on_error):
    dataset = ImageFolder(folder, RRC)
    loader = fastload.DataLoader(dataset, batch_size=4, seed=0, on_error=on_error)
    assert [i for o in outcomes(loader) for i in o] == list(range(16))
    bad = [1, 2, 9, 10]
    for i in bad:
        _shrink_in_place(dataset.samples[i][0], factor)
    if on_error == "raise":
        got = outcomes(loader)
        assert_isolated(got, 16, 4, set(bad))
        assert got[0].names[0] in (f"file '{dataset.samples[i][0]}'" for i in bad)
    else:
        assert skip_epoch(loader)[0] == [i for i in range(16) if i not in bad]
