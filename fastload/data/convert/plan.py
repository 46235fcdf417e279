"""What a conversion decides before it writes anything: the options checked, the source
listed and fingerprinted, the destination's identity named, the shard count fixed.

One function, :func:`plan_conversion`, for every way a conversion runs: in this process
(:func:`fastload.data.convert.folder.convert_folder`) or as shard tasks on an engine
(:mod:`fastload.data.convert.engine`); the identity a shard records in its sidecar is
therefore the same whichever ran it, and a set started one way is finished the other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastload.data.convert.image_check import CHECKS
from fastload.data.convert.source_list import SourceList, list_source
from fastload.data.format.constants import FORMAT_VERSION, JPEG_CHECK_STRICT, META_JPEG_CHECK
from fastload.data.format.limits import MAX_CLASS_NAME, writable_class_list_problem
from fastload.data.format.untrusted import refuse_url
from fastload.utils.checks import check_positive_int, file_on_path

__all__ = ["DEFAULT_COMMIT_EVERY", "ConversionPlan", "check_convert_options", "plan_conversion",
           "shards_for_size"]

DEFAULT_COMMIT_EVERY = 256  # source files per LMDB write transaction


# A bound past any machine's cores, below the threads a process may start (30,000 failed here)
MAX_WORKERS = 1024


def _check_positive(name: str, value, allow_none: bool = True) -> None:
    check_positive_int(name, value, allow_none=allow_none)


def check_convert_options(*, workers: int | None = None, max_side: int | None = None,
                          quality: int = 90, commit_every: int = DEFAULT_COMMIT_EVERY,
                          check: str = "decode", shards: int | None = None,
                          shard_index: int | None = None,
                          shard_size_mb: float | None = None) -> None:
    """Raise ``ValueError`` naming the first of :func:`convert_folder`'s options that is out of
    range (the checks it runs before touching any file)."""
    _check_positive("workers", workers)
    if workers is not None and workers > MAX_WORKERS:
        raise ValueError(f"workers should be at most {MAX_WORKERS} (a thread or process each; "
                         f"this machine has {os.cpu_count()} cores), but got workers={workers}")
    _check_positive("max_side", max_side)
    _check_positive("commit_every", commit_every, allow_none=False)
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality should be an integer in [1, 100], but got quality={quality!r}")
    if check not in CHECKS:
        raise ValueError(f"check should be one of {CHECKS}, but got check={check!r}")
    _check_positive("shards", shards)
    if shard_size_mb is not None:
        if isinstance(shard_size_mb, bool) or not isinstance(shard_size_mb, int | float) \
                or not 0 < shard_size_mb < math.inf:
            raise ValueError(f"shard_size_mb should be a positive finite number of megabytes, but got "
                             f"shard_size_mb={shard_size_mb!r}")
        if shards is not None:
            raise ValueError("shards and shard_size_mb are mutually exclusive: pass the number "
                             "of shards or their target size, not both")
    if shard_index is not None:
        if shards is None and shard_size_mb is None:
            raise ValueError(f"shard_index={shard_index!r} needs shards=N (the number of shards)")
        limit = shards if shards is not None else 1 << 62  # checked against the count later
        if isinstance(shard_index, bool) or not isinstance(shard_index, int) \
                or not 0 <= shard_index < limit:
            what = f"in [0, {shards})" if shards is not None else ">= 0"
            raise ValueError(f"shard_index should be an integer {what}, but got "
                             f"shard_index={shard_index!r}")


MEGABYTE = 10**6  # shard_size_mb's unit


def shards_for_size(total_bytes: int, files: int, shard_size_mb: float) -> int:
    """The shard count whose shards hold about ``shard_size_mb`` of the source's
    ``total_bytes`` each (at least 1, at most one per file); the same in every process."""
    target = max(1, int(shard_size_mb * MEGABYTE))
    return max(1, min(max(1, files), -(-total_bytes // target)))


@dataclass(frozen=True)
class ConversionPlan:
    """A conversion's decisions (see :func:`plan_conversion`).

    ``run`` is the writer loop's settings ``(workers, max_side, quality, check, composite,
    strict, progress, commit_every)``; ``dst_path`` the local destination (None for a
    URL, then ``location`` is the :class:`~fastload.data.remote.url.RemoteLocation` and
    ``staging`` the local folder shards are written in before they are uploaded, None for
    the cache's); ``shards`` the shard count (None: one database)."""

    source: SourceList
    identity: dict
    total_bytes: int
    src_path: Path
    dst_path: Path | None
    location: object | None
    shards: int | None
    run: tuple
    staging: Path | None = None

    @property
    def remote(self) -> bool:
        return self.dst_path is None


def plan_conversion(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    workers: int | None = None,
    max_side: int | None = None,
    quality: int = 90,
    strict: bool = False,
    progress: bool = True,
    commit_every: int = DEFAULT_COMMIT_EVERY,
    check: str = "decode",
    composite: bool = False,
    shards: int | None = None,
    shard_index: int | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    label_field: str | None = None,
    shard_size_mb: float | None = None,
    storage_options: dict | None = None,
    staging: str | os.PathLike | None = None,
    listed: Callable[[SourceList], None] | None = None,
) -> ConversionPlan:
    """Check :func:`~fastload.data.convert.folder.convert_folder`'s options, list and
    fingerprint ``src`` and name the identity its database or shards record (the arguments
    mean what they mean there); nothing is written. ``listed`` is called with the listing
    before it is fingerprinted (the caller may start reading it meanwhile)."""
    from fastload.data.remote.url import locate

    check_convert_options(workers=workers, max_side=max_side, quality=quality,
                          commit_every=commit_every, check=check, shards=shards,
                          shard_index=shard_index, shard_size_mb=shard_size_mb)
    refuse_url(src, "source")
    if isinstance(src, str | bytes) and not src:  # Path("") would be the current folder
        raise ValueError("src is empty; pass the folder or list of images to convert")
    if isinstance(dst, str | bytes) and not dst:
        raise ValueError("dst is empty; pass the folder to write the database into")
    where = locate(dst, storage_options, "destination")
    remote = not isinstance(where, str)
    # (a destination that is itself a file is refused by prepare_destination)
    if not remote and (blocking := file_on_path(os.path.dirname(os.path.abspath(where)))):
        raise NotADirectoryError(f"destination {where!r} cannot be made: {blocking!r} on its "
                                 "path is a file, not a folder; pass another path")
    if remote and shards is None and shard_size_mb is None:
        raise ValueError(f"destination {os.fsdecode(dst)!r} is a URL, where fastload writes "
                         "sharded sets only: pass shards=N or shard_size_mb=MB (streaming "
                         "shards of 64-256 MB suit object storage)")
    if staging is not None and not remote:
        raise ValueError("staging applies when dst is a URL; drop it for a local destination")
    src_path = Path(os.path.abspath(src))
    dst_path = Path(os.path.abspath(where)) if not remote else None
    if dst_path is not None and src_path.is_dir() and (
            dst_path == src_path or src_path in dst_path.parents):
        raise ValueError(
            f"destination {str(dst_path)!r} is inside the source folder {str(src_path)!r}; "
            "write the database outside the source tree"
        )
    source = list_source(src, image_column=image_column, label_column=label_column,
                         label_field=label_field, workers=workers or os.cpu_count() or 1)
    if problem := writable_class_list_problem(source.classes):
        raise ValueError(
            f"source {os.fsdecode(src)!r} cannot be converted: its class list {problem}; "
            f"shorten the labels in the source (a class name may hold {MAX_CLASS_NAME} "
            "characters) or give integer labels")
    if listed is not None:
        listed(source)
    digest, total_bytes = source.fingerprint()
    identity = {
        "format_version": FORMAT_VERSION,
        "source": str(source.root if source.kind == "folder" else src_path),
        "source_kind": source.kind,
        "source_fingerprint": digest,
        "classes": source.classes,
        "options": {"max_side": max_side, "quality": quality, "check": check,
                    **({"composite": True} if composite else {}), **source.options},
        # the check every JPEG passed, which the loader trusts; part of the identity, so a
        # partial made by a fastload whose "decode" was Pillow's is never resumed as strict
        **({META_JPEG_CHECK: JPEG_CHECK_STRICT} if check == "decode" else {}),
    }
    run = (workers or os.cpu_count() or 1, max_side, quality, check, composite, strict,
           progress, commit_every)
    if shard_size_mb is not None:
        shards = shards_for_size(total_bytes, len(source.samples), shard_size_mb)
        if shard_index is not None and shard_index >= shards:
            raise ValueError(f"shard_index should be an integer in [0, {shards}) (the "
                             f"{shards} shards of shard_size_mb={shard_size_mb}), but got "
                             f"shard_index={shard_index!r}")
    return ConversionPlan(source=source, identity=identity, total_bytes=total_bytes,
                          src_path=src_path, dst_path=dst_path,
                          location=where if remote else None, shards=shards, run=run,
                          staging=Path(os.path.abspath(staging)) if staging is not None else None)
