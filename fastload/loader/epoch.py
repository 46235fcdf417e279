"""One epoch of a ``fastload.DataLoader`` on the DALI path: read, submit, fetch, deliver.

The loader decides the batches (order, sampling, resume); this module reads their encoded
samples, keeps ``prefetch_factor`` of them in the decoder and turns each into ``[images,
labels]``. Two objects share the work, each with its own state:

* ``EpochIterator``, the caller's handle: ``next()`` pulls the batches' indices from the
  sampler on the caller's thread (as torch's loader iterates its sampler), hands out each
  batch's outcome in order, records what the loader reads back (``record``: the indices
  of the batch it handed out last) and finishes the epoch on the loader's order.
* ``Maker``, which owns the hand-off and the thread: it makes the batches' outcomes with
  an ``InFlight`` (``loader/in_flight.py``: read, submit, fetch, recover damaged samples
  through a ``Recovery``, stage). On the CPU it runs in a thread of its own
  (``fastload-maker``), up to ``prefetch_factor + 1`` batches ahead of the caller, as
  torch's workers run ahead: the caller ``put``s the batches it pulled and takes outcomes
  with :meth:`Maker.next_outcome`; one condition guards both ends. On a GPU
  ``next_outcome`` makes each batch on the caller's thread.

What crosses between them is typed: a pulled batch ``(position, indices)``, the sampler's
exception or ``None`` (its end) one way; an outcome the other way (``Made``, ``Skipped``,
``Empty``, ``Failed``, then ``End``). A batch's torch suffix runs in a stage thread beside
the maker when it leaves the global generators alone (``SampleStage.beside_caller``); else
it runs in ``next()``, on the caller's thread, as does a custom collate.

An error belongs to its batch, as in torch's loader: whatever fails while a batch is made
ahead (its sampler, an index, a read, the decode, ``target_transform``, the suffix or
collate) is kept as that batch's ``Failed`` outcome and raised at its turn, after every
batch before it; the next ``next()`` goes on with the batch after it (after the sampler
itself raised, the epoch ends there, as torch's single-process loader's does). A fault of
fastload's own that ends the maker thread is raised once, after every batch made before
it, and ends the epoch. A batch whose samples were all skipped is passed over in a loop.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from fastload.loader.context import EpochContext
from fastload.loader.in_flight import Empty, Failed, InFlight, Made, NothingYet, Outcome, Pulled
from fastload.loader.sample_sources import call_set_hook
from fastload.loader.sampling import mix_seed
from fastload.utils.threads import at_interpreter_exit

__all__ = ["End", "EpochIterator", "EpochRecord", "Maker", "makes_ahead"]


@dataclass(frozen=True)
class End:
    """Nothing more comes: the epoch is made, or the maker thread ended on ``failure``."""

    failure: BaseException | None = None


_TURNS = itertools.count()  # orders the batches every epoch of the process hands out


class EpochRecord:
    """What an epoch leaves for its loader to read back, alive after its iterator:
    ``last_indices``, the indices of the batch it handed out last, and that hand-out's
    ``turn`` in one count over all epochs (-1: none yet), so that a loader running two
    epochs at once reads the later one (:meth:`latest`)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[int, list[int]] = (-1, [])  # replaced whole: read in one piece

    def note(self, indices: list[int]) -> None:
        """The iterator hands out the batch of ``indices`` now."""
        self._last = (next(_TURNS), indices)

    @property
    def turn(self) -> int:
        return self._last[0]

    @property
    def last_indices(self) -> list[int]:
        return self._last[1]

    @staticmethod
    def latest(records: Iterable[EpochRecord]) -> EpochRecord | None:
        """The record among ``records`` whose last hand-out came last (None if none)."""
        return max(records, key=lambda record: record.turn, default=None)


def makes_ahead(device: torch.device) -> bool:
    """Whether an epoch on ``device`` makes its batches ahead in a maker thread (the CPU)
    rather than in ``next()`` (a GPU)."""
    return device.type == "cpu"


