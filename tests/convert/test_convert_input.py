"""Conversion stores what torchvision's ImageFolder loader gives, and bad input gets one
clear sentence."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from torchvision.datasets import ImageFolder

import fastload
from fastload.data.convert.folder import convert_folder
from fastload.data.convert.source_list import list_source


def _save(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _photo(width: int = 40, height: int = 32) -> Image.Image:
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // width, y * 255 // height, (x * y) % 256], -1).astype(np.uint8)
    return Image.fromarray(rgb, "RGB")


def _modes() -> dict[str, bytes]:
    """One file per mode the issue found differing from ImageFolder (or likely to)."""
    photo = _photo()
    rgba = photo.convert("RGBA")
    alpha = np.zeros((32, 40), np.uint8)
    alpha[:, 20:] = 255
    rgba.putalpha(Image.fromarray(alpha))
    palette = photo.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.info["transparency"] = 0
    gray16 = Image.fromarray(np.arange(32 * 40, dtype=np.uint16).reshape(32, 40) * 50)
    return {
        "a_rgba.png": _save(rgba, "PNG"),
        "b_palette_transparent.png": _save(palette, "PNG", transparency=0),
        "c_16bit.png": _save(gray16, "PNG"),
        "d_cmyk.jpg": _save(photo.convert("CMYK"), "JPEG", quality=95),
        "e_gray.jpg": _save(photo.convert("L"), "JPEG", quality=95),
        "f_gray.png": _save(photo.convert("L"), "PNG"),
        "g_la.png": _save(photo.convert("LA"), "PNG"),
    }


@pytest.fixture(scope="module")
def mode_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    (root / "cls").mkdir()
    for name, data in _modes().items():
        (root / "cls" / name).write_bytes(data)
    return root


def _as_quality_jpeg(image: Image.Image, quality: int) -> np.ndarray:
    """``image`` as conversion stores a source that is no RGB JPEG: at 4:4:4."""
    with Image.open(io.BytesIO(_save(image, "JPEG", quality=quality, subsampling=0))) as decoded:
        return np.asarray(decoded)


def test_stored_pixels_are_imagefolders_pixels_as_a_jpeg(mode_tree, tmp_path):
    db = convert_folder(mode_tree, tmp_path / "db", workers=1, progress=False, quality=95).path
    ours = fastload.LMDBDataset(db)
    theirs = ImageFolder(mode_tree)
    assert len(ours) == len(theirs) == len(_modes())
    for i in range(len(theirs)):
        expected = _as_quality_jpeg(theirs[i][0], 95)
        assert np.array_equal(np.asarray(ours[i][0]), expected), theirs.samples[i][0]


def test_composite_puts_transparent_pixels_on_white_and_scales_16_bit(mode_tree, tmp_path):
    db = convert_folder(mode_tree, tmp_path / "db", workers=1, progress=False,
                        composite=True).path
    ours = fastload.LMDBDataset(db)
    rgba = np.asarray(ours[0][0]).astype(int)
    assert rgba[:, :16].min() >= 245  # transparent left half: white
    gray16 = np.asarray(ours[2][0]).astype(int)
    assert 100 < gray16.mean() < 150  # 50 * index / 257 (mean 124), not clipped at 255


def test_composite_is_part_of_the_options_a_resume_must_match(mode_tree, tmp_path):
    plain = convert_folder(mode_tree, tmp_path / "db", workers=1, progress=False)
    with pytest.raises((FileExistsError, ValueError)):
        convert_folder(mode_tree, plain.path, workers=1, progress=False, composite=True)


def test_cli_composite_flag_reaches_the_converter(mode_tree, tmp_path):
    from fastload.tools.cli import main

    assert main(["convert", str(mode_tree), str(tmp_path / "db"), "--composite",
                 "--no-progress", "--workers", "1"]) == 0
    rgba = np.asarray(fastload.LMDBDataset(tmp_path / "db")[0][0]).astype(int)
    assert rgba[:, :16].min() >= 245


def test_cli_refuses_commit_every_zero(mode_tree, tmp_path, capsys):
    from fastload.tools.cli import main

    assert main(["convert", str(mode_tree), str(tmp_path / "db"), "--commit-every", "0",
                 "--no-progress"]) == 2
    assert "--commit-every should be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()


def test_empty_class_folder_raises_file_not_found_naming_it(mode_tree, tmp_path):
    import shutil

    root = tmp_path / "src"
    shutil.copytree(mode_tree, root)
    (root / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_class"):
        ImageFolder(root)
    with pytest.raises(FileNotFoundError, match="empty_class.*hold no image files"):
        list_source(root)


def test_non_utf8_csv_names_the_file_and_line(tmp_path):
    csv = tmp_path / "list.csv"
    csv.write_bytes(b"path,label\na.jpg,0\nb\xe9.jpg,1\n")
    with pytest.raises(ValueError, match=r"list.csv' line 3 is not UTF-8"):
        list_source(csv)


def test_csv_with_a_bom_is_read(tmp_path):
    csv = tmp_path / "list.csv"
    csv.write_bytes(b"\xef\xbb\xbfpath,label\na.jpg,0\n")
    assert list_source(csv).samples == [(str(tmp_path / "a.jpg"), 0)]


def test_csv_rows_leaving_the_csv_folder_are_reported(tmp_path):
    (tmp_path / "lists").mkdir()
    csv = tmp_path / "lists" / "list.csv"
    csv.write_text("in.jpg,0\n../out.jpg,1\n/abs/x.jpg,1\n")
    with pytest.warns(UserWarning, match=r"2 row\(s\) name files outside .* line 2"):
        samples = list_source(csv).samples
    assert samples[1] == (str(tmp_path / "out.jpg"), 1)


def test_a_fifo_or_a_device_in_the_source_is_skipped_naming_what_it_is(tmp_path):
    import json
    import os
    import warnings

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "ok.jpg").write_bytes(_save(_photo(), "JPEG"))
    os.mkfifo(src / "waits.jpg")  # no writer ever opens it: reading it would block forever
    listed = tmp_path / "list.csv"
    listed.write_text(f"path,label\n{src / 'ok.jpg'},0\n/dev/zero,0\n{src / 'waits.jpg'},0\n")
    for source, dst in ((tmp_path / "src", tmp_path / "db"), (listed, tmp_path / "db2")):
        with warnings.catch_warnings():  # /dev/zero lies outside the list's folder: said so
            warnings.simplefilter("ignore", UserWarning)
            report = convert_folder(source, dst, workers=1, progress=False)
        assert (report.stored, report.skipped) == ((1, 1) if dst.name == "db" else (1, 2))
        reasons = {e["path"]: e["reason"] for e in json.loads(
            (dst / "errors.json").read_text())["skipped"]}
        assert reasons[str(src / "waits.jpg")] == ("cannot read file: not a regular file but "
                                                   "a FIFO; list only image files")
    assert "a character device" in reasons["/dev/zero"]


def test_the_cli_prints_a_warning_as_one_line_naming_the_command(tmp_path, capsys):
    from fastload.tools.cli import main

    photo = tmp_path / "img" / "ok.jpg"
    photo.parent.mkdir()
    photo.write_bytes(_save(_photo(), "JPEG"))
    (tmp_path / "lists").mkdir()
    listed = tmp_path / "lists" / "list.csv"
    listed.write_text(f"path,label\n{photo},0\n")  # outside the list's folder: a warning
    assert main(["convert", str(listed), str(tmp_path / "db"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("fastload convert: warning: '") and "name files outside" in err
    assert ".py:" not in err and "UserWarning" not in err
