"""Int8 dynamic quantization of a fine-tuned checkpoint: smaller file, accuracy reported."""

from __future__ import annotations

import json

import pytest
import torch

from fastload.tools.cli import main
from fastload.train.export import model_from_checkpoint, quantize_dynamic_int8


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_export_dynamic_int8_shrinks_the_model_and_reports_top1(fp32_checkpoint, tmp_path,
                                                               capsys):
    ckpt = fp32_checkpoint
    out = tmp_path / "int8.pt"
    assert main(["export", str(ckpt), "--quantize", "dynamic", "--output", str(out),
                 "--latency-batches", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["output"] == str(out) and out.is_file()
    assert report["quantized_layers"] == 12 * 4 + 1  # qkv, proj, fc1, fc2 per block + head
    assert report["size_ratio"] < 0.5  # int8 weights are a quarter of fp32's
    assert report["latency_ratio"] > 0 and report["compiled"] is False  # dynamic runs eagerly
    assert 0.0 <= report["fp32_top1"] <= 1.0 and 0.0 <= report["int8_top1"] <= 1.0
    assert report["top1_change"] == report["int8_top1"] - report["fp32_top1"]

    # The int8 file loads without unpickling code into a freshly quantized model.
    state = torch.get_rng_state()
    fp32, _ = model_from_checkpoint(ckpt)
    assert torch.equal(torch.get_rng_state(), state)  # its init, overwritten, drew nothing
    int8 = quantize_dynamic_int8(fp32)
    int8.load_state_dict(torch.load(out, weights_only=True))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert int8(images).shape == (2, 4)
        assert torch.allclose(int8(images), fp32(images), atol=0.5)


def test_export_with_a_data_folder_that_does_not_exist_fails_naming_it(fp32_checkpoint, tmp_path,
                                                                        capsys):
    out = tmp_path / "int8.pt"
    code = main(["export", str(fp32_checkpoint), "--quantize", "dynamic", "--data",
                 str(tmp_path / "missing"), "--output", str(out)])
    assert code == 1 and not out.exists()
    assert f"--data '{tmp_path / 'missing'}' is not a folder" in capsys.readouterr().err


def test_export_of_a_checkpoint_cut_short_fails_as_a_damaged_file(fp32_checkpoint, tmp_path,
                                                                  capsys):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(fp32_checkpoint.read_bytes()[:100_000])
    assert main(["export", str(cut), "--quantize", "dynamic"]) == 1
    assert "could not be read (damaged or cut short?)" in capsys.readouterr().err


def test_sensitivity_refuses_the_outputs_it_would_not_write(tmp_path, capsys):
    checkpoint = tmp_path / "run.pt"  # refused before the checkpoint is read
    out = tmp_path / "sens.pt"
    assert main(["export", str(checkpoint), "--sensitivity", "--quantize", "dynamic",
                 "-o", str(out)]) == 2
    assert ("--sensitivity prints each layer group's cost and writes no model, so --quantize "
            "and --output would do nothing" in capsys.readouterr().err)
    assert not out.exists()


def test_calibration_batches_below_one_are_refused_as_the_arguments_are_read(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(tmp_path / "run.pt"), "--quantize", "static",
              "--calibration-batches", "0"])
    assert exit_.value.code == 2
    assert "argument --calibration-batches: should be 1 or more, but got 0" in \
        capsys.readouterr().err
