"""Argument checks shared by the library, with torch's message shape
(``"batch_size should be a positive integer, but got batch_size=0"``)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_positive_int"]


def check_positive_int(name: str, value: Any, *, allow_none: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1 (a bool is not;
    ``None`` passes when ``allow_none``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} should be a positive integer, but got {name}={value!r}")
