"""`fastload bench`: the harness end to end on a tiny set, and its building blocks."""

from __future__ import annotations

import json

import pytest

from fastload.tools import cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_runs_two_rows_and_writes_table_json_and_png(synth_root, tmp_path, capsys):
    out_json = tmp_path / "bench.json"
    out_png = tmp_path / "bench.png"
    status = cli.main([
        "bench", str(synth_root), "--rows", "a,f", "--limit", "16", "--batch-size", "8",
        "--epochs", "1", "--warmup-epochs", "1", "--threads", "1", "--device", "cpu",
        "--workdir", str(tmp_path / "cache"), "--json", str(out_json), "--plot", str(out_png),
    ])
    assert status == 0
    table = capsys.readouterr().out
    assert "(a)  torchvision ImageFolder + torch DataLoader" in table
    assert "(f)  decode ceiling" in table
    assert "PSS summed over the tree" in table and "PSS MiB  USS MiB" in table

    report = json.loads(out_json.read_text())
    assert report["format"] == 1
    assert report["config"]["images_per_epoch"] == 16
    assert report["config"]["rows"] == "af"
    rows = {r["row"]: r for r in report["rows"]}
    assert set(rows) == {"a", "f"}
    for r in rows.values():
        assert r["status"] == "ok", r["note"]
        assert r["images_per_epoch"] == 16
        assert len(r["epoch_images_per_s"]) == 1
        assert r["spread_min"] <= r["images_per_s"] <= r["spread_max"]
        # the row's process tree; PSS counts pages shared with other processes in part
        assert 50 < r["peak_pss_mib"] <= r["peak_rss_mib"]  # a process with torch imported
        assert 0 < r["peak_uss_mib"] <= r["peak_pss_mib"]
        assert r["cpu_percent"] >= 0  # CPU times tick in 10 ms: a tiny epoch may read 0
    assert rows["a"]["ratio_to_a"] == pytest.approx(1.0)
    assert rows["f"]["share_of_f"] == pytest.approx(1.0)
    assert rows["a"]["share_of_f"] == pytest.approx(
        rows["a"]["images_per_s"] / rows["f"]["images_per_s"])

    # The --limit subset spreads over every class of the train split.
    subset = tmp_path / "cache" / "train-limit16"
    assert sorted(p.name for p in subset.iterdir()) == sorted(
        p.name for p in (synth_root / "train").iterdir())

    png = out_png.read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    from matplotlib.image import imread

    pixels = imread(out_png)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 400


