"""What a sharded set's manifest may hold, checked when the set is opened.

:func:`parse_manifest` reads ``fastload-set.json`` defensively (size and nesting bounded, see
:mod:`fastload.data.format.untrusted`) and checks every field a reader uses: types and ranges,
the shard count bounded by :data:`MAX_SHARDS` (checked before any entry is looked at), each
shard path relative, normalised and resolving inside the set's folder, listed once, its
folder present, and the ``[start, stop)`` ranges sorted, contiguous and summing to the
set's ``count``. The set's labels file and its dtype are fixed by the format. Any problem
is one ``ValueError`` (a missing shard folder: ``FileNotFoundError``) naming the field.

The entries are checked in bulk first (NumPy over each field's column, the paths against
the names fastload gives its shards, one listing of the set's folder for their folders: no
system call per shard); only a manifest that fails that, or names its shards otherwise, is
checked entry by entry, which names the first problem. Both accept the same manifests. The
checked entries are kept as a :class:`~fastload.data.sets.table.ShardTable` (12 bytes per
shard when the shards have fastload's names).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastload.data.format.constants import (
    CHECKSUM_FILE,
    LABELS_DTYPE,
    LABELS_FILE,
    STATE_COMPLETE,
    SUPPORTED_VERSIONS,
)
from fastload.data.format.limits import MAX_RECORDS, class_list_problem
from fastload.data.format.untrusted import confined_path, read_json, short_repr
from fastload.data.sets.table import SHARD_PREFIX, ShardEntry, ShardTable, shard_names

__all__ = ["MAX_CRC32", "MAX_MANIFEST_BYTES", "MAX_SHARDS", "MAX_SHARD_RECORDS",
           "MANIFEST_FILE", "MANIFEST_FORMAT", "MANIFEST_VERSION", "SET_LABELS_FILE",
           "SUPPORTED_MANIFEST_VERSIONS", "ShardEntry", "ShardTable", "parse_manifest",
           "repair_advice"]

MANIFEST_FILE = "fastload-set.json"
MANIFEST_FORMAT = "fastload-lmdb-set"
MANIFEST_VERSION = 1
SUPPORTED_MANIFEST_VERSIONS = (1,)
SET_LABELS_FILE = LABELS_FILE  # the set's labels, concatenated in global order

MAX_SHARDS = 100_000  # 100 M images in shards of 1,000 would be 100,000 (docs/scale.md)
MAX_SHARD_RECORDS = MAX_RECORDS  # a shard's keys have KEY_DIGITS digits
MAX_MANIFEST_BYTES = 64 << 20  # 64 MiB: ~250 bytes per shard entry, 100,000 entries
MAX_CRC32 = (1 << 32) - 1
# a shard entry's integer fields and their ranges (checked in bulk and entry by entry)
_ENTRY_INTEGERS = (("count", 0, MAX_SHARD_RECORDS),
                   ("start", 0, MAX_SHARDS * MAX_SHARD_RECORDS),
                   ("stop", 0, MAX_SHARDS * MAX_SHARD_RECORDS),
                   ("checksum_file_crc32", 0, MAX_CRC32),
                   ("skipped", 0, MAX_SHARD_RECORDS))


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


def parse_manifest(file: Path, *, shards_present: bool = True) -> tuple[dict, ShardTable]:
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
    table = _table_as_written(real_root, shards, count, shards_present)
    if table is None:  # entry by entry: names the first problem, or takes other names
        entries = [_entry(fields, real_root, k, entry, shards_present)
                   for k, entry in enumerate(shards)]
        _check_layout(fields, entries, count)
        table = _table_of(real_root, entries, count)
    return manifest, table


def _table_as_written(real_root: str, shards: list, count: int,
                      present: bool) -> ShardTable | None:
    """The table of ``shards`` when every entry is as fastload writes it, checked in bulk:
    each field of :func:`_entry` by type and range, the ranges as :func:`_check_layout`
    checks them, shard ``k`` at ``shard_name(k, N)`` with its checksum file, and (``present``)
    each a real folder, not a symlink, in one listing of ``real_root``. None when anything
    differs: :func:`_entry` then finds and names it, or accepts what this does not."""
    import numpy as np  # here, not at import: a conversion's shards need none (NOTES C24)

    if set(map(type, shards)) != {dict}:
        return None
    bounds = np.empty(len(shards) + 1, dtype=np.int64)  # the table's: starts, then count
    bounds[-1] = count
    counts = start = crcs = None  # (one column at a time: the C heap keeps what it held)
    for key, low, high in _ENTRY_INTEGERS:  # count, start, stop, CRC-32, skipped
        values = [entry.get(key) for entry in shards]
        if set(map(type, values)) != {int}:  # not bool, float, str, None
            return None
        try:
            column = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
        if int(column.min()) < low or int(column.max()) > high:
            return None
        if key == "count":
            counts = column
        elif key == "start":
            start = bounds[:-1]
            start[:] = column
        elif key == "stop":  # the ranges: from 0, contiguous, each count long, to count
            if (int(start[0]) != 0 or int(column[-1]) != count
                    or np.any(column - start != counts) or np.any(column[:-1] != start[1:])):
                return None
            counts = None
        elif key == "checksum_file_crc32":
            crcs = column.astype(np.uint32)
    if [entry.get("path") for entry in shards] != shard_names(len(shards)):
        return None
    if [entry.get("checksum_file") for entry in shards] != shard_names(
            len(shards), "/" + CHECKSUM_FILE):
        return None
    if present and not _all_real_folders(real_root, len(shards)):
        return None
    return ShardTable(real_root, bounds, crcs)


def _all_real_folders(real_root: str, count: int) -> bool:
    """Whether each ``shard_name(k, count)`` is a folder in ``real_root``, not a symlink:
    one listing, each name parsed (no set of 100,000 names); False when it cannot be listed
    or names are longer than 5 digits (the check entry by entry then looks)."""
    seen = bytearray(count)
    head, tail = len(SHARD_PREFIX), f"-of-{count:05d}"
    width = head + 5 + len(tail)
    try:
        with os.scandir(real_root) as listing:
            for entry in listing:
                name = entry.name
                if len(name) == width and name.startswith(SHARD_PREFIX) and name.endswith(tail):
                    digits = name[head:head + 5]
                    if (digits.isascii() and digits.isdigit() and int(digits) < count
                            and entry.is_dir(follow_symlinks=False)):
                        seen[int(digits)] = 1
    except OSError:
        return False
    return seen.count(0) == 0


def _table_of(real_root: str, entries: list[ShardEntry], count: int) -> ShardTable:
    """The table of ``entries`` checked one by one (their paths and folders kept unless they
    are the ones fastload gives)."""
    import numpy as np

    paths = [entry.path for entry in entries]
    folders = [entry.folder for entry in entries]
    if paths == shard_names(len(entries)) and folders == [
            os.path.join(real_root, path) for path in paths]:
        paths = folders = None
    bounds = np.array([entry.start for entry in entries] + [count], dtype=np.int64)
    crcs = np.array([entry.checksum_crc32 for entry in entries], dtype=np.uint32)
    return ShardTable(real_root, bounds, crcs, paths, folders)


def _entry(fields: _Fields, real_root: str, k: int, entry: object,
           present: bool = True) -> ShardEntry:
    where = f"shards[{k}]."
    if not isinstance(entry, dict):
        fields.fail(f"shards[{k}]", f"should be an object, but got {short_repr(entry)}")
    number = {key: fields.integer(entry, key, low, high, where)
              for key, low, high in _ENTRY_INTEGERS}
    count, start, stop = number["count"], number["start"], number["stop"]
    if stop - start != count:
        fields.fail(where + "stop", f"is {stop}, but start={start} and count={count} make "
                                    f"the range end at {start + count}")
    crc = number["checksum_file_crc32"]
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
