"""A Hugging Face ``datasets`` folder made by ``save_to_disk``, read with ``datasets`` itself.

``datasets`` is an optional extra: a folder holding ``state.json`` and
``dataset_info.json`` (or a ``DatasetDict``'s ``dataset_dict.json``) is recognised without
it, and converting it names the package to install. ``datasets.load_from_disk`` maps the
folder's Arrow files into memory; rows are read in dataset order, ``BATCH_ROWS`` at a time
as Arrow tables (``with_format("arrow")``), whose bytes are views of the mapped files, so
private memory stays bounded. A ``DatasetDict`` (several splits) is refused naming its
splits: pass the split's folder.

Columns: see :mod:`fastload.data.convert.sources.arrow`. Class names come from the label column's
``ClassLabel`` feature when it has one (labels outside it, e.g. ``-1`` for "no label",
are skipped and reported), otherwise from the labels (:mod:`fastload.data.convert.sources.labels`).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from pathlib import Path

from fastload.data.convert.sources.arrow import (
    BATCH_ROWS,
    check_columns,
    column_options,
    image_cells,
    label_values,
    null_image,
)
from fastload.data.convert.sources.base import Record, RecordTable, SourceList, files_digest
from fastload.data.convert.sources.labels import assign_labels

DATASET_FILES = ("state.json", "dataset_info.json")
DATASET_DICT_FILE = "dataset_dict.json"


def is_datasets_folder(path: Path) -> bool:
    """True when ``path`` looks like the output of ``Dataset(Dict).save_to_disk``."""
    return (path / DATASET_DICT_FILE).is_file() or all((path / n).is_file() for n in DATASET_FILES)


def _load(path: Path):
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"{str(path)!r} is a Hugging Face datasets folder (save_to_disk); reading it needs "
            "the datasets package: `pip install 'fastload-dali[datasets]'` (or `pip install "
            "datasets`)") from None
    if (path / DATASET_DICT_FILE).is_file():
        try:
            splits = json.loads((path / DATASET_DICT_FILE).read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError):
            splits = []
        raise ValueError(
            f"{str(path)!r} is a datasets DatasetDict with splits {', '.join(map(repr, splits))}; "
            f"convert one split at a time: pass {str(path / (splits[0] if splits else '<split>'))!r}")
    try:
        dataset = datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds for a damaged folder
        raise ValueError(f"datasets cannot load {str(path)!r} ({type(exc).__name__}: {exc}); "
                         "is it a complete save_to_disk folder?") from None
    if not isinstance(dataset, datasets.Dataset):
        raise ValueError(f"{str(path)!r} loads as a {type(dataset).__name__}, not a Dataset")
    return datasets, dataset


class DatasetRecords(RecordTable):
    """The rows of a ``datasets.Dataset``: labels listed up front, images read in batches."""

    def __init__(self, path: Path, image_column: str, label_column: str) -> None:
        datasets, dataset = _load(path)
        self.path = path
        self.image_column = image_column
        where = repr(str(path))
        check_columns(dataset.data.schema, image_column, label_column, where)
        feature = dataset.features[label_column]
        names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
        labels = dataset.select_columns([label_column]).with_format("arrow")[:]
        values = label_values(labels.column(0))
        self.classes, indices, self._problems = assign_labels(values, names)
        for i, value in enumerate(values):
            if value is None:
                self._problems[i] = f"the {label_column!r} of this row is null"
        self._labels = array("i", indices)
        self._images = dataset.select_columns([image_column]).with_format("arrow")
        # datasets has no public fingerprint; a release without it reads as "" (the files
        # and labels are digested too)
        self._source_fingerprint = getattr(dataset, "_fingerprint", "")
        self._files = sorted(path.glob("*.arrow")) + [path / n for n in DATASET_FILES]
        self._bytes = sum(p.stat().st_size for p in self._files)
        super().__init__(len(dataset))

    def _name(self, index: int) -> str:
        return f"{self.path}:row {index}"

    def _label(self, index: int) -> int:
        return self._labels[index]

    def _read(self, start: int, stop: int) -> Iterator[Record]:
        for begin in range(start, stop, BATCH_ROWS):
            batch = self._images[begin:min(stop, begin + BATCH_ROWS)]
            for index, (data, path) in enumerate(image_cells(batch.column(0)), begin):
                name = self._name(index)
                problem = self._problems.get(index)
                if problem is not None:
                    yield Record(name, -1, problem=problem)
                elif data is None:
                    yield Record(name, -1, problem=null_image(self.image_column, path))
                else:
                    yield Record(name, self._labels[index], data=data)

    def fingerprint(self) -> tuple[str, int]:
        digest = files_digest("datasets", self.classes, self._files, self.path)
        digest.update(f"{self._source_fingerprint}\n{self.image_column}\n".encode())
        digest.update(self._labels.tobytes())
        return digest.hexdigest(), self._bytes


def list_datasets_folder(path: Path, image_column: str | None = None,
                         label_column: str | None = None) -> SourceList:
    """The rows of a ``save_to_disk`` folder as a :class:`SourceList`."""
    table = DatasetRecords(path, image_column or "image", label_column or "label")
    if len(table) == 0:
        raise ValueError(f"the datasets folder {str(path)!r} holds no rows")
    return SourceList(root=path, kind="datasets", classes=table.classes, samples=table,
                      options=column_options(image_column, label_column))
