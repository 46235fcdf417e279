"""What ``fastload convert`` reads: the ordered records of ``SRC`` and its class names.

``SRC`` is one of (the kind is decided from the path, in this order):

* **Hugging Face ``datasets`` folder** made by ``save_to_disk`` (it holds ``state.json``
  and ``dataset_info.json``): rows in dataset order, see :mod:`fastload.data.convert.sources.hf_datasets`.
* **ImageFolder tree** ``SRC/<class>/**/<file>`` (a folder with sub-folders): classes are
  the sorted sub-folder names and files are ordered exactly as torchvision's ``ImageFolder``
  orders them (classes sorted, then ``os.walk`` of each class folder with directories and
  file names sorted, symlinks followed, only ImageFolder's extensions, case-insensitive).
  So record ``i`` of the database is sample ``i`` of ``ImageFolder(SRC)`` whenever no file
  was skipped.
* **WebDataset tar shards**: a ``.tar`` file, a folder of them (no sub-folders) or a glob
  (``'shards/*.tar'``, or ``{000..009}`` braces): see :mod:`fastload.data.convert.sources.webdataset`.
* **Parquet files**: a ``.parquet`` file, a folder of them or a glob: see
  :mod:`fastload.data.convert.sources.parquet`.
* **CSV file** of ``path,label`` rows (an optional first row ``path,label`` is a header),
  UTF-8 (a BOM is allowed), or a **JSONL file** of ``{"path", "label"}`` objects (see
  :mod:`fastload.data.convert.sources.jsonl`). Paths are relative to the list's folder (see
  :mod:`fastload.data.convert.sources.filelist`); rows keep the list's order.

Labels and class names follow :mod:`fastload.data.convert.sources.labels`: a ``ClassLabel``
feature's names when the source has one; otherwise integer labels are class indices
(classes ``"0"`` .. ``str(max)``) when they are at least half of the labels, else the
labels are class names (classes = their sorted set, as ImageFolder sorts folder names); a
label that does not fit (``-1``, ``cat`` among indices) is a bad record, skipped and
reported.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from fastload.data.convert.sources.base import IMG_EXTENSIONS, SourceList
from fastload.data.convert.sources.filelist import CsvCursor, file_list_source

__all__ = ["IMG_EXTENSIONS", "SourceList", "list_source", "read_csv_list", "scan_image_folder"]

_GLOB_CHARS = "*?[{"


def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def scan_image_folder(root: Path) -> SourceList:
    """List an ImageFolder tree in torchvision ``ImageFolder`` order."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"no class folders found in {str(root)!r}; an ImageFolder source needs "
            "SRC/<class name>/<image files>"
        )
    samples: list[tuple[str, int]] = []
    empty = []
    for label, name in enumerate(classes):
        class_dir = os.path.join(root, name)
        before = len(samples)
        for dirpath, _, filenames in sorted(os.walk(class_dir, followlinks=True)):
            for filename in sorted(filenames):
                if _is_image_name(filename):
                    samples.append((os.path.join(dirpath, filename), label))
        if len(samples) == before:
            empty.append(name)
    if empty and samples:  # as torchvision's ImageFolder refuses it
        raise FileNotFoundError(
            f"class folder(s) {', '.join(repr(os.path.join(root, n)) for n in empty)} hold no "
            f"image files ({', '.join(IMG_EXTENSIONS)}), so ImageFolder would refuse {str(root)!r}; "
            "add images or remove the empty folders"
        )
    if not samples:
        raise FileNotFoundError(
            f"no image files found under {str(root)!r} (looked for {', '.join(IMG_EXTENSIONS)} "
            "inside the class folders); point SRC at a folder of class folders holding images"
        )
    return SourceList(root=root, kind="folder", classes=classes, samples=samples)


def read_csv_list(csv_path: Path) -> SourceList:
    """Read a ``path,label`` CSV (see the module docstring for the label rule), streamed
    (:mod:`fastload.data.convert.sources.filelist`)."""
    return file_list_source(csv_path, "csv", CsvCursor)


