"""``fastload convert``: an image source (see :mod:`fastload.data.convert.source_list`) into an LMDB.

Lists the source, checks the options and names the destination's identity; one database is
written by :mod:`fastload.data.convert.database` (with the strict check, its first records
are read and checked while the source is fingerprinted), a sharded set by
:mod:`fastload.data.convert.shards`. The order is fixed by the source, so a resumed or
re-run conversion produces the same records whatever ``workers`` or ``commit_every``.
"""

from __future__ import annotations

import os
import time

from fastload.data.convert.database import (
    ConvertError,
    ConvertReport,
    convert_one,
    is_complete,
    read_early,
)
from fastload.data.convert.destination import REPLACEMENT
from fastload.data.convert.plan import (
    DEFAULT_COMMIT_EVERY,
    check_convert_options,
    plan_conversion,
    shards_for_size,
)
from fastload.data.format.constants import ERRORS_FILE, PARTIAL_FILE

__all__ = ["DEFAULT_COMMIT_EVERY", "ENGINES", "ConvertError", "ConvertReport",
           "check_convert_options", "check_engine_options", "convert_folder", "is_complete",
           "shards_for_size"]

ENGINES = ("ray", "dask", "spark")  # engine= values: see fastload.data.convert.engine


def check_engine_options(engine: str | None, engine_address: str | None, *,
                         shards: int | None, shard_index: int | None,
                         shard_size_mb: float | None) -> None:
    """Raise ``ValueError`` naming the first ``engine`` option that does not fit the others
    (checked before the source is listed)."""
    if engine is None:
        if engine_address is not None:
            raise ValueError(f"engine_address={engine_address!r} applies with an engine "
                             "(engine='ray', 'dask' or 'spark'); pass one too, or drop it")
        return
    if engine not in ENGINES:
        raise ValueError(f"engine should be one of {ENGINES} or None, but got engine={engine!r}")
    if shards is None and shard_size_mb is None:
        raise ValueError(f"engine={engine!r} converts a sharded set, one task per shard: pass "
                         "shards=N or shard_size_mb=MB too")
    if shard_index is not None:
        raise ValueError(f"engine={engine!r} converts every shard of the set; drop "
                         f"shard_index={shard_index!r}")


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
    engine: str | None = None,
    engine_address: str | None = None,
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
        workers: processes that re-encode files, and cores that check kept JPEGs
            strictly (``workers - 1`` threads beside the calling thread, which checks too
            while it waits; default: all CPU cores; 1 = everything in the calling thread).
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
        engine: run the shards as tasks of an engine, ``"ray"``, ``"dask"`` or
            ``"spark"`` (with ``shards`` or ``shard_size_mb``; a folder every worker sees,
            or a URL: see :mod:`fastload.data.convert.engine` and
            :mod:`fastload.data.remote.engine_tasks`): one task per shard, retried by the
            engine after a lost worker, the manifest written here once every shard is
            checked. The set equals the one converted without an engine.
        engine_address: the cluster to join: a Ray address (else ``RAY_ADDRESS``, else
            a local Ray started and stopped here), a Dask scheduler address (else a
            ``LocalCluster``); Spark uses the active ``SparkSession`` (else a local one).

    Returns:
        What the conversion did, in figures (``stored + skipped == seen``), with
            the unreadable files and why, JPEGs kept and
            re-encoded, whether it resumed an interrupted run, the classes, and a sharded
            set's manifest once every shard is complete.

    Raises:
        ConvertError: ``strict=True`` and an unreadable file, a worker that stopped
            answering, (``engine``) shards that did not finish, or no file stored at all
            (every one skipped: the database is written, with each reason in its
            ``errors.json``).
        ValueError: an option out of range or that does not apply (to the source's kind,
            to a local or URL ``dst``, to ``engine``), or a partial conversion at ``dst``
            made from another source or with other options (without ``overwrite``).
        FileNotFoundError: ``src`` does not exist or holds no images.
        FileExistsError: ``dst`` is a file, holds a finished database (without
            ``overwrite``) or something else, or another conversion is writing it.
    """
    check_engine_options(engine, engine_address, shards=shards, shard_index=shard_index,
                         shard_size_mb=shard_size_mb)
    start = time.perf_counter()
    early: list = []  # one database's first records and their checks, read while planning

    def read_while_planning(source) -> None:
        if (engine is None and shards is None and shard_size_mb is None
                and not os.path.exists(os.path.join(os.fsdecode(dst), PARTIAL_FILE))):
            early.extend(read_early(source.samples, workers or os.cpu_count() or 1,
                                    (max_side, quality, check, composite)) or ())

    try:
        plan = plan_conversion(
            src, dst, workers=workers, max_side=max_side, quality=quality, strict=strict,
            progress=progress, commit_every=commit_every, check=check, composite=composite,
            shards=shards, shard_index=shard_index, image_column=image_column,
            label_column=label_column, label_field=label_field, shard_size_mb=shard_size_mb,
            storage_options=storage_options, staging=staging, listed=read_while_planning)
        report = _convert_planned(plan, early, overwrite, workers, shard_index, engine,
                                  engine_address)
    finally:
        if early:
            early[0].shutdown(cancel_futures=True)
    report.seconds = time.perf_counter() - start
    report.classes = plan.source.classes
    if shard_index is None and report.seen and not report.stored:
        single = plan.shards is None and not plan.remote
        if single:
            folder = report.path / REPLACEMENT if report.kept_old else report.path
            where = f"each reason in {os.fspath(folder / ERRORS_FILE)!r}"
        else:
            where = f"each reason in its {'new ' if report.kept_old else ''}shards' {ERRORS_FILE}"
        if report.kept_old:
            where += f"; the finished {'database' if single else 'set'} there is kept as it was"
        raise ConvertError(
            f"no file of {os.fsdecode(src)!r} could be stored: all {report.seen} were skipped "
            f"({where}); fix or remove them, then convert again with overwrite=True")
    return report


def _convert_planned(plan, early: list, overwrite: bool, workers: int | None,
                     shard_index: int | None, engine: str | None,
                     engine_address: str | None) -> ConvertReport:
    """:func:`convert_folder` once planned (the arguments mean what they mean there);
    ``early``: one database's ``(checks, ahead)`` from
    :func:`~fastload.data.convert.database.read_early`, or empty."""
    source, identity, total_bytes = plan.source, plan.identity, plan.total_bytes
    dst_path, where, remote, shards, run = (plan.dst_path, plan.location, plan.remote,
                                            plan.shards, plan.run)
    if engine is not None and remote:
        from fastload.data.convert.engines import runner
        from fastload.data.remote.engine_tasks import convert_url_on_engine

        return convert_url_on_engine(plan, runner(engine), engine_address,
                                     overwrite=overwrite, workers=workers)
    if engine is not None:
        from fastload.data.convert.engine_run import convert_on_engine
        from fastload.data.convert.engines import runner

        return convert_on_engine(plan, runner(engine), engine_address, overwrite=overwrite,
                                 workers=workers)
    if remote:
        from fastload.data.remote.replace import convert_replacing

        return convert_replacing(source.samples, where, identity, total_bytes, overwrite, run,
                                 shards, shard_index, plan.staging)
    if shards is None:
        checks, ahead = early or (None, None)
        return convert_one(source.samples, dst_path, identity, total_bytes, overwrite, run,
                           checks=checks, ahead=ahead)
    from fastload.data.convert.shards import convert_shards

    return convert_shards(source.samples, dst_path, identity, total_bytes, overwrite, run,
                          shards, shard_index)
