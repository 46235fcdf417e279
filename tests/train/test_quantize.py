"""Static int8 (PT2E, calibrated) of a fine-tuned ViT-Tiny: accuracy kept, a file plain torch
loads, layers kept in float on request, and the top-1 cost of each layer group."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from fastload.tools.cli import main
from fastload.train.export import export_checkpoint, sensitivity
from fastload.train.model import create_model
from fastload.train.quantize import (
    calibrate,
    convert,
    layer_groups,
    prepare_static,
    quantized_layer_count,
    resolve_skip,
)

ONE_VAL_IMAGE = 1 / 16  # the generated val set has 16 images: the smallest top-1 step
QUICK = dict(calibration_batches=2, latency_batches=(2,), latency_rounds=1, compile=False)


@pytest.fixture(scope="module")
def static_export(fp32_checkpoint, tmp_path_factory):
    """``(report, program path)`` of the static int8 export of ``fp32_checkpoint``."""
    program = tmp_path_factory.mktemp("quantize") / "run.int8.pt2"
    return export_checkpoint(fp32_checkpoint, program, quantize="static", **QUICK), program


@pytest.mark.slow
def test_static_int8_keeps_val_top1_within_one_val_image_of_fp32(static_export):
    report, program = static_export
    assert report.output == str(program) and program.is_file()
    assert report.calibration_batches == 2
    assert report.quantized_layers == 12 * 4 + 2  # qkv, proj, fc1, fc2 per block + patch conv + head
    assert abs(report.top1_change) <= ONE_VAL_IMAGE
    assert report.size_ratio <= 0.3  # int8 weights, float biases/norms/scales, the graph
    assert [row["batch"] for row in report.latency] == [2] and report.latency[0]["ratio"] > 0


@pytest.mark.slow
def test_static_int8_file_reloads_in_a_process_without_fastload_with_the_same_logits(
        static_export, tmp_path):
    from fastload.train.quantize import load_program

    program = static_export[1]

    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = load_program(program)(images)
    torch.save({"images": images, "logits": expected}, tmp_path / "expected.pt")
    script = textwrap.dedent(f"""
        import sys
        import torch
        import torchao  # registers the int8 (quantized_decomposed) operators
        model = torch.export.load({str(program)!r}).module()
        saved = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            logits = model(saved["images"])
        assert "fastload" not in sys.modules
        print(float((logits - saved["logits"]).abs().max()))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True,
                          capture_output=True, text=True)
    assert float(done.stdout.split()[-1]) <= 1e-5
    assert expected.shape == (3, 4)


def test_skip_quantize_keeps_matching_modules_in_float():
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    skip = ["head", "blocks.0", "blocks.*.attn.proj"]
    assert resolve_skip(model, skip)[:3] == ["head", "blocks.0", "blocks.0.attn.proj"]
    prepared = prepare_static(model, 32, skip)
    calibrate(prepared, [(torch.randn(4, 3, 32, 32), None)], 1)
    # 50 quantizable layers less the head, block 0's four and the other 11 blocks' attn.proj.
    assert quantized_layer_count(convert(prepared)) == 50 - 1 - 4 - 11


def test_skip_quantize_pattern_that_matches_nothing_names_the_pattern():
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    with pytest.raises(ValueError, match="skip_quantize pattern 'block.0'"):
        resolve_skip(model, ["block.0"])


def test_layer_groups_are_the_patch_embedding_each_block_and_the_head():
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    assert layer_groups(model) == ["patch_embed", *[f"blocks.{i}" for i in range(12)], "head"]


@pytest.mark.slow
def test_sensitivity_measures_the_top1_change_of_each_layer_group(fp32_checkpoint):
    base, costs = sensitivity(fp32_checkpoint, calibration_batches=1,
                              groups=["patch_embed", "blocks.0", "head"])
    assert base >= 0.75
    assert [c.group for c in costs] == ["patch_embed", "blocks.0", "head"]
    for cost in costs:
        assert 0.0 <= cost.top1 <= 1.0 and cost.change == cost.top1 - base
        assert abs(cost.change) <= ONE_VAL_IMAGE  # one group alone costs at most one image here
    assert all(c.loss_change != 0.0 for c in costs)  # int8 rounding moves every group's logits


@pytest.mark.slow
def test_export_cli_reports_static_int8_as_json(fp32_checkpoint, tmp_path, capsys):
    out = tmp_path / "cli.int8.pt2"
    args = ["export", str(fp32_checkpoint), "--quantize", "static", "--calibration-batches", "1",
            "--skip-quantize", "head", "--latency-batches", "2", "--no-compile", "-o", str(out), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["quantize"] == "static" and out.is_file()
    assert report["skipped"] == ["head"] and report["quantized_layers"] == 49
    assert report["top1_change"] == report["int8_top1"] - report["fp32_top1"]


def test_export_cli_refuses_qat_for_a_checkpoint_trained_without_it(fp32_checkpoint, capsys):
    assert main(["export", str(fp32_checkpoint), "--quantize", "qat"]) == 2
    assert "qat=False" in capsys.readouterr().err
