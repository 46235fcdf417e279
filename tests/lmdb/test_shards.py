"""Sharded sets: `fastload convert --shards N [--shard-index i]`, the manifest, reading and
verifying the set as one data set. Real LMDB files, real CLI processes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.data.format.dataset import LMDBDataset
from fastload.data.sets.manifest import MANIFEST_FILE, shard_name
from fastload.data.sets.shards import ShardedReader
from fastload.data.sets.verify import verify_set
from fastload.tools.cli import main as cli

N = 23  # source files: 21 JPEGs, 1 PNG (re-encoded), 1 unreadable (skipped)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("shard_src") / "src"
    rng = np.random.default_rng(0)
    for i in range(N):
        folder = root / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (8 + i % 5, 12, 3), dtype=np.uint8)
        if i == 7:
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")
        elif i == 11:
            (folder / f"{i:03d}.jpg").write_bytes(b"not an image")
        else:
            Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=85)
    return root


@pytest.fixture(scope="module")
def unsharded(source, tmp_path_factory):
    dst = tmp_path_factory.mktemp("shard_ref") / "ref.lmdb"
    convert_folder(source, dst, workers=1, progress=False)
    return LMDBDataset(dst)


def records(reader) -> list[tuple[bytes, int]]:
    return [(bytes(reader.image_bytes(i)[0]), reader.image_bytes(i)[1])
            for i in range(len(reader))]


def test_three_parallel_shard_index_processes_make_a_set_equal_to_the_unsharded_conversion(
        source, unsharded, tmp_path):
    dst = tmp_path / "set"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "fastload.tools.cli", "convert", str(source), str(dst),
         "--shards", "3", "--shard-index", str(i), "--workers", "1", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert subprocess.run([sys.executable, "-m", "fastload.tools.cli", "verify", str(dst)],
                          capture_output=True, timeout=120).returncode == 0
    manifest = json.loads((dst / MANIFEST_FILE).read_text())
    assert [s["path"] for s in manifest["shards"]] == [shard_name(k, 3) for k in range(3)]
    dataset = LMDBDataset(dst)
    assert len(dataset) == len(unsharded) == N - 1
    assert dataset.classes == unsharded.classes
    assert dataset.targets == unsharded.targets
    assert records(dataset.reader) == records(unsharded.reader)


def test_manifest_maps_global_indices_to_contiguous_shard_ranges(source, tmp_path):
    convert_folder(source, tmp_path / "set", workers=1, progress=False, shards=3)
    manifest = json.loads((tmp_path / "set" / MANIFEST_FILE).read_text())
    ranges = [(s["start"], s["stop"]) for s in manifest["shards"]]
    assert ranges[0][0] == 0 and ranges[-1][1] == manifest["count"] == N - 1
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert [s["count"] for s in manifest["shards"]] == [b - a for a, b in ranges]
    assert manifest["classes"] == ["class_0", "class_1", "class_2"]


def test_manifest_is_pending_until_the_last_shard_finishes(source, tmp_path):
    dst = tmp_path / "set"
    first = convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=1)
    assert first.manifest is None and not (dst / MANIFEST_FILE).exists()
    with pytest.raises(ValueError, match="shard-00000-of-00002"):
        verify_set(dst)
    with pytest.raises(ValueError, match="no fastload-set.json yet"):
        LMDBDataset(dst)
    last = convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=0)
    assert last.manifest is not None and last.manifest["count"] == N - 1


def test_verify_completes_a_manifest_lost_after_every_shard_finished(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    (dst / MANIFEST_FILE).unlink()
    report = verify_set(dst, full=True)
    assert report.ok and report.manifest_written and report.found == N - 1
    assert report.decoded == N - 1


def test_verify_names_a_shard_whose_checksum_file_changed(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    checksums = dst / shard_name(1, 2) / "checksums.crc32"
    data = bytearray(checksums.read_bytes())
    data[0] ^= 0xFF
    checksums.write_bytes(bytes(data))
    report = verify_set(dst)
    assert not report.ok
    assert any(key.startswith(shard_name(1, 2)) for key, _ in report.bad)


def test_reader_opens_only_the_shards_it_reads(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=3)
    reader = ShardedReader(dst / MANIFEST_FILE)  # the manifest path works as well
    assert reader.opened_shards == []
    last = len(reader) - 1
    reader.image_bytes(last)
    assert reader.opened_shards == [2]
    assert reader.key(last).decode().startswith(shard_name(2, 3) + "/")


def test_a_shard_run_with_another_shard_count_is_refused(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=0)
    with pytest.raises(FileExistsError, match="2-shard set"):
        convert_folder(source, dst, workers=1, progress=False, shards=3, shard_index=0)


def test_shard_index_without_shards_names_both_arguments(source, tmp_path):
    with pytest.raises(ValueError, match="shard_index=0 needs shards=N"):
        convert_folder(source, tmp_path / "x", shard_index=0, progress=False)


def test_cli_rejects_a_shard_index_out_of_range(source, tmp_path, capsys):
    code = cli(["convert", str(source), str(tmp_path / "set"), "--shards", "2",
                "--shard-index", "2", "--no-progress"])
    assert code == 2  # an option value out of range: nothing was done
    assert "shard_index should be an integer in [0, 2)" in capsys.readouterr().err


def test_dataloader_reads_the_set_by_path_with_global_indices(source, unsharded, tmp_path):
    import torchvision.transforms as T

    import fastload

    convert_folder(source, tmp_path / "set", workers=1, progress=False, shards=3)
    transform = T.Compose([T.Resize((8, 8)), T.ToTensor()])
    loader = fastload.DataLoader(str(tmp_path / "set"), batch_size=5, transform=transform,
                                 device="cpu", strict=True)
    reference = fastload.DataLoader(str(unsharded.path), batch_size=5, transform=transform,
                                    device="cpu", strict=True)
    for (images, labels), (ref_images, ref_labels) in zip(loader, reference, strict=True):
        assert labels.tolist() == ref_labels.tolist()
        assert (images - ref_images).abs().max().item() == 0


def test_a_shard_killed_mid_conversion_resumes_to_the_same_set(source, unsharded, tmp_path):
    import os

    command = [sys.executable, "-m", "fastload.tools.cli", "convert", str(source),
               str(tmp_path / "set"), "--shards", "2", "--shard-index", "1", "--workers", "1",
               "--commit-every", "3", "--no-progress"]
    killed = subprocess.run(command, env={**os.environ, "FASTLOAD_TEST_CRASH": "after_commit:2"},
                            capture_output=True, timeout=120)
    assert killed.returncode == -9
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    convert_folder(source, tmp_path / "set", workers=1, progress=False, shards=2, shard_index=0)
    assert records(LMDBDataset(tmp_path / "set").reader) == records(unsharded.reader)


def test_overwrite_replaces_a_set_of_another_shard_count(source, unsharded, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    convert_folder(source, dst, workers=1, progress=False, shards=3, overwrite=True)
    assert sorted(p.name for p in dst.iterdir() if p.is_dir()) == [
        shard_name(k, 3) for k in range(3)]
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)


def test_an_image_folder_with_classes_named_like_shards_is_not_a_set(tmp_path):
    from fastload.data.sets.manifest import is_sharded_set

    (tmp_path / "shard-00000-of-00002").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "shard-00000-of-00002" / "a.jpg")
    assert not is_sharded_set(tmp_path)


def test_a_loader_whose_samples_live_in_one_shard_opens_only_that_shard(source, tmp_path):
    import torchvision.transforms as T

    import fastload

    convert_folder(source, tmp_path / "set", workers=1, progress=False, shards=3)
    dataset = LMDBDataset(tmp_path / "set", T.Compose([T.Resize((8, 8)), T.ToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=2, sampler=[0, 1, 2], device="cpu",
                                 strict=True)
    assert [labels.tolist() for _, labels in loader] == [dataset.targets[:2], dataset.targets[2:3]]
    assert dataset.reader.opened_shards == [0]


def test_processes_completing_the_manifest_at_once_agree_on_one_file(source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=3)
    (dst / MANIFEST_FILE).unlink()
    code = ("import json, sys; from fastload.data.sets.manifest import complete_manifest; "
            "print(json.dumps(complete_manifest(sys.argv[1], 3)['shards']))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(dst)], stdout=subprocess.PIPE)
             for _ in range(4)]
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(answer == answers[0] for answer in answers)
    assert json.loads((dst / MANIFEST_FILE).read_text())["shards"] == answers[0]
    assert verify_set(dst).ok


@pytest.mark.parametrize("shards", [1, 2])  # another shard count, and the same
def test_an_overwrite_that_stores_no_file_keeps_the_finished_set(source, unsharded, tmp_path,
                                                                 shards):
    from fastload.data.convert.folder import ConvertError

    dst, unreadable = tmp_path / "set", tmp_path / "unreadable"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    before = (dst / MANIFEST_FILE).read_bytes()
    for k in range(2):
        (unreadable / f"c{k}").mkdir(parents=True)
        (unreadable / f"c{k}" / "x.jpg").write_bytes(b"not an image")
    with pytest.raises(ConvertError, match=r"all 2 were skipped \(each reason in its new "
                                           r"shards' errors.json; the finished set there is kept"):
        convert_folder(unreadable, dst, workers=1, progress=False, shards=shards, overwrite=True)
    assert (dst / MANIFEST_FILE).read_bytes() == before and verify_set(dst, full=True).ok
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)


@pytest.mark.parametrize("shards", [2, 3])  # the same shard count, and another
def test_an_overwrite_that_stops_keeps_the_finished_set_whole(source, unsharded, tmp_path,
                                                              shards):
    from fastload.data.convert.folder import ConvertError

    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    before = (dst / MANIFEST_FILE).read_bytes()
    # the source's unreadable 011.jpg is in the last shard: the others finish first
    with pytest.raises(ConvertError, match="unreadable image .*011.jpg"):
        convert_folder(source, dst, workers=1, progress=False, shards=shards, overwrite=True,
                       strict=True)
    assert (dst / MANIFEST_FILE).read_bytes() == before and verify_set(dst, full=True).ok
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)
    convert_folder(source, dst, workers=1, progress=False, shards=shards, overwrite=True)
    assert sorted(p.name for p in dst.iterdir() if p.is_dir()) == [
        shard_name(k, shards) for k in range(shards)]
    assert verify_set(dst, full=True).ok and not list(dst.rglob(".fastload-replacement"))
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)


def test_shard_index_overwrites_keep_the_finished_set_until_its_last_shard_is_finished(
        source, unsharded, tmp_path):
    dst, resized = tmp_path / "set", tmp_path / "resized"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    convert_folder(source, resized, workers=1, progress=False, shards=2, max_side=6)
    before = (dst / MANIFEST_FILE).read_bytes()
    report = convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=0,
                            overwrite=True, max_side=6)
    assert report.replacing and report.manifest is None
    # shard 1 is still the old set's: the old set is read, whole, until it is replaced too
    assert (dst / MANIFEST_FILE).read_bytes() == before and verify_set(dst, full=True).ok
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)
    convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=1,
                   overwrite=True, max_side=6)
    assert verify_set(dst, full=True).ok and not list(dst.rglob(".fastload-replacement"))
    assert records(LMDBDataset(dst).reader) == records(LMDBDataset(resized).reader)
    assert records(LMDBDataset(dst).reader) != records(unsharded.reader)


def test_a_shard_index_overwrite_that_stops_keeps_the_finished_set_whole(source, unsharded,
                                                                        tmp_path):
    from fastload.data.convert.folder import ConvertError

    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=0,
                   overwrite=True, strict=True)
    # the set as that overwrite left it (its manifest written again: shard 1 was finished
    # with the same identity, so the set was whole at once)
    before = (dst / MANIFEST_FILE).read_bytes()
    # the source's unreadable 011.jpg is in the last shard
    with pytest.raises(ConvertError, match="unreadable image .*011.jpg"):
        convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=1,
                       overwrite=True, strict=True)
    assert (dst / MANIFEST_FILE).read_bytes() == before and verify_set(dst, full=True).ok
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)


def test_parallel_shard_index_overwrites_replace_the_set_once_all_are_finished(
        source, tmp_path):
    dst, resized = tmp_path / "set", tmp_path / "resized"
    convert_folder(source, dst, workers=1, progress=False, shards=3)
    convert_folder(source, resized, workers=1, progress=False, shards=3, max_side=6)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "fastload.tools.cli", "convert", str(source), str(dst),
         "--shards", "3", "--shard-index", str(i), "--workers", "1", "--no-progress",
         "--overwrite", "--max-side", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert verify_set(dst, full=True).ok and not list(dst.rglob(".fastload-replacement"))
    assert records(LMDBDataset(dst).reader) == records(LMDBDataset(resized).reader)


def test_shard_index_overwrites_in_threads_of_one_process_replace_the_set_once(
        source, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    dst, resized = tmp_path / "set", tmp_path / "resized"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    convert_folder(source, resized, workers=1, progress=False, shards=2, max_side=6)

    def shard(k):
        return convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=k,
                              overwrite=True, max_side=6)

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(shard, range(2)))
    assert sum(report.manifest is not None for report in reports) >= 1
    assert verify_set(dst, full=True).ok and not list(dst.rglob(".fastload-replacement"))
    assert records(LMDBDataset(dst).reader) == records(LMDBDataset(resized).reader)


def test_an_overwrite_to_another_shard_count_removes_a_replacement_left_in_a_shard(
        source, unsharded, tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    # shard 0's replacement, finished; shard 1's never made (that overwrite stopped)
    convert_folder(source, dst, workers=1, progress=False, shards=2, shard_index=0,
                   overwrite=True, max_side=6)
    assert (dst / shard_name(0, 2) / ".fastload-replacement").is_dir()
    convert_folder(source, dst, workers=1, progress=False, shards=3, overwrite=True)
    assert sorted(p.name for p in dst.iterdir() if p.is_dir()) == [
        shard_name(k, 3) for k in range(3)]
    assert records(LMDBDataset(dst).reader) == records(unsharded.reader)


def test_a_shard_index_overwrite_of_a_new_folder_replaces_nothing(source, tmp_path, capsys):
    dst = tmp_path / "set"
    assert cli(["convert", str(source), str(dst), "--shards", "2", "--shard-index", "0",
                "--workers", "1", "--overwrite", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "manifest pending until every shard is converted" in out and "replaces" not in out


def test_a_single_database_conversion_onto_a_set_says_it_is_a_set_and_keeps_it(source,
                                                                               tmp_path):
    dst = tmp_path / "set"
    convert_folder(source, dst, workers=1, progress=False, shards=2)
    before = (dst / MANIFEST_FILE).read_bytes()
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"holds a sharded set \(fastload-set.json\); "
                                                  r"pass shards=N to convert into it"):
            convert_folder(source, dst, workers=1, progress=False, overwrite=overwrite)
    assert (dst / MANIFEST_FILE).read_bytes() == before and verify_set(dst).ok
