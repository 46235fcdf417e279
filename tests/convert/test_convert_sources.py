"""fastload convert from WebDataset tars, parquet, a datasets folder and JSONL: each source is
built with its own library, converted, and read back record by record against the source
and against the folder conversion of the same images."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile

import pytest
from PIL import Image

from fastload.data.convert.folder import ConvertError, convert_folder
from fastload.data.convert.source_list import list_source
from fastload.data.format.constants import ERRORS_FILE, PARTIAL_FILE
from fastload.data.format.reader import LMDBReader
from fastload.data.format.verify import verify_lmdb
from fastload.data.sets.shards import open_reader
from fastload.data.sets.verify import verify_set

wds = pytest.importorskip("webdataset")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")


def cli(argv: list[str]) -> int:
    from fastload.tools.cli import main

    return main(argv)


def _encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def images(synth_root, tmp_path_factory):
    """One set of images as an ImageFolder tree and as ``[(class name, suffix, bytes)]`` in
    its order: 14 generated photos (JPEGs, kept as they are), two PNGs and a grayscale JPEG
    (re-encoded), in 4 classes."""
    tree = tmp_path_factory.mktemp("source_images") / "tree"
    photos = sorted((synth_root / "train").rglob("*.jpg"))[::3][:14]
    for i, photo in enumerate(photos):
        (tree / f"c{i % 4}").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(photo, tree / f"c{i % 4}" / f"p{i:02d}.jpg")
    gradient = Image.linear_gradient("L").resize((48, 40))
    (tree / "c0" / "q0.png").write_bytes(_encoded(Image.merge("RGB", [gradient] * 3), "PNG"))
    (tree / "c2" / "q1.png").write_bytes(_encoded(gradient.convert("RGBA"), "PNG"))
    (tree / "c1" / "q2.jpg").write_bytes(_encoded(gradient, "JPEG"))
    items = [(os.path.basename(os.path.dirname(p)), os.path.splitext(p)[1][1:],
              open(p, "rb").read()) for p, _ in list_source(tree).samples]
    return tree, items


@pytest.fixture(scope="module")
def folder_records(images, tmp_path_factory):
    """The folder conversion of ``images``: (classes, [(record image bytes, label)])."""
    dst = tmp_path_factory.mktemp("folder_db") / "db"
    convert_folder(images[0], dst, workers=1, progress=False)
    return _read_back(dst)


def _read_back(dst) -> tuple[list[str], list[tuple[bytes, int]]]:
    reader = open_reader(dst)
    try:
        return reader.classes, [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
                                for i in range(len(reader))]
    finally:
        reader.close()


# ----- the sources, each written by its own library ---------------------------------------

def _names(items) -> list[str]:
    return sorted({name for name, _, _ in items})


def write_webdataset(folder, items, label="cls", per_shard=5):
    """Shards ``folder/shard-%06d.tar`` by ``webdataset.ShardWriter``: ``key.jpg``/``key.png``
    and the class index in ``key.cls``, or the class name in ``key.json``'s ``"name"``."""
    folder.mkdir(parents=True, exist_ok=True)
    names = _names(items)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i, (name, suffix, data) in enumerate(items):
            sample = {"__key__": f"sample{i:05d}", suffix: data}
            if label == "cls":
                sample["cls"] = names.index(name)
            else:
                sample["json"] = {"name": name, "index": names.index(name)}
            sink.write(sample)
    return folder


def _image_struct(items, nulls=()):
    return pa.array([{"bytes": None if i in nulls else data, "path": f"{i}.{suffix}"}
                     for i, (_, suffix, data) in enumerate(items)])


