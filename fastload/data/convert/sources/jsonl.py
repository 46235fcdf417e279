"""A JSONL list of images: one ``{"path": ..., "label": ...}`` object a line.

The file is UTF-8; blank lines are skipped; other keys are ignored. ``path`` is a string
(relative to the JSONL file's folder, see :mod:`fastload.data.convert.sources.filelist`);
``label`` an integer class index or a class name (see :mod:`fastload.data.convert.sources.labels`).
A line that is not such an object refuses the whole list, naming the line, as a CSV row
with the wrong columns does: the list is the source, and a guess would shift every label.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastload.data.convert.sources.base import SourceList
from fastload.data.convert.sources.filelist import file_list_source

JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read_jsonl_list(jsonl_path: Path) -> SourceList:
    """Read a JSONL list of ``{"path", "label"}`` objects, streamed
    (:mod:`fastload.data.convert.sources.filelist`)."""
    return file_list_source(jsonl_path, "jsonl", JsonlCursor)


class JsonlCursor:
    """The objects of a JSONL list from a byte position; ``line`` counts its lines."""

    empty_hint = "add rows of a path and a label"

    def __init__(self, list_path: Path, position: int = 0, line: int = 0) -> None:
        self.list_path = list_path
        self.line = line
        self._position = position
        self._file = open(list_path, "rb")  # noqa: SIM115
        self._file.seek(position)

    def __iter__(self) -> JsonlCursor:
        return self

    def __next__(self) -> tuple[int, str, int | str]:
        while True:
            raw = self._file.readline()
            if not raw:
                raise StopIteration
            self._position += len(raw)
            self.line += 1
            row = _parse(raw, f"{str(self.list_path)!r} line {self.line}", self.line == 1)
            if row is not None:
                return (self.line, *row)

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._file.close()


def _parse(raw: bytes, where: str, first: bool) -> tuple[str, int | str] | None:
    """``(path, label)`` of one JSONL line, None for a blank one; ValueError naming
    ``where`` for anything else."""
    try:
        text = raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 (byte {raw[exc.start]:#04x}); save "
                         "the list as UTF-8") from None
    if not text.strip():
        return None
    try:
        row = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where} is not JSON ({exc}); each line must be an object "
                         'like {"path": "a/b.jpg", "label": 3}') from None
    if not isinstance(row, dict) or "path" not in row or "label" not in row:
        raise ValueError(f"{where} is not an object with \"path\" and \"label\"; each "
                         'line must be like {"path": "a/b.jpg", "label": 3}')
    path, label = row["path"], row["label"]
    if not isinstance(path, str) or not path:
        raise ValueError(f"{where}: \"path\" should be a non-empty string, but got "
                         f"{path!r}")
    if isinstance(label, bool) or not isinstance(label, int | str) or label == "":
        raise ValueError(f"{where}: \"label\" should be an integer class index or a "
                         f"class name, but got {label!r}")
    return path, label
