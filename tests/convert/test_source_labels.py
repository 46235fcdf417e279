"""One label rule for every conversion source, and reports that say what a record is: a
``-1`` or a ``cat`` among class indices costs its own sample only (reported in
``errors.json``), never a renumbering of the others; link members of a tar and list rows
that leave their folder through a symlink are reported as what they are."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.convert.source_list import list_source
from fastload.data.convert.sources.labels import MAX_CLASSES, integer_label
from fastload.data.format.constants import ERRORS_FILE
from fastload.data.format.reader import LMDBReader


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _tar(path, samples: list[tuple[str, str]]) -> None:
    """A WebDataset shard of ``(key, .cls text)`` samples, each with a small JPEG."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, (key, label) in enumerate(samples):
            _add(tar, f"{key}.jpg", _jpeg(i))
            _add(tar, f"{key}.cls", label.encode())


def _files(folder, count: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        (folder / f"{i}.jpg").write_bytes(_jpeg(i))
        names.append(f"{folder.name}/{i}.jpg")
    return names


def _skipped(dst) -> list[dict]:
    return json.loads((dst / ERRORS_FILE).read_text())["skipped"]


LABELS = ["0", "1", "2", "-1", "0", "2"]


def test_a_minus_one_cls_in_webdataset_is_reported_and_the_others_keep_their_labels(tmp_path):
    _tar(tmp_path / "a.tar", [(f"s{i}", label) for i, label in enumerate(LABELS)])
    report = convert_folder(tmp_path / "a.tar", tmp_path / "db", workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    assert reader.classes == ["0", "1", "2"] and reader.targets == [0, 1, 2, 0, 2]
    [error] = _skipped(tmp_path / "db")
    assert report.skipped == 1 and error["path"] == f"{tmp_path / 'a.tar'}:s3.jpg"
    assert "label '-1' is negative" in error["reason"]


def test_a_minus_one_in_a_csv_list_is_reported_and_the_others_keep_their_labels(tmp_path):
    paths = _files(tmp_path / "img", len(LABELS))
    (tmp_path / "list.csv").write_text("path,label\n" + "".join(
        f"{p},{label}\n" for p, label in zip(paths, LABELS, strict=True)))
    convert_folder(tmp_path / "list.csv", tmp_path / "db", workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    assert reader.classes == ["0", "1", "2"] and reader.targets == [0, 1, 2, 0, 2]
    [error] = _skipped(tmp_path / "db")
    assert error["path"] == str(tmp_path / paths[3])
    assert "list.csv line 5: label '-1' is negative" in error["reason"]


def test_a_minus_one_in_a_jsonl_list_is_reported_not_a_refusal_of_the_list(tmp_path):
    paths = _files(tmp_path / "img", len(LABELS))
    (tmp_path / "list.jsonl").write_text("".join(
        json.dumps({"path": p, "label": int(label)}) + "\n"
        for p, label in zip(paths, LABELS, strict=True)))
    convert_folder(tmp_path / "list.jsonl", tmp_path / "db", workers=1, progress=False)
    assert LMDBReader(tmp_path / "db").targets == [0, 1, 2, 0, 2]
    [error] = _skipped(tmp_path / "db")
    assert "list.jsonl line 4: label -1 is negative" in error["reason"]


def test_a_minus_one_text_in_a_parquet_string_column_is_reported(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    images = pa.array([{"bytes": _jpeg(i), "path": f"{i}.jpg"} for i in range(len(LABELS))])
    pq.write_table(pa.table({"image": images, "label": LABELS}), tmp_path / "t.parquet")
    convert_folder(tmp_path / "t.parquet", tmp_path / "db", workers=1, progress=False)
    assert LMDBReader(tmp_path / "db").targets == [0, 1, 2, 0, 2]
    [error] = _skipped(tmp_path / "db")
    assert error["path"] == f"{tmp_path / 't.parquet'}:row 3"


def test_a_class_name_among_integer_labels_is_reported_in_index_mode(tmp_path):
    _tar(tmp_path / "a.tar", [("s0", "0"), ("s1", "cat"), ("s2", "1"), ("s3", "1.0"),
                              ("s4", "3")])
    convert_folder(tmp_path / "a.tar", tmp_path / "db", workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    assert reader.classes == ["0", "1", "2", "3"] and reader.targets == [0, 1, 3]
    reasons = {e["path"].rsplit(":", 1)[1]: e["reason"] for e in _skipped(tmp_path / "db")}
    assert sorted(reasons) == ["s1.jpg", "s3.jpg"]
    assert "label 'cat' is not an integer class index (3 of 5" in reasons["s1.jpg"]


def test_an_integer_among_class_names_is_reported_in_name_mode(tmp_path):
    paths = _files(tmp_path / "img", 4)
    (tmp_path / "list.csv").write_text("".join(
        f"{p},{label}\n" for p, label in zip(paths, ["dog", "cat", "3", "dog"], strict=True)))
    convert_folder(tmp_path / "list.csv", tmp_path / "db", workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    assert reader.classes == ["cat", "dog"] and reader.targets == [1, 0, 1]
    [error] = _skipped(tmp_path / "db")
    assert "label '3' is an integer among class names" in error["reason"]


def test_a_label_past_the_largest_class_index_is_reported_not_a_huge_class_list(tmp_path):
    paths = _files(tmp_path / "img", 3)
    (tmp_path / "list.csv").write_text(f"{paths[0]},1\n{paths[1]},{MAX_CLASSES}\n{paths[2]},0\n")
    source = list_source(tmp_path / "list.csv")
    assert source.classes == ["0", "1"]
    problems = [r.problem for r in source.samples.records()]
    assert problems[0] is None and "past the largest class index" in problems[1]


@pytest.mark.parametrize("text, number", [("3", 3), (" 3 ", 3), ("+3", 3), ("007", 7),
                                          ("-1", -1), (5, 5)])
def test_integer_labels_are_base_10_text_with_ascii_digits(text, number):
    assert integer_label(text) == number


@pytest.mark.parametrize("text", ["1.0", "3e2", "1_000", "\u0663", "", "0x1", True])
def test_other_text_is_no_integer_label(text):
    assert integer_label(text) is None


# ----- reports say what a record is -------------------------------------------------------

@pytest.mark.parametrize("kind", ["symlink", "hard link"])
def test_a_link_image_member_is_reported_as_a_link_not_as_a_missing_image(kind, tmp_path):
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, "s0.jpg", _jpeg(0))
        _add(tar, "s0.cls", b"0")
        link = tarfile.TarInfo("s1.jpg")
        link.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        link.linkname = "s0.jpg"
        tar.addfile(link)
        _add(tar, "s1.cls", b"1")
    report = convert_folder(tmp_path / "a.tar", tmp_path / "db", workers=1, progress=False)
    [error] = _skipped(tmp_path / "db")
    assert report.stored == 1 and error["path"].endswith(":s1.jpg")
    assert f"'s1.jpg' is a {kind} member (to 's0.jpg'), not stored" in error["reason"]


def test_a_symlink_label_member_is_reported_as_a_link_not_as_a_missing_label(tmp_path):
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, "s0.jpg", _jpeg(0))
        _add(tar, "s0.cls", b"0")
        _add(tar, "s1.jpg", _jpeg(1))
        link = tarfile.TarInfo("s1.cls")
        link.type, link.linkname = tarfile.SYMTYPE, "s0.cls"
        tar.addfile(link)
    convert_folder(tmp_path / "a.tar", tmp_path / "db", workers=1, progress=False)
    [error] = _skipped(tmp_path / "db")
    assert error["path"].endswith(":s1.jpg")
    assert "'s1.cls' is a symlink member (to 's0.cls'), not stored" in error["reason"]


@pytest.mark.parametrize("how", ["folder", "file"])
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_list_row_leaving_its_folder_through_a_symlink_is_counted(how, kind, tmp_path):
    outside = _files(tmp_path / "elsewhere", 2)
    lists = tmp_path / "lists"
    inside = _files(lists / "img", 2)
    if how == "folder":
        (lists / "linked").symlink_to(tmp_path / "elsewhere")
        rows = inside + ["linked/1.jpg"]
    else:
        (lists / "img" / "x.jpg").symlink_to(tmp_path / outside[1])
        rows = inside + ["img/x.jpg"]
    (lists / "inner").mkdir()
    (lists / "inner" / "ok.jpg").symlink_to(lists / inside[0])  # a link inside: not counted
    rows.append("inner/ok.jpg")
    text = "".join(f"{row},0\n" if kind == "csv" else json.dumps({"path": row, "label": 0}) + "\n"
                   for row in rows)
    (lists / f"list.{kind}").write_text(text)
    with pytest.warns(UserWarning, match=r"1 row\(s\) name files outside .* symlink\), the "
                                         r"first on line 3"):
        list_source(lists / f"list.{kind}")


def test_a_list_inside_its_folder_gives_no_warning(tmp_path, recwarn):
    paths = _files(tmp_path / "img", 3)
    (tmp_path / "list.csv").write_text("".join(f"{p},0\n" for p in paths))
    list_source(tmp_path / "list.csv")
    assert not [w for w in recwarn if "outside" in str(w.message)]


@pytest.mark.parametrize("header", ["path,label", "filename,class", "image,label", "id,species"])
def test_a_csv_header_of_any_names_is_no_record_and_no_class(header, tmp_path):
    paths = _files(tmp_path / "img", 3)
    (tmp_path / "list.csv").write_text(f"{header}\n" + "".join(
        f"{p},{label}\n" for p, label in zip(paths, ["mouse", "zebra", "mouse"], strict=True)))
    convert_folder(tmp_path / "list.csv", tmp_path / "db", workers=1, progress=False)
    reader = LMDBReader(tmp_path / "db")
    assert reader.classes == ["mouse", "zebra"] and reader.targets == [0, 1, 0]
    assert not (tmp_path / "db" / ERRORS_FILE).exists() or _skipped(tmp_path / "db") == []


def test_a_first_row_naming_a_missing_image_is_a_record_not_a_header(tmp_path):
    paths = _files(tmp_path / "img", 2)
    (tmp_path / "list.csv").write_text(f"img/gone.jpg,cat\n{paths[0]},dog\n{paths[1]},dog\n")
    convert_folder(tmp_path / "list.csv", tmp_path / "db", workers=1, progress=False)
    assert LMDBReader(tmp_path / "db").classes == ["cat", "dog"]
    [error] = _skipped(tmp_path / "db")
    assert error["path"].endswith("gone.jpg")


@pytest.mark.parametrize("shards", [None, 2])
def test_a_class_name_no_reader_would_accept_is_refused_before_anything_is_written(
        tmp_path, shards):
    names = _files(tmp_path / "images", 2)
    (tmp_path / "list.csv").write_text(f"path,label\n{names[0]},cat\n{names[1]},{'x' * 5000}\n")
    with pytest.raises(ValueError, match=r"list.csv' cannot be converted: its class list holds "
                                         r"'xxx.*at \[1\].*1 to 4096 characters"):
        convert_folder(tmp_path / "list.csv", tmp_path / "dst", workers=1, progress=False,
                       shards=shards)
    assert not (tmp_path / "dst").exists()


def test_class_names_that_would_overflow_the_sidecar_are_refused_before_anything_is_written(
        tmp_path):
    names = _files(tmp_path / "images", 1)
    rows = [f"{names[0]},{i:05d}{'x' * 4000}" for i in range(4200)]  # 4,200 names of 4 KB
    (tmp_path / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match="class list takes .* bytes in fastload.json, more "
                                         "than the 15 MiB it may hold"):
        convert_folder(tmp_path / "list.csv", tmp_path / "dst", workers=1, progress=False)
    assert not (tmp_path / "dst").exists()
