"""The strict check of kept JPEGs in threads, a few records per task.

``fastload convert`` keeps a JPEG by its markers in the main process, then checks its
entropy-coded data (``check="decode"``) in ``workers`` threads. The C check decodes two
files at once in one thread (``pipelines/csrc/jpegcheck/lanes.c``: the steps of one file's
pass depend on each other, two files' do not), so a task takes :data:`BATCH` records: about
30% less CPU per photo than one file per call (benchmarks/NOTES.md C14).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from fastload.data.convert.image_check import kept_records_problems

__all__ = ["BATCH", "CheckBatches", "CheckedRecord"]

BATCH = 4  # records per task: two decoded at once, the next two as they finish


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
        if self._future is None:  # its batch is not full yet: check what there is
            self._batches.flush()
        problem = self._future.result()[self._slot]  # a thread of this process: no crash
        return self.kept if problem is None else ("skip", problem)


class CheckBatches:
    """Kept records gathered :data:`BATCH` at a time, each batch checked in a thread."""

    def __init__(self, workers: int, batch: int = BATCH) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="fastload-check")
        self._batch = batch
        self._open: list[CheckedRecord] = []

    def add(self, kept: tuple) -> CheckedRecord:
        """The check of ``kept`` (``("ok", record, crc, how)``), submitted with its batch."""
        record = CheckedRecord(kept, self)
        self._open.append(record)
        if len(self._open) >= self._batch:
            self.flush()
        return record

    def flush(self) -> None:
        """Submit the records gathered so far, however few."""
        if self._open:
            batch, self._open = self._open, []
            future = self._pool.submit(kept_records_problems, [r.kept[1] for r in batch])
            for slot, record in enumerate(batch):
                record.submitted(future, slot)

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Wait for every check (the gathered ones submitted first), or with
        ``cancel_futures`` drop those not started."""
        if not cancel_futures:
            self.flush()
        self._pool.shutdown(cancel_futures=cancel_futures)
