"""Property: a sharded set whose manifest or sidecars were changed at random reads as the
original data exactly, or fails with one clear error (ValueError, or an OSError such as
fastload's CorruptRecord, with a message); never other data, another exception, or a hang."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.shards import ShardedReader

SHARD_FILES = ("fastload.json", "labels.i32", "checksums.crc32")
TARGETS = [MANIFEST_FILE, "labels.i32"] + [f"{shard_name(k, 3)}/{name}" for k in range(3)
                                          for name in SHARD_FILES]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([0, 1, -1, 20, 61])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["", "O", "<i4", "<u4", "..", "/etc", "../other", "shard-00001-of-00003",
                       "shard-00000-of-00003/checksums.crc32", "labels.i32", "complete"])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)


def read_all(root: Path):
    reader = ShardedReader(root)
    try:
        return (reader.classes, reader.targets,
                [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
                 for i in range(len(reader))])
    finally:
        reader.close()


@pytest.fixture(scope="module")
def original(sharded_set):
    return read_all(sharded_set)


def _locations(value, path=()):
    """Every (container path, key) in a JSON value, for an edit to pick from."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, child in items:
        found.append((path, key))
        found += _locations(child, (*path, key))
    return found


def _edit_json(data: bytes, rng: random.Random, new_value) -> bytes:
    doc = json.loads(data)
    kind = rng.choice(["set", "set", "set", "delete", "swap", "text", "deep"])
    if kind == "text":  # a byte of the file itself flipped, or the file cut short
        raw = bytearray(data)
        if rng.random() < 0.3:
            return bytes(raw[:rng.randrange(len(raw))])
        raw[rng.randrange(len(raw))] ^= rng.randrange(1, 256)
        return bytes(raw)
    if kind == "deep":
        return data[:-2] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    locations = _locations(doc)
    path, key = rng.choice(locations)
    container = doc
    for step in path:
        container = container[step]
    if kind == "set":
        container[key] = new_value
    elif kind == "delete":
        del container[key]
    elif isinstance(container, list) and len(container) > 1:  # swap or duplicate an entry
        other = rng.randrange(len(container))
        if rng.random() < 0.5:
            container[key], container[other] = container[other], container[key]
        else:
            container[other] = container[key]
    return json.dumps(doc).encode()


def _edit_binary(data: bytes, rng: random.Random) -> bytes:
    raw = bytearray(data)
    kind = rng.choice(["flip", "cut", "grow", "label"])
    if kind == "flip":
        raw[rng.randrange(len(raw))] ^= rng.randrange(1, 256)
    elif kind == "cut":
        del raw[rng.randrange(len(raw)):]
    elif kind == "grow":
        raw += bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 8])))
    else:  # one int32 replaced by a plausible label (another class, or out of range)
        at = 4 * rng.randrange(len(raw) // 4)
        raw[at:at + 4] = rng.choice([0, 1, 2, 3, 99, -1, 2**31 - 1]).to_bytes(4, "little",
                                                                              signed=True)
    return bytes(raw)


@settings(max_examples=120, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), seed=st.integers(0, 2**32 - 1), new_value=json_values)
def test_a_randomly_mutated_set_reads_as_the_original_or_fails_clearly(
        sharded_set, original, target, seed, new_value):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        shutil.copytree(sharded_set, root)
        file = root / target
        data = file.read_bytes()
        file.write_bytes(_edit_json(data, rng, new_value) if target.endswith(".json")
                         else _edit_binary(data, rng))
        try:
            outcome = read_all(root)
        except (ValueError, OSError) as exc:
            assert str(exc).strip(), f"{type(exc).__name__} without a message"
            return
        assert outcome == original, f"{target} edited: other data was served"
