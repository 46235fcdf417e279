"""The one fresh-process runner: a function in a newly spawned Python process, over a pipe.

A fresh process is how fastload measures a configuration on its own: its imports, threads,
caches and peak memory (``ru_maxrss`` and RSS never go down within a process) are its own.
Both ``fastload bench`` (one long-lived process per row, asked for epoch after epoch) and the
fine-tuning A/B table (one process per row, one call each) use it.

Protocol: ``target(conn, *args)`` runs in the child with its end of a ``multiprocessing``
pipe; each message is a tuple whose first item names it. A child that raises should answer
``("error", message, traceback)`` (:func:`call_in_fresh_process` does). The parent's
:meth:`FreshProcess.answer` turns a child that died or went silent into such an error tuple,
so the parent never hangs on a dead child.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["FreshProcess", "FreshProcessError", "call_in_fresh_process"]

_POLL_S = 1.0  # how often a waiting parent checks that the child is still alive


class FreshProcessError(RuntimeError):
    """The function run in a fresh process failed; ``traceback`` is the child's, as text."""

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback_text


class FreshProcess:
    """``target(conn, *args)`` in a new process (``spawn`` start method unless ``context``
    is given), and the parent's end of its pipe."""

    def __init__(self, target: Callable[..., None], args: tuple = (), *, name: str,
                 context: Any = None) -> None:
        context = context or multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=target, args=(child, *args), name=name)
        self.proc.start()
        child.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, message: Any, timeout_s: float) -> tuple:
        """Send ``message`` and wait for the answer (see :meth:`answer`)."""
        self.conn.send(message)
        return self.answer(timeout_s)

    def answer(self, timeout_s: float) -> tuple:
        """The child's next message, or ``("error", why, "")`` when it exited or sent nothing
        within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while not self.conn.poll(_POLL_S):
            if not self.proc.is_alive():
                return ("error", f"the process exited with code {self.proc.exitcode}", "")
            if time.monotonic() > deadline:
                return ("error", f"no answer within {timeout_s:.0f} s", "")
        try:
            return self.conn.recv()
        except EOFError:
            return ("error", f"the process exited with code {self.proc.exitcode}", "")

    def stop(self, wait_s: float = 30.0) -> None:
        """Wait up to ``wait_s`` seconds for the child to exit, then terminate it."""
        self.proc.join(timeout=wait_s)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)
        self.conn.close()


def _call_main(conn, fn: Callable[..., Any], args: tuple) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:  # report anything, the parent raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        conn.send(("result", result))


def call_in_fresh_process(fn: Callable[..., Any], *args: Any, name: str = "fastload-fresh",
                          timeout_s: float = 7 * 24 * 3600.0,
                          on_start: Callable[[int], Any] | None = None) -> Any:
    """``fn(*args)`` in a new spawned process; its (picklable) result, or
    :class:`FreshProcessError` with the child's message and traceback. ``fn`` must be
    importable by name (a module-level function). ``on_start(pid)``, if given, is called
    with the child's pid once it has started (e.g. to sample its memory)."""
    proc = FreshProcess(_call_main, (fn, args), name=name)
    try:
        if on_start is not None:
            on_start(proc.pid)
        answer = proc.answer(timeout_s)
    finally:
        proc.stop()
    if answer[0] != "result":
        raise FreshProcessError(f"{name} failed: {answer[1]}", answer[2] if len(answer) > 2 else "")
    return answer[1]