# Data files a folder or glob source may hold (compressed tars only to refuse them by name).
_DATA_SUFFIXES = (".tar", ".parquet", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")
_KINDS_HELP = ("an ImageFolder directory, a CSV (path,label) or JSONL ({\"path\", \"label\"}) "
               "list, WebDataset .tar shards, .parquet files or a datasets save_to_disk folder")


def list_source(src: str | os.PathLike, *, image_column: str | None = None,
                label_column: str | None = None, label_field: str | None = None,
                workers: int = 1) -> SourceList:
    """The records of ``src`` (see the module docstring for the kinds and their order).

    An option that does not apply to the kind of ``src`` is refused.

    Args:
        src: an ImageFolder directory, a ``.csv`` or ``.jsonl`` list, WebDataset ``.tar``
            shards, ``.parquet`` files (a file, a folder of them or a glob) or a
            ``datasets`` ``save_to_disk`` folder.
        image_column: the image column of a parquet or ``datasets`` source (default
            ``"image"``).
        label_column: the label column of a parquet or ``datasets`` source (default
            ``"label"``).
        label_field: read WebDataset labels from this field of each sample's ``.json``
            member instead of its ``.cls``.
        workers: processes that list several tar shards at once (the order is the same);
            1 lists them in the calling process.

    Returns:
        The source's root, kind, class names and ordered ``(path, label)`` samples (a
            record table for containers and file lists).

    Raises:
        FileNotFoundError: ``src`` does not exist, matches no file, or (an ImageFolder)
            holds no class folder or image, or an empty class folder.
        ValueError: ``src`` is a file of another kind, or an option that does not apply to
            its kind is given.
    """
    from fastload.data.convert.sources.hf_datasets import is_datasets_folder, list_datasets_folder
    from fastload.data.convert.sources.jsonl import JSONL_SUFFIXES, read_jsonl_list

    text = os.fspath(src)
    path = Path(os.path.abspath(text))
    files_only = {"image_column": image_column, "label_column": label_column,
                  "label_field": label_field}
    if not path.exists() and any(c in os.path.basename(text) for c in _GLOB_CHARS):
        return _list_files(_expand(text), path.parent, text, image_column, label_column,
                           label_field, workers)
    if path.is_dir():
        if is_datasets_folder(path):
            _only("datasets", label_field=label_field)
            return list_datasets_folder(path, image_column, label_column)
        if not any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(path)):
            files = sorted(Path(e.path) for e in os.scandir(path)
                           if e.is_file() and e.name.lower().endswith(_DATA_SUFFIXES))
            if files:
                return _list_files(files, path, text, image_column, label_column, label_field,
                                   workers)
        _only("folder", **files_only)
        return scan_image_folder(path)
    if path.is_file():
        name = path.name.lower()
        if name.endswith(".csv"):
            _only("csv", **files_only)
            return read_csv_list(path)
        if name.endswith(JSONL_SUFFIXES):
            _only("jsonl", **files_only)
            return read_jsonl_list(path)
        if name.endswith(_DATA_SUFFIXES):
            return _list_files([path], path.parent, text, image_column, label_column,
                               label_field)
        raise ValueError(
            f"source {str(path)!r} is a file but not a .csv, .jsonl, .tar or .parquet; pass "
            f"{_KINDS_HELP}")
    raise FileNotFoundError(f"source {str(path)!r} does not exist; pass {_KINDS_HELP}")


