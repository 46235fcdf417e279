"""One fastload LMDB written from a list of source records: the writer loop behind ``convert``.

The main process reads every record and keeps a JPEG whose markers pass the keep-bytes
check itself (see :mod:`fastload.data.convert.image_check`); with ``check="decode"`` (the default)
such a JPEG's entropy-coded data is then checked in the main process, by ``workers - 1``
threads and by the main thread while it waits for a verdict
(:mod:`fastload.data.convert.check_batches`; the check releases the GIL, measured cheaper
than sending the bytes to a process and back). Records
that need Pillow (other formats, ``max_side``) go to worker processes. Results are consumed in source order and the main process alone writes, in
committed batches (:mod:`fastload.data.format.writer`), so a resumed run produces the same records
whatever ``workers`` or ``commit_every``. Used by :mod:`fastload.data.convert.folder` (one
database) and :mod:`fastload.data.convert.shards` (one per shard).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fastload.data.convert.check_batches import CheckBatches
from fastload.data.convert.destination import move_replacement_in, prepare_destination
from fastload.data.convert.dst_lock import unlock_destination
from fastload.data.convert.image_check import (
    KEPT,
    ScratchBuffer,
    check_file,
    check_file_task_copy,
)
from fastload.data.convert.read_ahead import ReadAhead, record_bytes
from fastload.data.convert.sources.base import iter_records
from fastload.data.format.constants import (
    JPEG_CHECK_STRICT,
    META_FILE,
    META_JPEG_ATTESTATION,
    META_JPEG_CHECK,
    STATE_COMPLETE,
)
from fastload.data.format.writer import LMDBWriter, MapFull
from fastload.data.sets.attest import attest_database
from fastload.utils.process import default_context, interrupts_held, owned_child

__all__ = ["ConvertError", "ConvertReport", "convert_one", "is_complete", "read_early",
           "stored_nothing"]

WORKER_TIMEOUT_S = 600  # longest wait for one image from a worker process

# Held while the worker pool forks, and by a thread of this process that must not be forked
# beside (a shard upload holds it around each request: see fastload.data.remote.upload),
# so no worker starts with a lock such a thread held.
FORK_LOCK = threading.Lock()


class ConvertError(RuntimeError):
    """A conversion stopped early (``strict=True`` and an unreadable file), or stored no file.

    A ``RuntimeError`` raised by :func:`~fastload.data.convert_folder` (also when a worker
    stops answering); its message names the file and why it failed, and the fix. What was
    committed before is kept: a rerun of the same conversion resumes it.
    """


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
    # an overwritten set kept whole (readable) until every shard's replacement is finished
    replacing: bool = False
    # an overwrite that stored nothing (every file skipped): the finished database or set it
    # would replace is kept as it was, and the new one left beside it (its errors.json)
    kept_old: bool = False

    def summary(self) -> str:
        return f"stored {self.stored} + skipped {self.skipped} = seen {self.seen}"


def convert_one(samples, dst_path: Path, identity: dict, total_bytes: int, overwrite: bool,
                 run: tuple, progress_state: dict | None = None,
                 checks: CheckBatches | None = None, ahead: ReadAhead | None = None,
                 next_ahead: ReadAhead | None = None, move_in: bool = True) -> ConvertReport:
    """Convert ``samples`` into the one LMDB directory ``dst_path`` (resuming a partial);
    ``progress_state`` is :func:`prepare_destination`'s answer when the caller took it.

    For a caller that converts several databases in turn: ``checks``, the strict check's
    threads (else started and ended here); ``ahead``, this database's first records read
    while the one before finished (``samples`` is then ``ahead.samples``); ``next_ahead``,
    the next one's, to read while this one's last checks finish. A finished database's
    replacement is moved in once finished, or with ``move_in=False`` left finished beside it
    for the caller (a set's shards all move in at its end)."""
    if progress_state is None:
        progress_state = prepare_destination(dst_path, identity, overwrite=overwrite)
    # a finished database's replacement is written beside it, and moved in once finished
    write_path = Path(progress_state.get("replacing", dst_path))
    try:
        try:
            writer = LMDBWriter(write_path, identity, progress_state,
                                map_size=_initial_map_size(total_bytes, len(samples)))
        except BaseException:
            unlock_destination(write_path)
            raise
        try:
            _run(samples, writer, *run, checks=checks, ahead=ahead, next_ahead=next_ahead)
        except BaseException:
            writer.close()
            raise
        meta = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        if identity.get(META_JPEG_CHECK) == JPEG_CHECK_STRICT:  # bind the claim to the records
            attestation = attest_database(writer.stored, writer.checksums)
            if attestation is not None:
                meta[META_JPEG_ATTESTATION] = attestation
        writer.finish(meta)
        moves_in = write_path != dst_path and move_in
        kept_old = moves_in and stored_nothing(writer.seen, writer.stored)
        if moves_in and not kept_old:
            move_replacement_in(dst_path, write_path)
    finally:
        if write_path != dst_path:
            unlock_destination(dst_path)
    kept = writer.counts.get(KEPT, 0)
    return ConvertReport(
        path=dst_path, stored=writer.stored, skipped=len(writer.skipped), seen=writer.seen,
        errors=writer.skipped, kept=kept, reencoded=writer.stored - kept,
        resumed=writer.resumed, resumed_from=writer.resumed_from, kept_old=kept_old,
    )


def stored_nothing(seen: int, stored: int) -> bool:
    """Whether a conversion that saw files stored none (every one skipped): an overwrite
    then keeps the finished database or set it would replace."""
    return seen > 0 and stored == 0


def read_early(samples, workers: int,
               options: tuple) -> tuple[CheckBatches, ReadAhead] | None:
    """A conversion's first records read and their strict checks started in new check
    threads, while the caller goes on (fingerprints the source, opens the database): for
    :func:`convert_one`'s ``checks`` and ``ahead`` (the caller shuts ``checks`` down).
    ``options``: ``(max_side, quality, check, composite)``. None where the strict check runs
    in no thread here (``check="markers"``, one worker)."""
    if not _checked_in_threads(options, workers):
        return None
    checks, ahead = CheckBatches(workers), ReadAhead(samples, 0)
    while ahead.read_one(_kept_by_markers(options), checks, EARLY_RECORDS, WINDOW_BYTES):
        pass
    return checks, ahead


def _checked_in_threads(options: tuple, workers: int) -> bool:
    """Whether kept JPEGs are checked strictly in threads of this process (``options``:
    ``(max_side, quality, check, composite)``)."""
    return options[2] == "decode" and workers > 1 and _THREADED_STRICT


def _kept_by_markers(options: tuple) -> tuple:
    """``options`` with the check the reader keeps a JPEG by before its threaded strict one"""
    max_side, quality, _, composite = options
    return (max_side, quality, "markers", composite)


def _initial_map_size(total_bytes: int, count: int) -> int:
    """Room for every source byte plus a quarter and page overhead (grown when exceeded)."""
    return total_bytes + total_bytes // 4 + (count << 12)


def _run(samples, writer: LMDBWriter, workers: int, max_side, quality, check, composite,
         strict, progress, commit_every, checks: CheckBatches | None = None,
         ahead: ReadAhead | None = None, next_ahead: ReadAhead | None = None) -> None:
    from fastload.utils.progress import progress as progress_bar

    # a tqdm bar on a terminal, a plain line every 30 s in a log (never one per redraw)
    bar = progress_bar(total=len(samples), initial=writer.seen, unit="img",
                       disable=not progress, desc="convert")
    try:
        while True:
            try:
                _run_from(writer.seen, samples, writer, workers,
                          (max_side, quality, check, composite), strict, bar, commit_every,
                          (checks, ahead, next_ahead))
                return
            except MapFull:  # the batch was rolled back and the map grown: redo it
                bar.n = writer.seen
                bar.refresh()
    finally:
        bar.close()


def _run_from(start, samples, writer, workers, options, strict, bar, commit_every,
              shared: tuple) -> None:
    """Convert ``samples[start:]``; the main process reads every record and keeps the JPEGs
    that pass the marker check itself (their strict decode, with ``check="decode"``, in
    threads), and only files that need Pillow (re-encoding, or the strict decode when
    ``_THREADED_STRICT`` is off) go to the worker pool, started on the first such file
    (after those threads are drained: no fork beside them). Results are taken
    in source order from a bounded window, so the output never depends on timing.

    ``shared``: the caller's (check threads, this database's records read ahead, the next
    one's to read ahead), each or None (see :func:`convert_one`)."""
    pool = None
    shared_checks, ahead, next_ahead = shared
    checks = shared_checks  # threads for the strict decode of kept JPEGs (check="decode")
    threaded = _checked_in_threads(options, workers)
    # with threads the main process keeps JPEGs by their markers, then checks them there
    first = _kept_by_markers(options) if threaded else options
    window = max(WINDOW, workers * 16)
    pending: deque = deque()
    held = 0  # bytes of the records in the window
    taken = ahead.take(start) if ahead is not None else None
    if taken is not None:  # read while the database before finished: first, in order
        pending, held = taken
    last_commit = start

    def settle(index: int, path: str, label: int, result, size: int) -> None:
        nonlocal last_commit, held
        held -= size
        if not isinstance(result, tuple):
            try:
                result = result.get(timeout=WORKER_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                raise ConvertError(
                    f"no answer from the worker reading {path!r} within {WORKER_TIMEOUT_S} s "
                    "(did the image decoder crash?); rerun the same command to resume"
                ) from None
        if result[0] == "ok":
            record, crc, how = result[1:4]  # a kept file's JPEG view may follow (check_file)
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
        first_read = start + len(pending)
        for index, record in enumerate(iter_records(samples, first_read), first_read):
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
                            checks.stop_threads()  # hold, an import's, would stay held there)
                        context = default_context()
                        with FORK_LOCK, interrupts_held(context.get_start_method()):
                            pool = context.Pool(  # no worker sees a Ctrl-C before it ignores it
                                workers, initializer=owned_child)
                    result = pool.apply_async(check_file_task_copy, (task, span, None if data
                                                                     is None else bytes(data)))
                elif threaded and result[0] == "ok":
                    if checks is None:
                        checks = CheckBatches(workers)
                    result = checks.add(result)
            size = record_bytes(result)
            held += size
            pending.append((index, name, label, result, size))
            while pending and (len(pending) > window or held > WINDOW_BYTES
                               or _ready(pending[0][3])):
                settle(*pending.popleft())
        if checks is not None:
            checks.end_input()  # the last records' checks start now, not at the first wait
        while pending:
            if (next_ahead is not None and checks is not None and not _ready(pending[0][3])
                    and next_ahead.read_one(first, checks, window, WINDOW_BYTES)):
                continue  # the next database's records while the last checks run
            settle(*pending.popleft())
        writer.commit(len(samples))
    except BaseException:
        if checks is not None:  # what is in flight is of no use now
            checks.shutdown(cancel_futures=True)
        raise
    finally:
        if checks is not None and checks is not shared_checks:
            checks.shutdown(cancel_futures=True)
        if pool is not None:
            pool.terminate()
            pool.join()


# Records read ahead of the one written next, at most: room for a few strict-check tasks
# (check_batches.MOST records each) while a task runs, within WINDOW_BYTES of records. Where
# the reader may not take the check threads' reserve it reads on, up to here: 256 left it
# waiting (benchmarks/NOTES.md C25).
WINDOW = 512
WINDOW_BYTES = 256 << 20

# Records read (their checks started) before the source is fingerprinted, where the check
# threads would otherwise wait: two tasks of check_batches.LEAST (benchmarks/NOTES.md C25).
EARLY_RECORDS = 64

# The kept JPEGs' strict decode in threads of the main process (True) or in the worker
# processes with everything that needs Pillow (False): see benchmarks/NOTES.md C10.
_THREADED_STRICT = True


def _ready(result) -> bool:
    return isinstance(result, tuple) or result.ready()


def is_complete(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a finished fastload database.

    Reads only its ``fastload.json``: never raises for a missing or unreadable one.

    Args:
        path: an LMDB directory (or a shard folder of a set).

    Returns:
        True when its ``fastload.json`` says the conversion finished, else False.
    """
    import json

    try:
        with open(Path(path) / META_FILE, encoding="utf-8") as handle:
            return json.load(handle).get("state") == STATE_COMPLETE
    except (OSError, ValueError, AttributeError):
        return False
