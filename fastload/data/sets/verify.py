"""``fastload verify`` of a sharded set: the open checks, then every record of every shard.

:func:`verify_set` opens the set as a reader does (:class:`~fastload.data.sets.shards.ShardedReader`:
the manifest's schema, paths and ranges, the set's labels), then for each shard runs the
checks of its first read (its sidecar against the manifest) and :func:`verify_lmdb` on the
very folder the reader reads: every record's key, CRC-32, Datum and label, and a decode of a
sample. With ``repair=True`` a manifest or set labels file that fails the open checks is
rebuilt from the set's shard folders, once every shard verifies clean.
"""

from __future__ import annotations

import bisect
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastload.data.format.untrusted import refuse_url
from fastload.data.format.verify import VerifyReport, check_sample, progress_for, verify_lmdb
from fastload.data.remote.url import locate
from fastload.data.sets.manifest import (
    complete_manifest,
    describe_shards,
    existing_shard_counts,
    manifest_path,
    pending_shards,
)
from fastload.data.sets.shards import ShardedReader

__all__ = ["SetVerifyReport", "verify_set"]


@dataclass
class SetVerifyReport(VerifyReport):
    """:func:`verify_set`'s findings: a :class:`VerifyReport` summed over the shards, and
    what was checked (``checked``, one phrase each)."""

    found: int = 0
    shards: int = 0
    manifest_written: bool = False
    repaired: bool = False
    checked: list[str] = field(default_factory=list)

    def summary(self) -> str:
        verdict = "OK" if self.ok else f"FAILED: {len(self.bad)} problem(s)"
        written = ("; manifest rebuilt from the shards" if self.repaired
                   else "; manifest completed" if self.manifest_written else "")
        checked = "; checked: " + ", ".join(self.checked) if self.checked else ""
        return (f"{verdict}: {self.found}/{self.expected} records in {self.shards} shards, "
                f"{self.checksums_checked} checksums checked, {self.decoded} images decoded"
                f"{written}{checked}")


def verify_set(path: str | os.PathLike, full: bool = False, sample: int = 64,
               seed: int = 0, *, repair: bool = False,
               storage_options: dict | None = None, progress: Any = False) -> SetVerifyReport:
    """Verify a sharded set (module docstring): the open checks, then every shard.

    Completes the set's manifest if every shard is finished and none is written yet, or
    (``repair``) rebuilds a manifest that does not pass the open checks. A shard that fails
    its checks is a finding in the report, as are bad records. ``path`` may be a URL: each
    shard is fetched into the shard cache, checked against the manifest, verified, and let
    go before the next.

    Args:
        path: the set's folder or manifest, or its URL.
        full: decode every record of every shard instead of a sample.
        sample: records to decode without ``full``, at least 0: drawn once over the whole
            set (each shard decodes the ones it holds, none for most shards of a set with
            more shards than ``sample``).
        seed: seed of the decode sample (the same seed, the same records).
        repair: a local set only: if its manifest or labels file fails the open checks,
            rebuild both from the shard folders (only when every shard verifies clean).
        storage_options: fsspec's options when ``path`` is a URL (credentials,
            ``endpoint_url``).
        progress: True shows the records checked, over all shards, on stderr (a tqdm bar
            on a terminal, a plain line every 30 s otherwise); a tqdm-like object is
            advanced instead.

    Returns:
        :func:`~fastload.data.verify_lmdb`'s report summed over the shards, with the shard
            count, whether the manifest was completed or rebuilt, and what was checked.

    Raises:
        ValueError: ``sample`` is negative or not an int, ``repair`` with a URL, a URL
            holding one LMDB, an unfinished set, or a manifest or labels file that fails the
            open checks (without ``repair``).
        FileNotFoundError: there is no set at ``path``.
        ImportError: a URL whose fsspec backend is not installed (the ``remote`` extra).
    """
    check_sample(sample)
    start = time.monotonic()
    where = locate(path, storage_options, "sharded set")
    written = repaired = False
    if not isinstance(where, str):  # a URL: its shards are fetched into the cache one by one
        from fastload.data.remote.sets import RemoteShardedReader, remote_kind

        if repair:
            raise ValueError(f"repair rewrites a local set's manifest, but {where.url!r} is a "
                             "URL; repair a local copy and upload it again")
        kind, where, listed = remote_kind(where)
        if kind != "set":
            raise ValueError(f"{where.url} holds one LMDB, not a sharded set; verify it with "
                             "verify_lmdb (`fastload verify` picks the right one)")
        reader = RemoteShardedReader(where, listed=listed)
        root = where.url
    else:
        refuse_url(where, "sharded set")
        root = manifest_path(where).parent
        if repair:
            repaired = _repair(root)
        elif not manifest_path(root).exists() and len(existing_shard_counts(root)) == 1:
            count = next(iter(existing_shard_counts(root)))
            _refuse_unfinished(root, count)
            written = complete_manifest(root, count) is not None
        reader = ShardedReader(root)  # the open checks: one clear error when they fail
    report = SetVerifyReport(path=root, expected=len(reader), shards=reader.num_shards,
                             manifest_written=written, repaired=repaired)
    picked = _decode_sample(reader.entries.starts.tolist(), report.expected, sample, seed,
                            full)
    matched = 0
    bar, owned = progress_for(progress, report.expected)  # one bar over every shard's records
    try:
        for k, entry in enumerate(reader.entries):
            try:
                shard = reader.shard_reader(k)  # the checks of a shard's first read
            except (OSError, ValueError) as exc:
                report.bad.append((entry.path, str(exc)))
                if bar is not None:
                    bar.update(entry.count)  # dealt with: its records are not read
                continue
            matched += 1
            sub = verify_lmdb(shard.path, full=full, decode=picked[k], progress=bar)
            report.found += sub.found
            report.checksums_checked += sub.checksums_checked
            report.decoded += sub.decoded
            report.bad += [(f"{entry.path}/{key}", why) for key, why in sub.bad]
            reader.release_shard(k)  # a remote set's cache may evict it now
    finally:
        if owned:
            bar.close()
    reader.close()
    report.seconds = time.monotonic() - start
    report.checked = [
        "the manifest (fields, paths inside the set, contiguous ranges)",
        f"the set's labels ({len(reader)} in [0, {len(reader.classes)}))",
        f"{matched}/{reader.num_shards} shard sidecars against the manifest (identity, "
        "count, checksum-file CRC-32, labels)",
        "every record's key, CRC-32, Datum and label",
    ]
    return report


