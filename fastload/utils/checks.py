"""Argument checks shared by the library, with torch's message shape
(``"batch_size should be a positive integer, but got batch_size=0"``)."""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Callable
from typing import Any

__all__ = ["check_int", "check_number", "check_output_file", "check_positive_int",
           "check_share", "file_on_path", "is_json_lines", "is_json_report",
           "is_png", "is_torch_file"]


def check_int(name: str, value: Any, *, least: int = 0, allow_none: bool = False,
              what: str | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= ``least`` (a bool is
    not; ``None`` passes when ``allow_none``). ``what`` words the message's expectation
    (default ``"an integer >= least"``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} should be {what or f'an integer >= {least}'}, but got "
                         f"{name}={value!r}")


def check_positive_int(name: str, value: Any, *, allow_none: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1 (a bool is not;
    ``None`` passes when ``allow_none``)."""
    check_int(name, value, least=1, allow_none=allow_none, what="a positive integer")


def check_number(name: str, value: Any, *, least: float = 0.0, above: bool = False,
                 allow_none: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite real number >= ``least``
    (> ``least`` with ``above``; a bool is not one; ``None`` passes when ``allow_none``)."""
    if value is None and allow_none:
        return
    ok = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
          and (value > least if above else value >= least))
    if not ok:
        bound = f"{'>' if above else '>='} {least:g}"
        raise ValueError(f"{name} should be a finite number {bound}, but got {name}={value!r}")


def check_share(name: str, value: Any) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a number in [0, 1] (a bool is
    not one)."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0.0 <= value <= 1.0):
        raise ValueError(f"{name} should be a number in [0, 1], but got {name}={value!r}")


def check_output_file(name: str, path: str | os.PathLike | None, *,
                      replaces: Callable[[str], bool] | None = None, what: str = "") -> None:
    """Raise ``ValueError`` naming ``name`` where ``path`` (a file a run writes later) cannot be
    one: an existing folder, or a path through a file; with ``replaces``, also an existing file
    it does not accept (a file of another kind than the run writes, ``what``: the user's file
    is never written over). Checked before the work, so a long run does not end on it.
    ``None`` passes."""
    if path is None:
        return
    text = os.fspath(path)
    if replaces is not None and os.path.isfile(text) and not replaces(text):
        raise ValueError(f"{name}={text!r} is an existing file that is not {what}, and writing "
                         f"would replace it; pass a new path, or remove that file first")
    if os.path.isdir(text):
        example = os.path.join(text, "run.pt" if name == "checkpoint" else "run.json")
        raise ValueError(f"{name} should be a file path, but {name}={text!r} is a folder; "
                         f"pass a file in it, such as {example!r}")
    blocking = file_on_path(os.path.dirname(os.path.abspath(text)))
    if blocking is not None:
        raise ValueError(f"{name}={text!r} cannot be written: {blocking!r} on its path is a "
                         "file, not a folder; pass another path")


def file_on_path(folder: str | os.PathLike) -> str | None:
    """The nearest existing path at or above ``folder`` where that is not a folder (so
    ``folder`` cannot be made), else None."""
    parent = os.path.abspath(folder)
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else parent


def is_torch_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a zip archive that ``torch.save`` or ``torch.export.save`` wrote
    (read from its table of contents: nothing is unpickled)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(n.endswith(("/data.pkl", "/archive_format")) for n in names)


def is_json_report(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a JSON report of a fastload command: an object with a ``format``
    and the ``command`` (convert's, verify's) or the ``rows`` (bench's)."""
    try:
        with open(path, "rb") as handle:
            if handle.read(1) != b"{":  # as the reports are written: no other file read whole
                return False
            handle.seek(0)
            report = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and "format" in report and ("command" in report
                                                                 or "rows" in report)


def is_json_lines(path: str | os.PathLike, limit: int = 1 << 20) -> bool:
    """Whether ``path`` is empty or starts with a line holding a JSON object (a log that JSON
    lines are appended to; its first ``limit`` bytes read at most)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(limit)
    except OSError:
        return False
    if not first:
        return True
    if not first.startswith(b"{"):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def is_png(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts as a PNG file."""
    try:
        with open(path, "rb") as handle:
            return handle.read(8) == b"\x89PNG\r\n\x1a\n"
    except OSError:
        return False
