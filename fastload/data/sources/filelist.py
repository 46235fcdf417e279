"""A list of image files with labels (a CSV or a JSONL file) as a :class:`SourceList`.

Relative paths are relative to the list file's folder. A list names files its author
chose, so paths may leave that folder (``..`` or absolute), but never silently: rows whose
path resolves outside it are reported in one ``UserWarning`` (their count and the first
line). Labels follow :mod:`fastload.data.sources.labels`; rows keep the list's order.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from fastload.data.sources.base import SourceList
from fastload.data.sources.labels import Label, assign_labels


def file_list_source(list_path: Path, kind: str,
                     rows: Sequence[tuple[int, str, Label]]) -> SourceList:
    """``rows`` of ``(line number, path as written, label)`` read from ``list_path``."""
    base = list_path.parent
    if not rows:
        raise ValueError(f"{str(list_path)!r} lists no images; add rows of a path and a label")
    outside = []
    samples_paths = []
    for line_no, path, _ in rows:
        resolved = os.path.normpath(os.path.join(base, path))
        if os.path.commonpath([resolved, str(base)]) != str(base):
            outside.append((line_no, path))
        samples_paths.append(resolved)
    if outside:
        warnings.warn(
            f"{str(list_path)!r}: {len(outside)} row(s) name files outside the {kind.upper()}'s folder "
            f"{str(base)!r}, the first on line {outside[0][0]} ({outside[0][1]!r}); they are "
            "converted as listed", UserWarning, stacklevel=4)
    classes, indices, problems = assign_labels([label for _, _, label in rows])
    if problems:
        first = min(problems)
        raise ValueError(f"{str(list_path)!r} line {rows[first][0]}: {problems[first]}; "
                         "fix the label")
    return SourceList(root=base, kind=kind, classes=classes,
                      samples=list(zip(samples_paths, indices, strict=True)))
