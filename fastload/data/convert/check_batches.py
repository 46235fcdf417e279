"""The strict check of kept JPEGs, in tasks of records: in threads, and by the reader.

``fastload convert`` keeps a JPEG by its markers in the main process, then checks its
entropy-coded data (``check="decode"``). The C check decodes many files at once in one
thread (``pipelines/csrc/jpegcheck``, from 10 files a call: 32 with AVX-512, 16 with AVX2;
two otherwise), so a task takes several records: a task starts once :data:`LEAST` records are
gathered and a check thread is free (or :data:`MOST` are gathered, or a record's verdict is
asked for).

``workers`` cores are shared by ``workers - 1`` check threads (at least one) and the thread
that reads. It reads on while the check threads keep up; when it has to wait for a
verdict, it checks the records of the oldest task no thread has taken, :data:`STEAL` at a
time, and reads on as soon as the verdict it waits for is in. So no more threads are
runnable than there are cores: a check never takes the core of the reader that will wait
for it, and no core idles while a task waits (benchmarks/NOTES.md C16). While a thread
checks the record waited for, the reader leaves :data:`LEAST` records a thread queued (so
that a thread which finishes finds its next task ready), unless :meth:`CheckBatches.end_input`
said that no more are coming (benchmarks/NOTES.md C25).

One :class:`CheckBatches` may serve several databases in turn (the shards of a set): its
threads, and the C check's per-thread look-ups and buffers, are kept from one to the next.
"""

from __future__ import annotations

import queue
import threading
from collections import deque

from fastload.data.convert.image_check import kept_jpegs_problems
from fastload.data.format.datum import datum_fields
from fastload.data.format.jpeg_damage import release_thread_cache

__all__ = ["LEAST", "MOST", "STEAL", "CheckBatches", "CheckedRecord"]

LEAST = 32  # records a task waits for while the reader reads on
MOST = 128  # records a task takes at most
STEAL = 16  # records the reader checks at a time while it waits

_END = object()  # tells a check thread to end


class _Task:
    """Records checked together: ``problems`` (or ``error``) once ``done`` is set."""

    __slots__ = ("records", "problems", "error", "done")

    def __init__(self, records: list[CheckedRecord]) -> None:
        self.records = records
        for slot, record in enumerate(records):
            record.task, record.slot = self, slot
        self.problems: list[str | None] | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        # the records refer to their task: let go of them, so no cycle keeps their buffers
        records, self.records = self.records, []
        try:
            self.problems = kept_jpegs_problems([_jpeg_of(record.kept) for record in records])
        except Exception as exc:  # noqa: BLE001 - raised where a verdict is asked for
            self.error = exc
        except BaseException as exc:  # a Ctrl-C while the reader checks: raised there
            self.error = exc
            raise
        finally:
            self.done.set()

    def drop(self) -> None:
        """End the task unchecked (no verdict of its records is wanted any more)."""
        self.records = []
        self.error = RuntimeError("the strict check stopped before this record's")
        self.done.set()


def _jpeg_of(kept: tuple) -> bytes | memoryview:
    """The JPEG of a kept result: its view as ``check_file(..., keep_only=True)`` gives it,
    else parsed from the record."""
    return kept[4] if len(kept) > 4 else datum_fields(kept[1])[0]


class CheckedRecord:
    """A kept record whose strict check runs in a task: ``ready``/``get`` as an
    AsyncResult; ``get()`` is the kept result tuple, or ``("skip", reason)`` for damaged
    JPEG data."""

    __slots__ = ("kept", "task", "slot", "_batches")

    def __init__(self, kept: tuple, batches: CheckBatches) -> None:
        self.kept = kept
        self.task: _Task | None = None  # set once the record is in a task
        self.slot = 0
        self._batches = batches

    def ready(self) -> bool:
        return self.task is not None and self.task.done.is_set()

    def get(self, timeout: float | None = None) -> tuple:
        """The verdict; meanwhile this thread checks records of tasks not yet taken."""
        if self.task is None:  # gathered, not in a task yet: start one
            self._batches.flush()
        while not self.task.done.is_set():
            self._batches.help_or_wait(self)
        if self.task.error is not None:
            raise self.task.error
        problem = self.task.problems[self.slot]
        return self.kept if problem is None else ("skip", problem)


