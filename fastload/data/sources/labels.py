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
    rule = LabelRule()
    for value in values:
        rule.add(value)
    classes = rule.classes()
    for i, value in enumerate(values):
        if value is None:
            continue
        problem = rule.problem(value)
        if problem is None:
            indices[i] = rule.index(value)
        else:
            problems[i] = problem
    return classes, indices, problems


class LabelRule:
    """The rule without class names, fed one label at a time (:meth:`add`), for a listing
    too long to hold: then :meth:`classes`, and per label :meth:`problem` and
    :meth:`index`. It keeps the distinct labels only. ``first_problem`` is ``(where,
    label)`` of the first label with a problem (when every label is an index: the first
    negative one), or None.
    """

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._all_index = True
        self._top = -1
        self._first_negative: tuple[object, Label] | None = None
        self._position: dict[str, int] | None = None

    def add(self, value: Label, where: object = None) -> None:
        if value is None:
            return
        name = value if isinstance(value, str) else str(value)
        if name in self._names:  # a label seen before: nothing new (str(3) == "3" alike)
            return
        self._position = None
        self._names.add(name)
        if not _is_index(value):
            self._all_index = False
        elif int(value) < 0:
            if self._first_negative is None:
                self._first_negative = (where, value)
        else:
            self._top = max(self._top, int(value))

    @property
    def first_problem(self) -> tuple[object, Label] | None:
        return self._first_negative if self._all_index else None

    def classes(self) -> list[str]:
        if self._all_index:
            return [str(i) for i in range(self._top + 1)]
        return sorted(self._names)

    def problem(self, value: Label) -> str | None:
        """Why ``value`` (one of the labels added) is no class index, or None."""
        if self._all_index and int(value) < 0:
            return f"label {value} is negative; integer labels are class indices 0, 1, ..."
        return None

    def index(self, value: Label) -> int:
        """The class index of ``value`` (one of the labels added, without a problem)."""
        if self._all_index:
            return int(value)
        if self._position is None:
            self._position = {name: i for i, name in enumerate(self.classes())}
        return self._position[str(value)]


def _preview(classes: Sequence[str], count: int = 4) -> str:
    shown = ", ".join(repr(c) for c in classes[:count])
    return shown + (", ..." if len(classes) > count else "")
