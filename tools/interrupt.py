"""Ctrl-C for the ``fastload`` program: one line, rc 130, no traceback, no process left.

The library installs no signal handler (it shares its user's process); the command line is
the program, so it may. On the first KeyboardInterrupt :func:`end_interrupted` ignores any
further Ctrl-C (a second press must not raise inside the clean-up), ends every process this
one started (their children too: pools, fresh row processes, loader workers), flushes
stdout and stderr, and leaves with :data:`EXIT_INTERRUPTED` through ``os._exit``: the
interpreter's own exit would run the atexit hooks of the libraries underneath, which
join worker pools (a hang when a worker is gone) and shut down DALI pipelines a thread may
still be using (DALI's ``AssertionError`` at exit).

Only a first press outside an import raises KeyboardInterrupt. A press during an import, a
second press, and a first press the program has not ended on within :data:`ENDS_WITHIN_S`
end the command at once: an extension module's initialisation may swallow the
KeyboardInterrupt (``torch._C`` imports numpy and goes on without it when that import fails,
so ``fastload bench`` ran on for minutes), and one raised where C++ code may not throw aborts
the process ("terminate called", rc -6, seen once after a second press).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from fastload.utils.process import descendant_pids, end_processes

__all__ = ["ENDS_WITHIN_S", "EXIT_INTERRUPTED", "ctrl_c_ends", "end_interrupted"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program Ctrl-C ended
ENDS_WITHIN_S = 5.0  # a command still running this long after its Ctrl-C is ended at once


def end_interrupted(command: str | None, note: str | None = None, *, say: bool = True) -> None:
    """Say ``fastload COMMAND: interrupted`` (and ``note``; not with ``say=False``, for a
    command that said it already) on stderr, end this process's descendants and exit with
    status 130. Never returns; it may run in the SIGINT handler or in another thread."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: the pending interrupt is all there is
        pass
    try:
        left = end_processes(descendant_pids(), grace_s=1.0)
        name = f"fastload {command}" if command else "fastload"
        line = f"{name}: interrupted" + (f"; {note}" if note else "")
        if left:
            line += f" (processes {', '.join(map(str, left))} did not end)"
        if say or left:
            print(line, file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            # a closed pipe or stream, or (RuntimeError) a handler that interrupted a write
            # to it: nothing more to say
            except (OSError, ValueError, RuntimeError):
                pass
        os._exit(EXIT_INTERRUPTED)


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (a frame of importlib's bootstrap under it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def ctrl_c_ends(command: Callable[[], str | None]) -> Iterator[Callable[[], bool]]:
    """Record the Ctrl-C presses while the block runs; yields ``pressed()``, whether any came.

    Python's own SIGINT handler is replaced by one that records the press and, for a first
    press outside an import, raises KeyboardInterrupt, so that the program can end as
    interrupted whatever the KeyboardInterrupt became on its way up: caught by a library and
    turned into another error, or landed where Python cannot raise it (a weakref callback
    or ``__del__``: that ends the command at once, see ``sys.unraisablehook``). A press
    during an import, a second press, and a first press not ended on within
    :data:`ENDS_WITHIN_S` end the command at once (the module docstring says why). A SIGINT
    that was ignored (a shell's background job) stays ignored; both hooks are put back after
    the block. ``command()`` names the command."""
    presses: list[int] = []
    watchdog = threading.Timer(ENDS_WITHIN_S, lambda: end_interrupted(command()))
    watchdog.daemon = True

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        presses.append(signum)
        if len(presses) > 1 or _importing(frame):
            end_interrupted(command())
        watchdog.start()
        raise KeyboardInterrupt

    def on_unraisable(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            end_interrupted(command())
        previous_hook(unraisable)

    previous_hook = sys.unraisablehook
    previous_handler = signal.getsignal(signal.SIGINT)
    install = previous_handler is signal.default_int_handler
    if install:
        try:
            signal.signal(signal.SIGINT, on_sigint)
        except ValueError:  # not the main thread: Python's handler, which is the main's
            install = False
    sys.unraisablehook = on_unraisable
    try:
        yield lambda: bool(presses)
    finally:
        watchdog.cancel()
        sys.unraisablehook = previous_hook
        if install:
            signal.signal(signal.SIGINT, previous_handler)
