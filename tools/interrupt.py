"""Ctrl-C for the ``fastload`` program: one line, rc 130, no traceback, no process left.

The library installs no signal handler (it shares its user's process); the command line is
the program, so it may. On the first KeyboardInterrupt :func:`end_interrupted` ignores any
further Ctrl-C (a second press must not raise inside the clean-up), ends every process this
one started (their children too: pools, fresh row processes, loader workers), flushes
stdout and stderr, and leaves with :data:`EXIT_INTERRUPTED` through ``os._exit``: the
interpreter's own exit would run the atexit hooks of the libraries underneath, which
join worker pools (a hang when a worker is gone) and shut down DALI pipelines a thread may
still be using (DALI's ``AssertionError`` at exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

__all__ = ["EXIT_INTERRUPTED", "ctrl_c_ends", "end_interrupted"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program Ctrl-C ended


def end_interrupted(command: str | None, note: str | None = None, *, say: bool = True) -> None:
    """Say ``fastload COMMAND: interrupted`` (and ``note``; not with ``say=False``, for a
    command that said it already) on stderr, end this process's descendants and exit with
    status 130. Never returns."""
    from fastload.utils.process import descendant_pids, end_processes

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
            except (OSError, ValueError):  # a closed pipe or stream: nothing more to say
                pass
        os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def ctrl_c_ends(command: Callable[[], str | None]) -> Iterator[Callable[[], bool]]:
    """Record the Ctrl-C presses while the block runs; yields ``pressed()``, whether any came.

    Python's own SIGINT handler is replaced by one that does what it does (raise
    KeyboardInterrupt) and records the press, so that the program can end as interrupted
    whatever the KeyboardInterrupt became on its way up: caught by a library inside an
    import and turned into another error (a module left half imported fails at its next
    use), or landed where Python cannot raise it (a weakref callback or ``__del__``, such
    as importlib's module-lock clean-up: the latter ends the command at once, see
    ``sys.unraisablehook``). A SIGINT that was ignored (a shell's background job) stays
    ignored; both hooks are put back after the block. ``command()`` names the command."""
    presses: list[int] = []

    def on_sigint(signum, frame) -> None:
        presses.append(signum)
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
        sys.unraisablehook = previous_hook
        if install:
            signal.signal(signal.SIGINT, previous_handler)
