"""``fastload convert``: an image source (see :mod:`fastload.data.convert.source_list`) into an LMDB.

Lists the source, checks the options and names the destination's identity; one database is
written by :mod:`fastload.data.convert.database`, a sharded set by
:mod:`fastload.data.convert.shards`. The order is fixed by the source, so a resumed or
re-run conversion produces the same records whatever ``workers`` or ``commit_every``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from fastload.data.convert.database import ConvertError, ConvertReport, convert_one, is_complete
from fastload.data.convert.image_check import CHECKS
from fastload.data.convert.source_list import list_source
from fastload.data.format.constants import FORMAT_VERSION, JPEG_CHECK_STRICT, META_JPEG_CHECK
from fastload.data.format.untrusted import refuse_url
from fastload.utils.checks import check_positive_int

__all__ = ["ConvertError", "ConvertReport", "check_convert_options", "convert_folder",
           "is_complete", "shards_for_size"]

DEFAULT_COMMIT_EVERY = 256  # source files per LMDB write transaction


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
    _check_positive("max_side", max_side)
    _check_positive("commit_every", commit_every, allow_none=False)
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality should be an integer in [1, 100], but got quality={quality!r}")
    if check not in CHECKS:
        raise ValueError(f"check should be one of {CHECKS}, but got check={check!r}")
    _check_positive("shards", shards)
    if shard_size_mb is not None:
        if isinstance(shard_size_mb, bool) or not isinstance(shard_size_mb, int | float) \
                or not shard_size_mb > 0:
            raise ValueError(f"shard_size_mb should be a positive number of megabytes, but got "
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


def convert_folder(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    workers: int | None = None,
    max_side: int | None = None,
    quality: int = 90,
    strict: bool = False,
    overwrite: bool = False,
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
) -> ConvertReport:
    """Convert ``src`` into the LMDB directory ``dst``.

    A record of a container that has no usable image or label (a tar cut short, a null
    image, a label outside the class list) is skipped and reported as an unreadable file
    is. Unreadable files are listed in ``dst/errors.json``.

    ``dst`` may be a URL (``s3://bucket/train.set``, any scheme fsspec has a backend for)
    with ``shards`` or ``shard_size_mb``: each shard is written in ``staging``, uploaded
    once finished and removed there; the manifest goes up last (see
    :mod:`fastload.data.remote.upload`). A rerun skips the shards already uploaded intact.

    An interrupted conversion (even SIGKILL) is resumed by calling again with the same
    source and options; the result equals an uninterrupted run.

    Args:
        src: an ImageFolder directory, a ``.csv`` or ``.jsonl`` list, WebDataset ``.tar``
            shards, ``.parquet`` files or a ``datasets`` ``save_to_disk`` folder (a file, a
            folder or a glob; see :mod:`fastload.data.convert.source_list`).
        dst: the LMDB directory to write (or, with ``shards``/``shard_size_mb``, the
            set's folder), new or holding a partial conversion of the same source and
            options; or a URL (see above).
        workers: processes that re-encode files, and threads that check kept JPEGs
            strictly (default: all CPU cores; 1 = everything in the calling thread).
        max_side: re-encode images whose long side exceeds this, resized to it.
        quality: JPEG quality for every re-encoded image (1-100).
        strict: stop with :class:`ConvertError` at the first unreadable file.
        overwrite: replace a finished database (or a partial made with other options).
        progress: show a tqdm bar (images/s and ETA) on stderr.
        commit_every: source files per LMDB commit (the resume granularity).
        check: ``"decode"`` also decodes every JPEG strictly at 1/8 scale: one whose
            entropy-coded data is damaged (which libjpeg, Pillow and DALI decode with only
            a warning) is skipped and reported with the decoder's report, and the sidecar
            says ``"jpeg_check": "strict"``, so the loader trusts the records without a
            check of its own; ``"markers"`` keeps a JPEG after checking its markers and
            end-of-image only (faster; the loader then decodes each record strictly at its
            first read in a process, see :mod:`fastload.loader.damage`).
        composite: composite transparent pixels on white (and scale 16-bit images by
            1/257) when re-encoding; by default images convert exactly as torchvision's
            ImageFolder loader converts them (``Image.open(p).convert("RGB")``).
        shards: write a sharded set instead: ``shards`` LMDB shards under ``dst`` (a
            contiguous range of source files each) and a manifest (see
            :mod:`fastload.data.sets.manifest`); the set reads as one data set in source order.
        shard_index: with ``shards``, convert only this shard, so that ``shards`` processes
            can convert in parallel; the last one to finish writes the manifest.
        image_column: the image column of a parquet or ``datasets`` source (``"image"``).
        label_column: the label column of a parquet or ``datasets`` source (``"label"``).
        label_field: read a WebDataset sample's label from this field of its ``.json``
            member (default: the text of its ``.cls`` member).
        shard_size_mb: instead of ``shards``, the shards' target size in MB (10^6 bytes):
            the count is the source's bytes divided by it, rounded up (re-encoding with
            ``max_side`` makes smaller shards).
        storage_options: fsspec's options when ``dst`` is a URL (credentials, endpoint).
        staging: when ``dst`` is a URL, the local folder shards are written in before they
            are uploaded (default: ``staging/`` of the shard cache, ``$FASTLOAD_CACHE``).

    Returns:
        What the conversion did, in figures (``stored + skipped == seen``), with
            the unreadable files and why, JPEGs kept and
            re-encoded, whether it resumed an interrupted run, the classes, and a sharded
            set's manifest once every shard is complete.

    Raises:
        ConvertError: ``strict=True`` and an unreadable file, or a worker that stopped
            answering.
        ValueError: an option out of range or that does not apply (to the source's kind,
            to a local or URL ``dst``), or a partial conversion at ``dst`` made
            from another source or with other options (without ``overwrite``).
        FileNotFoundError: ``src`` does not exist or holds no images.
        FileExistsError: ``dst`` is a file, holds a finished database (without
            ``overwrite``) or something else, or another conversion is writing it.
    """
    from fastload.data.remote.url import locate

    check_convert_options(workers=workers, max_side=max_side, quality=quality,
                          commit_every=commit_every, check=check, shards=shards,
                          shard_index=shard_index, shard_size_mb=shard_size_mb)
    refuse_url(src, "source")
    where = locate(dst, storage_options, "destination")
    remote = not isinstance(where, str)
    if remote and shards is None and shard_size_mb is None:
        raise ValueError(f"destination {os.fsdecode(dst)!r} is a URL, where fastload writes "
                         "sharded sets only: pass shards=N or shard_size_mb=MB (streaming "
                         "shards of 64-256 MB suit object storage)")
    if staging is not None and not remote:
        raise ValueError("staging applies when dst is a URL; drop it for a local destination")
    start = time.perf_counter()
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
    if remote:
        from fastload.data.remote.upload import convert_to_url

        report = convert_to_url(source.samples, where, identity, total_bytes, overwrite, run,
                                shards, shard_index, Path(staging) if staging else None)
    elif shards is None:
        report = convert_one(source.samples, dst_path, identity, total_bytes, overwrite, run)
    else:
        from fastload.data.convert.shards import convert_shards

        report = convert_shards(source.samples, dst_path, identity, total_bytes, overwrite,
                                run, shards, shard_index)
    report.seconds = time.perf_counter() - start
    report.classes = source.classes
    return report

