"""Files a module fixture builds once per test session, shared by the pytest-xdist workers
(not a test module). Without it, each worker that runs a test of the module builds them
again, and two builds that write the same place (the sdist of the tree) can collide."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], None]) -> Path:
    """The folder ``name`` after ``build(folder)`` ran in it once for the whole session.

    The first worker to ask builds while holding a lock; the others wait for it and reuse
    its folder. A build that fails (an error or a skip) leaves no folder, so the next
    worker to ask tries again and reports its own outcome."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    folder, done = base / name, base / f"{name}.built"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