def _list_files(files: list[Path], root: Path, text: str, image_column, label_column,
                label_field, workers: int = 1) -> SourceList:
    """A source of data files all of one kind: tar shards or parquet files."""
    from fastload.data.convert.sources.parquet import PARQUET_SUFFIXES, list_parquet
    from fastload.data.convert.sources.webdataset import list_tar_shards

    parquets = [p for p in files if p.name.lower().endswith(PARQUET_SUFFIXES)]
    tars = [p for p in files if p.name.lower().endswith(_DATA_SUFFIXES) and p not in parquets]
    if tars and parquets:
        raise ValueError(f"source {text!r} holds both .tar and .parquet files; convert each kind "
                         "on its own (pass a glob such as 'SRC/*.tar')")
    if len(tars) + len(parquets) != len(files):
        other = next(p for p in files if p not in tars and p not in parquets)
        raise ValueError(f"source {text!r} matches {str(other)!r}, which is neither a .tar "
                         "shard nor a .parquet file; narrow the glob (e.g. 'SRC/*.tar')")
    if tars:
        _only("webdataset", image_column=image_column, label_column=label_column)
        return list_tar_shards(tars, root, label_field, workers)
    _only("parquet", label_field=label_field)
    _refuse_splits(parquets, text)
    return list_parquet(parquets, root, image_column, label_column)


# the Hub's parquet names: <split>-00000-of-00003.parquet
_SPLIT_FILE = re.compile(r"(.+)-\d+-of-\d+\.parquet", re.IGNORECASE)


def _refuse_splits(files: list[Path], text: str) -> None:
    """Refuse parquet files of several splits in the Hub's naming (``train-00000-of-00001``,
    ``test-...``, all in one ``data/`` folder): read together they would be one set."""
    splits = sorted({m.group(1) for p in files if (m := _SPLIT_FILE.fullmatch(p.name))})
    if len(splits) > 1:
        folder = files[0].parent
        raise ValueError(
            f"source {text!r} holds the parquet files of the splits "
            f"{', '.join(repr(s) for s in splits)}; convert one split at a time, e.g. "
            f"{str(folder / (splits[0] + '-*.parquet'))!r}")


def _expand(pattern: str) -> list[Path]:
    """The files a glob (with ``{a,b}`` / ``{000..009}`` braces) names, sorted. Each name the
    braces spell out without a wildcard must exist (as WebDataset reads them): a shard
    missing from the pattern fails naming it, not a set converted without it."""
    patterns = [pattern]
    if "{" in pattern:
        try:
            from braceexpand import braceexpand
        except ImportError:
            raise ImportError(f"source {pattern!r} uses {{...}} braces, which need the "
                              "braceexpand package: `pip install 'fastload-dali[sources]'` (or "
                              "`pip install braceexpand`); or pass a glob such as "
                              "'shards/*.tar'") from None
        patterns = list(braceexpand(pattern))
    found = {os.path.abspath(p) for q in patterns for p in glob.glob(q) if os.path.isfile(p)}
    if not found:
        raise FileNotFoundError(f"source {pattern!r} matches no files; pass {_KINDS_HELP}")
    missing = [q for q in patterns
               if not any(c in q for c in _GLOB_CHARS) and not os.path.isfile(q)]
    if missing:
        raise FileNotFoundError(
            f"source {pattern!r} names {len(patterns)} files, but {len(missing)} of them do not "
            f"exist ({', '.join(repr(q) for q in missing[:3])}{', ...' if len(missing) > 3 else ''}); "
            "fetch them, or narrow the braces to the files there are")
    return sorted(Path(p) for p in found)


def _only(kind: str, **options) -> None:
    """Refuse a reading option given for a source kind it does not apply to."""
    applies = {"image_column": "parquet or datasets", "label_column": "parquet or datasets",
               "label_field": "WebDataset"}
    for option, value in options.items():
        if value is not None:
            raise ValueError(f"{option}={value!r} applies to {applies[option]} sources only, "
                             f"but the source is {_KIND_WORDS[kind]}")


_KIND_WORDS = {"folder": "an ImageFolder directory", "csv": "a CSV list", "jsonl": "a JSONL list",
               "webdataset": "a WebDataset tar source", "parquet": "a parquet source",
               "datasets": "a datasets folder"}
