"""The process-wide state an engine fastload starts may change, put back once it is stopped.

``convert_folder(..., engine="spark" | "ray" | "dask")`` starts a local Spark session, Ray or
Dask cluster where the caller has none, and stops it at the end. Starting one changes the
caller's process and stopping it gives nothing back: pyspark installs a SIGINT handler
that, once its context is stopped, raises ``AttributeError`` at Ctrl-C; Ray a SIGTERM
handler, ``faulthandler`` and ``PYTHONBREAKPOINT``; a Dask local cluster
``OMP_NUM_THREADS=1`` for every process the caller starts later. Import-time effects are
not undone (take the snapshot after the import): the engine stays imported and may need
them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["process_state_restored"]

_HOOKS = ("excepthook", "displayhook", "breakpointhook", "unraisablehook")


@contextlib.contextmanager
def process_state_restored() -> Iterator[None]:
    """Put back, on leaving, what was changed inside: environment variables, ``sys.path``,
    Python-level signal handlers, ``sys``'s and ``threading``'s hooks, whether
    ``faulthandler`` is on, the open-files soft limit, and the handlers, level and
    propagation of every logger that existed before."""
    environ = dict(os.environ)
    path = list(sys.path)
    handlers = _signal_handlers()
    hooks = {name: getattr(sys, name) for name in _HOOKS}
    thread_hook = threading.excepthook
    faults_on = faulthandler.is_enabled()
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)
    loggers = {logger: _logger_state(logger) for logger in _loggers()}
    try:
        yield
    finally:
        _restore_environ(environ)
        if sys.path != path:
            sys.path[:] = path
        _restore_signal_handlers(handlers)
        for name, hook in hooks.items():
            if getattr(sys, name) is not hook:
                setattr(sys, name, hook)
        if threading.excepthook is not thread_hook:
            threading.excepthook = thread_hook
        if faulthandler.is_enabled() and not faults_on:
            faulthandler.disable()
        _restore_open_files(open_files)
        for logger, state in loggers.items():
            if _logger_state(logger) != state:
                logger.handlers[:] = state[0]
                logger.setLevel(state[1])
                logger.propagate, logger.disabled = state[2], state[3]


def _signal_handlers() -> dict[signal.Signals, object]:
    handlers = {}
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if handler is not None:  # None: a handler not set from Python, which we cannot set
            handlers[signum] = handler
    return handlers


def _restore_signal_handlers(handlers: dict[signal.Signals, object]) -> None:
    for signum, handler in handlers.items():
        try:
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        except (OSError, ValueError):  # not the main thread: no handler could have changed
            pass


def _restore_environ(environ: dict[str, str]) -> None:
    for key in [key for key in os.environ if key not in environ]:
        del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _restore_open_files(limits: tuple[int, int]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != limits[0] and (hard == resource.RLIM_INFINITY or limits[0] <= hard):
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limits[0], hard))


def _loggers() -> list[logging.Logger]:
    known = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger()] + [logger for logger in known
                                    if isinstance(logger, logging.Logger)]


def _logger_state(logger: logging.Logger) -> tuple:
    return (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
