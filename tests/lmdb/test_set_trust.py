"""A sharded set is read only as far as it is checked: its paths stay inside its folder, its
manifest, labels and shard sidecars are checked at open and at a shard's first read, and
`fastload verify` checks the shards it reads. Each case edits a real set written by
`fastload convert` the way a bad copy, a half-finished sync or a hostile download would."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.shards import ShardedReader
from fastload.data.sets.verify import verify_set
from fastload.tools.cli import main as cli

SHARDS = [shard_name(k, 3) for k in range(3)]  # 20, 20 and 21 records of 61, 3 classes


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """Another 3-shard set: 61 other images, the same layout and classes."""
    base = tmp_path_factory.mktemp("foreign_set")
    rng = np.random.default_rng(7)
    for i in range(61):
        folder = base / "src" / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(
            folder / f"{i:03d}.jpg", quality=85)
    convert_folder(base / "src", base / "set", workers=1, progress=False, shards=3)
    return base / "set"


@pytest.fixture
def work(sharded_set, foreign, tmp_path):
    """Private copies: ``tmp/set`` (free to edit) beside ``tmp/other`` (a foreign set)."""
    shutil.copytree(sharded_set, tmp_path / "set")
    shutil.copytree(foreign, tmp_path / "other")
    return tmp_path


def records(reader) -> list[tuple[bytes, int]]:
    return [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
            for i in range(len(reader))]


def manifest_of(root) -> dict:
    return json.loads((root / MANIFEST_FILE).read_text())


def write_manifest(root, manifest: dict) -> None:
    (root / MANIFEST_FILE).write_text(json.dumps(manifest))


def set_labels(root) -> np.ndarray:
    return np.fromfile(root / "labels.i32", dtype="<i4")


@pytest.mark.parametrize("how", ["parent", "absolute"])
def test_a_shard_path_leading_out_of_the_set_is_refused_at_open(work, how):
    manifest = manifest_of(work / "set")
    outside = work / "other" / SHARDS[1]
    manifest["shards"][1]["path"] = (f"../other/{SHARDS[1]}" if how == "parent"
                                     else str(outside))
    write_manifest(work / "set", manifest)
    with pytest.raises(ValueError, match=r"shards\[1\]\.path .*closed folder"):
        ShardedReader(work / "set")


def test_a_shard_folder_symlinked_to_another_set_is_refused_at_open(work):
    shutil.rmtree(work / "set" / SHARDS[1])
    (work / "set" / SHARDS[1]).symlink_to(work / "other" / SHARDS[1])
    with pytest.raises(ValueError, match="outside the set's folder"):
        LMDBDataset(work / "set")


def test_verify_of_a_set_reaching_outside_is_an_error_not_ok(work, capsys):
    shutil.rmtree(work / "set" / SHARDS[2])
    (work / "set" / SHARDS[2]).symlink_to(work / "other" / SHARDS[2])
    assert cli(["verify", str(work / "set")]) == 1
    out, err = capsys.readouterr()
    assert "OK" not in out and "outside the set's folder" in err
    assert len(err.strip().splitlines()) == 1


def test_a_shard_listed_twice_is_refused_even_with_labels_edited_to_match(work):
    manifest = manifest_of(work / "set")
    first, second = manifest["shards"][0], manifest["shards"][1]
    manifest["shards"][1] = {**first, "start": second["start"], "stop": second["stop"]}
    write_manifest(work / "set", manifest)
    labels = set_labels(work / "set")
    labels[20:40] = labels[0:20]
    labels.tofile(work / "set" / "labels.i32")
    with pytest.raises(ValueError, match=r"shards\[1\]\.path names the folder of shards\[0\]"):
        ShardedReader(work / "set")


def test_swapped_shard_folders_are_refused_at_their_first_read(work):
    root = work / "set"
    (root / SHARDS[0]).rename(root / "tmp")
    (root / SHARDS[1]).rename(root / SHARDS[0])
    (root / "tmp").rename(root / SHARDS[1])
    labels = set_labels(root)
    labels[0:20], labels[20:40] = labels[20:40].copy(), labels[0:20].copy()
    labels.tofile(root / "labels.i32")
    reader = ShardedReader(root)
    with pytest.raises(ValueError, match="shard 0 .* does not match the manifest"):
        reader.image_bytes(3)


def test_a_shard_with_a_permuted_class_list_is_refused_at_its_first_read(work):
    meta_file = work / "set" / SHARDS[1] / "fastload.json"
    meta = json.loads(meta_file.read_text())
    meta["classes"] = meta["classes"][::-1]
    meta_file.write_text(json.dumps(meta))
    reader = ShardedReader(work / "set")
    reader.image_bytes(0)  # shard 0 is sound
    with pytest.raises(ValueError, match="differs from the manifest in classes"):
        reader.image_bytes(25)


@pytest.mark.parametrize("label", [99, -1])
def test_set_labels_outside_the_class_range_are_refused_at_open(work, label):
    labels = set_labels(work / "set")
    labels[5] = label
    labels.tofile(work / "set" / "labels.i32")
    with pytest.raises(ValueError, match=rf"label {label} at record 5, outside \[0, 3\)"):
        ShardedReader(work / "set")


def test_shard_labels_outside_the_class_range_are_refused_at_its_first_read(work):
    for path in (work / "set" / "labels.i32", work / "set" / SHARDS[0] / "labels.i32"):
        labels = np.fromfile(path, dtype="<i4")
        labels[0] = 99  # the set's labels file too: the set's own check would catch it first
        labels.tofile(path)
    with pytest.raises(ValueError, match="label 99"):
        ShardedReader(work / "set").image_bytes(0)


def test_shard_labels_edited_to_match_the_set_are_refused_at_the_record(work):
    """Both labels files changed consistently: the record's own label still disagrees."""
    for path in (work / "set" / "labels.i32", work / "set" / SHARDS[0] / "labels.i32"):
        labels = np.fromfile(path, dtype="<i4")
        labels[4] = (labels[4] + 1) % 3
        labels.tofile(path)
    reader = ShardedReader(work / "set")
    with pytest.raises(OSError, match="record 00000004 .* holds label"):
        reader.image_bytes(4)


