"""A package face whose names load on first use (PEP 562), so importing the package is cheap.

A face lists ``{exported name: (module relative to the package, name in it)}`` and sets
``__getattr__, __dir__ = lazy_exports(__name__, exports)``. No exported name may also be a
sub-module's name: the import system sets a sub-module on its package when it is imported,
which would hide the export.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, tuple[str, str]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the face of ``package``.

    Args:
        package: the package's ``__name__``.
        exports: exported name -> (module relative to ``package``, attribute in it).

    Returns:
        ``(__getattr__, __dir__)``: the first imports a name's module on first use and keeps
        the value in the package's namespace (later lookups skip it); the second lists the
        package's names and the exports.
    """

    def __getattr__(name: str) -> Any:
        try:
            module, attr = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module, package), attr)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
