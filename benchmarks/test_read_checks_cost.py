"""Cost of the read-time integrity checks: the per-record CRC-32 and the damaged-JPEG check.

Every LMDB record is checked against ``checksums.crc32`` before its bytes reach a decoder;
a folder file is decoded strictly until it is once found intact (``fastload.loader.damage``).
Measured side by side in one run:

* the CRC-32 of a batch of 64 records (microseconds per batch) against the time the loader
  takes to make a batch of 64 (the (d) row's work: LMDB read, decode, RandomResizedCrop,
  flip, normalise), as a share;
* whole epochs of ``fastload.DataLoader`` over the same ``LMDBDataset`` with the checks on
  and with the checksums switched off (``reader.checksums = None``), rounds alternating, as
  a ratio of images/s (median and range over rounds);
* the candidates for detecting silently damaged JPEG data, per batch of 64 and whether
  each one finds the damage of ``tests/damage.py`` (scrambled scan bytes, markers intact):
  a marker scan (``parse_jpeg``), Pillow's 1/8-scale ``draft`` decode, strict ``simplejpeg``
  decodes (full size RGB and grey, 1/8 scale RGB, 1/8 scale grey: the one the loader uses where it
  cannot decode strictly itself);
* whole epochs over the same files as an ImageFolder, the first one (every file checked:
  the check cache emptied before it) against later ones (cache kept), rounds alternating,
  as images/s and CPU milliseconds per image.

Run: ``pytest benchmarks/test_read_checks_cost.py -s`` (``FASTLOAD_BENCH_IMAGES=N`` for
the tree size; ``--benchmark-disable`` for a smoke run).
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

import pytest
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.format.constants import crc32

BATCH = 64
ROUNDS = 5

TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@pytest.fixture(scope="module")
def lmdb_tree(convert_tree, tmp_path_factory):
    return convert_folder(convert_tree, tmp_path_factory.mktemp("checks") / "db",
                          progress=False).path


def _epoch(loader) -> tuple[float, int]:
    start = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return time.perf_counter() - start, images


def _epoch_cpu(loader) -> tuple[float, float]:
    """(images/s, CPU ms per image of this process, all threads) of one epoch."""
    start, cpu = time.perf_counter(), time.process_time()
    images = sum(len(labels) for _, labels in loader)
    return images / (time.perf_counter() - start), 1e3 * (time.process_time() - cpu) / images


def test_read_checks_cost_side_by_side(lmdb_tree, benchmark):
    dataset = fastload.LMDBDataset(lmdb_tree, transform=TRAIN)
    reader = dataset.reader
    checksums = reader.checksums
    values = [reader.record(i) for i in range(min(len(reader), BATCH))]
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0,
                                 num_workers=2, drop_last=False)
    _epoch(loader)  # warm-up: graph built, page cache filled
    on_rates, off_rates, ratios = [], [], []
    for _ in range(ROUNDS):
        reader.checksums = checksums
        seconds, images = _epoch(loader)
        on = images / seconds
        reader.checksums = None
        seconds, images = _epoch(loader)
        off = images / seconds
        on_rates.append(on)
        off_rates.append(off)
        ratios.append(on / off)
    reader.checksums = checksums
    reps = 200
    start = time.perf_counter()
    for _ in range(reps):
        for value in values:
            crc32(value)
    crc_us = 1e6 * (time.perf_counter() - start) / reps * BATCH / len(values)
    batch_ms = 1e3 * BATCH / statistics.median(on_rates)
    info = {
        "crc_us_per_batch_of_64": crc_us,
        "loader_ms_per_batch_of_64": batch_ms,
        "crc_share_of_batch": crc_us / 1e3 / batch_ms,
        "imgs_per_s_checks_on_median": statistics.median(on_rates),
        "imgs_per_s_checks_off_median": statistics.median(off_rates),
        "ratio_on_over_off_median": statistics.median(ratios),
        "ratio_on_over_off_range": [min(ratios), max(ratios)],
    }
    benchmark.extra_info.update(info)
    print(f"\nCRC-32 of a batch of {BATCH}: {crc_us:.0f} us = {100 * info['crc_share_of_batch']:.2f}% "
          f"of the loader's {batch_ms:.1f} ms per batch; epochs with checks / without: "
          f"median {info['ratio_on_over_off_median']:.3f} (range {min(ratios):.3f}-"
          f"{max(ratios):.3f}) over {ROUNDS} alternating rounds")
    benchmark.extra_info.update(_detection_alternatives(reader, reps=20))
    for name in _CANDIDATES:
        info = benchmark.extra_info
        print(f"damage detection, {name}: {info[name + '_ms_per_batch']:.1f} ms per batch of "
              f"{BATCH}, finds {info[name + '_found']} of {info['damaged_images']} damaged")
    benchmark.pedantic(lambda: [crc32(v) for v in values], rounds=3, iterations=1)


def _pillow_draft(data: bytes) -> None:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
        image.load()


def _strict(**kwargs):
    import simplejpeg

    return lambda data: simplejpeg.decode_jpeg(data, strict=True, **kwargs)


def _markers(data: bytes) -> None:
    from fastload.data.format.jpeg import parse_jpeg

    parse_jpeg(data)


_CANDIDATES = {
    "marker_scan": _markers,
    "pillow_draft_eighth": _pillow_draft,
    "strict_full_rgb": _strict(),
    # simplejpeg scales only to meet min_height/min_width: min_factor alone decodes full size
    "strict_full_grey": _strict(colorspace="GRAY"),
    "strict_eighth_rgb": _strict(min_height=1, min_width=1, min_factor=8),
    "strict_eighth_grey": _strict(min_height=1, min_width=1, min_factor=8, colorspace="GRAY"),
}


def _detection_alternatives(reader, reps: int) -> dict[str, float]:
    """Each candidate's time per batch of 64 and how many scrambled images it finds."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from damage import scramble_scan

    images = [bytes(reader.image_bytes(i)[0]) for i in range(min(len(reader), BATCH))]
    damaged = [scramble_scan(data) for data in images[:16]]
    scale = BATCH / len(images)
    out: dict[str, float] = {"damaged_images": len(damaged)}
    for name, check in _CANDIDATES.items():
        start = time.perf_counter()
        for _ in range(reps):
            for data in images:
                check(data)
        out[name + "_ms_per_batch"] = 1e3 * (time.perf_counter() - start) / reps * scale
        found = 0
        for data in damaged:
            try:
                check(data)
            except Exception:  # noqa: BLE001 - any failure is a detection
                found += 1
        out[name + "_found"] = found
    return out


