"""The strict check of kept JPEGs in threads, records gathered into tasks as threads free up.

``fastload convert`` keeps a JPEG by its markers in the main process, then checks its
entropy-coded data (``check="decode"``) in ``workers`` threads. The C check decodes many
files at once in one thread (``pipelines/csrc/jpegcheck``: 32 with AVX-512, from 10 files
a call; two otherwise), so a task takes several records: a task starts
once :data:`LEAST` records are gathered and a thread is free (or :data:`MOST` are gathered,
or a record's verdict is asked for). The main thread reads on meanwhile; while the threads
keep up, little is left to check at a shard's end.

One :class:`CheckBatches` may serve several databases in turn (the shards of a set): its
threads, and the C check's per-thread look-ups and buffers, are kept from one to the next.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from fastload.data.convert.image_check import kept_records_problems

__all__ = ["LEAST", "MOST", "CheckBatches", "CheckedRecord"]

LEAST = 32  # records a task waits for while the main thread reads on
MOST = 128  # records a task takes at most


class CheckedRecord:
    """A kept record whose strict check runs in a thread: ``ready``/``get`` as an
    AsyncResult; ``get()`` is the kept result tuple, or ``("skip", reason)`` for damaged
    JPEG data."""

    def __init__(self, kept: tuple, batches: CheckBatches) -> None:
        self.kept = kept
        self._batches = batches
        self._future: Future | None = None
        self._slot = 0

    def submitted(self, future: Future, slot: int) -> None:
        self._future, self._slot = future, slot

    def ready(self) -> bool:
        return self._future is not None and self._future.done()

    def get(self, timeout: float | None = None) -> tuple:
        if self._future is None:  # its task has not started yet: start it
            self._batches.flush()
        problem = self._future.result()[self._slot]  # a thread of this process: no crash
        return self.kept if problem is None else ("skip", problem)


class CheckBatches:
    """Kept records checked in ``workers`` threads, gathered into tasks of ``least`` to
    ``most`` records (see the module's docstring)."""

    def __init__(self, workers: int, least: int = LEAST, most: int = MOST) -> None:
        self._workers = workers
        self._least, self._most = least, most
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.RLock()  # a task done at once calls back under it
        self._open: list[CheckedRecord] = []
        self._running = 0  # tasks submitted, not finished
        self._ending = False  # threads being ended: a finished task starts no other

    def add(self, kept: tuple) -> CheckedRecord:
        """The check of ``kept`` (``("ok", record, crc, how)``), started with its task."""
        record = CheckedRecord(kept, self)
        with self._lock:
            self._open.append(record)
            if len(self._open) >= self._most or (
                    len(self._open) >= self._least and self._running < self._workers):
                self._submit()
        return record

    def flush(self) -> None:
        """Start a task for the records gathered so far, however few."""
        with self._lock:
            if self._open:
                self._submit()

    def stop_threads(self) -> None:
        """Check what was gathered and end the threads (before a fork); the next record
        starts new ones."""
        self.flush()
        self._end_threads(cancel_futures=False)

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Wait for every check (the gathered ones started first), or with
        ``cancel_futures`` drop those not started."""
        if not cancel_futures:
            self.flush()
        self._end_threads(cancel_futures)

    def _end_threads(self, cancel_futures: bool) -> None:
        with self._lock:
            pool, self._pool, self._ending = self._pool, None, True
        if pool is not None:
            pool.shutdown(cancel_futures=cancel_futures)

    def _submit(self) -> None:  # under the lock
        batch, self._open = self._open, []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="fastload-check")
            self._ending = False
        self._running += 1
        future = self._pool.submit(kept_records_problems, [record.kept[1] for record in batch])
        for slot, record in enumerate(batch):
            record.submitted(future, slot)
        future.add_done_callback(self._finished)

    def _finished(self, _future: Future) -> None:
        with self._lock:
            self._running -= 1
            if (not self._ending and len(self._open) >= self._least
                    and self._running < self._workers):
                self._submit()
