"""The manifest of a sharded fastload set: N ordinary LMDB shards read as one data set.

A sharded set is a directory::

    DST/
      shard-00000-of-00003/   a normal fastload LMDB directory (see format.py)
      shard-00001-of-00003/
      shard-00002-of-00003/
      fastload-set.json       the manifest, written last, atomically (temp file + rename)
      labels.i32              every record's label in global order (one read opens the set)
      .fastload-set.lock      serialises the processes that try to complete the manifest

Shard ``k`` holds source files ``[k * n // N, (k + 1) * n // N)`` of the ``n`` files of the
source, in source order, so global index ``i`` is record ``i - start`` of the shard whose
``[start, stop)`` range holds it and the global order equals an unsharded conversion's. The
manifest lists, per shard, its directory, record count, range, checksum file and that
file's CRC-32, plus the set's class names, source fingerprint and options (and
``"jpeg_check": "strict"`` when every shard's sidecar says it). It exists only
once every shard is complete; whichever process finds them all complete first writes it.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from fastload.data.format import (
    CHECKSUM_FILE,
    JPEG_CHECK_STRICT,
    LABELS_DTYPE,
    LABELS_FILE,
    META_FILE,
    META_JPEG_CHECK,
    PARTIAL_FILE,
    STATE_COMPLETE,
    crc32,
    jpeg_checked,
)

MANIFEST_FILE = "fastload-set.json"
MANIFEST_FORMAT = "fastload-lmdb-set"
MANIFEST_VERSION = 1
SUPPORTED_MANIFEST_VERSIONS = (1,)
SET_LABELS_FILE = LABELS_FILE  # the set's labels, concatenated in global order
LOCK_FILE = ".fastload-set.lock"
SHARD_PREFIX = "shard-"
_SHARD_DIR = re.compile(r"shard-(\d{5,})-of-(\d{5,})")
# Keys every shard of one set must agree on (they come from the conversion's identity).
SHARED_KEYS = ("format_version", "source", "source_kind", "source_fingerprint", "classes",
               "options")


def shard_name(index: int, count: int) -> str:
    """The directory name of shard ``index`` of ``count``: ``shard-00001-of-00003``."""
    return f"{SHARD_PREFIX}{index:05d}-of-{count:05d}"


def shard_bounds(num_files: int, count: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` source-file range of each of ``count`` shards (contiguous)."""
    return [(k * num_files // count, (k + 1) * num_files // count) for k in range(count)]


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest file of a set given as its directory or as the manifest itself."""
    path = Path(os.path.abspath(path))
    return path if path.name == MANIFEST_FILE else path / MANIFEST_FILE


def is_sharded_set(path: str | os.PathLike) -> bool:
    """True when ``path`` is a set's manifest, or a directory holding one or shard folders."""
    path = Path(path)
    if path.name == MANIFEST_FILE:
        return path.is_file()
    if not path.is_dir():
        return False
    return (path / MANIFEST_FILE).exists() or bool(existing_shard_counts(path))


def shard_folders(root: Path) -> dict[str, int]:
    """``{folder name: its shard count N}`` of the ``shard-xxxxx-of-N`` folders in ``root``
    that hold a fastload database or partial (so ImageFolder classes never match)."""
    found = {}
    if root.is_dir():
        for entry in os.scandir(root):
            match = _SHARD_DIR.fullmatch(entry.name)
            if match and entry.is_dir() and any(
                    os.path.exists(os.path.join(entry.path, name))
                    for name in (META_FILE, PARTIAL_FILE)):
                found[entry.name] = int(match.group(2))
    return found


def existing_shard_counts(root: Path) -> set[int]:
    """The shard counts N named by the ``shard-xxxxx-of-N`` folders in ``root``."""
    return set(shard_folders(root).values())


def load_manifest(path: str | os.PathLike) -> dict:
    """The parsed manifest of the set at ``path``; one clear sentence when it is unusable."""
    file = manifest_path(path)
    root = file.parent
    if not file.exists():
        if root.is_dir() and existing_shard_counts(root):
            raise ValueError(
                f"sharded set {str(root)!r} has no {MANIFEST_FILE} yet: some shards are "
                f"unfinished; finish the conversion of every shard_index, then run "
                f"`fastload verify {root}`"
            )
        raise FileNotFoundError(f"{str(file)!r} does not exist; convert a sharded set "
                                "(shards=N) there first")
    try:
        with open(file, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except ValueError as exc:
        raise ValueError(f"{str(file)!r} is not valid JSON ({exc}); run `fastload verify "
                         f"{root}` to rewrite it") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{str(file)!r} does not describe a {MANIFEST_FORMAT} set")
    if manifest.get("version") not in SUPPORTED_MANIFEST_VERSIONS:
        raise ValueError(
            f"{str(file)!r} uses manifest version {manifest.get('version')!r} but this fastload "
            f"reads versions {SUPPORTED_MANIFEST_VERSIONS}; upgrade fastload")
    return manifest


def _read_meta(shard_dir: Path) -> dict | None:
    try:
        with open(shard_dir / META_FILE, encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("state") == STATE_COMPLETE else None


def pending_shards(root: Path, count: int) -> list[str]:
    """Names of the shards of a ``count``-shard set in ``root`` that are not complete."""
    return [shard_name(k, count) for k in range(count)
            if _read_meta(root / shard_name(k, count)) is None]


def build_manifest(root: Path, count: int) -> dict:
    """The manifest of the ``count`` complete shards in ``root`` (all must be complete and
    agree on source, classes and options; ValueError naming the shard otherwise)."""
    shards, start, first, strict = [], 0, None, True
    for k in range(count):
        name = shard_name(k, count)
        meta = _read_meta(root / name)
        if meta is None:
            raise ValueError(f"shard {str(root / name)!r} is not complete; rerun its "
                             f"conversion with shard_index={k}")
        if first is None:
            first = meta
        differs = [key for key in SHARED_KEYS if meta.get(key) != first.get(key)]
        info = meta.get("shard") or {}
        if differs or info.get("index") != k or info.get("count") != count:
            raise ValueError(
                f"shard {str(root / name)!r} was converted from another source or with other "
                f"options ({', '.join(differs) or 'shard index/count'} differ); reconvert it "
                "with the same source and options and overwrite=True")
        strict = strict and jpeg_checked(meta)
        checksum_file = f"{name}/{meta.get('checksum_file', CHECKSUM_FILE)}"
        shards.append({
            "path": name, "count": int(meta["count"]), "start": start,
            "stop": start + int(meta["count"]), "skipped": int(meta.get("skipped", 0)),
            "source_range": [info.get("source_start"), info.get("source_stop")],
            "checksum_file": checksum_file,
            "checksum_file_crc32": crc32((root / checksum_file).read_bytes()),
        })
        start += int(meta["count"])
    return {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "state": STATE_COMPLETE,
        "count": start, "num_shards": count, "classes": first["classes"],
        "source": first["source"], "source_kind": first["source_kind"],
        "source_fingerprint": first["source_fingerprint"], "options": first["options"],
        "shard_format_version": first["format_version"],
        **({META_JPEG_CHECK: JPEG_CHECK_STRICT} if strict and shards else {}),
        "labels_file": SET_LABELS_FILE, "labels_dtype": LABELS_DTYPE, "shards": shards,
        "index_rule": "global index i is record i - start of the shard with start <= i < stop",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def complete_manifest(root: str | os.PathLike, count: int | None = None) -> dict | None:
    """Write the manifest when every shard is complete and return it (None while some are
    not). Safe to call from many processes at once: a lock file serialises them, the set's
    labels and the manifest are written to temporary files and renamed, manifest last."""
    import fcntl

    import numpy as np

    from fastload.data.atomic import write_bytes_atomic, write_json_atomic

    root = Path(os.path.abspath(root))
    if count is None:
        counts = existing_shard_counts(root)
        if len(counts) != 1:
            raise ValueError(f"{str(root)!r} holds shards of {len(counts)} different shard "
                             "counts; pass count= or remove the stray shard folders")
        count = counts.pop()
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a second finisher waits, then finds it written
        existing = root / MANIFEST_FILE
        if existing.exists():
            try:
                manifest = load_manifest(root)
                if manifest.get("num_shards") == count:
                    return manifest
            except ValueError:
                pass  # unreadable: rewrite it below
        if pending_shards(root, count):
            return None
        manifest = build_manifest(root, count)
        labels = [np.fromfile(root / s["path"] / LABELS_FILE, dtype=LABELS_DTYPE)
                  for s in manifest["shards"]]
        joined = np.concatenate(labels) if labels else np.zeros(0, dtype=LABELS_DTYPE)
        write_bytes_atomic(root / SET_LABELS_FILE, joined.astype(LABELS_DTYPE).tobytes(),
                           sync_dir=False)
        write_json_atomic(existing, manifest)
        return manifest
    finally:
        os.close(fd)  # releases the lock
