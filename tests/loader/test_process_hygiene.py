"""fastload shares its user's process: file descriptor 2 stays the user's (never redirected,
usable when closed), a forked child iterates a loader the parent used, the suffix's worker
processes are not forked from the training process, and nothing is printed at exit."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torchvision.transforms as T
import torchvision.transforms.v2 as v2
from hang_guard import wait_child
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
LIMIT = 60.0  # seconds: far above an epoch of 16 small images, far below a hang


@pytest.fixture()
def folder(synth_root, tmp_path):
    root = tmp_path / "val"
    shutil.copytree(synth_root / "val", root)
    return root


def _fd2() -> tuple[int, int]:
    st = os.fstat(2)
    return st.st_dev, st.st_ino


def _wait_child(pid: int, limit: float = LIMIT) -> int:
    """The forked child's exit code; fails the test when it hangs."""
    code = wait_child(pid, limit)
    if code is None:
        pytest.fail(f"the forked child hung: not finished within {limit:.0f} s")
    return code


def _run_script(code: str, *args: str, shell_suffix: str = "") -> subprocess.CompletedProcess:
    script = textwrap.dedent(code)
    command = [sys.executable, "-c", script, *args]
    if shell_suffix:  # e.g. "2>&-": the script runs with its fd 2 closed
        quoted = " ".join(_quote(c) for c in command)
        return subprocess.run(["bash", "-c", f"{quoted} {shell_suffix}"], capture_output=True,
                              text=True, timeout=300)
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


# ------------------------------------------------------------------------- fd 2
def test_fd_2_is_the_same_file_during_and_after_an_epoch(folder):
    before = _fd2()
    seen = []
    for _ in fastload.DataLoader(ImageFolder(folder, SMALL), batch_size=4):
        seen.append(_fd2())
    assert seen == [before] * 4 and _fd2() == before


def test_a_redirection_of_fd_2_made_mid_epoch_stays_through_the_next_epoch(folder, tmp_path):
    loader = fastload.DataLoader(ImageFolder(folder, SMALL), batch_size=4)
    log = tmp_path / "stderr.log"
    saved = os.dup(2)
    try:
        it = iter(loader)
        next(it)
        with open(log, "wb") as f:  # as logging or a test runner redirects stderr
            os.dup2(f.fileno(), 2)
        redirected = _fd2()
        seen = [_fd2() for _ in it] + [_fd2() for _ in loader]
        os.write(2, b"after two epochs\n")
        seen.append(_fd2())
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert seen == [redirected] * 8
    assert log.read_bytes() == b"after two epochs\n"


def test_a_file_opened_after_an_epoch_with_a_fork_in_it_holds_only_what_was_written(
        folder, tmp_path):
    """A child forked mid-epoch keeps writing to its stderr; the parent finishes the epoch,
    then opens a file of its own: no line of the child's lands in it."""
    loader = fastload.DataLoader(ImageFolder(folder, SMALL), batch_size=4)
    it = iter(loader)
    next(it)
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a line on its stderr every 10 ms until told to stop
        try:
            os.close(stop_w)
            os.set_blocking(stop_r, False)
            for _ in range(1000):
                os.write(2, b"a line from the child's stderr\n")
                try:
                    if os.read(stop_r, 1) == b"":
                        break
                except BlockingIOError:
                    pass
                time.sleep(0.01)
        finally:
            os._exit(0)
    os.close(stop_r)
    try:
        for _ in it:
            pass
        path = tmp_path / "user.bin"
        payload = b"exactly these bytes\n" * 50
        with open(path, "wb", buffering=0) as f:
            f.write(payload)
            time.sleep(0.3)  # the child goes on writing meanwhile
            f.write(payload)
    finally:
        os.close(stop_w)
        _wait_child(pid)
    assert path.read_bytes() == payload * 2


@pytest.mark.slow
def test_iterating_works_with_stderr_closed(folder):
    """``python train.py 2>&-``: the loader needs no fd 2."""
    done = _run_script("""
        import sys
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        import fastload
        transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
        loader = fastload.DataLoader(ImageFolder(sys.argv[1], transform), batch_size=4)
        print("batches", sum(1 for _ in loader), sum(1 for _ in loader))
    """, str(folder), shell_suffix="2>&-")
    assert done.returncode == 0 and done.stdout.strip() == "batches 4 4", done.stdout


# ------------------------------------------------------------------------- fork
def _count_batches(loader) -> list[int]:
    return [i for _ in loader for i in loader.last_batch_indices]


