"""The maker thread of a CPU epoch and what it shares with the caller's ``next()``.

The caller pulls batches of indices from the sampler (on its own thread, as torch's loader
iterates its sampler) and ``put``s them; the maker ``take``s them, reads, decodes and
resamples them, and appends their outcomes for ``next()`` to hand out. ``Handoff.cond``
guards both ends; closing it ends the maker after the batch it is making. ``MakerHandoff``
is the part of the epoch's core that uses them: its ``next()`` with a maker, its pulls and
its outcomes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["Handoff", "MakerHandoff", "NothingYet", "run_maker"]


class NothingYet(Exception):
    """The maker has made every batch the caller has pulled so far."""


class Handoff:
    """What the caller and an iterator's maker thread share, under ``cond``: the batches the
    caller pulled (``put``, ``take``), the end (``close``), the maker's own failure."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pulled: deque[Any] = deque()
        self.closed = False  # the iterator ended, was closed or collected: the maker stops
        self.finished = False  # the maker stopped: nothing more comes into the outcomes
        self.failure: BaseException | None = None

    def put(self, pulled: Any) -> None:
        with self.cond:
            self.pulled.append(pulled)
            self.cond.notify_all()

    def take(self) -> Any:
        with self.cond:
            if not self.pulled:
                raise NothingYet
            return self.pulled.popleft()

    def wait_for_work(self) -> bool:
        """Block until the caller pulled a batch or the iterator ended; whether to go on."""
        with self.cond:
            while not self.pulled and not self.closed:
                self.cond.wait()
            return not self.closed

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def stop(self, failure: BaseException | None = None) -> None:
        with self.cond:
            self.finished = True
            self.failure = failure
            self.cond.notify_all()


def run_maker(make_one: Callable[[], bool], all_made: Callable[[], bool],
              handoff: Handoff) -> None:
    """The maker thread's body: ``make_one()`` (the oldest pulled batch's outcome; False when
    nothing pulled is left to make) while the caller pulls batches, until ``all_made()``
    (the epoch's end was pulled and made) or ``handoff`` is closed (which a dropped
    iterator does)."""
    from fastload.utils.threads import one_omp_thread

    one_omp_thread()  # its torch ops (collate, labels) start no OpenMP team of their own
    failure = None
    try:
        while not handoff.closed:
            made = make_one()
            if not made and all_made():
                break  # the epoch is made
            if not made and not handoff.wait_for_work():
                break
    except BaseException as err:  # a fault of fastload's own: raised in the caller's next()
        failure = err
    handoff.stop(failure)


class MakerHandoff:
    """A part of the epoch's core (as ``DamageRecovery`` is): its ``next()`` when a maker
    thread makes the batches, and the two ends of its ``Handoff`` (``_handoff``; None on a
    GPU, where ``next()`` makes each batch itself).

    The core that mixes it in has ``_handoff``, ``_maker``, ``_epoch``, ``_out``, ``_queue``,
    ``_lead``, ``_pulled_ahead``, ``_pulls_done``, ``_exhausted``, ``_make_one``,
    ``_pop_outcome`` and ``_finish``."""

    def _next_made_ahead(self) -> list[Any]:
        """``next()`` with a maker thread: pull indices ahead, hand out the oldest outcome."""
        handoff = self._handoff
        self._start_making()
        with handoff.cond:
            while not self._out and not handoff.finished:
                handoff.cond.wait()
            failure = None
            if self._out:  # what was made before a failure is handed out first
                finished = False
                self._pulled_ahead -= self._out[0][2]
            else:
                finished = True
                failure, handoff.failure = handoff.failure, None
        if finished:
            self._finish()
            if failure is not None:  # raised once; the epoch ends with its maker
                raise failure
            raise StopIteration
        return self._pop_outcome()

    def _start_making(self, limit: int | None = None) -> None:
        """Pull indices ahead (no more than ``limit`` batches) and start the maker thread if
        it is not running yet: at the first ``next()``, or at ``iter()`` with workers (as
        torch's workers start there)."""
        self._pull_ahead(limit)
        if self._maker is None:
            self._maker = threading.Thread(
                target=run_maker, name="fastload-maker", daemon=True,
                args=(self._make_one, lambda: self._exhausted and not self._queue,
                      self._handoff))
            self._maker.start()

    def _pull_ahead(self, limit: int | None = None) -> None:
        """Pull batches from the epoch (on the caller's thread, where torch's loader iterates
        its sampler) until ``_lead`` (or ``limit``) are pulled and not yet handed out; the
        maker makes them."""
        handoff = self._handoff
        lead = self._lead if limit is None else min(self._lead, limit)
        while self._pulled_ahead < lead and not self._pulls_done:
            try:
                pulled = self._epoch.next()
            except Exception as err:  # the sampler raised: its error ends the epoch
                self._pulls_done = True
                handoff.put(("error", err))
                break
            if pulled is None:
                self._pulls_done = True
                handoff.put(None)
                break
            self._pulled_ahead += 1
            handoff.put(pulled)

    def _pull(self) -> tuple[int, list[int]] | None:
        """The next batch of the epoch: from the sampler (in ``next()``), or what the caller
        pulled for the maker (``NothingYet`` when it has pulled nothing more yet)."""
        if self._handoff is None:
            return self._epoch.next()
        pulled = self._handoff.take()
        if isinstance(pulled, tuple) and pulled[0] == "error":
            raise pulled[1]
        return pulled

    def _emit(self, outcome: tuple[str, Any, bool]) -> None:
        handoff = self._handoff
        if handoff is None:
            self._out.append(outcome)
            return
        with handoff.cond:
            self._out.append(outcome)
            handoff.cond.notify_all()

    def _stop_maker(self) -> None:
        """End the maker thread and wait for it (it may be in a fetch): the decoder is then
        the caller's again (a new epoch resets it)."""
        if self._handoff is not None:
            self._handoff.close()
        maker = self._maker
        if maker is not None and maker is not threading.current_thread():
            try:
                maker.join()
            except RuntimeError:  # not started (an interrupt inside iter()): once it runs, it
                pass  # finds the handoff closed and ends without touching the decoder