def write_parquet(folder, items, *, class_label=True, image="image", label="label",
                  rows_per_file=7, nulls=(), labels=None, binary=False):
    """Parquet files by ``pyarrow.parquet.write_table`` in the Hub's layout: an image column
    of {bytes, path} (or, with ``binary``, plain bytes) and integer labels with datasets'
    ClassLabel in the schema metadata (or, without ``class_label``, the class names)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = _names(items)
    if labels is None:
        labels = [names.index(n) if class_label else n for n, _, _ in items]
    features = {image: {"_type": "Image"}}
    if class_label:
        features[label] = {"names": names, "_type": "ClassLabel"}
    column = pa.array([d for _, _, d in items]) if binary else _image_struct(items, nulls)
    table = pa.table({image: column, label: labels}).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    for k, begin in enumerate(range(0, len(items), rows_per_file)):
        pq.write_table(table.slice(begin, rows_per_file), folder / f"train-{k:05d}.parquet",
                       row_group_size=3)
    return folder


def write_datasets(folder, items, *, labels=None, nulls=()):
    """A ``datasets.Dataset.from_dict(...).save_to_disk`` folder (two Arrow shards)."""
    names = _names(items)
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=names)})
    column = [None if i in nulls else {"bytes": data, "path": f"{i}.{suffix}"}
              for i, (_, suffix, data) in enumerate(items)]
    ds = datasets.Dataset.from_dict(
        {"image": column, "label": labels or [names.index(n) for n, _, _ in items]},
        features=features)
    ds.save_to_disk(str(folder), num_shards=2)
    return folder


def write_jsonl(folder, items, tree):
    """``folder/list.jsonl`` naming a copy of the tree in ``folder`` by relative paths."""
    shutil.copytree(tree, folder / "tree")
    paths = [p for p, _ in list_source(folder / "tree").samples]
    with open(folder / "list.jsonl", "w") as out:
        for path, (name, _, _) in zip(paths, items, strict=True):
            out.write(json.dumps({"path": os.path.relpath(path, folder), "label": name}) + "\n")
    return folder / "list.jsonl"


SOURCES = {
    "webdataset-cls": lambda d, tree, items: write_webdataset(d / "wds", items),
    "webdataset-json-field": lambda d, tree, items: write_webdataset(d / "wds", items, "json"),
    "parquet-classlabel": lambda d, tree, items: write_parquet(d / "pq", items),
    "parquet-string-labels": lambda d, tree, items: write_parquet(d / "pq", items,
                                                                  class_label=False),
    "parquet-binary-image-column": lambda d, tree, items: write_parquet(
        d / "pq", items, class_label=False, binary=True),
    "datasets-save-to-disk": lambda d, tree, items: write_datasets(d / "hf", items),
    "jsonl": lambda d, tree, items: write_jsonl(d / "lists", items, tree),
}


@pytest.mark.parametrize("kind", list(SOURCES))
def test_each_source_kind_stores_every_image_and_label_as_the_folder_path_does(
        kind, images, folder_records, tmp_path):
    tree, items = images
    src = SOURCES[kind](tmp_path, tree, items)
    options = {"label_field": "name"} if kind == "webdataset-json-field" else {}
    report = convert_folder(src, tmp_path / "db", workers=2, progress=False, **options)
    classes, records = _read_back(tmp_path / "db")
    folder_classes, expected = folder_records
    assert (report.stored, report.skipped, report.kept) == (len(items), 0, len(items) - 3)
    assert records == expected  # same bytes (JPEGs kept, others re-encoded alike), labels
    for (data, _), (_, suffix, source) in zip(records, items, strict=True):
        assert (data == source) == (suffix == "jpg" and Image.open(io.BytesIO(source)).mode == "RGB")
    assert classes == (folder_classes if kind != "webdataset-cls" else ["0", "1", "2", "3"])
    assert verify_lmdb(tmp_path / "db", full=True).ok


@pytest.mark.parametrize("kind", ["webdataset-cls", "parquet-classlabel", "datasets-save-to-disk"])
def test_worker_processes_give_the_records_of_an_in_process_conversion(kind, images, tmp_path):
    tree, items = images
    src = SOURCES[kind](tmp_path, tree, items)
    one = convert_folder(src, tmp_path / "one", workers=1, max_side=64, progress=False)
    two = convert_folder(src, tmp_path / "two", workers=2, max_side=64, progress=False)
    assert one.reencoded == two.reencoded > len(items) // 2  # resized in the worker pool
    assert _read_back(tmp_path / "one") == _read_back(tmp_path / "two")


def test_a_glob_and_brace_pattern_of_shards_read_as_the_folder_of_them(images, tmp_path):
    folder = write_webdataset(tmp_path / "wds", images[1])
    whole = list_source(folder)
    for pattern in (folder / "shard-*.tar", folder / "shard-{000000..000003}.tar"):
        listed = list_source(str(pattern))
        assert [listed.samples[i] for i in range(len(listed.samples))] == \
               [whole.samples[i] for i in range(len(whole.samples))]
    assert len(whole.samples) == len(images[1])


def test_braces_naming_a_missing_shard_fail_naming_it(images, tmp_path):
    folder = write_webdataset(tmp_path / "wds", images[1])  # shard-000000 .. shard-000003
    with pytest.raises(FileNotFoundError, match=r"names 6 files, but 2 of them do not exist "
                                                r"\('.*shard-000004.tar', '.*shard-000005.tar'\)"):
        list_source(str(folder / "shard-{000000..000005}.tar"))


def test_parquet_files_of_several_hub_splits_are_refused_naming_them(images, tmp_path):
    folder = write_parquet(tmp_path / "pq", images[1])
    for k, split in enumerate(["test", "validation"]):
        shutil.copy(folder / "train-00000.parquet", folder / f"{split}-0000{k}-of-00001.parquet")
    (folder / "train-00000.parquet").rename(folder / "train-00000-of-00001.parquet")
    for source in (folder, str(folder / "*.parquet")):
        with pytest.raises(ValueError, match=r"splits 'test', 'train', 'validation'; convert one "
                                             r"split at a time, e.g. '.*pq/test-\*.parquet'"):
            list_source(source)
    assert len(list_source(str(folder / "train-*.parquet")).samples) == len(images[1])


def test_shards_listed_by_several_processes_keep_their_order(images, tmp_path, monkeypatch):
    from fastload.data.convert.sources import webdataset as tar_source

    folder = write_webdataset(tmp_path / "wds", images[1], per_shard=3)
    alone = list_source(folder, workers=1)
    monkeypatch.setattr(tar_source, "PARALLEL_LISTING_BYTES", 0)
    pooled = list_source(folder, workers=2)
    assert [pooled.samples[i] for i in range(len(pooled.samples))] == \
           [alone.samples[i] for i in range(len(alone.samples))]
    assert pooled.fingerprint() == alone.fingerprint()


# ----- bad input: skipped and reported as bad files are, or refused with strict -----------

def _truncated_webdataset(tmp_path, items):
    """Shards whose last one is cut inside the image member of its second sample."""
    folder = write_webdataset(tmp_path / "wds", items)
    last = sorted(folder.glob("*.tar"))[-1]
    with tarfile.open(last) as tar:
        images = [m for m in tar.getmembers() if m.name.endswith((".jpg", ".png"))]
    with open(last, "r+b") as handle:
        handle.truncate(images[1].offset_data + images[1].size // 2)
    return folder, f"{last}:{images[1].name}", "truncated"


def _webdataset_without_image(tmp_path, items):
    folder = tmp_path / "wds"
    folder.mkdir()
    with wds.TarWriter(str(folder / "a.tar")) as sink:
        for i, (_, suffix, data) in enumerate(items[:4]):
            sink.write({"__key__": f"s{i}", suffix: data, "cls": i % 2})
        sink.write({"__key__": "s4", "cls": 1, "txt": "no image here"})
    return folder, f"{folder / 'a.tar'}:s4", "no image member"


def _parquet_with_null_bytes(tmp_path, items):
    folder = write_parquet(tmp_path / "pq", items[:9], nulls={4})
    return folder, f"{folder / 'train-00000.parquet'}:row 4", "bytes of this row are null"


def _datasets_label_out_of_list(tmp_path, items):
    names = _names(items)
    labels = [names.index(n) for n, _, _ in items[:8]]
    labels[5] = -1  # datasets' "no label"
    return (write_datasets(tmp_path / "hf", items[:8], labels=labels), f"{tmp_path / 'hf'}:row 5",
            "label -1 is out of the class list")


def _parquet_label_out_of_list(tmp_path, items):
    labels = [0, 1, 0, 1, 9, 0, 1, 0]  # items[:8] span two classes
    return (write_parquet(tmp_path / "pq", items[:8], labels=labels),
            f"{tmp_path / 'pq' / 'train-00000.parquet'}:row 4", "label 9 is out of the class list")


def _parquet_cut_short(tmp_path, items):
    folder = write_parquet(tmp_path / "pq", items[:10], rows_per_file=5)
    cut = folder / "train-00001.parquet"
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])  # its footer is gone
    return folder, str(cut), "not a readable parquet file"


BAD = {"tar-cut-inside-a-member": _truncated_webdataset,
       "tar-sample-without-image": _webdataset_without_image,
       "parquet-null-image-bytes": _parquet_with_null_bytes,
       "parquet-file-cut-short": _parquet_cut_short,
       "datasets-label-minus-one": _datasets_label_out_of_list,
       "parquet-label-past-the-class-list": _parquet_label_out_of_list}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_record_is_skipped_and_reported_like_a_bad_file(case, images, tmp_path, capsys):
    src, name, reason = BAD[case](tmp_path, images[1])
    report = convert_folder(src, tmp_path / "db", workers=1, progress=False)
    assert report.skipped == 1 and report.stored == report.seen - 1
    [error] = json.loads((tmp_path / "db" / ERRORS_FILE).read_text())["skipped"]
    assert error["path"] == name and reason in error["reason"]
    assert len(LMDBReader(tmp_path / "db")) == report.stored
    assert cli(["convert", str(src), str(tmp_path / "db2"), "--no-progress"]) == 0
    assert f"{name}: " in capsys.readouterr().out


@pytest.mark.parametrize("case", list(BAD))
def test_strict_stops_at_the_bad_record_naming_it(case, images, tmp_path):
    src, name, reason = BAD[case](tmp_path, images[1])
    with pytest.raises(ConvertError, match=f"unreadable image '{name}': .*{reason}"):
        convert_folder(src, tmp_path / "db", workers=1, strict=True, progress=False)


def test_a_parquet_row_group_that_cannot_be_decoded_skips_its_rows_only(images, tmp_path):
    items = images[1][:9]
    src = tmp_path / "one.parquet"
    pq.write_table(pa.table({"image": _image_struct(items), "label": [0, 1, 2] * 3}), src,
                   row_group_size=3, use_dictionary=False)
    page = pq.ParquetFile(src).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(src.read_bytes())
    data[page:page + 12] = b"\xff" * 12  # the page header of row group 1's image bytes
    src.write_bytes(bytes(data))
    report = convert_folder(src, tmp_path / "db", workers=1, progress=False)
    assert [e["index"] for e in report.errors] == [3, 4, 5]
    assert all("row group 1 of this file cannot be decoded" in e["reason"] for e in report.errors)
    assert [d for d, _ in _read_back(tmp_path / "db")[1]] == \
           [d for i, (_, _, d) in enumerate(items) if i not in (3, 4, 5)]


def test_a_compressed_shard_is_refused_in_one_sentence(images, tmp_path, capsys):
    folder = write_webdataset(tmp_path / "wds", images[1])
    first = sorted(folder.glob("*.tar"))[0]
    first.write_bytes(gzip.compress(first.read_bytes()))
    with pytest.raises(ValueError, match="gzip-compressed; .*decompress it first"):
        convert_folder(folder, tmp_path / "db", progress=False)
    assert cli(["convert", str(folder), str(tmp_path / "db"), "--no-progress"]) == 1
    assert "gzip-compressed" in capsys.readouterr().err


@pytest.mark.parametrize("make, message", [
    (lambda d, items: write_parquet(d, items, image="img"), "no column 'image' \\(image_column\\)"),
    (lambda d, items: write_parquet(d, items, label="y"), "no column 'label' \\(label_column\\)"),
])
def test_a_missing_column_names_the_columns_and_the_option(make, message, images, tmp_path):
    src = make(tmp_path / "pq", images[1])
    with pytest.raises(ValueError, match=message + ".*columns are"):
        list_source(src)


def test_cli_column_and_label_field_options_reach_the_converter(images, tmp_path, capsys):
    items = images[1]
    src = write_parquet(tmp_path / "pq", items, image="img", label="y")
    assert cli(["convert", str(src), str(tmp_path / "db"), "--no-progress",
                "--image-column", "img", "--label-column", "y"]) == 0
    assert LMDBReader(tmp_path / "db").classes == _names(items)
    shards = write_webdataset(tmp_path / "wds", items, "json")
    assert cli(["convert", str(shards), str(tmp_path / "db2"), "--no-progress",
                "--label-field", "index"]) == 0
    assert LMDBReader(tmp_path / "db2").classes == ["0", "1", "2", "3"]
    assert cli(["convert", str(src), str(tmp_path / "db3"), "--no-progress",
                "--label-field", "index"]) == 1
    assert "--label-field 'index' applies to WebDataset sources only" in capsys.readouterr().err


def test_a_dataset_dict_is_refused_naming_its_splits(images, tmp_path):
    items = images[1]
    split = datasets.Dataset.from_dict({"label": [0, 1], "image": [d for _, _, d in items[:2]]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match="splits 'train', 'test'.*pass '.*dd/train'"):
        list_source(tmp_path / "dd")


_WITHOUT_EXTRAS = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "datasets", "braceexpand"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from fastload.tools.cli import main
sys.exit(main(["convert", sys.argv[1], sys.argv[2], "--no-progress"]))
"""


