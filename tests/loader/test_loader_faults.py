"""Failures inside DALI's (and the resample pool's) worker threads reach the caller as an
exception within seconds, naming the sample where one is to blame; nothing hangs, the loader
iterates again afterwards and ``on_error="skip"`` finishes the epoch without the sample. Two
iterators of one loader advancing in turn each catch their own corrupt-JPEG report."""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
import warnings

import hang_guard
import pytest
import torch
import torchvision.transforms as T
from damage import scramble_scan
from PIL import Image
from torchvision.datasets import ImageFolder

import fastload
from fastload.loader.sample_sources import SampleError
from fastload.pipelines.decode import resample as torch_resample

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
RRC = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])
LIMIT = 20.0  # seconds: far above a real failure's time to raise, far below a hang


def within(fn, limit: float = LIMIT):
    """``fn()``'s result (or its exception) and the seconds it took; fails the test when it
    does not finish within ``limit``."""
    return hang_guard.within(fn, limit, "the loader hung: no batch and no exception")


def indices_seen(loader) -> list[int]:
    return [i for _ in loader for i in loader.last_batch_indices]


@pytest.fixture()
def folder(synth_root, tmp_path):
    """A writable copy of the generated validation split (16 images, 4 classes)."""
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return root


def epoch_error(loader, limit: float = LIMIT):
    """The exception one epoch of ``loader`` raises, and seconds to raise it."""
    def run():
        try:
            indices_seen(loader)
        except Exception as err:  # noqa: BLE001 - what the test inspects
            return err
        return None

    err, seconds = within(run, limit)
    assert err is not None, "the epoch finished without raising"
    return err, seconds


# ------------------------------------------------------------ DALI's decoder throws
def _broken_png_named_jpg(folder, dataset, index: int) -> str:
    """Sample ``index`` rewritten as an 8-bit PNG (which goes to DALI as it is) under its
    .jpg name, its compressed pixel data scrambled: Pillow reads its size from the header,
    DALI's decoder throws on it inside its thread pool."""
    path = dataset.samples[index][0]
    out = io.BytesIO()
    Image.open(path).convert("RGB").save(out, format="PNG")
    data = bytearray(out.getvalue())
    start = data.index(b"IDAT") + 40
    data[start : start + 40] = bytes(b ^ 0x5A for b in data[start : start + 40])
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.mark.parametrize("transform", [SMALL, RRC], ids=["decode", "slice-decode"])
def test_a_sample_dalis_decoder_throws_on_raises_sample_error_naming_it(folder, transform):
    dataset = ImageFolder(folder, transform)
    bad = _broken_png_named_jpg(folder, dataset, 5)
    loader = fastload.DataLoader(dataset, batch_size=4)
    err, seconds = epoch_error(loader)
    assert isinstance(err, SampleError) and err.names == [f"file '{bad}'"]
    assert "Failed to decode" in str(err) and "no longer valid" not in str(err)
    assert seconds < 10 and loader.last_batch_indices == [0, 1, 2, 3]
    # the loader is usable again: a new epoch delivers the batch before it, then the error
    it = iter(loader)
    assert within(lambda: next(it))[0][0].shape == (4, 3, 16, 16)
    with pytest.raises(SampleError, match="class_01_000005"):
        within(lambda: next(it))
    assert within(lambda: next(it))[0][0].shape[0] == 4 and loader.last_batch_indices[0] == 8


def test_skip_finishes_the_epoch_without_a_sample_dalis_decoder_throws_on(folder):
    dataset = ImageFolder(folder, SMALL)
    bad = _broken_png_named_jpg(folder, dataset, 5)
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    with pytest.warns(RuntimeWarning, match="Failed to decode"):
        seen, _ = within(lambda: indices_seen(loader))
    assert seen == [i for i in range(16) if i != 5] and loader.skipped == [f"file '{bad}'"]
    assert within(lambda: indices_seen(loader))[0] == seen  # and again, next epoch


# ------------------------------------------------- a later DALI operator throws
def _shrink_after_first_epoch(folder, dataset, loader, index: int) -> str:
    """Run one epoch (the loader caches each file's header size), then make sample
    ``index`` decode as a 20x12 image while the cache still holds its old size (the file's
    length and modification time kept, so the cache is not refreshed: a fault injected on
    purpose): its crop window, drawn for the cached size, lies outside the decoded image and
    DALI's slice decode throws."""
    assert len(indices_seen(loader)) == 16
    path = dataset.samples[index][0]
    before = os.stat(path)
    Image.open(path).convert("RGB").resize((20, 12)).save(path, format="JPEG")
    with open(path, "ab") as f:  # pad to the old length after the end-of-image marker
        f.write(b"\0" * (before.st_size - os.path.getsize(path)))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return path


