"""The shard cache's files: where things go, how they are named, and what makes an
installed shard usable (its marker). The policy (locks, bound, eviction) is in
:mod:`fastload.data.remote.cache`.

Names are content addresses where the content is known before the download: a shard by
the manifest's description of it (:func:`content_name`), a set's manifest and labels by
the manifest's bytes. So the same set read through another endpoint, another spelling of
its URL or from a copy in another bucket, at any world size, finds what the cache holds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import time
from pathlib import Path

__all__ = ["GLOBAL_LOCK", "LOCKS", "MARKER", "RESERVED", "SHARDS", "content_name",
           "default_cache_dir", "discard", "make_folder", "marker_bytes", "part_name",
           "read_marker", "set_key", "touch", "valid", "write_marker"]

MARKER = ".fastload-cache.json"  # in an installed shard: its fingerprint and file sizes
RESERVED = "reserved.json"  # in a download in progress: the bytes it reserved
LOCKS = ".locks"  # beside the shards of a store: one lock file per shard
GLOBAL_LOCK = ".fastload-cache.lock"  # serialises the byte accounting
SHARDS = "shards"  # the content-addressed shard store, shared by every set
MAX_MARKER_BYTES = 1 << 20
_COUNTER = itertools.count()


def default_cache_dir() -> Path:
    """``$FASTLOAD_CACHE``, else ``$XDG_CACHE_HOME/fastload``, else ``~/.cache/fastload``."""
    if os.environ.get("FASTLOAD_CACHE"):
        return Path(os.environ["FASTLOAD_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastload"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name.rstrip("/").rsplit("/", 1)[-1])[:40] or "set"


def set_key(url: str, endpoint: str | None = None) -> str:
    """A folder name for what is known only by its URL (a single LMDB, a conversion's
    staging folder): its last part, made safe, and a hash of the URL and its ``endpoint``
    (two servers' ``s3://b/set`` do not share a folder)."""
    digest = hashlib.sha256(f"{endpoint or ''}\n{url}".encode()).hexdigest()[:16]
    return f"{_safe(url)}-{digest}"


def content_name(name: str, content: bytes | dict) -> str:
    """The folder name of ``content`` (bytes, or a JSON-able description): ``name`` made
    safe and a SHA-256 of the content, so that equal content has one name wherever it was
    read from."""
    if isinstance(content, dict):
        content = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    return f"{_safe(name)}-{hashlib.sha256(content).hexdigest()[:24]}"


def make_folder(path: Path) -> Path:
    """``path``, made with its parents; OSError naming the folder and the fix otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the shard cache folder {str(path)!r}: "
                      f"{exc.strerror}; pass cache_dir= or set FASTLOAD_CACHE to a "
                      "writable folder") from None
    return path


def touch(marker: Path) -> None:
    """Stamp ``marker`` with the clock's time (its last use, for the LRU order): the
    kernel's own file times are coarse (a tick of several ms), too coarse to order two uses
    in a row."""
    now = time.time_ns()
    os.utime(marker, ns=(now, now))


def read_marker(folder: Path) -> dict | None:
    """The marker of the installed shard ``folder``; None when absent or unreadable."""
    try:
        with open(folder / MARKER, "rb") as handle:
            value = json.loads(handle.read(MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_marker(part: Path, fingerprint: dict) -> dict[str, int]:
    """Write the marker of the finished download ``part`` (``fingerprint`` and the sizes
    of its files); returns those sizes."""
    sizes = {entry.name: entry.stat().st_size for entry in os.scandir(part) if entry.is_file()}
    (part / MARKER).write_text(json.dumps({"fingerprint": fingerprint, "files": sizes}))
    touch(part / MARKER)
    return sizes


def marker_bytes(marker: dict) -> int:
    """The bytes an installed shard's files take, as its marker lists them."""
    try:
        return sum(int(v) for v in marker.get("files", {}).values())
    except (TypeError, ValueError, AttributeError):
        return 0


def valid(folder: Path, fingerprint: dict) -> bool:
    """Whether ``folder`` is installed with ``fingerprint`` and its files still have the
    sizes its marker lists (a copy cut short or grown in the cache is fetched again)."""
    marker = read_marker(folder)
    if marker is None or marker.get("fingerprint") != fingerprint:
        return False
    files = marker.get("files")
    if not isinstance(files, dict):
        return False
    for name, size in files.items():
        try:
            if os.stat(folder / name).st_size != size:
                return False
        except OSError:
            return False
    return True


def discard(folder: Path) -> None:
    """Remove an installed shard: renamed away first (it stops looking installed at once),
    then deleted."""
    trash = folder.parent / f".trash-{folder.name}-{os.getpid()}-{next(_COUNTER)}"
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def part_name(folder: Path) -> Path:
    """A fresh name for a download of ``folder`` in progress (unique in this process)."""
    return folder.parent / f".part-{folder.name}-{os.getpid()}-{next(_COUNTER)}"