@pytest.mark.parametrize("kind, extra", [("parquet-classlabel", "sources"),
                                         ("datasets-save-to-disk", "datasets")])
def test_a_source_whose_extra_is_missing_names_the_extra_to_install(kind, extra, images,
                                                                     tmp_path):
    src = SOURCES[kind](tmp_path, *images)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS, str(src), str(tmp_path / "db")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert f"pip install 'fastload-dali[{extra}]'" in done.stderr.strip().splitlines()[-1]


def test_braces_without_braceexpand_name_the_extra_to_install(images, tmp_path):
    folder = write_webdataset(tmp_path / "wds", images[1])
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS,
                           str(folder / "shard-{000000..000003}.tar"), str(tmp_path / "db")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "pip install 'fastload-dali[sources]'" in done.stderr.strip().splitlines()[-1]


def test_a_jsonl_line_that_is_not_an_object_with_path_and_label_is_named(tmp_path):
    (tmp_path / "list.jsonl").write_text('{"path": "a.jpg", "label": 0}\n\n{"path": "b.jpg"}\n')
    with pytest.raises(ValueError, match="list.jsonl' line 3 is not an object with \"path\""):
        list_source(tmp_path / "list.jsonl")


# ----- resume after a kill, shards, verify ------------------------------------------------

