"""The buffers a strict conversion reads kept files into are not zero-filled first
(``fastload.utils.buffers``): an ordinary ``bytearray``, whose every byte the reader writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fastload.utils import buffers
from fastload.utils.buffers import unfilled_bytearray


def test_an_unfilled_bytearray_is_an_ordinary_bytearray_of_the_size_asked(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(bytes(range(256)) * 400)
    buffer = unfilled_bytearray(256 * 400 + 8)
    assert type(buffer) is bytearray and len(buffer) == 256 * 400 + 8
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.readv(fd, [memoryview(buffer)[8:]]) == 256 * 400
    finally:
        os.close(fd)
    buffer[:8] = b"prefix.."
    buffer += b"!"
    assert bytes(buffer) == b"prefix.." + path.read_bytes() + b"!"
    assert unfilled_bytearray(0) == bytearray()


def test_an_unfilled_bytearray_keeps_what_the_allocator_gave():
    # A block freed and asked for again at the same size comes back with its bytes: the
    # zero-fill bytearray(n) would do is skipped (a fresh process: the allocator's defaults).
    script = """
import sys
from fastload.utils.buffers import unfilled_bytearray
unfilled_bytearray(1)  # its first call looks the allocator up (imports ctypes)
old = bytearray(b"\\xab" * 1000)
del old
print(unfilled_bytearray(1000).count(0xAB))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert int(out.stdout) > 900


def test_a_size_bytearray_would_refuse_is_refused():
    with pytest.raises(ValueError, match="size must be 0 or more"):
        unfilled_bytearray(-1)
    with pytest.raises(OverflowError, match="more than sys.maxsize"):
        unfilled_bytearray(1 << 70)  # ctypes alone would wrap it to 0
    with pytest.raises(TypeError):
        unfilled_bytearray(3.0)


def test_without_cpythons_c_api_it_is_a_zeroed_bytearray(monkeypatch):
    import ctypes

    buffers._allocator.cache_clear()
    monkeypatch.delattr(ctypes, "pythonapi")
    try:
        buffer = unfilled_bytearray(4096)
    finally:
        buffers._allocator.cache_clear()  # the next call looks the C API up again
    assert type(buffer) is bytearray and buffer == bytearray(4096)


def test_the_c_api_function_ctypes_shares_is_left_as_it_was():
    # ctypes.pythonapi's attribute is one object for every caller in the process (a fresh
    # process: nothing looked it up before)
    script = """
import ctypes
from fastload.utils.buffers import unfilled_bytearray
shared = ctypes.pythonapi.PyByteArray_FromStringAndSize
before = (shared.argtypes, shared.restype)
unfilled_bytearray(16)
print(before == (shared.argtypes, shared.restype))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["True"]
