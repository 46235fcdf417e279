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

__all__ = ["EXIT_INTERRUPTED", "end_interrupted", "interrupts_in_callbacks_end"]

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
def interrupts_in_callbacks_end(command: Callable[[], str | None]) -> Iterator[None]:
    """While the block runs, a KeyboardInterrupt Python cannot raise (one that lands in a
    weakref callback or a ``__del__``, such as importlib's module-lock clean-up during an
    import) ends the command as a raised one does, instead of a printed traceback and a run
    that goes on as if the key had not been pressed. ``command()`` names the command."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            end_interrupted(command())
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
