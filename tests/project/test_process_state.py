"""A library shares its user's process: the process-wide settings fastload's own worker pools
need are read, never fixed."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r'''
import multiprocessing, sys
from fastload.data.convert.folder import convert_folder
from fastload.data.pictures.synth import synthesize

root = sys.argv[1]
synthesize(root + "/src", train=64, val=0, classes=2, workers=2, min_side=64, max_side=96)
convert_folder(root + "/src/train", root + "/db", workers=2, max_side=32, progress=False)
print(multiprocessing.get_start_method(allow_none=True))
multiprocessing.set_start_method("spawn")  # what a user's script may do next
'''


def test_synth_and_convert_pools_leave_the_start_method_for_the_user_to_set(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None"]
    assert len(list((tmp_path / "db").iterdir())) > 0


_FRESH = r'''
import multiprocessing
from fastload.utils.process import call_in_fresh_process

print(call_in_fresh_process(multiprocessing.get_start_method))  # what its loaders use
print(multiprocessing.get_all_start_methods()[0])  # the platform's default
print(multiprocessing.get_start_method(allow_none=True))
multiprocessing.set_start_method("spawn")
'''


def test_a_fresh_process_runs_in_the_platforms_start_method_and_leaves_the_parents_unset():
    # the fresh process stands for a user's `python script.py`: its torch DataLoader forks its
    # workers on Linux, as the script's would, instead of spawning them at every epoch
    done = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    child, platform, parent = done.stdout.split()
    assert child == platform and parent == "None"
