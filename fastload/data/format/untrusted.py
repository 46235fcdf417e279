"""Reading what a user, a bad copy or a download may have edited: the one owner of three rules.

* **Local paths only, where a URL is not supported.** A ``scheme://`` string
  (``s3://bucket/set``) is refused with one sentence where fastload needs a local path (a
  conversion's source, :func:`refuse_url`), and by the entry points that do read and write
  URLs when fsspec has no backend for its scheme (:mod:`fastload.data.remote.url`); it is
  never read or written as a relative local folder named ``s3:``.
* **A set is a closed folder.** A path named by a set's manifest is relative, normalised
  (no ``.``, ``..``, ``//`` or trailing ``/``) and its real path, symlinks followed, lies
  inside the set's real folder (:func:`confined_path`).
* **Bounded JSON.** A sidecar or manifest is read only up to a size, parsed without a raw
  ``RecursionError`` for deep nesting, and refused past a nesting depth
  (:func:`read_json`); every failure is a ``ValueError`` naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import chain, compress
from pathlib import Path

__all__ = ["confined_path", "read_json", "refuse_url", "regular_file_size", "short_repr"]

# Two or more scheme characters, so a Windows drive ("C:/") is not a URL; one slash after
# the colon as well, because pathlib collapses "s3://b" to "s3:/b".
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")
MAX_JSON_DEPTH = 32  # fastload writes at most 4 levels; anything deeper is not ours


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a message never quotes a megabyte)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def refuse_url(path: object, what: str = "path") -> None:
    """Raise ``ValueError`` when ``path`` is a URL where only a local path will do (a
    conversion's source, a folder of the cache; the entry points that read and write sets
    at URLs go through :func:`fastload.data.remote.locate` first)."""
    try:
        text = os.fsdecode(path)
    except TypeError:
        return  # not a path at all: the caller's own type check names it
    match = _URL.match(text)
    if match:
        raise ValueError(
            f"{what} {text!r} is a URL ({match.group(1)}://), but it must be a local path "
            "here (local folders only): copy the data to a local folder and pass its path "
            f"(write './{text}' if it really is a local folder named "
            f"{match.group(1) + ':'!r})")


def confined_path(real_root: str, relative: object, what: str,
                  fix: str = "copy the data into the set's folder") -> str:
    """The real path of ``real_root/relative``; ``ValueError`` naming ``what`` (and ``fix``)
    unless ``relative`` is a normalised relative path resolving, symlinks followed, inside
    ``real_root`` (itself a real path: ``os.path.realpath`` of the folder, once per folder)."""
    if not isinstance(relative, str) or not relative or len(relative) > 4096:
        raise ValueError(f"{what} should be a relative path inside the set's folder, but got "
                         f"{short_repr(relative)}; {fix}")
    parts = relative.split("/")
    if (os.path.isabs(relative) or "\\" in relative or "\x00" in relative or ".." in parts
            or os.path.normpath(relative) != relative or relative == "."):
        raise ValueError(
            f"{what} is {short_repr(relative)}, not a normalised relative path inside the set's "
            f"folder (no leading '/', no '.' or '..' parts): a set is a closed folder; {fix}")
    joined = os.path.join(real_root, relative)
    if len(parts) == 1 and not os.path.islink(joined):
        return joined  # the common case, one lstat instead of a walk of every part
    real = os.path.realpath(joined)
    if real == real_root or os.path.commonpath([real_root, real]) != real_root:
        raise ValueError(
            f"{what} is {relative!r}, which resolves to {real!r}, outside the set's folder "
            f"{real_root!r} (a symlink?): a set is a closed folder; {fix}")
    return real


def regular_file_size(path: Path, what: str) -> int:
    """The size of ``path``; ``FileNotFoundError``/``ValueError`` naming ``what`` when it is
    missing or not a regular file (a FIFO or device would block or never end)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {str(path)!r} is missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what} {str(path)!r} is not a regular file")
    return info.st_size


def read_json(path: Path, max_bytes: int, fix: str) -> object:
    """The parsed JSON of ``path`` (at most ``max_bytes``, nested at most
    :data:`MAX_JSON_DEPTH` deep); a ``ValueError`` naming the file and ``fix`` otherwise."""
    size = regular_file_size(path, "file")
    if size > max_bytes:
        raise ValueError(f"{str(path)!r} holds {size} bytes, more than the {max_bytes} a "
                         f"fastload file of its kind may hold; {fix}")
    with open(path, "rb") as handle:  # not read(max_bytes + 1): that allocates it all first
        data = handle.read(min(size, max_bytes) + 1)
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"{str(path)!r} is nested too deeply to be a fastload file; "
                         f"{fix}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5,000-digit number
        raise ValueError(f"{str(path)!r} is not valid JSON ({exc}); {fix}") from None
    if type(value) in (dict, list) and _depth_exceeds(value, MAX_JSON_DEPTH):
        raise ValueError(f"{str(path)!r} is nested more than {MAX_JSON_DEPTH} levels deep, "
                         f"so it is not a fastload file; {fix}")
    return value


_IS_DICT = frozenset((dict,)).__contains__
_IS_LIST = frozenset((list,)).__contains__
_IS_CONTAINER = frozenset((dict, list)).__contains__
_DEPTH_CHUNK = 4096  # containers of a level looked into at once: small temporary lists


def _depth_exceeds(value: object, limit: int) -> bool:
    """True when ``value`` (a parsed list or object) nests lists and objects more than
    ``limit`` deep; level by level, each level's children gathered by C iterators (a
    100,000-shard manifest: 0.1 s), a chunk of the level at a time (the temporaries of a
    whole level, megabytes, would stay in the C heap as free memory of the process)."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list = []
        for begin in range(0, len(level), _DEPTH_CHUNK):
            part = level[begin:begin + _DEPTH_CHUNK]
            types = list(map(type, part))
            children = list(chain(
                chain.from_iterable(map(dict.values, compress(part, map(_IS_DICT, types)))),
                chain.from_iterable(compress(part, map(_IS_LIST, types)))))
            below += compress(children, map(_IS_CONTAINER, map(type, children)))
        level = below
    return False