class EpochIterator:
    """One epoch of a DataLoader on the DALI path, keeping ``prefetch_factor`` batches in
    the decoder while the caller works.

    The maker thread holds the ``Maker``, never this iterator: when the caller drops it
    mid-epoch (a ``break``), the epoch is closed at once, its maker ended and its decoder let
    go, as torch's iterator shuts its workers down when it is collected."""

    def __init__(self, context: EpochContext) -> None:
        # The context's fields, not the context: close() must drop the decoder's reference.
        self._pid = os.getpid()
        self._order, self._epoch = context.order, context.epoch
        self._at_first_next = context.at_first_next
        self._stage, self._collate_fn = context.stage, context.collate_fn
        self._length, self._eager = context.length, context.eager_batches
        self.record = EpochRecord()
        order, epoch, rank = context.order, context.epoch, context.rank
        depth = max(1, context.prefetch)
        work = InFlight(
            source=context.source, decoder=context.decoder, owns_decoder=context.owns_decoder,
            damage=context.damage, stage=context.stage, stage_ahead=makes_ahead(context.device),
            depth=depth, on_error=context.on_error, skips=context.skips,
            pin_memory=context.pin_memory,
            seed_for=lambda position: mix_seed(order.seed, epoch.epoch, rank, position))
        self._maker = Maker(work, context.source,
                            pull=None if makes_ahead(context.device) else epoch.next)
        # With a maker thread: the caller pulls up to `_lead` batches ahead of what it has
        # been handed; `_pulled_ahead` are pulled and not yet handed out.
        self._lead = depth + 1
        self._pulled_ahead = 0
        self._pulls_done = False
        self._active, self._done = True, False
        self._closed_by: str | None = None
        finalizer = weakref.finalize(self, self._maker.close)
        finalizer.atexit = False  # at exit, the process's end releases everything

    def start(self) -> None:
        """Start making the first batches now when the context asks for it (with workers,
        as torch's workers start at ``iter()``). Called last in ``iter()``, once this
        iterator and the loader's record of it exist: an interrupt at any instant before
        leaves no thread, and one after leaves a thread this iterator's finaliser ends."""
        if self._maker.threaded and self._eager and self._at_first_next is None:
            self._start_making(limit=self._eager)

    def maker_stopper(self) -> weakref.WeakMethod:
        """A weak reference to this epoch's :meth:`Maker.stop` (end its maker thread and wait
        for it), alive while the maker may still run even when this iterator is gone."""
        return weakref.WeakMethod(self._maker.stop)

    @property
    def decoder(self) -> Any:
        """The decoder this epoch uses (None once it is closed)."""
        return self._maker.decoder

    def __iter__(self) -> EpochIterator:
        return self

    def __len__(self) -> int:
        return self._length()

    @property
    def running(self) -> bool:
        """Whether this epoch may still yield (not ended or closed)."""
        return self._active and not self._done

    def close(self, by: str = "its close()") -> None:
        """End this epoch now (idempotent): the next ``next()`` raises, saying it was
        closed ``by``; its decoder (closed here when it is its own), its queued batches and
        its threads are let go."""
        if self._active and not self._done:
            self._closed_by = by
        self._active = False
        self._maker.close()

    def __next__(self) -> list[Any]:
        if self._done:
            raise StopIteration
        if self._pid != os.getpid():
            raise RuntimeError("this DataLoader iterator was made before os.fork(): its "
                               "decoder runs in the parent process; call iter(loader) in "
                               "this process for an epoch of its own")
        if not self._active:
            raise RuntimeError(f"this DataLoader iterator was closed by {self._closed_by}; "
                               "call iter(loader) for a new epoch (after loader.close(), it "
                               "builds the DALI graph again)")
        if self._at_first_next is not None:  # torch's RandomSampler draws at its first index
            draw, self._at_first_next = self._at_first_next, None
            draw()
        while True:
            outcome = self._next_outcome()
            if outcome.pulled:
                self._epoch.mark_yielded()
            if isinstance(outcome, Failed):
                # A frame raising an exception that one of its locals names forms a cycle
                # (the traceback holds the frame): only the garbage collector would then free
                # the loader, its graph and threads. Each raise of a kept exception here lets
                # go of its locals as the exception leaves.
                error, outcome = outcome.error, None
                try:
                    raise error
                finally:
                    error = None  # noqa: F841
            if isinstance(outcome, Empty):
                self.record.note([])
                return (self._collate_fn or default_collate)([])
            if isinstance(outcome, Made):
                self.record.note(outcome.indices)
                return self._stage.finish(outcome.prepared())  # a custom collate: here
            # Skipped: every sample of the batch was skipped; on to the next one

    def _next_outcome(self) -> Outcome:
        """The oldest batch's outcome, in order (pulling batches ahead for the maker); at the
        end, finish the epoch and raise StopIteration, or the maker's own failure."""
        maker = self._maker
        while True:
            if maker.threaded:
                self._start_making()
            outcome = maker.next_outcome()
            if outcome is not None:
                break
            # the maker made every batch pulled so far while this count says some are
            # ahead (a batch can end in no outcome of its own): pull again, never wait
            self._pulled_ahead = 0
        if not isinstance(outcome, End):
            if maker.threaded:
                self._pulled_ahead -= outcome.pulled
            return outcome
        self._finish()
        if outcome.failure is not None:  # raised once; the epoch ends with its maker
            failure, outcome = outcome.failure, None
            try:
                raise failure
            finally:  # as in __next__
                failure = None  # noqa: F841
        raise StopIteration

    def _start_making(self, limit: int | None = None) -> None:
        """Pull batches for the maker (no more than ``limit``) and start its thread if it is
        not running yet: at the first ``next()``, or at ``iter()`` with workers."""
        lead = self._lead if limit is None else min(self._lead, limit)
        while self._pulled_ahead < lead and not self._pulls_done:
            try:
                pulled = self._epoch.next()
            except Exception as err:  # the sampler raised: its error ends the epoch
                self._pulls_done = True
                self._maker.put(err)
                break
            if pulled is None:
                self._pulls_done = True
                self._maker.put(None)
                break
            self._pulled_ahead += 1
            self._maker.put(pulled)
        self._maker.start()

    def _finish(self) -> None:
        self._active = False
        self._done = True
        self._maker.finish()
        if self._order.current is self._epoch:
            self._order.finish_epoch()


