"""Background shard fetches of one remote reader, in threads that never keep a process alive.

A :class:`Prefetcher` runs up to ``threads`` daemon threads of its own (not a
``concurrent.futures`` pool, whose threads the interpreter joins at exit: a prefetch
waiting on another process's download would keep a finished training script, or a torchrun
rank, from exiting). Its threads hold the reader only weakly: once the reader is closed or
garbage-collected (an iterator abandoned with ``break``, a ``--batches 3`` run ending),
the fetches not started are cancelled, the one under way is told to stop waiting for any
lock, and the threads end. An idle thread ends after ``IDLE_S``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["IDLE_S", "Prefetcher"]

IDLE_S = 5.0  # an idle prefetch thread ends after this


class Prefetcher:
    """A queue of ``fetch(owner, shard, cancelled)`` calls run in the background for
    ``owner`` (held weakly), at most ``threads`` at a time, in the order submitted."""

    def __init__(self, owner: object, fetch: Callable[[object, int, Callable[[], bool]], bool],
                 threads: int, name: str = "fastload-prefetch") -> None:
        self._owner = weakref.ref(owner)
        self._fetch = fetch
        self._threads = threads
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, Future]] = deque()
        self._running = 0  # threads alive
        self._idle = 0  # of which waiting for work
        self._closed = False
        self.pid = os.getpid()
        weakref.finalize(owner, self.close)

    def submit(self, shard: int) -> Future:
        """Queue a fetch of ``shard``; its Future holds ``fetch``'s result or error (cancelled
        once the prefetcher is closed before it starts)."""
        future: Future = Future()
        with self._cond:
            if self._closed:
                future.cancel()
                return future
            self._queue.append((shard, future))
            if self._idle == 0 and self._running < self._threads:
                self._running += 1
                threading.Thread(target=self._run, name=f"{self._name}_{self._running - 1}",
                                 daemon=True).start()
            self._cond.notify()
        return future

    def cancelled(self) -> bool:
        """Whether the prefetcher was closed (a fetch under way stops waiting for locks)."""
        return self._closed

    def close(self) -> None:
        """Cancel the fetches not started, tell the one under way to stop waiting, and let
        the threads end (not waited for: a download under way finishes into the cache)."""
        with self._cond:
            self._closed = True
            pending, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        for _, future in pending:
            future.cancel()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle += 1
                    woken = self._cond.wait(IDLE_S)
                    self._idle -= 1
                    if not woken and not self._queue:
                        break
                if self._closed or not self._queue:
                    self._running -= 1
                    return
                shard, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            owner = self._owner()
            if owner is None:
                future.set_result(False)
                continue
            try:
                future.set_result(self._fetch(owner, shard, self.cancelled))
            except BaseException as exc:  # noqa: BLE001 - handed to the Future's reader
                future.set_exception(exc)
            finally:
                del owner
