"""``fastload convert`` keeps the heap glibc would give back at each LMDB commit
(``fastload.utils.heap``): in the command's own process only, never the library's caller's,
and never over the user's own malloc settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PIL import Image

from fastload.utils import heap

# Frees what an LMDB transaction of 32 photographs frees at its commit, 50 times: the page
# faults of the loop (a fresh process each, so that glibc's thresholds are its defaults).
_CHURN = """
import resource, sys
from fastload.utils.heap import keep_freed_heap
kept = sys.argv[1] == "keep" and keep_freed_heap()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    blocks = [bytearray(85_000) for _ in range(32)]
    del blocks
print(int(kept), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn_faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"}).stdout.split()
    return out[0] == "1", int(out[1])


def test_a_kept_heap_is_not_faulted_in_again_at_each_transaction():
    kept, faults = _churn_faults("keep")
    if not kept:
        pytest.skip("the C library has no mallopt (not glibc)")
    _, given_back = _churn_faults("default")
    assert faults * 3 < given_back, (faults, given_back)  # measured 664 against 3,822


@pytest.mark.parametrize(("name", "value"), [
    ("MALLOC_TRIM_THRESHOLD_", "131072"), ("MALLOC_TOP_PAD_", "0"),
    ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072")])
def test_the_users_own_malloc_settings_are_left_as_they_are(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert heap.keep_freed_heap() is False


def test_the_convert_command_keeps_the_heap_and_the_library_function_does_not(tmp_path,
                                                                             monkeypatch):
    from fastload.data.convert.folder import convert_folder
    from fastload.tools.cli import main

    for i in range(3):
        (tmp_path / "src" / f"class_{i}").mkdir(parents=True)
        Image.new("RGB", (16, 12), (40 * i, 0, 0)).save(tmp_path / "src" / f"class_{i}" / "a.jpg")
    calls = []
    monkeypatch.setattr(heap, "keep_freed_heap", lambda: calls.append(1) or True)
    convert_folder(tmp_path / "src", tmp_path / "lib", progress=False)
    assert calls == []  # a library call leaves the user's process as it was
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "cli"), "--no-progress"]) == 0
    assert calls == [1]