def test_a_crop_window_outside_the_decoded_image_raises_naming_the_file(folder):
    dataset = ImageFolder(folder, RRC)
    loader = fastload.DataLoader(dataset, batch_size=4)
    bad = _shrink_after_first_epoch(folder, dataset, loader, 9)
    err, seconds = epoch_error(loader)
    assert isinstance(err, SampleError) and err.names == [f"file '{bad}'"]
    assert "cropping window" in str(err) and "not valid for image dimensions [12 x 20]" in str(err)
    assert seconds < 10 and loader.last_batch_indices == [4, 5, 6, 7]


def test_skip_finishes_the_epoch_without_a_sample_whose_crop_window_is_outside(folder):
    dataset = ImageFolder(folder, RRC)
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    _shrink_after_first_epoch(folder, dataset, loader, 9)
    with pytest.warns(RuntimeWarning, match="cropping window"):
        seen, _ = within(lambda: indices_seen(loader))
    assert seen == [i for i in range(16) if i != 9]


# ------------------------------------------- the resample pool's threads throw
@pytest.fixture()
def big(big_folder, tmp_path):
    root = tmp_path / "big"
    shutil.copytree(big_folder, root)
    return root


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_scaled_decode_of_a_scrambled_large_jpeg_in_a_pool_thread_names_it(big, on_error):
    dataset = ImageFolder(big, SMALL)
    bad = dataset.samples[5][0]
    with open(bad, "rb") as f:
        damaged = scramble_scan(f.read())
    with open(bad, "wb") as f:
        f.write(damaged)
    loader = fastload.DataLoader(dataset, batch_size=4, on_error=on_error)
    if on_error == "raise":
        err, seconds = epoch_error(loader)
        assert isinstance(err, SampleError) and err.names == [f"file '{bad}'"]
        assert "Corrupt JPEG data" in str(err) and seconds < 10
    else:
        with pytest.warns(RuntimeWarning, match="Corrupt JPEG data"):
            seen, _ = within(lambda: indices_seen(loader))
        assert seen == [0, 1, 2, 3, 4, 6, 7]
    assert loader._decoder.scaled_batches > 0  # the batches did take the threaded path


class WriterBug(RuntimeError):
    pass


def _first_batch_writes_fail(monkeypatch) -> list[str]:
    """Make SampleWriter.write raise WriterBug in the pool's threads for every sample of
    the first batch written (its output tensor); returns the names of the threads it hit."""
    original = torch_resample.SampleWriter.write
    first: list = []
    threads: list[str] = []

    def write(self, i, decoded, params):
        if not first:
            first.append(self.out)
        if self.out is first[0]:
            threads.append(threading.current_thread().name)
            raise WriterBug(f"resample of sample {i} failed")
        return original(self, i, decoded, params)

    monkeypatch.setattr(torch_resample.SampleWriter, "write", write)
    return threads


@pytest.mark.parametrize("path", ["dali-then-torch", "scaled"])
def test_an_exception_in_a_resample_thread_propagates_and_the_epoch_goes_on(
        folder, big, monkeypatch, path):
    root, count = (folder, 16) if path == "dali-then-torch" else (big, 8)
    loader = fastload.DataLoader(ImageFolder(root, SMALL), batch_size=4)
    # the first epoch decodes each file strictly on the scaled path (loader/damage.py):
    # from the second on, the small images take DALI's decode and torch's resample
    assert len(indices_seen(loader)) == count
    warm = loader._decoder.scaled_batches
    threads = _first_batch_writes_fail(monkeypatch)
    it = iter(loader)
    with pytest.raises(WriterBug, match="resample of sample"):
        within(lambda: next(it))
    assert threads and all(name.startswith("fastload-resample") for name in threads)
    decoder = loader._decoder
    assert (decoder.resampler, decoder.scaled_batches > warm) == ("torch", path == "scaled")
    rest, _ = within(lambda: [loader.last_batch_indices for _ in it])
    assert rest == [list(range(k, k + 4)) for k in range(4, count, 4)]  # the epoch goes on
    assert within(lambda: indices_seen(loader))[0] == list(range(count))  # and a new one


