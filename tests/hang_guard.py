"""Watchdogs for tests of code that could hang (not a test module): a call run in a daemon
thread, so that a hang fails the test instead of blocking pytest's exit, and a forked child
waited for with a deadline."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest


def within(fn: Callable[[], Any], limit: float, hung: str = "the call hung") -> tuple[Any, float]:
    """``fn()``'s result (its exception is raised here) and the seconds it took; fails the
    test with ``hung`` when it does not finish within ``limit`` seconds."""
    box: dict = {}

    def run() -> None:
        start = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err
        box["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        pytest.fail(f"{hung}: not over within {limit:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"], box["seconds"]


def wait_child(pid: int, limit: float) -> int | None:
    """The forked child's exit code, or None (after killing it) when it runs past ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None