def test_counts_that_do_not_add_up_are_refused_at_open(work):
    manifest = manifest_of(work / "set")
    manifest["count"] = 56  # 5 samples would silently drop off the end
    write_manifest(work / "set", manifest)
    with pytest.raises(ValueError, match="field count is 56, but the shards' ranges hold 61"):
        ShardedReader(work / "set")


def test_overlapping_shard_ranges_are_refused_at_open(work):
    manifest = manifest_of(work / "set")
    manifest["shards"][1]["start"] -= 2
    manifest["shards"][1]["stop"] -= 2
    write_manifest(work / "set", manifest)
    with pytest.raises(ValueError, match=r"shards\[1\]\.start .*contiguous"):
        ShardedReader(work / "set")


DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.update(count=None), "field count should be an integer"),
    (lambda m: m.update(count="__INF__"), "field count should be an integer"),
    (lambda m: m["shards"][0].pop("start"), r"field shards\[0\]\.start should be an integer"),
    (lambda m: m.update(classes="abc"), "field classes is not a list"),
    (lambda m: m.update(classes=["a", "a", "b"]), "names class 'a' twice"),
    (lambda m: m.update(labels_dtype="O"), "field labels_dtype should be '<i4'"),
    (lambda m: m.update(labels_file="/etc/passwd"), "field labels_file should be 'labels.i32'"),
    (lambda m: m.update(options="__DEEP__"), "nested too deeply"),
    (lambda m: m.update(num_shards="3"), "field num_shards should be an integer"),
    (lambda m: m["shards"][2].update(path=123), r"field shards\[2\]\.path should be a relative"),
    (lambda m: m["shards"][1].update(checksum_file_crc32=-1), "checksum_file_crc32"),
    (lambda m: m["shards"].append(m["shards"][0]), "should list num_shards=3 shard entries"),
])
def test_a_malformed_manifest_field_is_one_value_error_naming_it(work, capsys, edit, field):
    manifest = manifest_of(work / "set")
    edit(manifest)
    text = json.dumps(manifest).replace('"__INF__"', "1e999").replace('"__DEEP__"', DEEP)
    (work / "set" / MANIFEST_FILE).write_text(text)
    with pytest.raises(ValueError, match=field):
        ShardedReader(work / "set")
    assert cli(["verify", str(work / "set")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fastload verify: error: ") and "Traceback" not in err
    assert "--repair" in err  # advice naming a command that does what it says


def test_two_hundred_thousand_bogus_shard_entries_are_refused_before_any_is_read(work):
    manifest = manifest_of(work / "set")
    bogus = {"path": "nowhere", "count": 1, "start": 0, "stop": 1}
    manifest.update(num_shards=200_000, shards=[bogus] * 200_000)
    write_manifest(work / "set", manifest)
    with pytest.raises(ValueError, match=r"field num_shards should be an integer in \[1, 100000\]"):
        verify_set(work / "set")


def test_bogus_entries_under_the_bound_fail_at_the_first_one(work):
    manifest = manifest_of(work / "set")
    bogus = {"path": "../nowhere", "count": 0, "start": 0, "stop": 0, "skipped": 0,
             "checksum_file_crc32": 0}
    manifest.update(num_shards=50_000, shards=[bogus] * 50_000)
    write_manifest(work / "set", manifest)
    with pytest.raises(ValueError, match=r"field shards\[0\]\.path"):
        verify_set(work / "set")


def test_a_shard_whose_checksum_file_changed_is_refused_before_its_first_record(work):
    checksums = work / "set" / SHARDS[1] / "checksums.crc32"
    data = bytearray(checksums.read_bytes())
    data[-1] ^= 0xFF  # the last record's checksum; record 20 (the shard's first) is intact
    checksums.write_bytes(bytes(data))
    reader = ShardedReader(work / "set")
    with pytest.raises(ValueError, match="checksums.crc32 differs .*CRC-32 mismatch"):
        reader.image_bytes(20)


@pytest.mark.parametrize("key, value", [("labels_dtype", "O"), ("checksum_dtype", ">f8"),
                                        ("labels_file", "../../other/labels.i32")])
def test_a_shard_sidecar_naming_another_dtype_or_file_is_refused(work, key, value):
    meta_file = work / "set" / SHARDS[0] / "fastload.json"
    meta = json.loads(meta_file.read_text())
    meta[key] = value
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"states {key}=.*the format fixes it"):
        ShardedReader(work / "set").image_bytes(0)


def test_verify_checks_the_shard_folder_it_reads_not_the_checksum_file_named(work, capsys):
    """A foreign shard copied inside the set, its entry's checksum file left as it was: the
    old verify read one folder and checked the checksum file of another."""
    shutil.copytree(work / "other" / SHARDS[1], work / "set" / "extra")
    manifest = manifest_of(work / "set")
    manifest["shards"][1]["path"] = "extra"
    write_manifest(work / "set", manifest)
    assert cli(["verify", str(work / "set")]) == 1
    assert "shards[1].checksum_file" in capsys.readouterr().err
    manifest["shards"][1]["checksum_file"] = "extra/checksums.crc32"
    write_manifest(work / "set", manifest)
    report = verify_set(work / "set")
    assert not report.ok and "extra" in dict(report.bad)
    assert "does not match the manifest" in dict(report.bad)["extra"]


def test_verify_says_what_it_checked(work, capsys):
    assert cli(["verify", str(work / "set")]) == 0
    out = capsys.readouterr().out
    assert "OK: 61/61 records in 3 shards" in out
    for phrase in ("the manifest", "the set's labels (61 in [0, 3))",
                   "3/3 shard sidecars against the manifest", "every record's key, CRC-32"):
        assert phrase in out


def test_verify_repair_rebuilds_a_damaged_manifest_and_labels_from_the_shards(work, capsys):
    original = records(ShardedReader(work / "set"))
    manifest = manifest_of(work / "set")
    manifest["shards"][0]["path"] = "../other/" + SHARDS[0]
    write_manifest(work / "set", manifest)
    (work / "set" / "labels.i32").write_bytes(b"\x01\x00")
    assert cli(["verify", str(work / "set"), "--repair"]) == 0
    assert "manifest rebuilt from the shards" in capsys.readouterr().out
    assert records(ShardedReader(work / "set")) == original
    assert cli(["verify", str(work / "set"), "--repair"]) == 0  # sound now: nothing rebuilt
    assert "rebuilt" not in capsys.readouterr().out


def test_verify_repair_writes_nothing_over_a_damaged_shard(work, capsys):
    from fastload.data.format.reader import LMDBReader

    (work / "set" / MANIFEST_FILE).write_text("{")
    data = work / "set" / SHARDS[2] / "data.mdb"
    payload = bytes(LMDBReader(work / "set" / SHARDS[2]).image_bytes(3)[0])
    raw = bytearray(data.read_bytes())
    raw[raw.find(payload) + len(payload) // 2] ^= 0x10
    data.write_bytes(bytes(raw))
    assert cli(["verify", str(work / "set"), "--repair"]) == 1
    assert "shard 'shard-00002-of-00003' does not verify" in capsys.readouterr().err
    assert (work / "set" / MANIFEST_FILE).read_text() == "{"


def test_repair_of_a_single_lmdb_is_a_usage_error(synth_lmdb, capsys):
    assert cli(["verify", str(synth_lmdb), "--repair"]) == 2
    assert "not a sharded set" in capsys.readouterr().err