# Makers whose thread may still run. At interpreter exit (a KeyboardInterrupt in the user's
# loop, say) each is stopped before DALI's atexit hook shuts the pipelines down under it: a
# maker still fetching would otherwise see its pipeline shut down, rebuild it, and leave
# DALI's hook a pipeline it did not know (its AssertionError, or a C++ abort).
_RUNNING: weakref.WeakSet = weakref.WeakSet()
_EXIT_JOIN_S = 5.0  # bound on each maker's last fetch at exit


def _stop_running_makers() -> None:
    for maker in list(_RUNNING):
        with maker._cond:
            maker._closed = maker._at_exit = True
            maker._cond.notify_all()
        thread = maker._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(_EXIT_JOIN_S)


class Maker:
    """Makes one epoch's batches into their outcomes, in order, with ``work`` (the batches
    in flight), and hands them out.

    ``pull=None``: threaded (the CPU). :meth:`start` runs the ``fastload-maker`` thread,
    which makes the batches the caller :meth:`put`, until the epoch is made or the maker
    is stopped; the caller takes their outcomes with :meth:`next_outcome`, waiting for
    each. Else ``pull()`` gives the next batch (the sampler's; None at its end) and
    :meth:`next_outcome` makes it on the caller's thread. ``_cond`` guards the hand-off:
    ``_pulled``, ``_outcomes``, ``_closed`` (the maker stops), ``_finished`` (its thread
    stopped) and ``_failure`` (a fault of fastload's own that ended it)."""

    def __init__(self, work: InFlight, source: Any,
                 pull: Callable[[], Pulled | None] | None) -> None:
        self._pid = os.getpid()
        self._work, self._source = work, source
        self.threaded = pull is None
        self._pull: Callable[[], Pulled | None] = pull or self._take
        self._over = False  # the epoch finished or was closed
        self._cond = threading.Condition()
        self._pulled: deque[Pulled | Exception | None] = deque()
        self._outcomes: deque[Outcome] = deque()
        self._closed = False
        self._finished = False
        self._failure: BaseException | None = None
        self._at_exit = False  # stopped as the interpreter began to exit
        self._thread: threading.Thread | None = None
        self._idle = False  # the maker thread waits for a pulled batch

    @property
    def decoder(self) -> Any:
        """The decoder the batches are made with (None once the epoch is closed)."""
        return self._work.decoder

    def put(self, pulled: Pulled | Exception | None) -> None:
        """Hand the maker thread the next batch the caller pulled (the sampler's exception,
        or None at its end)."""
        with self._cond:
            self._pulled.append(pulled)
            self._cond.notify_all()

    def start(self) -> None:
        """Start the maker thread unless it was started already (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fastload-maker",
                                            daemon=True)
            _RUNNING.add(self)
            at_interpreter_exit(_stop_running_makers)
            self._thread.start()

    def next_outcome(self) -> Outcome | End | None:
        """The oldest outcome not yet handed out: waited for (threaded), or made now; None
        when the maker thread has made every pulled batch and waits for the caller to pull."""
        if not self.threaded:
            outcome = self._work.make_one(self._pull)
            return End() if outcome is None else outcome
        with self._cond:
            while not self._outcomes and not self._finished:
                if self._idle and not self._pulled:
                    return None  # every pulled batch is made: the caller pulls more
                self._cond.wait()
            if self._outcomes:  # what was made before a failure is handed out first
                return self._outcomes.popleft()
            failure, self._failure = self._failure, None
        return End(failure)

    def stop(self) -> None:
        """End the maker thread, if any, and wait for it (idempotent; it may be in a
        fetch): the decoder is then the caller's again (a new epoch resets it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            try:
                thread.join()
            except RuntimeError:  # not started (an interrupt inside iter()): once it runs,
                pass  # it finds the hand-off closed and ends without touching the decoder

    def finish(self) -> None:
        """The epoch reached its end: stop, and let go of the threads (and of the decoder
        when it is the epoch's own)."""
        self._over = True
        self.stop()
        self._work.release()

    def close(self) -> None:
        """End the epoch now (idempotent; its iterator's close() and finaliser): as
        :meth:`finish`, and let go of the decoder and the batches in flight; an epoch closed
        before its end cancels the prefetches its set announced. A forked child's copy
        leaves the threads and locks, which are the parent's, as the fork found them (one
        may be held)."""
        abandoned, self._over = not self._over, True
        if self._pid != os.getpid():
            return
        self.stop()
        if abandoned:  # the shards it announced will not be read by it: stop fetching them
            call_set_hook(self._source, "cancel_prefetch")
        self._work.release()
        self._work.drop()

    def _take(self) -> Pulled | None:
        """(The maker thread) the next batch the caller put: ``NothingYet`` when it has put
        nothing more yet; the sampler's error raised."""
        with self._cond:
            if not self._pulled:
                raise NothingYet
            pulled = self._pulled.popleft()
        if isinstance(pulled, Exception):
            try:
                raise pulled
            finally:  # as in __next__
                pulled = None  # noqa: F841
        return pulled

    def _run(self) -> None:
        """The maker thread: make outcomes while the caller pulls batches, until the epoch
        is made or the maker is stopped; a fault of its own is kept for ``next_outcome``."""
        from fastload.utils.threads import one_omp_thread

        one_omp_thread()  # its torch ops (collate, labels) start no OpenMP team of their own
        failure = None
        try:
            while not self._closed:
                outcome = self._work.make_one(self._pull)
                if outcome is not None:
                    with self._cond:
                        self._outcomes.append(outcome)
                        self._cond.notify_all()
                elif self._work.done or not self._wait_for_work():
                    break  # the epoch is made, or the maker stopped
        except BaseException as err:  # a fault of fastload's own: raised in the caller's next()
            failure = err
        if failure is None and self._at_exit and not self._work.done:
            # a thread still iterating (a non-daemon one goes on after the main thread ends)
            # is told, rather than handed a short epoch as if it were whole
            failure = RuntimeError(
                "fastload.DataLoader: the interpreter began to exit (the main thread ended) "
                "while this epoch ran in another thread, so its remaining batches were not "
                "made; join() the thread that iterates before the main thread returns")
        with self._cond:
            self._finished, self._failure = True, failure
            self._cond.notify_all()

    def _wait_for_work(self) -> bool:
        """Block until the caller pulled a batch or the maker is stopped; whether to go on."""
        with self._cond:
            self._idle = True
            self._cond.notify_all()  # a caller waiting for an outcome pulls instead
            while not self._pulled and not self._closed:
                self._cond.wait()
            self._idle = False
            return not self._closed
