"""What a sharded set's manifest may hold, checked when the set is opened.

:func:`parse_manifest` reads ``fastload-set.json`` defensively (size and nesting bounded, see
:mod:`fastload.data.format.untrusted`) and checks every field a reader uses: types and ranges,
the shard count bounded by :data:`MAX_SHARDS` (checked before any entry is looked at), each
shard path relative, normalised and resolving inside the set's folder, listed once, its
folder present, and the ``[start, stop)`` ranges sorted, contiguous and summing to the
set's ``count``. The set's labels file and its dtype are fixed by the format. Any problem
is one ``ValueError`` (a missing shard folder: ``FileNotFoundError``) naming the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from fastload.data.format.constants import (
    CHECKSUM_FILE,
    LABELS_DTYPE,
    LABELS_FILE,
    STATE_COMPLETE,
    SUPPORTED_VERSIONS,
)
from fastload.data.format.reader import MAX_RECORDS, class_list_problem
from fastload.data.format.untrusted import confined_path, read_json, short_repr

MANIFEST_FILE = "fastload-set.json"
MANIFEST_FORMAT = "fastload-lmdb-set"
MANIFEST_VERSION = 1
SUPPORTED_MANIFEST_VERSIONS = (1,)
SET_LABELS_FILE = LABELS_FILE  # the set's labels, concatenated in global order

MAX_SHARDS = 100_000  # 100 M images in shards of 1,000 would be 100,000 (docs/scale.md)
MAX_SHARD_RECORDS = MAX_RECORDS  # a shard's keys have KEY_DIGITS digits
MAX_MANIFEST_BYTES = 64 << 20  # 64 MiB: ~250 bytes per shard entry, 100,000 entries
MAX_CRC32 = (1 << 32) - 1


class ShardEntry(NamedTuple):
    """One checked entry of a manifest's ``shards`` list."""

    index: int
    path: str  # as the manifest names it, relative to the set's folder
    folder: str  # its real path, inside the set's folder
    count: int
    start: int
    stop: int
    checksum_crc32: int  # CRC-32 of the shard's checksums.crc32


def repair_advice(root: Path) -> str:
    """What to run when a set's manifest or labels file is damaged."""
    return (f"run `fastload verify {root} --repair` to rebuild the manifest and labels from "
            "the set's shard folders")


class _Fields:
    """Type and range checks of one JSON object, each failure one sentence naming the field."""

    def __init__(self, file: Path, fix: str) -> None:
        self.file, self.fix = str(file), fix
        self.path_fix = f"copy the shard into the set's folder, or {fix}"

    def fail(self, field: str, problem: str) -> None:
        raise ValueError(f"{self.file!r}: field {field} {problem}; {self.fix}")

    def integer(self, obj: dict, key: str, low: int, high: int, where: str = "") -> int:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(where + key, f"should be an integer in [{low}, {high}], but got "
                                   f"{key}={short_repr(value)}")
        return value

    def string(self, obj: dict, key: str, where: str = "") -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            self.fail(where + key, f"should be a string, but got {key}={short_repr(value)}")
        return value

    def equal(self, obj: dict, key: str, expected: object, where: str = "") -> None:
        if obj.get(key) != expected:
            self.fail(where + key, f"should be {expected!r} (fixed by the format), but got "
                                   f"{key}={short_repr(obj.get(key))}")

    def classes(self, obj: dict) -> list[str]:
        value = obj.get("classes")
        problem = class_list_problem(value)
        if problem:
            self.fail("classes", f"{problem}: classes={short_repr(value)}")
        return value