@pytest.mark.parametrize("kind", ["folder", "lmdb"])
def test_a_forked_child_iterating_the_loader_after_an_epoch_gets_every_batch(
        folder, synth_lmdb, kind):
    dataset = (ImageFolder(folder, SMALL) if kind == "folder"
               else fastload.LMDBDataset(synth_lmdb, transform=SMALL))
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2)
    expected = _count_batches(loader)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            seen = _count_batches(loader)
            os.write(write_fd, ",".join(map(str, seen)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    exit_code = _wait_child(pid)
    with os.fdopen(read_fd, "rb") as f:
        got = f.read().decode()
    assert exit_code == 0
    assert got == ",".join(map(str, expected))
    assert _count_batches(loader) == expected  # and the parent goes on


def _child_epoch(loader, queue) -> None:
    queue.put(_count_batches(loader))


def test_a_multiprocessing_fork_child_iterates_the_parents_loader(folder):
    loader = fastload.DataLoader(ImageFolder(folder, SMALL), batch_size=4, num_workers=2)
    expected = _count_batches(loader)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_epoch, args=(loader, queue))
    child.start()
    try:
        got = queue.get(timeout=LIMIT)
    finally:
        child.join(LIMIT)
        if child.is_alive():
            child.kill()
            child.join()
    assert got == expected and child.exitcode == 0


_FORKS: list[int] = []
_WATCHING: list[bool] = []


def _note_fork() -> None:
    if _WATCHING:
        _FORKS.append(os.getpid())


@pytest.mark.slow
def test_the_suffix_worker_processes_are_not_forked_from_the_training_process(synth_root):
    """A suffix whose draws are not replayed runs in worker processes; starting them
    must not fork this (multi-threaded) process."""
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.ElasticTransform(), v2.PILToTensor()])
    loader = fastload.DataLoader(ImageFolder(synth_root / "train", transform), batch_size=6,
                                 seed=4, num_workers=2)
    os.register_at_fork(before=_note_fork)
    _WATCHING.append(True)
    try:
        batches = sum(1 for _ in loader)  # batches 2 and 4 run in the processes
    finally:
        _WATCHING.clear()
    assert batches == 8 and loader._stage._times["processes"]
    assert _FORKS == []


# ------------------------------------------------------------------------- exit
@pytest.mark.slow
@pytest.mark.parametrize("first", ["", "import multiprocessing"])
def test_a_loader_alive_at_interpreter_exit_prints_nothing(folder, first):
    # with multiprocessing imported first, the graph outlived DALI's module at teardown
    done = _run_script(f"""
        {first}
        import sys
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        import fastload
        transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
        loader = fastload.DataLoader(ImageFolder(sys.argv[1], transform), batch_size=4)
        batch = next(iter(loader))
        print("got", tuple(batch[0].shape))
    """, str(folder))
    assert done.returncode == 0 and done.stdout.strip() == "got (4, 3, 16, 16)"
    assert done.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("workers, reuse", [(0, False), (2, True)])
def test_a_child_forked_after_an_epoch_exits_normally(folder, workers, reuse):
    # the child's exit shut down the pipelines it inherited: a hang (0), a crash (2)
    done = _run_script("""
        import os, sys, time
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        import fastload
        transform = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])
        loader = fastload.DataLoader(ImageFolder(sys.argv[1], transform), batch_size=4,
                                     num_workers=int(sys.argv[2]))
        for batch in loader:
            pass
        pid = os.fork()
        if pid == 0:
            if sys.argv[3] == "reuse":
                print("child", sum(len(labels) for _, labels in loader), flush=True)
            sys.exit(0)
        for _ in range(600):  # 60 s at most: a hung child is killed and said
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("child status", status)
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            print("child hung")
    """, str(folder), str(workers), "reuse" if reuse else "exit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "child status 0"
    assert ("child 16" in done.stdout) == reuse and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_suffix_process_pool_stops_the_multiprocessing_helpers_it_started(folder, tmp_path):
    (tmp_path / "noise.py").write_text(textwrap.dedent("""
        import torch
        class Noise:
            def __call__(self, x):
                return x + torch.rand(x.shape) / 100
    """))
    done = _run_script("""
        import gc, os, subprocess, sys, threading
        sys.path.insert(0, sys.argv[2])
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        import fastload, noise

        def children():
            ps = subprocess.run(["ps", "-ww", "--ppid", str(os.getpid()), "-o", "args="],
                                capture_output=True, text=True).stdout
            return sorted(line.split(" import ")[0].split()[-1] for line in ps.splitlines()
                          if "multiprocessing" in line)

        if __name__ == "__main__":
            transform = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor(), noise.Noise()])
            loader = fastload.DataLoader(ImageFolder(sys.argv[1], transform), batch_size=2,
                                         num_workers=2)
            for epoch in range(2):
                for batch in loader:
                    pass
            loader.close()
            del loader
            gc.collect()
            print(children(), sorted(t.name for t in threading.enumerate()))
    """, str(folder), str(tmp_path))
    assert done.returncode == 0, done.stderr
    # the resource tracker stays (it would unlink the process's semaphores if stopped)
    assert done.stdout.strip() == "['multiprocessing.resource_tracker'] ['MainThread']"


def test_the_threads_openmp_setting_starts_no_openmp_team():
    """``one_omp_thread`` (the maker's and the resample pool's first call) enters no OpenMP
    parallel region: a child forked while a parent's thread is inside one would wait for
    ever in the next region a new thread of its starts. A region would start OpenMP's team
    threads (alive while the thread that made them lives); none appear."""
    done = _run_script("""
        import os, threading
        import torch
        from fastload.utils.threads import one_omp_thread
        torch.set_num_threads(4)  # what a thread's first parallel op would team up with
        before = len(os.listdir("/proc/self/task"))
        counted = []

        def run():
            one_omp_thread()
            counted.append(len(os.listdir("/proc/self/task")) - before - 1)  # not itself

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        print(counted[0])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
