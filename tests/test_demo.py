"""``fastload demo``: generate, convert and verify end to end, and resume by skipping."""

from __future__ import annotations

import json

from fastload.data.convert import is_complete
from fastload.data.dataset import LMDBDataset
from fastload.tools.cli import main


def test_demo_generates_converts_verifies_and_learns_then_skips_on_rerun(tmp_path, capsys):
    workdir = tmp_path / "demo"
    assert main(["demo", "--workdir", str(workdir), "--tiny", "--workers", "1"]) == 0
    first = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in first] == [
        "[1/6] synth", "[2/6] convert train", "[3/6] convert val",
        "[4/6] verify train", "[5/6] verify val", "[6/6] finetune",
    ]
    assert "stored 48 + skipped 0 = seen 48" in first[1]
    assert "OK: 16/16 records" in first[4]
    for split, count in (("train", 48), ("val", 16)):
        assert is_complete(workdir / "lmdb" / split)
        dataset = LMDBDataset(workdir / "lmdb" / split)
        assert len(dataset) == count
        assert dataset.classes == ["class_00", "class_01", "class_02", "class_03"]
    # One epoch of a ViT-Tiny on 48 generated images: labels line up, so it beats chance (25%).
    finetune = json.loads((workdir / "finetune.json").read_text(encoding="utf-8"))
    assert finetune["settings"]["loader"] == "fastload"
    assert finetune["epochs"][-1]["images"] == 48
    assert finetune["epochs"][-1]["val_top1"] > 0.4, first[5]

    assert main(["demo", "--workdir", str(workdir), "--tiny", "--workers", "1"]) == 0
    second = capsys.readouterr().out.strip().splitlines()
    assert all("skipped" in line for line in second[:3] + second[5:])
    assert "OK" in second[3] and "OK" in second[4]


def test_demo_refuses_a_workdir_made_with_other_arguments(tmp_path, capsys):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / "synth.json").write_text(json.dumps({"classes": 3}), encoding="utf-8")
    assert main(["demo", "--workdir", str(workdir), "--tiny", "--epochs", "0"]) == 1
    assert "other arguments" in capsys.readouterr().err


def test_demo_finishes_a_conversion_left_unfinished(tmp_path, capsys):
    workdir = tmp_path / "demo"
    argv = ["demo", "--workdir", str(workdir), "--tiny", "--workers", "1", "--epochs", "0"]
    assert main(argv) == 0
    capsys.readouterr()
    meta = workdir / "lmdb" / "val" / "fastload.json"
    meta.unlink()  # the completion marker goes first when a conversion is cut short
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5
    assert "skipped" in lines[1] and "seen 16" in lines[2] and "OK: 16/16" in lines[4]
