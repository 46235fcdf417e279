"""``iter(loader)`` may be interrupted at any instant, and the process forked at any moment
after it: a timer sweep across the first 100 ms of an epoch (its eager start with workers
included). After a caught ``KeyboardInterrupt`` the next ``iter()`` delivers a whole epoch
and no maker thread is left behind; a child forked at any moment gets a working loader.
The interrupts are real SIGINTs sent to the main thread by a thread of the test (the library
installs no signal handler; Python's default one raises ``KeyboardInterrupt``)."""

from __future__ import annotations

import gc
import os
import select
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torchvision.transforms as T
from hang_guard import wait_child, within
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
DELAYS = np.geomspace(0.00005, 0.1, 50)  # seconds after iter() starts: dense at its start
# A fork right after iter() returns finds the new maker thread starting (where it once
# entered an OpenMP region): ten forks at once, then later and later ones.
FORK_DELAYS = np.concatenate([np.zeros(10), np.geomspace(5e-5, 0.1, 40)])
LIMIT = 20.0  # seconds for one epoch or one child: far above a real one, far below a hang


@pytest.fixture()
def loader(synth_root, tmp_path):
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return fastload.DataLoader(ImageFolder(root, SMALL), batch_size=4, num_workers=2)


def epoch_indices(loader) -> list[int]:
    """One whole epoch's sample indices, under a watchdog."""
    return within(lambda: [i for _ in loader for i in loader.last_batch_indices],
                  LIMIT, "the epoch hung")[0]


def makers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fastload-maker"]


def test_an_interrupt_at_any_instant_of_iter_leaves_the_loader_usable(loader):
    others = set(makers())  # other tests' epochs, not this one's
    expected = epoch_indices(loader)
    assert expected == list(range(16))
    main = threading.main_thread().ident
    landed: list[str] = []  # where each interrupt came: inside iter(), the epoch, after it
    for delay in DELAYS:
        timer = threading.Thread(target=lambda d=delay: (time.sleep(d),
                                                         signal.pthread_kill(main, signal.SIGINT)))
        where = "iter"
        try:
            timer.start()
            it = iter(loader)
            where = "epoch"
            for _ in it:
                pass
            where = "after"
            timer.join()  # the interrupt lands inside this try, whenever it comes:
            for _ in range(1000):  # Python raises it at its next check, within this loop
                time.sleep(0.001)
        except KeyboardInterrupt:
            landed.append(where)
        timer.join()
        it = None  # noqa: F841 - the interrupted epoch is dropped, as a caller would
        assert epoch_indices(loader) == expected, (
            f"after an interrupt {delay * 1e3:.2f} ms in, inside {landed[-1] if landed else None}")
    gc.collect()
    deadline = time.monotonic() + LIMIT
    while set(makers()) - others and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(makers()) - others == set()


# CPython before 3.11.8 (and 3.12.0) can deadlock a forked child inside os.fork() itself,
# before any Python code runs there, when another thread was starting or ending at the fork
# (gh-112275: the runtime's HEAD_LOCK taken before it is reinitialised). A child that never
# reached its first line is that bug, whatever the libraries, and its fork is taken again.
INTERPRETER_FORK_DEADLOCK = ((3, 8) <= sys.version_info[:3] < (3, 11, 8)
                             or sys.version_info[:3] == (3, 12, 0))
STARTED = b"+"  # the child's first write: it got past os.fork()


def _child_epoch(loader, write_fd: int) -> None:
    """In the forked child: one epoch of ``loader``, its indices written to ``write_fd``."""
    code = 1
    try:
        os.write(write_fd, STARTED)
        seen = [i for _ in loader for i in loader.last_batch_indices]
        os.write(write_fd, ",".join(map(str, seen)).encode())
        code = 0
    finally:
        os._exit(code)


@pytest.mark.slow
def test_a_child_forked_at_any_moment_after_iter_gets_a_working_loader(loader):
    expected = ",".join(map(str, epoch_indices(loader)))
    for delay in FORK_DELAYS:
        code, got = None, ""
        for _ in range(3):  # the interpreter's own deadlock at fork (above): fork again
            it = iter(loader)  # its maker starts at once (num_workers=2)
            if delay:
                time.sleep(delay)
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child_epoch(loader, write_fd)
            os.close(write_fd)
            started = select.select([read_fd], [], [], 5.0)[0]
            if not started and INTERPRETER_FORK_DEADLOCK:
                wait_child(pid, 0.0)  # killed: it never left os.fork()
                os.close(read_fd)
                assert [i for _ in it for i in loader.last_batch_indices] == list(range(16))
                continue
            code = wait_child(pid, LIMIT)
            with os.fdopen(read_fd, "rb") as f:
                got = f.read().decode().removeprefix(STARTED.decode())
            break
        assert code is not None, f"the child forked {delay * 1e3:.1f} ms after iter() hung"
        assert (code, got) == (0, expected), f"the child forked {delay * 1e3:.1f} ms after iter()"
        assert [i for _ in it for i in loader.last_batch_indices] == list(range(16))
