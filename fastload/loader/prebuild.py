"""The loader's first DALI graph, built in a background thread from its constructor.

Building the graph (and importing DALI) costs 1-2.5 s on a CPU; ``iter()`` used to pay it
before the first batch. :class:`Prebuild` starts that build in one daemon thread
(``fastload-prebuild``) when the constructor knows the plan, and ``iter()`` joins it, so a
user's setup between the two (a model, an optimizer) hides it.

Rules the thread keeps:

* it only constructs a ``BatchDecoder`` (importing ``fastload.pipelines`` and DALI): it
  draws from no global random generator (DALI's own seed is drawn in C++) and touches no
  loader state; its result is handed over under a lock;
* a failed build is forgotten: ``iter()`` then builds the graph as it always did, so its
  error surfaces there, the same exception from the same call;
* ``close()`` (or the loader's collection) abandons it: a graph built by then is closed at
  once, one still being built is closed by the thread when it is done;
* a fork waits (at most ``FORK_WAIT_S``) for builds under way, so that a child never
  inherits DALI's locks half-taken; the child never uses the parent's graph (it is kept
  alive, untouched, as every inherited decoder is) and builds its own at its ``iter()``;
* the interpreter's exit waits (at most ``EXIT_WAIT_S``) for a build under way, before
  DALI's own exit hook runs.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from fastload.utils.threads import at_interpreter_exit

__all__ = ["EXIT_WAIT_S", "FORK_WAIT_S", "Prebuild"]

FORK_WAIT_S = 60.0  # the longest a fork waits for a graph being built
EXIT_WAIT_S = 60.0  # the longest the interpreter's exit waits for one

_UNDER_WAY: weakref.WeakSet = weakref.WeakSet()  # the builds of this process
_HOOKS = threading.Lock()
_hooked = False


def _wait_all(timeout: float) -> None:
    """Wait for this process's builds under way, ``timeout`` seconds at most in all."""
    import time

    deadline = time.monotonic() + timeout
    for build in list(_UNDER_WAY):
        if build.pid == os.getpid() and build._thread is not threading.current_thread():
            build._thread.join(max(0.0, deadline - time.monotonic()))


def _before_fork() -> None:
    _wait_all(FORK_WAIT_S)


def _at_exit() -> None:
    _wait_all(EXIT_WAIT_S)


def _hook_once() -> None:
    global _hooked
    with _HOOKS:
        if _hooked:
            return
        _hooked = True
    os.register_at_fork(before=_before_fork)
    at_interpreter_exit(_at_exit)


class Prebuild:
    """One decoder built in a daemon thread (module docstring).

    Args:
        make: builds the decoder (a ``BatchDecoder(...)`` call); it must hold no reference
            to the loader.
        key: what the decoder was built for; :meth:`take` hands it over only for an equal key.
    """

    def __init__(self, make: Callable[[], Any], key: tuple) -> None:
        _hook_once()
        self.key = key
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._decoder: Any = None
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, args=(make,),
                                        name="fastload-prebuild", daemon=True)
        _UNDER_WAY.add(self)
        self._thread.start()

    def _run(self, make: Callable[[], Any]) -> None:
        try:
            decoder = make()
        except BaseException:  # noqa: BLE001 - iter() builds again and raises it there
            return
        with self._lock:
            if not self._abandoned:
                self._decoder = decoder
                return
        decoder.close()  # abandoned while it was built

    def take(self, key: tuple) -> Any:
        """Wait for the build; the decoder if it succeeded for ``key`` in this process, else
        None (the caller builds one as before). The build is done with either way."""
        if self.pid != os.getpid():  # a forked child: the parent's graph is not usable here
            return None
        self._thread.join()
        with self._lock:
            decoder, self._decoder, self._abandoned = self._decoder, None, True
        if decoder is not None and key != self.key:
            decoder.close()
            return None
        return decoder

    def abandon(self) -> None:
        """Give up the build without waiting for it: a graph built already is closed now,
        one under way by its thread when it is done. Idempotent; nothing in a forked child."""
        if self.pid != os.getpid():
            return
        with self._lock:
            decoder, self._decoder, self._abandoned = self._decoder, None, True
        if decoder is not None:
            decoder.close()

    @property
    def running(self) -> bool:
        """Whether the thread is still building."""
        return self._thread.is_alive()
