"""Reading and verifying a sharded fastload set (see :mod:`fastload.data.manifest`).

:class:`ShardedReader` has :class:`~fastload.data.reader.LMDBReader`'s interface (``path``,
``meta``, ``classes``, ``class_to_idx``, ``targets``, ``len``, ``key``, ``record``,
``image_bytes``, ``close``) over global indices. Opening it reads the manifest and the set's
labels file only; a shard's LMDB environment is opened the first time one of its records is
read, in the process that reads it, so a rank touches only the shards its samples live in.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from fastload.data.format import LABELS_DTYPE, LABELS_FILE
from fastload.data.manifest import (
    SET_LABELS_FILE,
    complete_manifest,
    existing_shard_counts,
    is_sharded_set,
    load_manifest,
    manifest_path,
    pending_shards,
)
from fastload.data.reader import LMDBReader, load_sidecar_array, record_index
from fastload.data.verify import VerifyReport

__all__ = ["SetVerifyReport", "ShardedReader", "open_reader", "verify_set"]


class ShardedReader:
    """Read-only view of a sharded set as one data set with global indices."""

    def __init__(self, path: str | os.PathLike) -> None:
        import numpy as np

        file = manifest_path(path)
        self.path = file.parent
        self.meta: dict = load_manifest(file)
        self.classes: list[str] = list(self.meta.get("classes", []))
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(self.classes)}
        self._count = int(self.meta["count"])
        self._shards: list[dict] = list(self.meta["shards"])
        self._starts = [int(s["start"]) for s in self._shards]
        labels = load_sidecar_array(self.path, self.meta, "labels", SET_LABELS_FILE,
                                    LABELS_DTYPE, f"run `fastload verify {self.path}` to "
                                    "rewrite the set's manifest")
        self.targets: list[int] = labels.astype(np.int64).tolist()
        self._readers: dict[int, LMDBReader] = {}

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    @property
    def opened_shards(self) -> list[int]:
        """Indices of the shards this process has opened so far."""
        return sorted(k for k, r in self._readers.items() if r._pid == os.getpid())

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return (f"ShardedReader({str(self.path)!r}, records={self._count}, "
                f"shards={self.num_shards}, classes={len(self.classes)})")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_readers"] = {}  # reopened lazily where the copy reads
        return state

    def close(self) -> None:
        """Drop this process's LMDB handles (shards reopen on the next read)."""
        for reader in self._readers.values():
            reader.close()

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard, record within it)`` of global ``index`` (negative counts from the end)."""
        index = record_index(index, self._count, self.path)
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def shard_reader(self, shard: int) -> LMDBReader:
        """The reader of shard ``shard``, created on first use and checked against the manifest."""
        reader = self._readers.get(shard)
        if reader is None:
            info = self._shards[shard]
            reader = LMDBReader(self.path / info["path"])
            if len(reader) != int(info["count"]):
                raise ValueError(
                    f"shard {str(reader.path)!r} holds {len(reader)} records but the manifest "
                    f"says {info['count']}; run `fastload verify {self.path}`")
            self._readers[shard] = reader
        return reader

    def key(self, index: int) -> bytes:
        """``b"<shard folder>/<record key>"`` of global ``index``."""
        shard, local = self.locate(index)
        return self._shards[shard]["path"].encode() + b"/" + self.shard_reader(shard).key(local)

    def record(self, index: int) -> bytes:
        shard, local = self.locate(index)
        return self.shard_reader(shard).record(local)

    def image_bytes(self, index: int) -> tuple[memoryview, int, tuple[int, int]]:
        """``(encoded JPEG bytes, label, (height, width))`` of global record ``index``."""
        shard, local = self.locate(index)
        return self.shard_reader(shard).image_bytes(local)


def open_reader(path: str | os.PathLike) -> LMDBReader | ShardedReader:
    """A :class:`ShardedReader` for a sharded set (its folder or manifest), else an
    :class:`~fastload.data.reader.LMDBReader` for one LMDB directory."""
    if is_sharded_set(path):
        return ShardedReader(path)
    return LMDBReader(path)


@dataclass
class SetVerifyReport(VerifyReport):
    """:func:`verify_set`'s findings: a :class:`VerifyReport` summed over the shards."""

    found: int = 0
    shards: int = 0
    manifest_written: bool = False

    def summary(self) -> str:
        verdict = "OK" if self.ok else f"FAILED: {len(self.bad)} problem(s)"
        written = "; manifest completed" if self.manifest_written else ""
        return (f"{verdict}: {self.found}/{self.expected} records in {self.shards} shards, "
                f"{self.checksums_checked} checksums checked, {self.decoded} images decoded"
                f"{written}")


def verify_set(path: str | os.PathLike, full: bool = False, sample: int = 64,
               seed: int = 0) -> SetVerifyReport:
    """Verify a sharded set: complete its manifest if every shard is finished, then check the
    manifest against each shard (count, checksum file CRC-32, labels) and verify each shard
    as ``verify_lmdb`` does (``sample`` decodes spread over the shards by size)."""
    import numpy as np

    from fastload.data.format import crc32
    from fastload.data.verify import verify_lmdb

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ValueError(f"sample should be a non-negative integer, but got sample={sample!r}")
    root = manifest_path(path).parent
    counts = existing_shard_counts(root)
    written = False
    if not manifest_path(root).exists() and len(counts) == 1:
        count = next(iter(counts))
        missing = pending_shards(root, count)
        if missing:
            raise ValueError(
                f"sharded set {str(root)!r} is unfinished: {', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''} not complete; rerun their "
                "conversions (the same shards and their shard_index)")
        written = complete_manifest(root, count) is not None
    manifest = load_manifest(root)
    report = SetVerifyReport(path=root, expected=int(manifest["count"]),
                             shards=len(manifest["shards"]), manifest_written=written)
    labels = np.fromfile(root / manifest["labels_file"], dtype=manifest["labels_dtype"])
    total = max(1, report.expected)
    for k, info in enumerate(manifest["shards"]):
        shard_dir = root / info["path"]
        share = sample if full else -(-sample * int(info["count"]) // total)
        try:
            sub = verify_lmdb(shard_dir, full=full, sample=min(share, int(info["count"])),
                              seed=seed + k)
        except (OSError, ValueError) as exc:
            report.bad.append((info["path"], str(exc)))
            continue
        report.found += sub.found
        report.checksums_checked += sub.checksums_checked
        report.decoded += sub.decoded
        report.bad += [(f"{info['path']}/{key}", why) for key, why in sub.bad]
        if sub.expected != int(info["count"]):
            report.bad.append((info["path"], f"holds {sub.expected} records; the manifest "
                               f"says {info['count']}"))
        try:
            pinned = crc32((root / info["checksum_file"]).read_bytes())
        except OSError:
            pinned = None  # verify_lmdb has reported the missing file
        if pinned is not None and pinned != int(info["checksum_file_crc32"]):
            report.bad.append((info["checksum_file"], "differs from the file the manifest "
                               "was written for (CRC-32 mismatch)"))
        shard_labels = np.fromfile(shard_dir / LABELS_FILE, dtype=manifest["labels_dtype"])
        if not np.array_equal(shard_labels, labels[int(info["start"]):int(info["stop"])]):
            report.bad.append((manifest["labels_file"], f"labels of {info['path']} differ "
                               "from the set's labels file"))
    if len(labels) != report.expected:
        report.bad.append((manifest["labels_file"],
                           f"holds {len(labels)} labels for {report.expected} records"))
    return report
