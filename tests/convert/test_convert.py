"""fastload convert: sources, keep/convert/skip decisions, resume after SIGKILL, refusals."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import ConvertError, convert_folder
from fastload.data.convert.source_list import list_source
from fastload.data.format.constants import CHECKSUM_FILE, ERRORS_FILE, LABELS_FILE, PARTIAL_FILE
from fastload.data.format.reader import LMDBReader, acquire_env, release_env
from fastload.data.format.verify import verify_lmdb


def cli(argv: list[str]) -> int:
    """The ``fastload`` command, run in-process."""
    from fastload.tools.cli import main

    return main(argv)


def _jpeg(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _png_bomb(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` pixels (only the header is real)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _jpeg_bomb(good: bytes, width: int, height: int) -> bytes:
    """A valid JPEG whose start-of-frame claims ``width x height``."""
    sof = good.index(b"\xff\xc0")
    return good[: sof + 5] + struct.pack(">HH", height, width) + good[sof + 9:]


def _photo(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (width + height)], -1)
    noise = rng.integers(0, 30, size=(height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


# name -> (bytes, expected outcome: "kept", "converted" or a reason fragment of a skip)
def _bad_files() -> dict[str, tuple[bytes, str]]:
    photo = _photo(64, 48, 0)
    good = _jpeg(photo, quality=90)
    rgba = photo.convert("RGBA")
    rgba.putalpha(Image.fromarray(np.tile(np.array([0, 255], np.uint8).repeat(32), (48, 1))))
    gray16 = Image.fromarray(np.arange(48 * 64, dtype=np.uint16).reshape(48, 64) * 21)
    return {
        "a_good.jpg": (good, "kept"),
        "b_progressive.jpeg": (_jpeg(photo, quality=85, progressive=True), "kept"),
        "c_upper.JPG": (_jpeg(photo, quality=70), "kept"),
        "d_png.png": (_png(photo), "converted"),
        "e_gray.jpg": (_jpeg(photo.convert("L")), "converted"),
        "f_cmyk.jpg": (_jpeg(photo.convert("CMYK")), "converted"),
        "g_palette.png": (_png(photo.convert("P", palette=Image.Palette.ADAPTIVE)), "converted"),
        "h_16bit.png": (_png(gray16), "converted"),
        "i_rgba.png": (_png(rgba), "converted"),
        "j_corrupt.jpg": (good[:2] + b"\0" * 40 + good[42:], "corrupt JPEG"),
        "k_truncated.jpg": (good[: len(good) * 2 // 3], "truncated JPEG"),
        "l_empty.jpg": (b"", "empty file"),
        "m_text.jpg": (b"this is not an image\n" * 10, "not an image"),
        "n_bomb.png": (_png_bomb(20000, 20000), "decompression bomb"),
        "o_bomb.jpg": (_jpeg_bomb(good, 30000, 30000), "decompression bomb"),
    }


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_tree")
    (root / "cls").mkdir()
    for name, (data, _) in _bad_files().items():
        (root / "cls" / name).write_bytes(data)
    return root


@pytest.fixture(scope="module")
def mixed_tree(synth_root, tmp_path_factory):
    """synth_root/train plus unreadable and non-JPEG files spread over its classes."""
    root = tmp_path_factory.mktemp("mixed") / "train"
    shutil.copytree(synth_root / "train", root)
    classes = sorted(p.name for p in root.iterdir())
    files = _bad_files()
    for i, name in enumerate(["d_png.png", "l_empty.jpg", "m_text.jpg", "e_gray.jpg", "k_truncated.jpg"]):
        (root / classes[i % len(classes)] / f"{i:02d}{name}").write_bytes(files[name][0])
    return root


def _dump(db) -> dict:
    """Every key and value, the checksum and label sidecars and the skip list of ``db``."""
    env, key = acquire_env(db)
    try:
        with env.begin() as txn:
            records = list(txn.cursor().iternext(keys=True, values=True))
    finally:
        release_env(key)
    return {
        "records": records,
        "checksums": (db / CHECKSUM_FILE).read_bytes(),
        "labels": (db / LABELS_FILE).read_bytes(),
        "skipped": json.loads((db / ERRORS_FILE).read_text())["skipped"],
    }


def test_source_order_equals_torchvision_imagefolder(tmp_path):
    from torchvision.datasets import ImageFolder

    for rel in ["b/z.jpg", "b/A.JPG", "b/sub/2/x.png", "b/sub/1/y.jpeg", "b/notes.txt",
                "a/10.jpg", "a/9.jpg", "a/deep/er/1.webp", "c/only.bmp"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    source = list_source(tmp_path)
    folder = ImageFolder(tmp_path, loader=lambda path: path)
    assert source.classes == folder.classes
    assert source.samples == [(str(p), label) for p, label in folder.samples]


def test_folder_to_lmdb_keeps_jpeg_bytes_in_imagefolder_order(synth_lmdb, synth_root):
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(synth_root / "train")
    reader = LMDBReader(synth_lmdb)
    assert reader.targets == folder.targets and reader.classes == folder.classes
    for i, (path, label) in enumerate(folder.samples):
        data, stored_label, (height, width) = reader.image_bytes(i)
        with open(path, "rb") as handle:
            assert bytes(data) == handle.read()
        with Image.open(path) as image:
            assert image.size == (width, height)
        assert stored_label == label


@pytest.mark.parametrize("shards", [None, 3])
def test_records_waiting_for_their_strict_check_keep_their_own_bytes(tmp_path, shards):
    # More files than the writer holds while their checks run (its window), of varied
    # sizes; with shards, the next shard's first records are read while one finishes.
    from fastload.data.format.dataset import LMDBDataset

    rng = np.random.default_rng(5)
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    for i in range(400):
        side = int(rng.integers(8, 48))
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        (src / f"{i:04d}.jpg").write_bytes(_jpeg(Image.fromarray(pixels), quality=90))
    report = convert_folder(src.parent, tmp_path / "db", workers=2, check="decode",
                            shards=shards, progress=False)
    assert report.stored == 400
    reader = LMDBDataset(tmp_path / "db").reader
    for i, path in enumerate(sorted(src.iterdir())):
        assert bytes(reader.image_bytes(i)[0]) == path.read_bytes(), path.name


def test_every_kind_of_file_is_stored_or_reported(bad_tree, tmp_path, capsys):
    dst = tmp_path / "db"
    assert cli(["convert", str(bad_tree), str(dst), "--workers", "2", "--no-progress"]) == 0
    assert "stored 9 + skipped 6 = seen 15" in capsys.readouterr().out
    files = _bad_files()
    errors = json.loads((dst / ERRORS_FILE).read_text())
    reasons = {os.path.basename(e["path"]): e["reason"] for e in errors["skipped"]}
    assert errors["seen"] == 15 and errors["stored"] == 9
    for name, (_, outcome) in files.items():
        if outcome not in ("kept", "converted"):
            assert outcome in reasons[name], (name, reasons.get(name))
    stored = [(name, data, outcome) for name, (data, outcome) in sorted(files.items())
              if outcome in ("kept", "converted")]
    reader = LMDBReader(dst)
    assert len(reader) == len(stored)
    for i, (name, original, outcome) in enumerate(stored):
        data, _, (height, width) = reader.image_bytes(i)
        with Image.open(io.BytesIO(bytes(data))) as image:
            assert image.format == "JPEG" and image.mode == "RGB", name
            assert image.size == (width, height) == (64, 48), name
            pixels = np.asarray(image).astype(int)
        assert (bytes(data) == original) == (outcome == "kept"), name
        if name == "e_gray.jpg":
            assert np.abs(pixels[..., 0] - pixels[..., 2]).max() <= 3
        if outcome == "converted":  # the pixels ImageFolder's loader gives (alpha dropped,
            # 16-bit clipped) as a quality-90 4:4:4 JPEG (no RGB JPEG is among them: each
            # keeps its own sampling); composite=True: test_convert_input
            with Image.open(io.BytesIO(original)) as source:
                expected = _jpeg(source.convert("RGB"), quality=90, subsampling=0)
            with Image.open(io.BytesIO(expected)) as image:
                assert np.array_equal(pixels, np.asarray(image)), name
    assert verify_lmdb(dst, full=True).ok


def test_dali_decodes_every_kept_and_converted_record(bad_tree, tmp_path):
    from nvidia.dali import fn, pipeline_def, types

    dst = convert_folder(bad_tree, tmp_path / "db", workers=1, progress=False).path
    reader = LMDBReader(dst)

    @pipeline_def(batch_size=len(reader), num_threads=1, device_id=None)
    def caffe_pipeline():
        jpegs, labels = fn.readers.caffe(path=str(dst), random_shuffle=False)
        return fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), labels

    pipe = caffe_pipeline()
    pipe.build()
    images, labels = pipe.run()
    for i in range(len(reader)):
        _, label, (height, width) = reader.image_bytes(i)
        assert np.array(images.at(i)).shape == (height, width, 3)
        assert int(np.array(labels.at(i)).reshape(-1)[0]) == label


def test_decode_check_keeps_the_same_records_as_the_marker_check(bad_tree, tmp_path):
    markers = convert_folder(bad_tree, tmp_path / "m", workers=2, progress=False)
    decoded = convert_folder(bad_tree, tmp_path / "d", workers=2, progress=False, check="decode")
    assert (decoded.stored, decoded.kept, decoded.skipped) == (9, 3, 6)
    assert _dump(tmp_path / "d")["records"] == _dump(tmp_path / "m")["records"]
    assert markers.errors == decoded.errors


def test_strict_stops_at_the_first_unreadable_file_naming_it(bad_tree, tmp_path, capsys):
    assert cli(["convert", str(bad_tree), str(tmp_path / "db"), "--strict", "--no-progress"]) == 1
    assert "j_corrupt.jpg" in capsys.readouterr().err
    with pytest.raises(ConvertError, match="j_corrupt.jpg"):
        convert_folder(bad_tree, tmp_path / "db2", strict=True, progress=False, workers=1)


def test_max_side_reencodes_only_larger_images(synth_root, tmp_path):
    report = convert_folder(synth_root / "train", tmp_path / "db", max_side=100, quality=80,
                            workers=2, progress=False)
    reader = LMDBReader(tmp_path / "db")
    folder = list_source(synth_root / "train").samples
    resized = 0
    for i, (path, _) in enumerate(folder):
        data, _, (height, width) = reader.image_bytes(i)
        with Image.open(path) as image:
            long_side = max(image.size)
            aspect = image.width / image.height
        if long_side <= 100:
            assert bytes(data) == open(path, "rb").read()
        else:
            resized += 1
            assert max(height, width) == 100 and abs(width / height - aspect) < 0.05
    assert 0 < resized == report.reencoded and report.kept == 48 - resized
    assert reader.meta["options"]["max_side"] == 100


def test_a_resized_jpeg_keeps_its_chroma_sampling_and_a_png_is_stored_at_4_4_4(tmp_path):
    from PIL import JpegImagePlugin

    y, x = np.mgrid[0:64, 0:64]
    stripes = np.zeros((64, 64, 3), np.uint8)  # 2-pixel red, green and blue stripes
    stripes[..., 0] = np.where(x % 6 < 2, 255, 0)
    stripes[..., 1] = np.where(x % 6 // 2 == 1, 255, 0)
    stripes[..., 2] = np.where(x % 6 >= 4, 255, 0)
    (tmp_path / "src" / "a").mkdir(parents=True)
    Image.fromarray(stripes).save(tmp_path / "src" / "a" / "stripes.png")
    for sampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0 photographs, re-encoded to 64 px
        photo = Image.fromarray(np.dstack([x * 2, y * 3, x + y]).astype(np.uint8)).resize((160, 160))
        photo.save(tmp_path / "src" / "a" / f"photo{sampling}.jpg", quality=90,
                   subsampling=sampling)
    convert_folder(tmp_path / "src", tmp_path / "db", max_side=64, workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    paths = [path for path, _ in list_source(tmp_path / "src").samples]
    for i, path in enumerate(paths):
        with Image.open(io.BytesIO(bytes(reader.image_bytes(i)[0]))) as stored:
            got = JpegImagePlugin.get_sampling(stored)
            pixels = np.asarray(stored.convert("RGB"), dtype=np.float64) / 255
        if path.endswith(".png"):  # lossless source: no chroma halved
            assert got == 0
            assert np.abs(pixels - stripes / 255).mean() < 0.03
        else:
            assert got == int(path[-5])


@pytest.mark.filterwarnings("ignore:.*outside the CSV's folder")  # its rows point at synth_root
def test_csv_source_with_class_names_and_with_integer_labels(synth_root, tmp_path):
    samples = list_source(synth_root / "train").samples[::4]
    names = sorted({os.path.basename(os.path.dirname(p)) for p, _ in samples})
    rows = [f"{os.path.relpath(p, tmp_path)},{os.path.basename(os.path.dirname(p))}"
            for p, _ in reversed(samples)]
    (tmp_path / "named.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    reader = LMDBReader(convert_folder(tmp_path / "named.csv", tmp_path / "db1",
                                       progress=False, workers=1).path)
    assert reader.classes == names
    assert reader.targets == [names.index(os.path.basename(os.path.dirname(p)))
                              for p, _ in reversed(samples)]
    assert bytes(reader.image_bytes(0)[0]) == open(samples[-1][0], "rb").read()
    (tmp_path / "ints.csv").write_text("".join(f"{p},{i % 3 + 5}\n" for i, (p, _) in enumerate(samples)))
    reader = LMDBReader(convert_folder(tmp_path / "ints.csv", tmp_path / "db2",
                                       progress=False, workers=1).path)
    assert reader.classes == [str(i) for i in range(8)]
    assert reader.targets == [i % 3 + 5 for i in range(len(samples))]


def test_finished_database_is_never_overwritten_without_overwrite(synth_root, tmp_path, capsys):
    dst = tmp_path / "db"
    convert_folder(synth_root / "val", dst, progress=False, workers=1)
    before = _dump(dst)
    with pytest.raises(FileExistsError, match="already holds a finished.*overwrite=True"):
        convert_folder(synth_root / "val", dst, progress=False, workers=1)
    assert cli(["convert", str(synth_root / "val"), str(dst), "--no-progress"]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert _dump(dst) == before
    report = convert_folder(synth_root / "train", dst, overwrite=True, progress=False, workers=1)
    assert report.stored == 48 and len(LMDBReader(dst)) == 48


def test_a_folder_with_other_files_is_never_touched(synth_root, tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "thesis.tex").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match="not part of a fastload database"):
            convert_folder(synth_root / "val", tmp_path / "db", overwrite=overwrite, progress=False)
    assert sorted(os.listdir(tmp_path / "db")) == ["thesis.tex"]


@pytest.mark.parametrize(
    "make_source, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no class folders"),
        (lambda p: (p / "e" / "c").mkdir(parents=True) or p / "e", "no image files"),
        (lambda p: (p / "x.txt").write_text("a") and p / "x.txt", "not a .csv"),
        (lambda p: (p / "x.csv").write_text("a,b,c\n") and p / "x.csv", "3 columns"),
    ],
)
def test_bad_sources_get_one_clear_sentence(tmp_path, make_source, message, capsys):
    src = make_source(tmp_path)
    with pytest.raises((FileNotFoundError, ValueError), match=message):
        convert_folder(src, tmp_path / "out", progress=False)
    assert cli(["convert", str(src), str(tmp_path / "out2"), "--no-progress"]) == 1
    assert message in capsys.readouterr().err


def test_bad_options_and_destination_inside_source_are_refused(synth_root, tmp_path):
    with pytest.raises(ValueError, match="max_side=0"):
        convert_folder(synth_root, tmp_path / "db", max_side=0)
    with pytest.raises(ValueError, match="quality=101"):
        convert_folder(synth_root, tmp_path / "db", quality=101)
    with pytest.raises(ValueError, match="inside the source folder"):
        convert_folder(synth_root / "train", synth_root / "train" / "db")


# ----- crash and resume -------------------------------------------------------------------

def _convert_cmd(src, dst, *extra):
    return [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
            "--workers", "2", "--commit-every", "5", "--no-progress", *extra]


def _no_process_mentions(text: str) -> bool:
    import psutil

    for _ in range(50):
        alive = [p for p in psutil.process_iter(["cmdline"]) if text in " ".join(p.info["cmdline"] or [])]
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def mixed_reference(mixed_tree, tmp_path_factory):
    dst = tmp_path_factory.mktemp("reference") / "db"
    report = convert_folder(mixed_tree, dst, workers=1, progress=False)
    assert (report.stored, report.skipped) == (50, 3)
    return _dump(dst)


@pytest.mark.slow
@pytest.mark.parametrize(
    "crashes",
    [["after_commit:1"], ["mid_txn:8"], ["after_progress:5"], ["after_commit:10"],
     ["after_commit:3", "mid_txn:4"]],
    ids=["after-first-commit", "inside-a-transaction", "mid-run", "near-the-end", "twice"],
)
def test_convert_resumes_after_sigkill_identically(mixed_tree, mixed_reference, tmp_path, crashes):
    dst = tmp_path / "db"
    for crash in crashes:
        env = {**os.environ, "FASTLOAD_TEST_CRASH": crash}
        result = subprocess.run(_convert_cmd(mixed_tree, dst), env=env, capture_output=True,
                                timeout=300)
        assert result.returncode == -signal.SIGKILL, result.stderr.decode()
        assert (dst / PARTIAL_FILE).exists()
        with pytest.raises(ValueError, match="partial conversion"):
            LMDBReader(dst)
        assert _no_process_mentions(str(dst)), "pool workers outlived the killed converter"
    result = subprocess.run(_convert_cmd(mixed_tree, dst), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "stored 50 + skipped 3 = seen 53" in result.stdout and "resumed a partial" in result.stdout
    assert _dump(dst) == mixed_reference
    assert not (dst / PARTIAL_FILE).exists()


def test_transactions_committed_after_the_last_progress_record_are_redone(
        mixed_tree, mixed_reference, tmp_path):
    dst = tmp_path / "db"
    command = _convert_cmd(mixed_tree, dst)
    command[command.index("--commit-every") + 1] = "60"  # one batch: its progress comes last
    env = {**os.environ, "FASTLOAD_TEST_CRASH": "mid_txn:40"}  # after a 32-record commit
    assert subprocess.run(command, env=env, capture_output=True).returncode == -signal.SIGKILL
    import lmdb

    with lmdb.open(str(dst), readonly=True, lock=False) as env_:
        assert env_.stat()["entries"] == 32  # committed, but the progress record says 0
    assert json.loads((dst / PARTIAL_FILE).read_text())["stored"] == 0
    assert subprocess.run(command, capture_output=True).returncode == 0
    assert _dump(dst) == mixed_reference


@pytest.mark.parametrize("records_per_txn", [32, 4])
def test_a_full_map_grows_and_the_batch_is_redone(mixed_tree, mixed_reference, tmp_path,
                                                  monkeypatch, records_per_txn):
    import fastload.data.convert.database
    import fastload.data.format.writer

    monkeypatch.setattr(fastload.data.format.writer, "RECORDS_PER_TXN", records_per_txn)
    monkeypatch.setattr(fastload.data.format.writer, "MIN_MAP_SIZE", 0)
    monkeypatch.setattr(fastload.data.convert.database, "_initial_map_size",
                        lambda total, count: 256 << 10)
    convert_folder(mixed_tree, tmp_path / "db", workers=1, commit_every=20, progress=False)
    assert (tmp_path / "db" / "data.mdb").stat().st_size > 256 << 10  # the map had to grow
    assert _dump(tmp_path / "db") == mixed_reference


def test_resume_refuses_different_options_or_source(mixed_tree, synth_root, tmp_path):
    dst = tmp_path / "db"
    env = {**os.environ, "FASTLOAD_TEST_CRASH": "after_commit:2"}
    assert subprocess.run(_convert_cmd(mixed_tree, dst), env=env).returncode == -signal.SIGKILL
    with pytest.raises(ValueError, match="different source or with different options.*max_side"):
        convert_folder(mixed_tree, dst, max_side=64, progress=False)
    with pytest.raises(ValueError, match="source_fingerprint"):
        convert_folder(synth_root / "train", dst, progress=False)
    report = convert_folder(mixed_tree, dst, max_side=64, overwrite=True, progress=False)
    assert report.resumed_from == 0 and report.seen == 53


@pytest.mark.parametrize("stat_error", [-1000, +1000], ids=["grew", "shrank"])
def test_a_file_whose_size_changed_since_its_stat_is_read_whole(tmp_path, monkeypatch, stat_error):
    from fastload.data.convert import image_check

    path = tmp_path / "photo.jpg"
    payload = os.urandom(5000)
    path.write_bytes(payload)
    real_fstat = os.fstat

    def stale_fstat(fd):
        result = real_fstat(fd)
        return os.stat_result((*result[:6], result.st_size + stat_error, *result[7:]))

    monkeypatch.setattr(image_check.os, "fstat", stale_fstat)
    buffer, size = image_check._read_with_room(str(path), image_check.ScratchBuffer())
    start = image_check._HEADROOM
    assert bytes(buffer[start:start + size]) == payload
    assert len(buffer) >= start + size + image_check._TAILROOM


def test_a_picture_over_pillows_limit_is_refused_without_swapping_the_warning_filters(
        monkeypatch):
    """Between 1x and 2x ``MAX_IMAGE_PIXELS`` Pillow only warns; the check refuses the file
    and calls Pillow with the process's own filters (check threads run it side by side)."""
    import warnings

    from PIL import Image

    from fastload.data.convert.image_check import Unreadable, process_bytes

    opened_with = []
    real_open = Image.open

    def open_and_note(*args, **kwargs):
        opened_with.append(warnings.filters)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    monkeypatch.setattr(Image, "open", open_and_note)
    filters = warnings.filters
    with warnings.catch_warnings(record=True):  # the caller's own: Pillow's warning lands here
        warnings.simplefilter("always")
        inner = warnings.filters
        with pytest.raises(Unreadable, match="decompression bomb: 40x40 = 1600 pixels"):
            process_bytes(_png_bomb(40, 40))
        assert len(opened_with) == 1 and opened_with[0] is inner
    assert warnings.filters is filters