@pytest.mark.slow
def test_bench_reports_a_failing_row_naming_the_file_and_exits_1(synth_root, tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(synth_root / "val", data)
    bad = data / "class_00" / "zero_bytes.jpg"
    bad.write_bytes(b"")
    status = cli.main([
        "bench", str(data), "--rows", "f", "--epochs", "1", "--warmup-epochs", "0",
        "--threads", "1", "--workdir", str(tmp_path / "cache"),
        "--json", str(tmp_path / "bench.json"), "--plot", str(tmp_path / "bench.png"),
    ])
    assert status == 1
    out = capsys.readouterr()
    assert "(f) failed: OSError: cannot decode" in out.out and "zero_bytes.jpg" in out.out
    assert "not written" in out.err and not (tmp_path / "bench.png").exists()
    row = json.loads((tmp_path / "bench.json").read_text())["rows"][0]
    assert row["status"] == "failed" and row["images_per_s"] is None


def test_bench_rejects_unknown_row_letter_naming_the_choices(synth_root, capsys):
    status = cli.main(["bench", str(synth_root), "--rows", "a,z"])
    assert status == 2
    err = capsys.readouterr().err
    assert "rows should be distinct letters from 'abcdefghi'" in err and "'az'" in err


def test_bench_rejects_a_hardware_decoder_share_outside_zero_to_one(synth_root, capsys):
    assert cli.main(["bench", str(synth_root), "--hw-decoder-load", "3"]) == 2
    assert ("hw_decoder_load should be a number in [0, 1], but got --hw-decoder-load 3.0"
            in capsys.readouterr().err)


def test_bench_missing_data_folder_is_one_clear_error_and_a_failed_run(tmp_path, capsys):
    status = cli.main(["bench", str(tmp_path / "nowhere"), "--rows", "f"])
    assert status == 1  # the command line was valid; its data is not there
    err = capsys.readouterr().err
    assert "is not a directory" in err and "fastload synth" in err


def test_bench_given_a_database_says_it_reads_the_tree_it_was_converted_from(synth_lmdb,
                                                                            capsys):
    assert cli.main(["bench", str(synth_lmdb), "--rows", "f"]) == 1
    assert ("is a fastload database; bench reads the ImageFolder tree it was converted from"
            in capsys.readouterr().err)


def test_decode_ceiling_decodes_every_file_once_per_epoch(synth_root):
    from fastload.bench.ceiling import DecodeCeiling
    from fastload.bench.rows import folder_samples

    files = [path for path, _ in folder_samples(synth_root / "val")]
    ceiling = DecodeCeiling(files, processes=1)
    try:
        assert ceiling.run_epoch() == len(files)
        assert ceiling.run_epoch() == len(files)
    finally:
        ceiling.close()
    with pytest.raises(RuntimeError, match="closed"):
        ceiling.run_epoch()


def test_decode_floor_entropy_decodes_each_jpeg_at_one_eighth_and_other_files_in_full(
        synth_root, tmp_path):
    from PIL import Image

    from fastload.bench.ceiling import DecodeCeiling, decode_file_floor
    from fastload.bench.rows import folder_samples

    jpeg = folder_samples(synth_root / "val")[0][0]
    with Image.open(jpeg) as picture:
        assert decode_file_floor(jpeg) == picture.width * picture.height
        picture.save(tmp_path / "same.png")
    assert decode_file_floor(str(tmp_path / "same.png")) == picture.width * picture.height
    files = [path for path, _ in folder_samples(synth_root / "val")]
    floor = DecodeCeiling(files, processes=1, decode=decode_file_floor)
    try:
        assert floor.run_epoch() == len(files)
    finally:
        floor.close()


def test_rows_relate_to_the_floor_row_when_it_runs():
    from fastload.bench.harness import BenchReport, RowResult, _relate, format_table

    rows = {key: RowResult(key, key, images_per_s=rate, spread_min=rate, spread_max=rate)
            for key, rate in (("a", 50.0), ("c", 270.0), ("f", 150.0), ("i", 300.0))}
    _relate(rows)
    assert rows["c"].share_of_i == pytest.approx(0.9) and rows["i"].share_of_i == 1.0
    report = BenchReport({"images_per_epoch": 48, "transforms": "val", "batch_size": 16,
                          "image_size": 224, "threads": 2, "device": "cpu", "epochs": 3,
                          "warmup_epochs": 1}, {"cpu": "x", "usable_cores": 2},
                         list(rows.values()), "", 0.0)
    table = format_table(report)
    assert "% of (i)" in table and " 90% " in table.splitlines()[6]


@pytest.mark.parametrize("train", [True, False])
def test_reference_graph_gives_each_sample_once_per_epoch_normalised(synth_root, train):
    from fastload.bench.reference_graph import ReferenceLoader
    from fastload.bench.rows import folder_samples

    samples = folder_samples(synth_root / "val")
    labels = [label for _, label in samples]
    loader = ReferenceLoader([p for p, _ in samples], labels, batch_size=6, image_size=32,
                             train=train, num_threads=1)
    try:
        assert len(loader) == 3  # 16 images: 6 + 6 + 4
        for _ in range(2):
            seen = []
            for images, batch_labels in loader:
                assert images.dtype.is_floating_point and images.shape[1:] == (3, 32, 32)
                assert images.shape[0] == batch_labels.shape[0]
                assert -3.0 < float(images.min()) and float(images.max()) < 3.0
                seen += batch_labels.tolist()
            assert sorted(seen) == sorted(labels)
    finally:
        loader.close()


@pytest.mark.parametrize("transforms", ["train", "val"])
def test_ffcv_row_gives_each_sample_once_per_epoch_normalised(synth_root, tmp_path, transforms):
    pytest.importorskip("ffcv", reason="row (h) needs ffcv: bash benchmarks/ffcv_env.sh")
    from fastload.bench.rows import RowSpec, folder_samples, make_row

    labels = [label for _, label in folder_samples(synth_root / "val")]
    spec = RowSpec(folder=str(synth_root / "val"), beton=str(tmp_path / "val.beton"),
                   batch_size=6, image_size=32, transforms=transforms, threads=1)
    row = make_row("h", spec)
    row.setup()
    try:
        for _ in range(2):
            seen = []
            for images, batch_labels in row._batches():
                assert images.dtype.is_floating_point and images.shape[1:] == (3, 32, 32)
                assert -3.0 < float(images.min()) and float(images.max()) < 3.0
                seen += batch_labels.tolist()
            assert sorted(seen) == sorted(labels)
    finally:
        row.close()


def test_reference_graph_rejects_mismatched_labels():
    from fastload.bench.reference_graph import build_reference_pipeline

    with pytest.raises(ValueError, match="same length"):
        build_reference_pipeline(["a.jpg", "b.jpg"], [0], batch_size=2)
    with pytest.raises(ValueError, match="device should be 'cpu' or 'gpu'"):
        build_reference_pipeline(["a.jpg"], [0], batch_size=2, device="tpu")


def test_prepare_data_converts_the_subset_once_and_reuses_the_cache(synth_root, tmp_path):
    from fastload.bench.harness import BenchConfig, prepare_data
    from fastload.bench.rows import folder_samples
    from fastload.data.format.dataset import LMDBDataset

    config = BenchConfig(data=synth_root, rows="bde", limit=8, threads=1,
                         workdir=tmp_path / "cache", max_side=64)
    first: list[str] = []
    spec, count = prepare_data(config, log=first.append)
    assert count == 8
    assert sum("converting" in line for line in first) == 2  # keep-bytes and --max-side
    subset = folder_samples(spec.folder)
    for path in (spec.lmdb, spec.lmdb_small):
        dataset = LMDBDataset(path)
        assert dataset.targets == [label for _, label in subset]
    small = LMDBDataset(spec.lmdb_small)[0][0]
    assert max(small.size) <= 64

    again: list[str] = []
    assert prepare_data(config, log=again.append) == (spec, 8)
    assert again == []
