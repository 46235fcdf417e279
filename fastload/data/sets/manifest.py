"""The manifest of a sharded fastload set: N ordinary LMDB shards read as one data set.

A sharded set is a directory::

    DST/
      shard-00000-of-00003/   a normal fastload LMDB directory (see format.py)
      shard-00001-of-00003/
      shard-00002-of-00003/
      fastload-set.json       the manifest, written last, atomically (temp file + rename)
      labels.i32              every record's label in global order (one read opens the set)
      .fastload-set.lock      serialises the processes that claim shards or complete the
                              manifest (see dst_lock.set_lock)

Shard ``k`` holds source files ``[k * n // N, (k + 1) * n // N)`` of the ``n`` files of the
source, in source order, so global index ``i`` is record ``i - start`` of the shard whose
``[start, stop)`` range holds it and the global order equals an unsharded conversion's. The
manifest lists, per shard, its directory, record count, range, checksum file and that
file's CRC-32, plus the set's class names, source fingerprint and options (and
``"jpeg_check": "strict"`` when every shard's sidecar says it, with an attestation when
every shard's own verifies here: :mod:`fastload.data.sets.attest`). It exists only
once every shard is complete; whichever process finds them all complete first writes it.
What a manifest may hold, and what reading a set checks: :mod:`fastload.data.sets.schema`
and :mod:`fastload.data.sets.shards`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from fastload.data.format.constants import (
    CHECKSUM_FILE,
    JPEG_CHECK_STRICT,
    LABELS_DTYPE,
    META_FILE,
    META_JPEG_ATTESTATION,
    META_JPEG_CHECK,
    PARTIAL_FILE,
    STATE_COMPLETE,
    crc32,
    jpeg_checked,
)
from fastload.data.sets.schema import (
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    SET_LABELS_FILE,
    SUPPORTED_MANIFEST_VERSIONS,
    parse_manifest,
)
from fastload.data.sets.table import shard_name

__all__ = [
    "LOCK_FILE", "MANIFEST_FILE", "MANIFEST_FORMAT", "MANIFEST_VERSION", "SET_LABELS_FILE",
    "SUPPORTED_MANIFEST_VERSIONS", "build_manifest", "complete_manifest", "describe_shards",
    "existing_shard_counts", "identity_differences", "is_sharded_set", "load_manifest", "manifest_path",
    "pending_shards", "shard_bounds", "shard_count_of", "shard_folders", "shard_name",
]

LOCK_FILE = ".fastload-set.lock"
_SHARD_DIR = re.compile(r"shard-(\d{5,})-of-(\d{5,})")
# Keys every shard of one set must agree on (they come from the conversion's identity).
SHARED_KEYS = ("format_version", "source", "source_kind", "source_fingerprint", "classes",
               "options")


def shard_bounds(num_files: int, count: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` source-file range of each of ``count`` shards (contiguous)."""
    return [(k * num_files // count, (k + 1) * num_files // count) for k in range(count)]


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest file of a set given as its directory or as the manifest itself."""
    path = Path(os.path.abspath(os.path.expanduser(path)))
    return path if path.name == MANIFEST_FILE else path / MANIFEST_FILE


def is_sharded_set(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a sharded set.

    Args:
        path: a local path (a URL is never a local set).

    Returns:
        True when ``path`` is a set's manifest, or a directory holding one or shard folders.
    """
    path = Path(path)
    if path.name == MANIFEST_FILE:
        return path.is_file()
    if not path.is_dir():
        return False
    return (path / MANIFEST_FILE).exists() or bool(existing_shard_counts(path))


def shard_count_of(name: str) -> int | None:
    """The shard count ``N`` of a folder named ``shard-xxxxx-of-N``; None for another name."""
    match = _SHARD_DIR.fullmatch(name)
    return int(match.group(2)) if match else None


def shard_folders(root: Path) -> dict[str, int]:
    """``{folder name: its shard count N}`` of the ``shard-xxxxx-of-N`` folders in ``root``
    that hold a fastload database or partial (so ImageFolder classes never match)."""
    found = {}
    if root.is_dir():
        for entry in os.scandir(root):
            count = shard_count_of(entry.name)
            if count is not None and entry.is_dir() and any(
                    os.path.exists(os.path.join(entry.path, name))
                    for name in (META_FILE, PARTIAL_FILE)):
                found[entry.name] = count
    return found


def existing_shard_counts(root: Path) -> set[int]:
    """The shard counts N named by the ``shard-xxxxx-of-N`` folders in ``root``."""
    return set(shard_folders(root).values())


def load_manifest(path: str | os.PathLike) -> dict:
    """The parsed manifest of the set at ``path``, its schema, paths and ranges checked.

    See :mod:`fastload.data.sets.schema` for the checks.

    Args:
        path: the set's folder or its manifest file (a local path).

    Returns:
        The manifest as a dict (format, count, classes, options, shard entries).

    Raises:
        FileNotFoundError: there is no manifest at ``path``.
        ValueError: the manifest is unusable (one clear sentence), missing while shards are
            unfinished, or ``path`` is a URL.
    """
    return open_manifest(path)[0]


def open_manifest(path: str | os.PathLike, *, shards_present: bool = True):
    """``(manifest, shard entries)`` of the set at ``path``, checked as :func:`load_manifest`
    (without ``shards_present``, the shard folders need not exist yet: a remote set's cache)."""
    from fastload.data.format.untrusted import refuse_url

    refuse_url(path, "sharded set")
    file = manifest_path(path)
    root = file.parent
    if not file.exists():
        if root.is_dir() and existing_shard_counts(root):
            raise ValueError(
                f"sharded set {str(root)!r} has no {MANIFEST_FILE} yet: some shards are "
                f"unfinished; finish the conversion of every shard_index (or, if every shard "
                f"is finished, run `fastload verify {root}` to write the manifest)"
            )
        raise FileNotFoundError(f"{str(file)!r} does not exist; convert a sharded set "
                                "(shards=N) there first")
    return parse_manifest(file, shards_present=shards_present)


def _read_meta(shard_dir: Path) -> dict | None:
    """A shard's ``fastload.json`` when it says complete, else None (lenient: for listing)."""
    from fastload.data.format.limits import MAX_META_BYTES
    from fastload.data.format.untrusted import read_json

    try:
        meta = read_json(shard_dir / META_FILE, MAX_META_BYTES, "")
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("state") == STATE_COMPLETE else None


def pending_shards(root: Path, count: int) -> list[str]:
    """Names of the shards of a ``count``-shard set in ``root`` that are not complete."""
    return [shard_name(k, count) for k in range(count)
            if _read_meta(root / shard_name(k, count)) is None]


def describe_shards(root: Path) -> str:
    """What shard folders ``root`` holds, for messages: ``2 shards of a 4-shard set (1
    finished, 1 unfinished: shard-00000-of-00004, shard-00001-of-00004)``."""
    groups: dict[int, list[str]] = {}
    for name, count in sorted(shard_folders(root).items()):
        groups.setdefault(count, []).append(name)
    parts = []
    for count, names in sorted(groups.items()):
        done = sum(_read_meta(root / name) is not None for name in names)
        listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{len(names)} shard(s) of a {count}-shard set ({done} finished, "
                     f"{len(names) - done} unfinished: {listed})")
    return "; ".join(parts) or "no shard folders"


def identity_differences(meta: dict, expected: dict) -> list[str]:
    """The identity keys (source, fingerprint, classes, options, shard index and count) on
    which ``meta``, a shard's sidecar, differs from ``expected``."""
    differs = [key for key in SHARED_KEYS if meta.get(key) != expected.get(key)]
    info, want = meta.get("shard"), expected.get("shard") or {}
    if not isinstance(info, dict) or any(info.get(k) != want.get(k) for k in ("index", "count")):
        differs.append("shard index/count")
    return differs


def _check_identity(meta: dict, expected: dict, where: str) -> None:
    differs = identity_differences(meta, expected)
    if differs:
        raise ValueError(
            f"shard {where!r} was converted from another source or with other options "
            f"({', '.join(differs)} differ); reconvert it with the same source and options "
            "and overwrite=True")


def build_manifest(root: Path, count: int, open_shard: Callable | None = None):
    """``(manifest, labels)`` of the ``count`` complete shards in ``root``: every shard opens
    (its own checks, see :class:`~fastload.data.format.reader.LMDBReader`), lies inside ``root`` and
    agrees with shard 0 on source, classes and options; ValueError naming the shard otherwise.
    ``open_shard(k, name)``, when given, gives shard ``k``'s reader instead (``meta``,
    ``len``, ``checksums``, ``targets``: a remote set's sidecars, fetched)."""
    import numpy as np

    from fastload.data.format.reader import LMDBReader
    from fastload.data.format.untrusted import confined_path
    from fastload.data.sets.attest import attest_manifest, trusted_jpeg_check

    shards, labels, start, first, strict, attested = [], [], 0, None, True, True
    real_root = os.path.realpath(root)
    for k in range(count):
        name = shard_name(k, count)
        if open_shard is not None:
            reader = open_shard(k, name)
        else:
            folder = Path(confined_path(real_root, name, f"shard folder {name!r}"))
            if _read_meta(folder) is None:
                raise ValueError(f"shard {str(root / name)!r} is not complete; rerun its "
                                 f"conversion with shard_index={k}")
            reader = LMDBReader(folder)
        meta = reader.meta
        if first is None:
            first = meta
        _check_identity(meta, {**first, "shard": {"index": k, "count": count}},
                        str(root / name))
        strict = strict and jpeg_checked(meta)
        attested = attested and strict and trusted_jpeg_check(meta, reader.checksums)
        info = meta["shard"]
        shards.append({
            "path": name, "count": len(reader), "start": start, "stop": start + len(reader),
            "skipped": int(meta.get("skipped", 0)),
            "source_range": [info.get("source_start"), info.get("source_stop")],
            "checksum_file": f"{name}/{CHECKSUM_FILE}",
            "checksum_file_crc32": crc32(reader.checksums.astype("<u4").tobytes()),
        })
        labels.append(np.array(reader.targets, dtype=LABELS_DTYPE, copy=True))  # unmapped
        start += len(reader)
    manifest = {
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
    if attested and shards:
        attestation = attest_manifest(manifest)
        if attestation is not None:
            manifest[META_JPEG_ATTESTATION] = attestation
    joined = np.concatenate(labels) if labels else np.zeros(0, dtype=LABELS_DTYPE)
    return manifest, joined


def complete_manifest(root: str | os.PathLike, count: int | None = None, *,
                      rebuild: bool = False,
                      vet: Callable[[Path], None] | None = None) -> dict | None:
    """Write the manifest when every shard is complete and return it (None while some are
    not). Safe to call from many processes at once: the set's lock file serialises them, the
    set's labels and the manifest are written to temporary files and renamed, manifest last.

    A manifest already there is kept when it passes the open checks and has ``count``
    shards, unless ``rebuild``. ``vet(folder)``, when given, runs on every shard folder
    before anything is written and raises ValueError to stop the rebuild.
    """
    from fastload.data.convert.dst_lock import set_lock
    from fastload.data.format.atomic import write_bytes_atomic, write_json_atomic

    root = Path(os.path.abspath(root))
    if count is None:
        counts = existing_shard_counts(root)
        if len(counts) != 1:
            raise ValueError(f"{str(root)!r} holds {describe_shards(root)}; pass count= or "
                             "remove the stray shard folders")
        count = counts.pop()
    with set_lock(root, LOCK_FILE):  # a second finisher waits, then finds it written
        existing = root / MANIFEST_FILE
        if existing.exists() and not rebuild:
            try:
                manifest = load_manifest(root)
                if manifest.get("num_shards") == count:
                    return manifest
            except (OSError, ValueError):
                pass  # unusable: rewrite it below
        if pending_shards(root, count):
            return None
        manifest, labels = build_manifest(root, count)
        if vet is not None:
            for entry in manifest["shards"]:
                vet(root / entry["path"])
        write_bytes_atomic(root / SET_LABELS_FILE, labels.astype(LABELS_DTYPE).tobytes(),
                           sync_dir=False)
        write_json_atomic(existing, manifest)
        return manifest