def test_a_conversion_that_keeps_every_jpeg_does_not_import_pillow(synth_root, tmp_path):
    """Pillow's import (about 12 ms) is for files that need it: a folder of JPEGs kept as they
    are, checked strictly or by their markers, converts without it."""
    script = (
        "import sys\n"
        "from fastload.data.convert.folder import convert_folder\n"
        f"for check in ('decode', 'markers'):\n"
        f"    convert_folder({str(synth_root / 'val')!r}, {str(tmp_path)!r} + '/' + check,\n"
        "                   check=check, workers=2, progress=False)\n"
        "print('PIL.Image' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
    assert verify_lmdb(tmp_path / "decode").ok and verify_lmdb(tmp_path / "markers").ok


def test_the_pixel_limit_assumed_before_pillow_is_imported_is_pillows_default():
    script = ("from fastload.data.convert.image_check import PILLOW_MAX_IMAGE_PIXELS\n"
              "from PIL import Image\n"
              "print(PILLOW_MAX_IMAGE_PIXELS, Image.MAX_IMAGE_PIXELS)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assumed, pillows = done.stdout.split()
    assert assumed == pillows


def test_a_jpeg_over_the_pixel_limit_the_user_set_is_refused(synth_root, monkeypatch):
    from fastload.data.convert.image_check import Unreadable, process_bytes

    jpeg = sorted((synth_root / "val").rglob("*.jpg"))[0].read_bytes()
    process_bytes(jpeg)  # within Pillow's default
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(Unreadable, match="decompression bomb: .* more than Pillow's limit of 1000"):
        process_bytes(jpeg)


def test_an_overwrite_that_stops_on_a_damaged_file_keeps_the_finished_database(
        synth_root, tmp_path):
    dst, src = tmp_path / "db", tmp_path / "src"
    convert_folder(synth_root / "val", dst, progress=False, workers=1)
    before = _dump(dst)
    shutil.copytree(synth_root / "train", src)
    damaged = sorted(src.rglob("*.jpg"))[30]
    good = damaged.read_bytes()
    damaged.write_bytes(good[: len(good) // 2])
    with pytest.raises(ConvertError, match="truncated JPEG"):
        convert_folder(src, dst, overwrite=True, strict=True, progress=False, workers=1)
    assert _dump(dst) == before and verify_lmdb(dst).ok  # untouched, still finished
    damaged.write_bytes(good)  # the same command after the fix replaces it
    report = convert_folder(src, dst, overwrite=True, strict=True, progress=False, workers=1)
    assert report.stored == 48 and len(LMDBReader(dst)) == 48
    assert verify_lmdb(dst).ok and not (dst / ".fastload-replacement").exists()
    assert sorted(p.name for p in dst.iterdir()) == sorted(
        ["data.mdb", "lock.mdb", "fastload.json", "checksums.crc32", "labels.i32", "errors.json"])


def test_an_overwrite_that_stores_no_file_keeps_the_finished_database(synth_root, tmp_path):
    dst, src = tmp_path / "db", tmp_path / "src"
    convert_folder(synth_root / "val", dst, progress=False, workers=1)
    before = _dump(dst)
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.jpg").write_bytes(b"not a picture")
    with pytest.raises(ConvertError, match=r"all 1 were skipped \(each reason in .*"
                                           r"\.fastload-replacement/errors.json'; the finished "
                                           r"database there is kept as it was\)"):
        convert_folder(src, dst, overwrite=True, progress=False, workers=1)
    assert _dump(dst) == before and verify_lmdb(dst).ok


def test_a_conversion_that_stores_no_file_fails_naming_the_source_and_errors_json(
        tmp_path, capsys):
    src = tmp_path / "src"
    for name in ("a", "b"):
        (src / name).mkdir(parents=True)
        (src / name / "x.jpg").write_bytes(b"not a picture")
    with pytest.raises(ConvertError, match=r"no file of .*src' could be stored: all 2 were "
                                           r"skipped \(each reason in .*errors.json'\)"):
        convert_folder(src, tmp_path / "db", progress=False, workers=1)
    assert len(json.loads((tmp_path / "db" / ERRORS_FILE).read_text())["skipped"]) == 2
    assert cli(["convert", str(src), str(tmp_path / "db2"), "--no-progress"]) == 1
    assert "then convert again with --overwrite" in capsys.readouterr().err
