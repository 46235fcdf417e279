"""mkdocs hook: ``::: fastload.DataLoader`` in a page documents the object that name gives.

The package's faces (``fastload``, ``fastload.data``) export names lazily or re-export them
from the module that defines them, which a static reader of the source cannot follow. This
hook imports each name an API page asks for and hands mkdocstrings the defining module's
path, with the public name as the heading, so the page keeps naming what users import while
the modules behind it move.
"""

from __future__ import annotations

import importlib
import re

DIRECTIVE = re.compile(r"^::: (fastload(?:\.\w+)+)[ \t]*$", re.MULTILINE)


def _defining_path(public: str) -> str:
    """``module.qualname`` of the object ``public`` names (imported, attribute by attribute)."""
    parts = public.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if module is None or qualname is None:  # a module, or a constant: its own name
            return public
        return f"{module}.{qualname}"
    raise ImportError(f"the API page names {public!r}, which cannot be imported")


def _rewrite(match: re.Match) -> str:
    public = match.group(1)
    real = _defining_path(public)
    if real == public:
        return match.group(0)
    return f'::: {real}\n    options:\n      heading: "{public}"\n      toc_label: "{public}"'


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs hook)
    if ":::" not in markdown:
        return markdown
    return DIRECTIVE.sub(_rewrite, markdown)
