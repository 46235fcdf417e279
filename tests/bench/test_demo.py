"""``fastload demo``: generate, convert and verify end to end, and resume by skipping."""

from __future__ import annotations

import json

import pytest

from fastload.data.convert.folder import is_complete
from fastload.data.format.dataset import LMDBDataset
from fastload.tools.cli import main


@pytest.mark.slow
def test_demo_generates_converts_verifies_measures_learns_and_reports_then_skips(tmp_path,
                                                                                capsys):
    workdir = tmp_path / "demo"
    # --amp on: the AMP row runs where bf16 is emulated too (auto would skip it there)
    argv = ["demo", "--workdir", str(workdir), "--tiny", "--workers", "1", "--amp", "on"]
    assert main(argv) == 0
    first = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in first[:11]] == [
        "[1/11] plan", "[2/11] synth", "[3/11] convert train", "[4/11] convert val",
        "[5/11] verify train", "[6/11] verify val", "[7/11] photos", "[8/11] bench",
        "[9/11] recipe ra", "[10/11] finetune A/B", "[11/11] report",
    ]
    assert "the A/B trains on 48 generated images" in first[0]
    assert "AMP row run as asked" in first[0]
    first = first[1:]
    assert "stored 48 + skipped 0 = seen 48" in first[1]
    assert "OK: 16/16 records" in first[4]
    for split, count in (("train", 48), ("val", 16)):
        assert is_complete(workdir / "data" / f"{split}.lmdb")
        dataset = LMDBDataset(workdir / "data" / f"{split}.lmdb")
        assert len(dataset) == count
        assert dataset.classes == ["class_00", "class_01", "class_02", "class_03"]
    # The headline leads with the loader's own end-to-end gain at equal precision, then the
    # loader alone on the photographs, then each technique row for what it is.
    headline = [line.strip() for line in first[10:]]
    assert headline[0].startswith("end to end (fine-tune A/B, same fp32 training): "
                                  "fastload.DataLoader x")
    assert "data stall" in headline[0] and "peak PSS of the whole process tree" in headline[0]
    assert headline[1].startswith("loader alone (bench on photographs): fastload x")
    assert headline[2].startswith("augmentation recipe 'ra'")
    assert headline[3].startswith("+ AMP bf16 (a precision technique): x")
    assert headline[4].startswith("+ gradient checkpointing (a memory technique")
    assert "training's peak memory" in headline[4]
    assert len(list((workdir / "photos" / "train").rglob("*.jpg"))) == 28
    recipe = json.loads((workdir / "recipe.json").read_text(encoding="utf-8"))["bench"]
    assert recipe["config"]["recipe"] == "ra"
    assert {r["row"] for r in recipe["rows"] if r["images_per_s"]} == {"a", "c"}
    bench = json.loads((workdir / "bench.json").read_text(encoding="utf-8"))["bench"]
    assert {r["row"] for r in bench["rows"] if r["images_per_s"]} == {"a", "d", "f"}
    ab = json.loads((workdir / "ab.json").read_text(encoding="utf-8"))["rows"]
    assert [r["row"] for r in ab] == ["baseline", "fastload", "amp", "gc"]
    # Two epochs of a ViT-Tiny on 48 generated images: labels line up, so it beats chance.
    assert all(r["epochs"][-1]["images"] == 48 for r in ab)
    assert ab[1]["val_top1"] > 0.4, first[8]
    assert all(r["tree_pss_mb"] > 50 and r["tree_uss_mb"] <= r["tree_pss_mb"] for r in ab)
    assert ab[0]["tree_processes"] > 1  # torch's loader: the training process and its workers
    report = (workdir / "report.md").read_text(encoding="utf-8")
    assert "## An augmentation recipe: `ra`" in report
    for chart in ("throughput.png", "step_time.png", "training.png", "memory.png"):
        assert f"]({chart})" in report
        assert (workdir / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert main(argv) == 0
    second = capsys.readouterr().out.strip().splitlines()
    assert "the set made earlier is kept: 48 training images" in second[0]
    second = second[1:]
    assert all("skipped" in line for line in second[:3] + second[5:9])
    assert "OK" in second[3] and "OK" in second[4]


@pytest.mark.parametrize("marker", ["synth.json", "photos.json"])
def test_demo_refuses_a_workdir_made_with_other_arguments(tmp_path, capsys, marker):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / marker).write_text(json.dumps({"train": 3}), encoding="utf-8")
    # --epochs 1: the photographs are made for the measured steps only
    assert main(["demo", "--workdir", str(workdir), "--tiny", "--workers", "1",
                 "--epochs", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{marker} records" in err and "made with other arguments" in err


def test_demo_finishes_a_conversion_left_unfinished(tmp_path, capsys):
    workdir = tmp_path / "demo"
    argv = ["demo", "--workdir", str(workdir), "--tiny", "--workers", "1", "--epochs", "0"]
    assert main(argv) == 0
    capsys.readouterr()
    meta = workdir / "data" / "val.lmdb" / "fastload.json"
    meta.unlink()  # the completion marker goes first when a conversion is cut short
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5
    assert "skipped" in lines[1] and "seen 16" in lines[2] and "OK: 16/16" in lines[4]


def test_headline_leads_with_the_loaders_gain_at_equal_precision_then_each_technique():
    from fastload.bench.demo_report import headline

    def row(name, label, rate, stall, own, tree):
        return {"row": name, "label": label, "images_per_s": rate, "data_stall_share": stall,
                "peak_mem_mb": own, "tree_pss_mb": tree}

    ab = [row("baseline", "baseline: fp32, torchvision", 10.0, 0.24, 100.0, 1900.0),
          row("fastload", "+ fastload.DataLoader from LMDB", 13.0, 0.03, 90.0, 1300.0),
          row("amp", "+ AMP bf16", 19.5, 0.03, 60.0, 1200.0),
          row("gc", "+ gradient checkpointing", 17.55, 0.03, 45.0, 1150.0)]
    lines = headline(None, ab).lines()
    assert lines[0] == ("end to end (fine-tune A/B, same fp32 training): fastload.DataLoader "
                        "x1.30 images/s against torchvision's DataLoader; data stall 24% -> 3% "
                        "of each epoch; memory 1,900 -> 1,300 MiB (peak PSS of the whole process "
                        "tree, loader workers included)")
    assert lines[1] == ("+ AMP bf16 (a precision technique): x1.50 images/s against the row "
                        "above, training's peak memory -33%")
    assert lines[2] == ("+ gradient checkpointing (a memory technique: activations recomputed "
                        "in backward): x0.90 images/s against the row above, training's peak "
                        "memory -25%")


def test_demo_refuses_a_workdir_that_is_a_file_naming_it(tmp_path, capsys):
    workdir = tmp_path / "demo"
    workdir.write_text("mine", encoding="utf-8")
    assert main(["demo", "--workdir", str(workdir), "--tiny"]) == 2
    err = capsys.readouterr().err
    assert f"--workdir '{workdir}' is a file; pass a folder" in err
    assert workdir.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("flag, value, words", [
    ("--classes", "0", "should be 1 or more, but got 0"),
    ("--train", "-3", "should be 1 or more, but got -3"),
    ("--img-size", "0", "should be 1 or more, but got 0"),
    ("--epochs", "-1", "should be 0 or more, but got -1"),
])
def test_demo_refuses_a_count_out_of_range_before_any_work(tmp_path, capsys, flag, value, words):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--workdir", str(tmp_path / "demo"), flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: {words}" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