def _decode_sample(starts: list[int], total: int, sample: int, seed: int,
                   full: bool) -> list[list[int]]:
    """Per shard (each starting at ``starts[k]``), the record numbers (within it) of
    ``sample`` records drawn once over the set's ``total`` with ``seed``: ``[]`` for each
    shard with ``full`` (it decodes all)."""
    if full:
        return [[] for _ in starts]
    picked: list[list[int]] = [[] for _ in starts]
    for i in sorted(random.Random(seed).sample(range(total), min(sample, total))):
        k = bisect.bisect_right(starts, i) - 1
        picked[k].append(i - starts[k])
    return picked


def _refuse_unfinished(root: Path, count: int) -> None:
    missing = pending_shards(root, count)
    if missing:
        raise ValueError(
            f"sharded set {str(root)!r} is unfinished: {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''} not complete; rerun their "
            "conversions (the same shards and their shard_index)")


def _repair(root: Path) -> bool:
    """Rebuild the manifest and the set's labels from the shard folders when the set does not
    pass its open checks; True when they were rewritten. Refused (ValueError) while a shard
    is unfinished or does not verify: a manifest is only ever written over sound shards."""
    try:
        ShardedReader(root)
        return False  # it opens: nothing a rebuild from the shards would change
    except (OSError, ValueError):
        pass
    counts = existing_shard_counts(root)
    if len(counts) != 1:
        raise ValueError(f"cannot repair {str(root)!r}: it holds {describe_shards(root)}, not "
                         "the shards of one set")
    count = next(iter(counts))
    _refuse_unfinished(root, count)

    def vet(folder: Path) -> None:
        sub = verify_lmdb(folder, sample=0)
        if not sub.ok:
            key, why = sub.bad[0]
            raise ValueError(f"cannot repair {str(root)!r}: shard {folder.name!r} does not "
                             f"verify ({key}: {why}); reconvert it (remove its folder and rerun "
                             "its conversion) or copy it again")

    complete_manifest(root, count, rebuild=True, vet=vet)
    return True