class CheckBatches:
    """Kept records gathered into tasks of ``least`` to ``most`` records, checked in
    ``workers - 1`` threads (at least one) and in the thread that waits for a verdict (see
    the module's docstring)."""

    def __init__(self, workers: int, least: int = LEAST, most: int = MOST,
                 steal: int = STEAL) -> None:
        self._thread_count = max(1, workers - 1)
        self._least, self._most, self._steal = least, most, steal
        self._lock = threading.Lock()
        self._open: list[CheckedRecord] = []  # gathered, in no task yet
        self._queue: deque[_Task] = deque()  # tasks no thread has taken, oldest first
        self._wake: queue.SimpleQueue = queue.SimpleQueue()  # one item a task queued, or _END
        self._threads: list[threading.Thread] = []
        self._ending_threads: list[threading.Thread] = []  # told to end, not joined yet
        self._busy = 0  # tasks the threads are checking
        self._ending = False  # threads being ended: a finished task starts no other
        self._helped = False  # the waiting thread has run checks (its C caches are filled)
        self._input_ended = False  # end_input() since the last add(): no reserve kept

    def add(self, kept: tuple) -> CheckedRecord:
        """The check of ``kept`` (``("ok", record, crc, how[, jpeg])``: with the JPEG's view
        where ``check_file(..., keep_only=True)`` gives it), started with its task."""
        record = CheckedRecord(kept, self)
        with self._lock:
            self._input_ended = False
            self._open.append(record)
            if len(self._open) >= self._most or (
                    len(self._open) >= self._least
                    and len(self._queue) + self._busy < self._thread_count):
                self._submit()
        return record

    def flush(self) -> None:
        """Start a task for the records gathered so far, however few."""
        with self._lock:
            if self._open:
                self._submit()

    def end_input(self) -> None:
        """No more records are coming (until the next :meth:`add`): start a task for those
        gathered, split the queued tasks into tasks of ``steal`` records (so that the threads
        and the waiting thread end together, and the records in order are written while
        the last are checked), and let the thread waiting for a verdict take any."""
        with self._lock:
            self._input_ended = True
            if self._open:
                self._submit()
            queued, self._queue = self._queue, deque()
            for task in queued:  # the records' tasks and slots are set anew by each _Task
                for start in range(0, len(task.records), self._steal):
                    self._queue.append(_Task(task.records[start:start + self._steal]))
            for _ in range(len(self._queue) - len(queued)):
                self._wake.put(None)  # a thread woken for a task taken by another moves on

    def help_or_wait(self, record: CheckedRecord) -> None:
        """Check up to ``steal`` records of the oldest task no thread has taken, or where
        there is none (or where a thread checks ``record`` and only the threads' reserve is
        queued) wait for ``record``'s task."""
        if not self._check_queued(whole=False, waiting_for=record):
            record.task.done.wait()

    def stop_threads(self) -> None:
        """Check what was gathered and end the threads (before a fork); the next record
        starts new ones."""
        self._end(cancel=False)

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Check every record gathered (in this thread too) and end the threads, or with
        ``cancel_futures`` drop the tasks not started; frees this thread's C caches where
        it checked records."""
        self._end(cancel=cancel_futures)
        if self._helped:
            release_thread_cache()
            self._helped = False

    def _end(self, cancel: bool) -> None:
        with self._lock:
            self._ending = True  # the threads end: a task submitted now is checked below
            if cancel:
                if self._open:
                    _Task(self._open).drop()
                    self._open = []
                while self._queue:
                    self._queue.popleft().drop()
            elif self._open:
                self._submit()
            for _ in self._threads:
                self._wake.put(_END)
            # joined below; kept listed until then, for a second call after an interrupt
            self._ending_threads += self._threads
            self._threads = []
            threads = list(self._ending_threads)
        while self._check_queued(whole=True):  # help the threads with what is queued
            pass
        for thread in threads:
            thread.join()
        with self._lock:
            self._ending_threads = []
            self._ending = False

    def _check_queued(self, whole: bool, waiting_for: CheckedRecord | None = None) -> bool:
        """Check the oldest task no thread has taken in this thread, or with ``whole=False``
        its first ``steal`` records (the rest stay queued); False where none is queued, or
        where ``waiting_for``'s task is not queued (a thread checks it) and taking them would
        leave the threads fewer than ``least`` records each before the input's end."""
        with self._lock:
            if not self._queue:
                return False
            oldest = self._queue[0]
            if (waiting_for is not None and not self._input_ended
                    and not any(task is waiting_for.task for task in self._queue)):
                queued = sum(len(task.records) for task in self._queue)
                taken = min(self._steal, len(oldest.records))
                if queued - taken < self._least * self._thread_count:
                    return False
            if whole or len(oldest.records) <= self._steal:
                task = self._queue.popleft()
            else:  # the records' tasks and slots are set anew by each part's _Task
                task = _Task(oldest.records[:self._steal])
                self._queue[0] = _Task(oldest.records[self._steal:])
        self._helped = True
        task.run()
        return True

    def _submit(self) -> None:  # under the lock
        batch, self._open = self._open, []
        self._queue.append(_Task(batch))
        if not self._threads and not self._ending:
            self._threads = [threading.Thread(target=self._serve, daemon=True,
                                              name=f"fastload-check_{i}")
                             for i in range(self._thread_count)]
            for thread in self._threads:
                thread.start()
        self._wake.put(None)

    def _serve(self) -> None:
        while self._wake.get() is not _END:
            with self._lock:
                if not self._queue:  # the waiting thread took it
                    continue
                task = self._queue.popleft()
                self._busy += 1
            task.run()
            with self._lock:
                self._busy -= 1
                if len(self._open) >= self._least and not self._ending:
                    self._submit()
