"""A JSONL list of images: one ``{"path": ..., "label": ...}`` object a line.

The file is UTF-8; blank lines are skipped; other keys are ignored. ``path`` is a string
(relative to the JSONL file's folder, see :mod:`fastload.data.sources.filelist`);
``label`` an integer class index or a class name (see :mod:`fastload.data.sources.labels`).
A line that is not such an object refuses the whole list, naming the line, as a CSV row
with the wrong columns does: the list is the source, and a guess would shift every label.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastload.data.sources.base import SourceList
from fastload.data.sources.filelist import file_list_source

JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read_jsonl_list(jsonl_path: Path) -> SourceList:
    """Read a JSONL list of ``{"path", "label"}`` objects."""
    rows = []
    with open(jsonl_path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            where = f"{str(jsonl_path)!r} line {line_no}"
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where} is not UTF-8 (byte {raw[exc.start]:#04x}); save "
                                 "the list as UTF-8") from None
            if not text.strip():
                continue
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
            rows.append((line_no, path, label))
    return file_list_source(jsonl_path, "jsonl", rows)
