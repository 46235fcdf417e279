"""``fastload convert``: an image source (see :mod:`fastload.data.convert_sources`) into an LMDB.

The main process reads every file (or tar member, or parquet row) and keeps a JPEG whose
markers pass the keep-bytes check itself (see :mod:`fastload.data.image_check`): that costs
less than handing the bytes to another process. With ``check="decode"`` (the default) such
a JPEG is then decoded strictly in ``workers`` threads of the main process (the decoder
releases the GIL; measured cheaper than sending the bytes to a process and back). Files
that need Pillow (other formats, ``max_side``) go to ``workers`` worker processes. Results
are consumed in source order and the main process alone writes, in committed batches (see
:mod:`fastload.data.writer`). The order is fixed by the source, so a resumed or re-run
conversion produces the same records whatever ``workers`` or ``commit_every``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fastload.data.convert_sources import list_source
from fastload.data.format import (
    FORMAT_VERSION,
    JPEG_CHECK_STRICT,
    META_FILE,
    META_JPEG_CHECK,
    STATE_COMPLETE,
)
from fastload.data.image_check import (
    CHECKS,
    KEPT,
    ScratchBuffer,
    check_file,
    check_file_task_copy,
    kept_record_problem,
)
from fastload.data.sources.base import iter_records
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

    def summary(self) -> str:
        return f"stored {self.stored} + skipped {self.skipped} = seen {self.seen}"


def _check_positive(name: str, value, allow_none: bool = True) -> None:
    check_positive_int(name, value, allow_none=allow_none)


def check_convert_options(*, workers: int | None = None, max_side: int | None = None,
                          quality: int = 90, commit_every: int = DEFAULT_COMMIT_EVERY,
                          check: str = "decode", shards: int | None = None,
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
    check: str = "decode",
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
        # the check every JPEG passed, which the loader trusts; part of the identity, so a
        # partial made by a fastload whose "decode" was Pillow's is never resumed as strict
        **({META_JPEG_CHECK: JPEG_CHECK_STRICT} if check == "decode" else {}),
    }
    run = (workers or os.cpu_count() or 1, max_side, quality, check, composite, strict,
           progress, commit_every)
    if shards is None:
        report = _convert_one(source.samples, dst_path, identity, total_bytes, overwrite, run)
    else:
        report = convert_shards(source.samples, dst_path, identity, total_bytes, overwrite,
                                run, shards, shard_index)
    report.seconds = time.perf_counter() - start
    report.classes = source.classes
    return report


def _convert_one(samples, dst_path: Path, identity: dict, total_bytes: int, overwrite: bool,
                 run: tuple) -> ConvertReport:
    """Convert ``samples`` into the one LMDB directory ``dst_path`` (resuming a partial)."""
    progress_state = prepare_destination(dst_path, identity, overwrite=overwrite)
    writer = LMDBWriter(dst_path, identity, progress_state,
                        map_size=_initial_map_size(total_bytes, len(samples)))
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


def convert_shards(samples, dst_path: Path, identity: dict, total_bytes: int, overwrite: bool,
                   run: tuple, shards: int, shard_index: int | None) -> ConvertReport:
    """Convert the shards of a set (all, or ``shard_index`` only), then complete the manifest
    if every shard is done. The report sums the shards converted by this call."""
    from fastload.data.manifest import (
        MANIFEST_FILE,
        SET_LABELS_FILE,
        complete_manifest,
        existing_shard_counts,
        shard_bounds,
        shard_folders,
        shard_name,
    )

    if shards > max(1, len(samples)):
        raise ValueError(f"shards={shards} exceeds the {len(samples)} source files; pass at "
                         "most one shard per file")
    if (dst_path / META_FILE).exists():
        raise FileExistsError(f"destination {str(dst_path)!r} is an unsharded fastload "
                              "database; write the sharded set to a new folder")
    if dst_path.is_dir():
        foreign = sorted(e.name for e in os.scandir(dst_path) if not e.name.startswith(
            (".", "shard-")) and e.name not in (MANIFEST_FILE, SET_LABELS_FILE))
        if foreign:
            raise FileExistsError(
                f"destination {str(dst_path)!r} holds files that are not part of a sharded "
                f"fastload set ({', '.join(foreign[:3])}); choose a new or empty folder")
    others = existing_shard_counts(dst_path) - {shards}
    if others and not overwrite:
        raise FileExistsError(
            f"destination {str(dst_path)!r} holds shards of a {min(others)}-shard set; pass "
            f"shards={min(others)}, or overwrite=True to replace it")
    dst_path.mkdir(parents=True, exist_ok=True)
    if overwrite:
        (dst_path / MANIFEST_FILE).unlink(missing_ok=True)  # the set is no longer complete
        for name, count in shard_folders(dst_path).items():
            if count != shards:  # a set of another shard count is replaced, not mixed in
                _remove_shard(dst_path / name)
    bounds = shard_bounds(len(samples), shards)
    todo = range(shards) if shard_index is None else [shard_index]
    total = ConvertReport(path=dst_path, stored=0, skipped=0, seen=0)
    for k in todo:
        begin, stop = bounds[k]
        shard_identity = {**identity, "shard": {"index": k, "count": shards,
                                                "source_start": begin, "source_stop": stop}}
        part = samples[begin:stop]
        share = total_bytes * len(part) // max(1, len(samples))
        report = _convert_one(part, dst_path / shard_name(k, shards), shard_identity, share,
                              overwrite, run)
        total.stored += report.stored
        total.skipped += report.skipped
        total.seen += report.seen
        total.kept += report.kept
        total.reencoded += report.reencoded
        total.errors += [{**e, "index": e["index"] + begin} for e in report.errors]
        total.resumed = total.resumed or report.resumed
        total.resumed_from += report.resumed_from
    total.manifest = complete_manifest(dst_path, shards)
    return total


def _remove_shard(folder: Path) -> None:
    """Delete a shard folder of fastload files; one holding anything else is refused."""
    from fastload.data.format import OWNED_FILES

    foreign = [e.name for e in os.scandir(folder) if e.name not in OWNED_FILES]
    if foreign:
        raise FileExistsError(f"shard folder {str(folder)!r} holds files that are not part of "
                              f"a fastload database ({', '.join(sorted(foreign)[:3])}); remove "
                              "them first")
    for name in sorted(OWNED_FILES, key=lambda n: n != META_FILE):  # not complete, first
        (folder / name).unlink(missing_ok=True)
    folder.rmdir()


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
    that pass the marker check itself (their strict decode, with ``check="decode"``, in
    threads), and only files that need Pillow (re-encoding, or the strict decode when
    ``_THREADED_STRICT`` is off) go to the worker pool, started on the first such file
    (after those threads are drained: no fork beside them). Results are taken
    in source order from a bounded window, so the output never depends on timing."""
    pool = None
    checks = None  # threads for the strict decode of kept JPEGs (check="decode")
    max_side, quality, check, composite = options
    threaded = check == "decode" and workers > 1 and _THREADED_STRICT
    # with threads the main process keeps JPEGs by their markers, then checks them there
    first = (max_side, quality, "markers", composite) if threaded else options
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
                result = check_file(path, label, *first, keep_only=True, span=span, data=data,
                                    scratch=None if pending or threaded else scratch)
                if result is None:
                    if pool is None:
                        if checks is not None:  # never fork beside our threads (a lock they
                            checks.shutdown()  # hold, an import's, would stay held there)
                            checks = None
                        pool = multiprocessing.get_context().Pool(workers, initializer=_worker_init)
                    result = pool.apply_async(check_file_task_copy, (task, span, None if data
                                                                     is None else bytes(data)))
                elif threaded and result[0] == "ok":
                    if checks is None:
                        checks = ThreadPoolExecutor(workers, thread_name_prefix="fastload-check")
                    result = _Checked(result, checks.submit(kept_record_problem, result[1]))
            pending.append((index, name, label, result))
            while pending and (len(pending) > window or _ready(pending[0][3])):
                settle(*pending.popleft())
        while pending:
            settle(*pending.popleft())
        writer.commit(len(samples))
    finally:
        if checks is not None:
            checks.shutdown(cancel_futures=True)
        if pool is not None:
            pool.terminate()
            pool.join()


# The kept JPEGs' strict decode in threads of the main process (True) or in the worker
# processes with everything that needs Pillow (False): see benchmarks/NOTES.md C10.
_THREADED_STRICT = True


class _Checked:
    """A kept record whose strict decode runs in a thread: ``get()`` is its result tuple,
    or ``("skip", reason)`` for damaged JPEG data (``ready``/``get`` as an AsyncResult)."""

    def __init__(self, kept: tuple, problem: Future) -> None:
        self._kept, self._problem = kept, problem

    def ready(self) -> bool:
        return self._problem.done()

    def get(self, timeout: float | None = None) -> tuple:
        problem = self._problem.result()  # a thread of this process: no crash to wait out
        return self._kept if problem is None else ("skip", problem)


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
