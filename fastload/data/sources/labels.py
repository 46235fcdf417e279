"""The one rule that turns a source's labels into class indices and class names.

* **Class names given** (a Hugging Face ``ClassLabel`` feature): each label must be an
  integer in ``[0, len(names))``; any other value (``-1``, which ``datasets`` uses for "no
  label", a number past the list, a string) is a record out of the class list: skipped
  and reported.
* **No names given, every label an integer** (an ``int``, or a string of decimal digits as
  a CSV or a ``.cls`` member holds it): labels are class indices used as given and the
  classes are ``"0", "1", ..., str(max)``; a negative integer is not an index: skipped
  and reported.
* **Otherwise** labels are class names: the classes are their sorted set (as ImageFolder
  sorts folder names) and each label maps to its position in it.

``None`` marks a record whose label is already known to be unusable; it takes no part in
the rule and keeps its problem.
"""

from __future__ import annotations

from collections.abc import Sequence

Label = int | str | None


def _is_index(value: Label) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value.isdigit())


def assign_labels(values: Sequence[Label], names: Sequence[str] | None = None,
                  ) -> tuple[list[str], list[int], dict[int, str]]:
    """``(classes, label index per record (-1 where unusable), {record: problem})``.

    ``values`` holds each record's raw label, ``None`` for one already unusable.
    """
    problems: dict[int, str] = {}
    indices = [-1] * len(values)
    if names is not None:
        classes = list(names)
        for i, value in enumerate(values):
            if value is None:
                continue
            if _is_index(value) and 0 <= int(value) < len(classes):
                indices[i] = int(value)
            else:
                problems[i] = (f"label {value!r} is out of the class list ({len(classes)} classes: "
                               f"{_preview(classes)})")
        return classes, indices, problems
    present = [v for v in values if v is not None]
    if all(_is_index(v) or (isinstance(v, int) and not isinstance(v, bool)) for v in present):
        for i, value in enumerate(values):
            if value is None:
                continue
            if int(value) < 0:
                problems[i] = (f"label {value} is negative; integer labels are class indices "
                               "0, 1, ...")
            else:
                indices[i] = int(value)
        top = max((v for v in indices if v >= 0), default=-1)
        return [str(i) for i in range(top + 1)], indices, problems
    classes = sorted({str(v) for v in present})
    position = {name: i for i, name in enumerate(classes)}
    for i, value in enumerate(values):
        if value is not None:
            indices[i] = position[str(value)]
    return classes, indices, problems


def _preview(classes: Sequence[str], count: int = 4) -> str:
    shown = ", ".join(repr(c) for c in classes[:count])
    return shown + (", ..." if len(classes) > count else "")
