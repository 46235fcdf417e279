"""What an ``ExportedProgram`` file (``.pt2``) would have ``torch.export.load`` unpickle,
checked before it is loaded.

``torch.export.load`` unpickles parts of the archive with Python's full unpickler: a member
that fails ``torch.load(weights_only=True)`` is loaded again with ``weights_only=False``
(the example inputs, legacy weights and constants), weights and constants marked
``use_pickle`` are loaded with ``weights_only=False``, and custom or opaque objects are
plain pickles. A crafted file runs its code there. :func:`check_program_file` refuses a
file any of whose pickled members holds more than tensors and plain containers (what
``weights_only=True`` accepts; a pickle it accepts loads the same objects either way), or
holds a pickled object of another kind, naming the member.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

__all__ = ["check_program_file"]

_FIX = "pass a file written by `fastload export` or torch.export.save"


def check_program_file(path: str | os.PathLike) -> None:
    """Raise ValueError naming ``path`` and the member where ``torch.export.load`` would
    unpickle more than tensors (module docstring), or where ``path`` is no ``.pt2`` archive."""
    from torch.export.pt2_archive.constants import (
        CONSTANTS_DIR,
        TENSOR_CONSTANT_FILENAME_PREFIX,
        WEIGHTS_DIR,
    )

    where = os.fspath(path)
    try:
        archive = zipfile.ZipFile(where)
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(
            f"int8 program {where!r} is not a .pt2 archive ({err}); {_FIX}") from None
    with archive:
        for name in archive.namelist():
            inner = name.split("/", 1)[1] if "/" in name else name
            root = name[: len(name) - len(inner)]
            if inner.startswith("data/") and inner.endswith(".pt"):
                _tensors_only(archive, name, where)
            elif inner.endswith(".json") and inner.startswith((WEIGHTS_DIR, CONSTANTS_DIR)):
                folder = WEIGHTS_DIR if inner.startswith(WEIGHTS_DIR) else CONSTANTS_DIR
                for entry in _config_entries(archive, name, where):
                    path_name = str(entry.get("path_name", ""))
                    member = root + folder + path_name
                    if folder == CONSTANTS_DIR and not path_name.startswith(
                            TENSOR_CONSTANT_FILENAME_PREFIX):
                        raise ValueError(
                            f"int8 program {where!r} holds a pickled Python object ({member!r}), "
                            "which loading it would unpickle and run; load only programs "
                            "written by `fastload export` or from a source you trust")
                    if entry.get("use_pickle"):
                        _tensors_only(archive, member, where)


def _config_entries(archive: zipfile.ZipFile, name: str, where: str) -> list[dict]:
    try:
        config = json.loads(archive.read(name)).get("config", {})
        entries = list(config.values())
    except (ValueError, AttributeError, KeyError) as err:
        raise ValueError(
            f"int8 program {where!r} has an unreadable {name!r} ({err}); {_FIX}") from None
    return [entry for entry in entries if isinstance(entry, dict)]


def _tensors_only(archive: zipfile.ZipFile, name: str, where: str) -> None:
    import torch

    try:
        data = archive.read(name)
    except KeyError:
        raise ValueError(f"int8 program {where!r} lists {name!r}, which it does not hold; "
                         f"{_FIX}") from None
    if not data:  # torch.export.load reads an empty member as no data, unpickling nothing
        return
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the restricted unpickler refuses
        reason = (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"int8 program {where!r} holds {name!r}, which is more than tensors (torch.load "
            f"with weights_only=True refuses it: {reason}); loading it "
            "would unpickle and run it: load only programs written by `fastload export` or "
            "from a source you trust") from None
