"""``fastload convert``: an image source (see :mod:`fastload.data.convert_sources`) into an LMDB.

The main process reads every file (or tar member, or parquet row) and keeps a JPEG whose
markers pass the keep-bytes check itself (see :mod:`fastload.data.image_check`): that costs
less than handing the bytes to another process. Files that need Pillow (other formats, ``max_side``, ``check="decode"``)
go to ``workers`` worker processes. Results are consumed in source order and the main
process alone writes, in committed batches (see :mod:`fastload.data.writer`). The order is
fixed by the source, so a resumed or re-run conversion produces the same records whatever
``workers`` or ``commit_every``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fastload.data.convert_sources import list_source
from fastload.data.dst_lock import unlock_destination
from fastload.data.format import FORMAT_VERSION, META_FILE, STATE_COMPLETE
from fastload.data.image_check import (
    CHECKS,
    KEPT,
    ScratchBuffer,
    check_file,
    check_file_task_copy,
)
from fastload.data.sources.base import iter_records
from fastload.data.untrusted import refuse_url
from fastload.data.writer import LMDBWriter, MapFull, prepare_destination
from fastload.utils.checks import check_positive_int

DEFAULT_COMMIT_EVERY = 256  # source files per LMDB write transaction
WORKER_TIMEOUT_S = 600  # longest wait for one image from a worker process


class ConvertError(RuntimeError):
    """A conversion stopped early (``strict=True`` and an unreadable file)."""


@dataclass
class ConvertReport:
    """What a conversion did. ``stored + skipped == seen``."""

    path: Path
    stored: int
    skipped: int
    seen: int
    errors: list[dict] = field(default_factory=list)  # {"index", "path", "reason"}
    seconds: float = 0.0
    kept: int = 0  # records holding the source file's bytes untouched
    reencoded: int = 0  # records converted or resized to a new JPEG
    resumed: bool = False  # True when this call finished an interrupted conversion
    resumed_from: int = 0  # source files already done by the interrupted run
    classes: list[str] = field(default_factory=list)
    manifest: dict | None = None  # a sharded set's manifest, once every shard is complete
    finished_shards: list[int] = field(default_factory=list)  # found finished, checked, kept

    def summary(self) -> str:
        return f"stored {self.stored} + skipped {self.skipped} = seen {self.seen}"


def _check_positive(name: str, value, allow_none: bool = True) -> None:
    check_positive_int(name, value, allow_none=allow_none)


def check_convert_options(*, workers: int | None = None, max_side: int | None = None,
                          quality: int = 90, commit_every: int = DEFAULT_COMMIT_EVERY,
                          check: str = "markers", shards: int | None = None,
                          shard_index: int | None = None) -> None:
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
    if shard_index is not None:
        if shards is None:
            raise ValueError(f"shard_index={shard_index!r} needs shards=N (the number of shards)")
        if isinstance(shard_index, bool) or not isinstance(shard_index, int) \
                or not 0 <= shard_index < shards:
            raise ValueError(f"shard_index should be an integer in [0, {shards}), but got "
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
    check: str = "markers",
    composite: bool = False,
    shards: int | None = None,
    shard_index: int | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    label_field: str | None = None,
) -> ConvertReport:
    """Convert ``src`` into the LMDB directory ``dst``.

    ``src``: an ImageFolder directory, a ``.csv`` or ``.jsonl`` list, WebDataset ``.tar``
    shards, ``.parquet`` files or a ``datasets`` ``save_to_disk`` folder (a file, a folder
    or a glob; see :mod:`fastload.data.convert_sources`). A record of a container that has
    no usable image or label (a tar cut short, a null image, a label outside the class
    list) is skipped and reported as an unreadable file is.

    Args:
        workers: processes that read and validate files (default: all CPU cores; 1 = in-process).
        max_side: re-encode images whose long side exceeds this, resized to it.
        quality: JPEG quality for every re-encoded image (1-100).
        strict: stop with :class:`ConvertError` at the first unreadable file.
        overwrite: replace a finished database (or a partial made with other options).
        progress: show a tqdm bar (images/s and ETA) on stderr.
        commit_every: source files per LMDB commit (the resume granularity).
        check: ``"markers"`` keeps a JPEG after checking its markers and end-of-image;
            ``"decode"`` also decodes it at reduced scale.
        composite: composite transparent pixels on white (and scale 16-bit images by
            1/257) when re-encoding; by default images convert exactly as torchvision's
            ImageFolder loader converts them (``Image.open(p).convert("RGB")``).
        shards: write a sharded set instead: ``shards`` LMDB shards under ``dst`` (a
            contiguous range of source files each) and a manifest (see
            :mod:`fastload.data.manifest`); the set reads as one data set in source order.
        shard_index: with ``shards``, convert only this shard, so that ``shards`` processes
            can convert in parallel; the last one to finish writes the manifest.
        image_column: the image column of a parquet or ``datasets`` source (``"image"``).
        label_column: the label column of a parquet or ``datasets`` source (``"label"``).
        label_field: read a WebDataset sample's label from this field of its ``.json``
            member (default: the text of its ``.cls`` member).

    An interrupted conversion (even SIGKILL) is resumed by calling again with the same
    source and options; the result equals an uninterrupted run. Unreadable files are
    listed in ``dst/errors.json``.
    """
    check_convert_options(workers=workers, max_side=max_side, quality=quality,
                          commit_every=commit_every, check=check, shards=shards,
                          shard_index=shard_index)
    refuse_url(src, "source")
    refuse_url(dst, "destination")
    start = time.perf_counter()
    src_path = Path(os.path.abspath(src))
    dst_path = Path(os.path.abspath(dst))
    if src_path.is_dir() and (dst_path == src_path or src_path in dst_path.parents):
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
    }
    run = (workers or os.cpu_count() or 1, max_side, quality, check, composite, strict,
           progress, commit_every)
    if shards is None:
        report = _convert_one(source.samples, dst_path, identity, total_bytes, overwrite, run)
    else:
        from fastload.data.convert_shards import convert_shards

        report = convert_shards(source.samples, dst_path, identity, total_bytes, overwrite,
                                run, shards, shard_index)
    report.seconds = time.perf_counter() - start
    report.classes = source.classes
    return report


def _convert_one(samples, dst_path: Path, identity: dict, total_bytes: int, overwrite: bool,
                 run: tuple, progress_state: dict | None = None) -> ConvertReport:
    """Convert ``samples`` into the one LMDB directory ``dst_path`` (resuming a partial);
    ``progress_state`` is :func:`prepare_destination`'s answer when the caller took it."""
    if progress_state is None:
        progress_state = prepare_destination(dst_path, identity, overwrite=overwrite)
    try:
        writer = LMDBWriter(dst_path, identity, progress_state,
                            map_size=_initial_map_size(total_bytes, len(samples)))
    except BaseException:
        unlock_destination(dst_path)
        raise
    try:
        _run(samples, writer, *run)
    except BaseException:
        writer.close()
        raise
    writer.finish({"created": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    kept = writer.counts.get(KEPT, 0)
    return ConvertReport(
        path=dst_path, stored=writer.stored, skipped=len(writer.skipped), seen=writer.seen,
        errors=writer.skipped, kept=kept, reencoded=writer.stored - kept,
        resumed=writer.resumed, resumed_from=writer.resumed_from,
    )


def _initial_map_size(total_bytes: int, count: int) -> int:
    """Room for every source byte plus a quarter and page overhead (grown when exceeded)."""
    return total_bytes + total_bytes // 4 + (count << 12)


def _run(samples, writer: LMDBWriter, workers: int, max_side, quality, check, composite,
         strict, progress, commit_every) -> None:
    from tqdm import tqdm

    bar = tqdm(total=len(samples), initial=writer.seen, unit="img", disable=not progress,
               dynamic_ncols=True, desc="convert")
    try:
        while True:
            try:
                _run_from(writer.seen, samples, writer, workers,
                          (max_side, quality, check, composite), strict, bar, commit_every)
                return
            except MapFull:  # the batch was rolled back and the map grown: redo it
                bar.n = writer.seen
                bar.refresh()
    finally:
        bar.close()


def _run_from(start, samples, writer, workers, options, strict, bar, commit_every) -> None:
    """Convert ``samples[start:]``; the main process reads every record and keeps the JPEGs
    that pass the marker check itself, and only files that need Pillow (re-encoding or a
    decode check) go to the worker pool, started on the first such file. Results are taken
    in source order from a bounded window, so the output never depends on timing."""
    pool = None
    window = max(64, workers * 16)
    pending: deque = deque()
    last_commit = start

    def settle(index: int, path: str, label: int, result) -> None:
        nonlocal last_commit
        if not isinstance(result, tuple):
            try:
                result = result.get(timeout=WORKER_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                raise ConvertError(
                    f"no answer from the worker reading {path!r} within {WORKER_TIMEOUT_S} s "
                    "(did the image decoder crash?); rerun the same command to resume"
                ) from None
        if result[0] == "ok":
            _, record, crc, how = result
            writer.add(record, crc, label, how)
        elif strict:
            writer.commit(index)
            raise ConvertError(
                f"unreadable image {path!r}: {result[1]} (strict=True); fix or remove it and "
                "rerun with overwrite=True, or without strict=True to skip such files"
            )
        else:
            writer.skip(index, path, result[1])
        if index + 1 - last_commit >= commit_every:
            writer.commit(index + 1)
            last_commit = index + 1
        bar.update(1)

    scratch = ScratchBuffer()  # every kept record is put before the next file is read
    try:
        for index, record in enumerate(iter_records(samples, start), start):
            name, label, path, span, data, problem = record
            task = (path, label, *options)
            if problem is not None:  # a container's record without a usable image or label
                result = ("skip", problem)
            elif workers == 1:
                result = check_file(*task, scratch=scratch, span=span, data=data)
            else:  # a kept record waits in the window behind a worker's: own buffer then
                result = check_file(*task, keep_only=True, scratch=None if pending else scratch,
                                    span=span, data=data)
                if result is None:
                    if pool is None:
                        pool = multiprocessing.get_context().Pool(workers, initializer=_worker_init)
                    result = pool.apply_async(check_file_task_copy, (task, span, None if data
                                                                     is None else bytes(data)))
            pending.append((index, name, label, result))
            while pending and (len(pending) > window or _ready(pending[0][3])):
                settle(*pending.popleft())
        while pending:
            settle(*pending.popleft())
        writer.commit(len(samples))
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def _ready(result) -> bool:
    return isinstance(result, tuple) or result.ready()


def _worker_init() -> None:
    """Workers ignore Ctrl-C (the parent stops them) and die with the parent, even on SIGKILL."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a finished fastload database."""
    import json

    try:
        with open(Path(path) / META_FILE, encoding="utf-8") as handle:
            return json.load(handle).get("state") == STATE_COMPLETE
    except (OSError, ValueError, AttributeError):
        return False