def parse_manifest(file: Path, *, shards_present: bool = True
                   ) -> tuple[dict, list[ShardEntry]]:
    """``(manifest, checked shard entries)`` of the manifest ``file`` (see module docstring);
    ``shards_present=False`` skips the check that each shard folder exists (a remote set's
    shards arrive in its cache folder when first read)."""
    root = file.parent
    fix = repair_advice(root)
    manifest = read_json(file, MAX_MANIFEST_BYTES, fix)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{str(file)!r} does not describe a {MANIFEST_FORMAT} set; {fix}")
    if manifest.get("version") not in SUPPORTED_MANIFEST_VERSIONS:
        raise ValueError(
            f"{str(file)!r} uses manifest version {short_repr(manifest.get('version'))} but "
            f"this fastload reads versions {SUPPORTED_MANIFEST_VERSIONS}; upgrade fastload")
    fields = _Fields(file, fix)
    fields.equal(manifest, "state", STATE_COMPLETE)
    num_shards = fields.integer(manifest, "num_shards", 1, MAX_SHARDS)
    shards = manifest.get("shards")
    if not isinstance(shards, list) or len(shards) != num_shards:
        what = f"{len(shards)} entries" if isinstance(shards, list) else short_repr(shards)
        fields.fail("shards", f"should list num_shards={num_shards} shard entries, but holds "
                              f"{what}")
    count = fields.integer(manifest, "count", 0, num_shards * MAX_SHARD_RECORDS)
    fields.classes(manifest)
    fields.equal(manifest, "labels_file", SET_LABELS_FILE)
    fields.equal(manifest, "labels_dtype", LABELS_DTYPE)
    for key in ("source", "source_kind", "source_fingerprint"):
        fields.string(manifest, key)
    if not isinstance(manifest.get("options"), dict):
        fields.fail("options", f"should be an object, but got "
                               f"options={short_repr(manifest.get('options'))}")
    if manifest.get("shard_format_version") not in SUPPORTED_VERSIONS:
        fields.fail("shard_format_version", f"should be one of {SUPPORTED_VERSIONS}, but got "
                    f"{short_repr(manifest.get('shard_format_version'))}")
    real_root = os.path.realpath(root)
    entries = [_entry(fields, real_root, k, entry, shards_present)
               for k, entry in enumerate(shards)]
    _check_layout(fields, entries, count)
    return manifest, entries


def _entry(fields: _Fields, real_root: str, k: int, entry: object,
           present: bool = True) -> ShardEntry:
    where = f"shards[{k}]."
    if not isinstance(entry, dict):
        fields.fail(f"shards[{k}]", f"should be an object, but got {short_repr(entry)}")
    count = fields.integer(entry, "count", 0, MAX_SHARD_RECORDS, where)
    start = fields.integer(entry, "start", 0, MAX_SHARDS * MAX_SHARD_RECORDS, where)
    stop = fields.integer(entry, "stop", 0, MAX_SHARDS * MAX_SHARD_RECORDS, where)
    if stop - start != count:
        fields.fail(where + "stop", f"is {stop}, but start={start} and count={count} make "
                                    f"the range end at {start + count}")
    crc = fields.integer(entry, "checksum_file_crc32", 0, MAX_CRC32, where)
    fields.integer(entry, "skipped", 0, MAX_SHARD_RECORDS, where)
    path = entry.get("path")
    try:
        folder = confined_path(real_root, path, "", fields.path_fix)
    except ValueError as exc:  # named here, not per entry: messages cost when built
        raise ValueError(f"{fields.file!r} field {where}path{exc}") from None
    fields.equal(entry, "checksum_file", path + "/" + CHECKSUM_FILE, where)
    if present and not os.path.isdir(folder):
        raise FileNotFoundError(f"{fields.file!r} field {where}path names {path!r}, which is "
                                f"not a folder of the set; restore it, or {fields.fix}")
    return ShardEntry(k, path, folder, count, start, stop, crc)


def _check_layout(fields: _Fields, entries: list[ShardEntry], count: int) -> None:
    """Ranges sorted, contiguous, from 0 to ``count``; each shard folder listed once."""
    end, folders = 0, {}
    for entry in entries:
        if entry.start != end:
            fields.fail(f"shards[{entry.index}].start",
                        f"is {entry.start}, but the shards before it end at {end}: shard "
                        "ranges must be sorted, contiguous and not overlap")
        other = folders.setdefault(entry.folder, entry.index)
        if other != entry.index:
            fields.fail(f"shards[{entry.index}].path",
                        f"names the folder of shards[{other}] ({entry.path!r}): each shard is "
                        "listed once")
        end = entry.stop
    if end != count:
        fields.fail("count", f"is {count}, but the shards' ranges hold {end} records")
