"""The maker thread of a CPU epoch and what it shares with the caller's ``next()``.

The caller pulls batches of indices from the sampler (on its own thread, as torch's loader
iterates its sampler) and ``put``s them; the maker ``take``s them, reads, decodes and
resamples them, and appends their outcomes for ``next()`` to hand out. ``Handoff.cond``
guards both ends; closing it ends the maker after the batch it is making.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["Handoff", "NothingYet", "run_maker"]


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
    from fastload.pipelines.torch_resample import one_omp_thread

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
