"""A reader collected while its own thread holds the environments' lock (the garbage
collector runs finalisers wherever an allocation starts a collection, inside acquire_env
too) gives its environment back without waiting for that lock: an epoch's maker thread
once waited on itself there, for ever, in a full test run."""

from __future__ import annotations

import os
import threading

from fastload.data.format import envs
from fastload.data.format.reader import LMDBReader


def _users(path) -> int:
    real = os.path.realpath(path)
    return sum(entry[2] for key, entry in envs._ENVS.items() if key[0] == real)


def test_a_reader_finalised_under_the_lock_releases_later_without_waiting(synth_lmdb):
    before = _users(synth_lmdb)
    reader = LMDBReader(synth_lmdb)
    reader.record(0)
    assert _users(synth_lmdb) == before + 1
    readers = [reader]
    del reader

    def finalise_under_the_lock() -> None:
        with envs._ENVS_LOCK:  # where acquire_env stands when a collection starts
            readers.clear()  # the last reference: __del__ runs here, in this thread

    thread = threading.Thread(target=finalise_under_the_lock, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the finaliser waited on the lock its own thread held"
    assert _users(synth_lmdb) == before + 1  # queued, not applied yet
    other = LMDBReader(synth_lmdb)
    other.record(0)  # the next acquire applies the queued release first
    assert _users(synth_lmdb) == before + 1
    other.close()
    assert _users(synth_lmdb) == before


def test_a_reader_finalised_elsewhere_releases_at_once(synth_lmdb):
    before = _users(synth_lmdb)
    reader = LMDBReader(synth_lmdb)
    reader.record(0)
    del reader
    assert _users(synth_lmdb) == before and not envs._DEFERRED
