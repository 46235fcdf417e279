"""The API reference cannot fall behind the code: every public object documents every parameter.

The public API is what the package's faces export (``__all__`` of ``fastload``,
``fastload.data`` and ``fastload.loader``) and the public methods and properties of the
classes among them. Each one's docstring is parsed as mkdocstrings parses it for the site
(griffe's Google-style parser): every parameter of its signature must appear in its ``Args:``
section (the site's parameter table), no ``Args:`` entry may name a parameter the signature
lacks, and a function that returns something has a ``Returns:`` (or ``Yields:``) section.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

griffe = pytest.importorskip("griffe", reason="the docs extra is not installed (pip install '.[docs]')")

FACES = ("fastload", "fastload.data", "fastload.loader")


def _public() -> dict[str, Any]:
    """``{public name: object}``: each exported class or function once (under the first face
    that exports it), then the public methods and properties each class defines."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    for face in FACES:
        module = importlib.import_module(face)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[f"{face}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isfunction(value)
                                                     or isinstance(value, property)):
                        found[f"{face}.{name}.{attr}"] = value
    return found


PUBLIC = _public()


def _sections(obj: Any) -> dict[str, list]:
    text = inspect.getdoc(obj.fget if isinstance(obj, property) else obj)
    assert text and text.strip(), "no docstring"
    parsed = griffe.Docstring(text, parser="google").parse(warnings=False)
    sections: dict[str, list] = {}
    for section in parsed:
        sections.setdefault(section.kind.value, []).append(section)
    return sections


def _parameters(obj: Any) -> list[inspect.Parameter]:
    """The parameters a caller passes (``self`` and ``cls`` left out); a class's are its
    constructor's, none for an exception that keeps ``Exception.__init__``."""
    if isinstance(obj, property):
        return []
    if inspect.isclass(obj) and not any("__init__" in vars(k) for k in obj.__mro__
                                        if k.__module__.startswith("fastload")):
        return []
    params = list(inspect.signature(obj).parameters.values())
    if inspect.isfunction(obj) and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return params


def _documented(sections: dict[str, list]) -> list[str]:
    return [param.name.lstrip("*") for section in sections.get("parameters", [])
            for param in section.value]


def test_the_faces_export_what_the_reference_covers():
    # the objects the acceptance names, so an empty or broken discovery cannot pass
    for name in ("fastload.DataLoader", "fastload.LMDBDataset", "fastload.StallMeter",
                 "fastload.data.convert_folder", "fastload.data.verify_lmdb",
                 "fastload.DataLoader.state_dict"):
        assert name in PUBLIC
    assert len(PUBLIC) > 40


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_parameter_is_documented(name):
    obj = PUBLIC[name]
    sections = _sections(obj)
    documented = _documented(sections)
    names = [p.name for p in _parameters(obj)]
    missing = [n for n in names if n not in documented]
    assert not missing, f"{name}: the Args: section lacks {missing}"
    stale = [n for n in documented if n not in names]
    assert not stale, f"{name}: the Args: section names {stale}, which the signature lacks"
    assert len(documented) == len(set(documented)), f"{name}: a parameter documented twice"


@pytest.mark.parametrize("name", sorted(n for n, o in PUBLIC.items() if inspect.isfunction(o)))
def test_what_returns_something_has_a_returns_section(name):
    obj = PUBLIC[name]
    returns = inspect.signature(obj).return_annotation
    if returns in (None, "None"):
        return
    sections = _sections(obj)
    assert "returns" in sections or "yields" in sections, (
        f"{name} returns {returns if returns is not inspect.Signature.empty else 'a value'} "
        "but its docstring has no Returns: section")