# ------------------------------------------------ two iterators advancing in turn
def _alternate(loader, lead_is_first: bool, pause: float):
    """``it1, it2 = iter(loader), iter(loader)``; the lead advances two batches, then lag
    and lead alternate (``pause`` seconds before each step: the caller's work, while each
    decoder finishes its batches in flight). Returns each step's (who, outcome)."""
    it1, it2 = iter(loader), iter(loader)
    lead, lag = (it1, it2) if lead_is_first else (it2, it1)
    steps = []

    def step(name, it):
        time.sleep(pause)
        try:
            next(it)
            steps.append((name, list(loader.last_batch_indices)))
        except StopIteration:
            steps.append((name, "stop"))
        except SampleError as err:
            steps.append((name, err))

    def run():
        step("lead", lead)
        step("lead", lead)
        for _ in range(4):
            step("lag", lag)
            step("lead", lead)

    within(run, 60)
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("pause", [0.2, 0.0], ids=["paced", "back-to-back"])
@pytest.mark.parametrize("lead_is_first", [True, False], ids=["shared-leads", "private-leads"])
def test_two_iterators_in_turn_each_raise_for_the_corrupt_jpeg_they_decoded(
        folder, lead_is_first, pause):
    dataset = ImageFolder(folder, SMALL)
    bad = dataset.samples[13][0]
    with open(bad, "rb") as f:
        damaged = scramble_scan(f.read())
    with open(bad, "wb") as f:
        f.write(damaged)
    loader = fastload.DataLoader(dataset, batch_size=4)
    steps = _alternate(loader, lead_is_first, pause)
    outcomes = {"lead": [], "lag": []}
    for who, outcome in steps:
        outcomes[who].append(outcome)
    for who in ("lead", "lag"):  # each: three clean batches, its own error, the end
        got = outcomes[who]
        assert got[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], (who, steps)
        assert isinstance(got[3], SampleError), (who, steps)
        assert got[3].names == [f"file '{bad}'"] and "Corrupt JPEG data" in str(got[3])
        assert all(o == "stop" for o in got[4:]), (who, steps)


def test_two_iterators_in_turn_skip_the_corrupt_jpeg_each_and_finish(folder):
    dataset = ImageFolder(folder, SMALL)
    bad = dataset.samples[6][0]
    with open(bad, "rb") as f:
        damaged = scramble_scan(f.read())
    with open(bad, "wb") as f:
        f.write(damaged)
    loader = fastload.DataLoader(dataset, batch_size=4, on_error="skip")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        steps = _alternate(loader, True, 0.05)
    for who in ("lead", "lag"):
        got = [o for w, o in steps if w == who and o != "stop"]
        assert [i for batch in got for i in batch] == [i for i in range(16) if i != 6]
    assert loader.skipped == [f"file '{bad}'"] * 2


def test_a_file_replaced_by_another_image_is_read_at_its_new_size(folder):
    transform = T.Compose([T.Resize(24), T.CenterCrop(24), T.ToTensor()])
    dataset = ImageFolder(folder, transform)
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert len(indices_seen(loader)) == 16
    path = dataset.samples[3][0]
    Image.open(path).convert("RGB").resize((40, 90)).save(path, format="JPEG")
    images = torch.cat([x for x, _ in within(lambda: list(loader))[0]])
    assert (images[3] - transform(Image.open(path).convert("RGB"))).abs().mean() < 0.01


def _jpeg_of_length(image: Image.Image, length: int) -> bytes:
    """``image`` as a JPEG of exactly ``length`` bytes: a comment segment after SOI pads it."""
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=75)
    data = out.getvalue()
    pad = length - len(data) - 4
    assert 0 <= pad < 65533, (len(data), length)
    return data[:2] + b"\xff\xfe" + (pad + 2).to_bytes(2, "big") + b"\0" * pad + data[2:]


def test_a_file_replaced_by_another_image_of_the_same_length_is_read_at_its_new_size(folder):
    transform = T.Compose([T.Resize(24), T.CenterCrop(24), T.ToTensor()])
    dataset = ImageFolder(folder, transform)
    path = dataset.samples[3][0]
    wide = Image.open(path).convert("RGB").resize((90, 40))
    tall = Image.open(path).convert("RGB").resize((40, 90))
    with open(path, "wb") as f:
        f.write(_jpeg_of_length(wide, 20000))
    loader = fastload.DataLoader(dataset, batch_size=4)
    assert len(indices_seen(loader)) == 16
    before = os.stat(path).st_mtime_ns
    with open(path, "wb") as f:  # the same length, another size, a later time
        f.write(_jpeg_of_length(tall, 20000))
    os.utime(path, ns=(before + 10**9, before + 10**9))
    images = torch.cat([x for x, _ in within(lambda: list(loader))[0]])
    assert (images[3] - transform(Image.open(path).convert("RGB"))).abs().mean() < 0.01


@pytest.mark.parametrize("damage", ["truncated", "scrambled png"])
def test_a_loader_whose_epoch_raised_is_freed_with_its_threads_when_deleted(folder, damage):
    import gc
    import weakref

    dataset = ImageFolder(folder, SMALL)
    path = dataset.samples[5][0]
    if damage == "truncated":  # Pillow's error, raised at the read
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 3])
    else:  # DALI's decoder throws in its thread pool
        _broken_png_named_jpg(folder, dataset, 5)
    threads = set(threading.enumerate())
    loader = fastload.DataLoader(dataset, batch_size=4)
    freed = weakref.ref(loader)
    gc.disable()  # freed by reference counting: no cycle waits for the collector
    try:
        try:
            for _ in loader:
                pass
        except SampleError:
            pass
        del loader
        deadline = time.monotonic() + 10
        while set(threading.enumerate()) - threads and time.monotonic() < deadline:
            time.sleep(0.05)
        assert freed() is None
        assert not set(threading.enumerate()) - threads
    finally:
        gc.enable()
