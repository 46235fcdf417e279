"""The loader's first DALI graph is built in a background thread started by its
constructor (issue 41: ``iter()`` paid the 1-2.5 s build before the first batch). Real LMDB
files and DALI graphs; the fork and exit cases in real child processes."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from hang_guard import wait_child

import fastload
from fastload.loader.prebuild import Prebuild

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


def _loader(synth_lmdb, **kwargs):
    return fastload.DataLoader(fastload.LMDBDataset(synth_lmdb, transform=SMALL),
                               batch_size=8, **kwargs)


def test_iter_uses_the_graph_the_constructor_started_building(synth_lmdb):
    loader = _loader(synth_lmdb, shuffle=True, seed=0)
    prebuild = loader._prebuild
    assert prebuild is not None and prebuild._thread.daemon
    assert prebuild._thread.name == "fastload-prebuild"
    prebuild._thread.join(120)
    built = prebuild._decoder
    assert built is not None and not prebuild.running
    images, labels = next(iter(loader))
    assert loader._decoder is built and loader._prebuild is None
    assert images.shape == (8, 3, 16, 16) and len(labels) == 8
    loader.close()
    assert built._closed


def test_the_build_takes_nothing_from_the_global_generators(synth_lmdb):
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    loader = _loader(synth_lmdb, shuffle=True)
    loader._prebuild._thread.join(120)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]
    loader.close()


def test_a_failed_build_is_built_again_at_iter_and_raises_there():
    def fails():
        raise ValueError("no graph")

    build = Prebuild(fails, ("k",))
    assert build.take(("k",)) is None  # iter() then builds it itself, raising as before


def test_settings_changed_before_iter_are_built_at_iter_with_its_error(synth_lmdb):
    loader = _loader(synth_lmdb)
    loader.scaled_decode = "sometimes"  # not a setting: BatchDecoder refuses it, at iter()
    with pytest.raises(ValueError, match="scaled_decode should be 'auto' or 'off'"):
        next(iter(loader))
    loader.scaled_decode = "auto"
    assert next(iter(loader))[0].shape == (8, 3, 16, 16)
    loader.close()


def test_closing_before_the_build_ends_leaks_no_thread_graph_or_fd(synth_lmdb):
    def cycle() -> Prebuild:
        loader = _loader(synth_lmdb)
        prebuild = loader._prebuild
        loader.close()  # at once: the build is most likely under way
        return prebuild

    cycle()._thread.join(120)  # DALI's process-wide threads start with the first graph
    gc.collect()
    fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    for _ in range(10):
        prebuild = cycle()
        prebuild._thread.join(120)
        assert prebuild._decoder is None  # closed by its thread, or by close()
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= fds
    assert threading.active_count() <= threads


def test_a_fork_waits_for_the_build_and_the_child_builds_its_own(synth_lmdb):
    loader = _loader(synth_lmdb, shuffle=True, seed=0)
    prebuild = loader._prebuild
    pid = os.fork()
    if pid == 0:  # the child: the parent's graph is not usable here
        code = 1
        try:
            images, _ = next(iter(loader))
            parents = prebuild._decoder
            code = 0 if (images.shape == (8, 3, 16, 16) and loader._decoder is not None
                         and loader._decoder is not parents) else 2
            loader.close()
        finally:
            os._exit(code)
    assert not prebuild.running  # the fork waited for the build to end
    assert wait_child(pid, 120) == 0
    assert next(iter(loader))[0].shape == (8, 3, 16, 16)
    loader.close()


def test_an_interpreter_that_exits_during_the_build_prints_nothing(synth_lmdb):
    script = textwrap.dedent(f"""
        import torchvision.transforms as T
        import fastload
        ds = fastload.LMDBDataset({str(synth_lmdb)!r}, transform=T.Compose(
            [T.Resize(16), T.CenterCrop(16), T.ToTensor()]))
        loader = fastload.DataLoader(ds, batch_size=8)  # exits while it builds, most likely
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "" and done.stderr == ""
