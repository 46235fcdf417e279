"""One loader used from several threads: each ``iter()`` is a whole epoch of its own, as with
torch's loader, and a ``state_dict()`` taken by another thread (a checkpointer) neither breaks
nor loses the epoch it describes."""

from __future__ import annotations

import threading
import time

import torch
import torchvision.transforms as T
from hang_guard import within
from torchvision.datasets import ImageFolder

import fastload

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


def test_two_threads_iterating_one_loader_at_once_each_get_whole_epochs(synth_root):
    dataset = ImageFolder(synth_root / "train", SMALL)
    loader = fastload.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
    rounds, counts, errors = 6, [], []
    barrier = threading.Barrier(2)

    def epochs():
        for _ in range(rounds):
            barrier.wait()  # both iter() calls at the same instant
            try:
                counts.append(sorted(int(y) for _, labels in loader for y in labels))
            except Exception as err:  # noqa: BLE001 - what the test reports
                errors.append(repr(err))

    threads = [threading.Thread(target=epochs) for _ in range(2)]

    def run():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    within(run, 120, "two threads' epochs hung")
    whole = sorted(dataset.targets)
    assert errors == [] and counts == [whole] * (2 * rounds)


class _SlowSampler(torch.utils.data.Sampler):
    """A sampler whose iterator takes a while per index (a state_dict() lands inside it)."""

    def __len__(self):
        return 48

    def __iter__(self):
        for i in range(48):
            time.sleep(0.0005)
            yield i


def test_a_state_dict_taken_by_another_thread_leaves_the_epoch_whole(synth_root):
    loader = fastload.DataLoader(ImageFolder(synth_root / "train", SMALL), batch_size=4,
                                 sampler=_SlowSampler())
    stop, states, errors = threading.Event(), [], []

    def checkpoint():
        while not stop.is_set():
            try:
                states.append(loader.state_dict())
            except Exception as err:  # noqa: BLE001 - what the test reports
                errors.append(repr(err))
            time.sleep(0.002)

    checkpointer = threading.Thread(target=checkpoint)
    checkpointer.start()
    try:
        seen = within(lambda: [[i for _ in loader for i in loader.last_batch_indices]
                               for _ in range(3)], 120, "the epochs hung")[0]
    finally:
        stop.set()
        checkpointer.join()
    assert seen == [list(range(48))] * 3 and errors == [] and states
    for state in states:  # what each state says is left is a tail of the epoch
        if state["remaining"] is not None:
            rest = state["remaining"]["indices"].tolist()
            assert rest == list(range(48 - len(rest), 48))


def test_a_thread_still_iterating_when_the_main_thread_ends_is_told_not_handed_short_epochs(
        synth_root):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys, threading, time
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        import fastload

        dataset = ImageFolder(sys.argv[1], T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))

        def train():
            loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2)
            for epoch in range(3):
                count = 0
                for _, labels in loader:
                    count += len(labels)
                    time.sleep(0.05)
                print("epoch", epoch, count, flush=True)

        threading.Thread(target=train).start()
        time.sleep(0.5)  # the main thread returns while the training thread runs
    """)
    done = subprocess.run([sys.executable, "-c", script, str(synth_root / "train")],
                          capture_output=True, text=True, timeout=120)
    epochs = [line.split() for line in done.stdout.splitlines() if line.startswith("epoch")]
    assert all(count == "48" for _, _, count in epochs), done.stdout  # whole, or none at all
    # or an error says why: fastload's ("the interpreter began to exit ..."), or, where the
    # thread's next batch was being submitted, concurrent.futures' own ("... after
    # interpreter shutdown": it refuses every pool's work once the main thread has ended)
    told = "RuntimeError" in done.stderr and "interpreter" in done.stderr
    assert len(epochs) == 3 or told, done.stderr