def test_folder_damage_check_first_epoch_against_later_ones(convert_tree, benchmark):
    """The folder path's check: the first epoch decodes each file strictly once, later
    epochs pay a fstat per file. Rounds alternate (cache emptied / kept)."""
    dataset = ImageFolder(convert_tree, TRAIN)
    loader = fastload.DataLoader(dataset, batch_size=BATCH, shuffle=True, seed=0,
                                 num_workers=2, drop_last=False)
    source = loader._source
    _epoch_cpu(loader)  # warm-up: graph built, page cache filled, files checked
    first, later = [], []
    for _ in range(ROUNDS):
        source._checked[:] = -2  # forget every check: this epoch pays them again
        first.append(_epoch_cpu(loader))
        later.append(_epoch_cpu(loader))
    info = {
        "first_epoch_imgs_per_s_median": statistics.median(r for r, _ in first),
        "later_epoch_imgs_per_s_median": statistics.median(r for r, _ in later),
        "first_epoch_cpu_ms_per_img_median": statistics.median(c for _, c in first),
        "later_epoch_cpu_ms_per_img_median": statistics.median(c for _, c in later),
        "first_over_later_imgs_per_s": [f[0] / la[0] for f, la in zip(first, later, strict=True)],
    }
    benchmark.extra_info.update(info)
    print(f"\nfolder, first epoch (every file decoded strictly) "
          f"{info['first_epoch_imgs_per_s_median']:.0f} img/s, "
          f"{info['first_epoch_cpu_ms_per_img_median']:.2f} CPU ms/img; later epochs "
          f"{info['later_epoch_imgs_per_s_median']:.0f} img/s, "
          f"{info['later_epoch_cpu_ms_per_img_median']:.2f} CPU ms/img "
          f"(medians of {ROUNDS} alternating rounds)")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_lmdb_damage_check_of_a_markers_set_first_epoch_against_later_ones(
        convert_tree, tmp_path_factory, benchmark):
    """A set converted with ``check="markers"`` (its sidecar does not say "strict"): the
    first epoch decodes each record strictly once, later epochs pay nothing more, as a set
    converted with the default strict check does from its first epoch. Rounds alternate
    (cache emptied / kept / the strict set)."""
    root = tmp_path_factory.mktemp("checks_markers")
    markers = convert_folder(convert_tree, root / "markers", progress=False,
                             check="markers").path
    strict = convert_folder(convert_tree, root / "strict", progress=False).path
    loaders = [fastload.DataLoader(fastload.LMDBDataset(path, transform=TRAIN),
                                   batch_size=BATCH, shuffle=True, seed=0, num_workers=2)
               for path in (markers, strict)]
    for loader in loaders:
        _epoch_cpu(loader)  # warm-up: graph built, page cache filled, records checked
    source = loaders[0]._source
    first, later, trusted = [], [], []
    for _ in range(ROUNDS):
        source._checked[:] = False  # forget every check: this epoch pays them again
        first.append(_epoch_cpu(loaders[0]))
        later.append(_epoch_cpu(loaders[0]))
        trusted.append(_epoch_cpu(loaders[1]))
    info = {}
    for name, runs in (("first", first), ("later", later), ("strict_set", trusted)):
        info[f"{name}_imgs_per_s_median"] = statistics.median(r for r, _ in runs)
        info[f"{name}_cpu_ms_per_img_median"] = statistics.median(c for _, c in runs)
    benchmark.extra_info.update(info)
    print(f"\nLMDB converted with check='markers': first epoch (every record decoded strictly) "
          f"{info['first_imgs_per_s_median']:.0f} img/s, "
          f"{info['first_cpu_ms_per_img_median']:.2f} CPU ms/img; later epochs "
          f"{info['later_imgs_per_s_median']:.0f} img/s, "
          f"{info['later_cpu_ms_per_img_median']:.2f} CPU ms/img; the strictly converted set "
          f"{info['strict_set_imgs_per_s_median']:.0f} img/s, "
          f"{info['strict_set_cpu_ms_per_img_median']:.2f} CPU ms/img "
          f"(medians of {ROUNDS} alternating rounds)")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
