"""Argument checks shared by the library, with torch's message shape
(``"batch_size should be a positive integer, but got batch_size=0"``)."""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = ["check_int", "check_number", "check_output_file", "check_positive_int"]


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


def check_output_file(name: str, path: str | os.PathLike | None) -> None:
    """Raise ``ValueError`` naming ``name`` where ``path`` (a file a run writes later) cannot be
    one: an existing folder, or a path through a file. Checked before the work, so a long
    run does not end on it. ``None`` passes."""
    if path is None:
        return
    text = os.fspath(path)
    if os.path.isdir(text):
        example = os.path.join(text, "run.pt" if name == "checkpoint" else "run.json")
        raise ValueError(f"{name} should be a file path, but {name}={text!r} is a folder; "
                         f"pass a file in it, such as {example!r}")
    parent = os.path.dirname(os.path.abspath(text))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{name}={text!r} cannot be written: {parent!r} on its path is a "
                         "file, not a folder; pass another path")
