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

A fresh process is fastload's own, not the user's: it ignores Ctrl-C (the terminal sends
SIGINT to the whole foreground process group; the parent, on its KeyboardInterrupt, ends the
child at once, see :meth:`FreshProcess.stop`) and, on Linux, dies with its parent.
:func:`descendant_pids` and :func:`end_processes` are what the command line uses to leave no
process behind after an interrupt.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["FreshProcess", "FreshProcessError", "call_in_fresh_process", "default_context",
           "default_method", "descendant_pids", "end_processes", "interrupts_held", "owned_child"]

_POLL_S = 1.0  # how often a waiting parent checks that the child is still alive


class FreshProcessError(RuntimeError):
    """The function run in a fresh process failed; ``traceback`` is the child's, as text."""

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback_text


def owned_child() -> None:
    """In a process fastload started for its own work: ignore Ctrl-C (its parent stops it)
    and, on Linux, get SIGKILL when the parent dies, even by SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held back while the parent started it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    # a parent that died before the line above (killed just after the fork) sends nothing:
    # this child, reparented, ends now instead of waiting for work for ever
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)


def default_method() -> str:
    """The process's start method: the one set, else the platform's default, without fixing
    it as ``multiprocessing.get_start_method()`` and ``get_context()`` do (after them, the
    user's own ``set_start_method`` raises "context has already been set")."""
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])  # the first listed is the default


def default_context() -> multiprocessing.context.BaseContext:
    """The context of :func:`default_method`, leaving the process's start method unset."""
    return multiprocessing.get_context(default_method())


@contextlib.contextmanager
def interrupts_held(start_method: str | None = None) -> Iterator[None]:
    """Hold SIGINT back from this thread while it starts a child: the mask is inherited
    through fork and exec, so the child cannot be interrupted before :func:`owned_child`
    ignores it; a Ctrl-C meanwhile reaches this process when the mask is restored.

    ``start_method`` is that of the children started in the block (default: the platform's).
    For ``spawn`` and ``forkserver``, Python's resource tracker is started first: the first
    such child starts it, and starting it unblocks SIGINT in this thread on its way out
    (``multiprocessing.resource_tracker.ensure_running``), which let a Ctrl-C interrupt the
    child's own imports with a traceback of its own."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    method = start_method or default_method()
    if method in ("spawn", "forkserver"):
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _owned_main(target: Callable[..., None], *args: Any) -> None:
    owned_child()
    # A spawned child starts with its own start method as its default; a fresh process stands
    # for a user's `python script.py`, whose loaders start workers in the platform's default
    # (fork on Linux): under "spawn", a torch DataLoader measured here would import torch
    # again in every worker at every epoch.
    multiprocessing.set_start_method(None, force=True)
    target(*args)


def descendant_pids(pid: int | None = None) -> list[int]:
    """The pids of ``pid``'s (default: this process's) children, theirs, and so on, from
    ``/proc`` (empty where there is none); parents before their children."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def end_processes(pids: list[int], grace_s: float = 1.0) -> list[int]:
    """SIGTERM each of ``pids``, SIGKILL those still there after ``grace_s`` seconds; the
    pids that were still running after the SIGKILL's short wait (normally none)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    left = list(pids)
    for sig_deadline, final in ((deadline, False), (deadline + 1.0, True)):
        while left and time.monotonic() < sig_deadline:
            left = [pid for pid in left if _running(pid)]
            if left:
                time.sleep(0.02)
        if left and not final:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    return left


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reaps our own children that ended
    except ChildProcessError:  # not our child: look at its state
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


class FreshProcess:
    """``target(conn, *args)`` in a new process (``spawn`` start method unless ``context``
    is given), and the parent's end of its pipe."""

    def __init__(self, target: Callable[..., None], args: tuple = (), *, name: str,
                 context: Any = None) -> None:
        context = context or multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=_owned_main, args=(target, child, *args), name=name)
        unset = multiprocessing.get_start_method(allow_none=True) is None
        with interrupts_held(context.get_start_method()):
            self.proc.start()
        if unset:  # starting a spawned child fixes the default (CPython's spawn reads it)
            multiprocessing.set_start_method(None, force=True)
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
        """Wait up to ``wait_s`` seconds for the child to exit, then terminate it (at once
        when ``wait_s`` is 0: what an interrupted parent does)."""
        if wait_s > 0:
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
    except BaseException:  # Ctrl-C (the child ignores it) or the caller's own error
        proc.stop(wait_s=0)
        raise
    finally:
        proc.stop()
    if answer[0] != "result":
        raise FreshProcessError(f"{name} failed: {answer[1]}", answer[2] if len(answer) > 2 else "")
    return answer[1]
