"""The one rule that turns a source's labels into class indices and class names.

Every source (WebDataset ``.cls`` text and ``.json`` fields, CSV and JSONL lists, parquet
and ``datasets`` columns) goes through :func:`assign_labels` or :class:`LabelRule`:

* **Class names given** (a Hugging Face ``ClassLabel`` feature): each label must be an
  integer in ``[0, len(names))``; any other value (``-1``, which ``datasets`` uses for "no
  label", a number past the list, a string) is a record out of the class list: skipped
  and reported.
* **Otherwise** a label is an *integer label* when it is an ``int`` or text that ``int()``
  reads in base 10 with ASCII digits only: an optional sign, surrounding whitespace
  allowed (``"3"``, ``" 3 "``, ``"+3"``, ``"007"``, ``"-1"``; not ``"1.0"``, ``"3e2"``,
  ``"1_000"``, ``"٣"``), as WebDataset's ``int(text)`` of a ``.cls`` member and a script's
  ``int(row["label"])`` read it. The labels of the set are then

  - **class indices** when integer labels are at least half of the records: the classes
    are ``"0", "1", ..., str(max)`` and each integer is its own index. A negative integer,
    one of :data:`MAX_CLASSES` or more, or a label that is no integer at all (``"cat"``,
    ``"1.0"``) is skipped and reported with the reason;
  - **class names** otherwise: the classes are the sorted set of the labels that are no
    integers (as ImageFolder sorts folder names), and an integer label among them is
    skipped and reported.

  So an odd label is never a reason to renumber the others: one ``"-1"`` or ``"cat"`` in a
  set of class indices, or one ``"3"`` in a set of class names, costs that sample only, and
  the conversion's ``errors.json`` says why.

``None`` marks a record whose label is already known to be unusable; it takes no part in
the rule and keeps its problem.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fastload.data.format.limits import MAX_CLASSES

__all__ = ["MAX_CLASSES", "Label", "LabelRule", "assign_labels", "integer_label"]

Label = int | str | None

_INTEGER_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


def integer_label(value: Label) -> int | None:
    """The integer ``value`` stands for (an ``int``, not a ``bool``, or its base-10 text
    with ASCII digits, sign and surrounding whitespace allowed), or None when it is no
    integer label."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)
    return None


def _index_problem(value: Label, number: int) -> str | None:
    """Why the integer label ``number`` (written ``value``) is no class index, or None."""
    if number < 0:
        return (f"label {value!r} is negative; integer labels are class indices 0, 1, ...: "
                "fix the label in the source")
    if number >= MAX_CLASSES:
        return (f"label {value!r} is past the largest class index a set may hold "
                f"({MAX_CLASSES - 1}): fix the label in the source")
    return None


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
            number = integer_label(value)
            if number is not None and 0 <= number < len(classes):
                indices[i] = number
            else:
                problems[i] = (f"label {value!r} is out of the class list ({len(classes)} classes: "
                               f"{_preview(classes)})")
        return classes, indices, problems
    rule = LabelRule()
    for value in values:
        rule.add(value)
    classes = rule.classes()
    for i, value in enumerate(values):
        if value is not None:
            indices[i], problem = rule.resolve(value)
            if problem is not None:
                problems[i] = problem
    return classes, indices, problems


class LabelRule:
    """The rule without class names, fed one label at a time (:meth:`add`), for a listing
    too long to hold: then :meth:`classes`, and per label :meth:`problem` and
    :meth:`index` (or both at once, :meth:`resolve`). It keeps two counts and the distinct
    labels only."""

    def __init__(self) -> None:
        self._seen: dict[Label, int | None] = {}  # distinct raw label -> its integer or None
        self._integers = 0  # records whose label is an integer label
        self._others = 0  # records whose label is not
        self._top = -1  # the largest valid class index seen
        self._position: dict[Label, int] | None = None

    def _number(self, value: Label) -> int | None:
        if type(value) is bool:  # True == 1 as a dict key
            return None
        try:
            return self._seen[value]
        except KeyError:
            pass
        number = self._seen[value] = integer_label(value)
        if number is None:
            self._position = None
        elif _index_problem(value, number) is None and number > self._top:
            self._top = number
        return number

    def add(self, value: Label) -> None:
        """Count one record's raw label (None: a record without a usable label)."""
        if value is None:
            return
        if self._number(value) is None:
            self._others += 1
        else:
            self._integers += 1

    @property
    def indices(self) -> bool:
        """True when the labels are class indices, False when they are class names."""
        return self._integers >= self._others

    def classes(self) -> list[str]:
        if self.indices:
            return [str(i) for i in range(self._top + 1)]
        return sorted(v for v, number in self._seen.items() if number is None)  # type: ignore[type-var]

    def problem(self, value: Label) -> str | None:
        """Why ``value`` (one of the labels added) is skipped, or None."""
        number = self._number(value)
        total = self._integers + self._others
        if self.indices:
            if number is None:
                return (f"label {value!r} is not an integer class index ({self._integers} of "
                        f"{total} labels are integers, so labels are class indices): fix the "
                        "label in the source")
            return _index_problem(value, number)
        if number is not None:
            return (f"label {value!r} is an integer among class names ({self._others} of "
                    f"{total} labels are names, so labels are class names): fix the label "
                    "in the source")
        return None

    def index(self, value: Label) -> int:
        """The class index of ``value`` (one of the labels added, without a problem)."""
        if self.indices:
            return self._number(value)  # type: ignore[return-value]
        if self._position is None:
            self._position = {name: i for i, name in enumerate(self.classes())}
        return self._position[value]  # type: ignore[index]

    def resolve(self, value: Label) -> tuple[int, str | None]:
        """``(class index, None)`` of ``value`` (one of the labels added), or ``(-1, why it
        is skipped)``."""
        problem = self.problem(value)
        return (-1, problem) if problem is not None else (self.index(value), None)


def _preview(classes: Sequence[str], count: int = 4) -> str:
    shown = ", ".join(repr(c) for c in classes[:count])
    return shown + (", ..." if len(classes) > count else "")