@pytest.mark.parametrize("kind", ["webdataset-cls", "parquet-classlabel"])
def test_an_interrupted_conversion_resumes_identically(kind, images, tmp_path):
    tree, items = images
    src = SOURCES[kind](tmp_path, tree, items)
    reference = tmp_path / "reference"
    convert_folder(src, reference, workers=1, progress=False)
    dst = tmp_path / "db"
    command = [sys.executable, "-m", "fastload.tools.cli", "convert", str(src), str(dst),
               "--workers", "2", "--commit-every", "4", "--no-progress"]
    killed = subprocess.run(command, env={**os.environ, "FASTLOAD_TEST_CRASH": "after_commit:2"},
                            capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert json.loads((dst / PARTIAL_FILE).read_text())["seen"] == 4
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "resumed a partial conversion at file 4" in done.stdout
    assert _read_back(dst) == _read_back(reference)


@pytest.mark.parametrize("kind", ["webdataset-cls", "parquet-classlabel", "datasets-save-to-disk"])
def test_shards_of_a_container_source_read_as_its_unsharded_conversion(kind, images, tmp_path):
    tree, items = images
    src = SOURCES[kind](tmp_path, tree, items)
    convert_folder(src, tmp_path / "whole", workers=1, progress=False)
    for k in range(3):  # as three processes would, each converting its own shard
        report = convert_folder(src, tmp_path / "set", workers=1, shards=3, shard_index=k,
                                progress=False)
    assert report.manifest is not None and report.manifest["count"] == len(items)
    assert _read_back(tmp_path / "set") == _read_back(tmp_path / "whole")
    assert verify_set(tmp_path / "set", full=True).ok
