"""What a database's sidecar may hold at most, and the check of its class list.

Without numpy (unlike the reader): a conversion checks and writes these before anything
reads a database back (benchmarks/NOTES.md C24).
"""

from __future__ import annotations

from fastload.data.format.constants import KEY_DIGITS
from fastload.data.format.untrusted import short_repr

__all__ = ["MAX_CLASSES", "MAX_CLASS_NAME", "MAX_META_BYTES", "MAX_RECORDS",
           "class_list_problem", "writable_class_list_problem"]

MAX_META_BYTES = 16 << 20  # fastload.json holds identity and counts: kilobytes
MAX_RECORDS = 10**KEY_DIGITS  # keys have KEY_DIGITS digits
MAX_CLASSES = 1_000_000  # class names a database or set may list
MAX_CLASS_NAME = 4096  # characters
# fastload.json's room for what is not the class list (identity, counts, options): kilobytes
_META_ROOM = 1 << 20


def class_list_problem(classes: object) -> str | None:
    """Why ``classes`` is not a list of distinct class names (one phrase), or None."""
    if not isinstance(classes, list) or len(classes) > MAX_CLASSES:
        return f"is not a list of at most {MAX_CLASSES} class names"
    seen: set[str] = set()
    for i, name in enumerate(classes):
        if not isinstance(name, str) or not 0 < len(name) <= MAX_CLASS_NAME:
            return (f"holds {short_repr(name)} at [{i}], not a class name (a string of 1 to "
                    f"{MAX_CLASS_NAME} characters)")
        if name in seen:
            return f"names class {short_repr(name)} twice"
        seen.add(name)
    return None


def writable_class_list_problem(classes: object) -> str | None:
    """Why a conversion cannot write ``classes`` (one phrase), or None: what
    :func:`class_list_problem` refuses at every read, and a list whose names would take
    ``fastload.json`` past :data:`MAX_META_BYTES` (as the writer lays it out, one a line)."""
    import json

    problem = class_list_problem(classes)
    if problem is not None:
        return problem
    size = sum(len(json.dumps(name)) + 4 for name in classes)  # indent, comma, newline
    if size > MAX_META_BYTES - _META_ROOM:
        return (f"takes {size} bytes in fastload.json, more than the "
                f"{(MAX_META_BYTES - _META_ROOM) >> 20} MiB it may hold")
    return None
