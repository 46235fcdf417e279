"""Quantization-aware training (``FinetuneConfig.qat``): it learns, resumes exactly, refuses what
it cannot train with, and converts to an int8 model as accurate as the fake-quantized one."""

from __future__ import annotations

import pytest

from fastload.train.checkpoint import read_checkpoint
from fastload.train.export import export_checkpoint
from fastload.train.finetune import FinetuneConfig, finetune

ONE_VAL_IMAGE = 1 / 16  # the generated val set has 16 images


@pytest.fixture(scope="module")
def qat_run(synth_root, tmp_path_factory):
    """``(config kwargs, result, checkpoint)``: 2 epochs at 32 px, float in epoch 1, fake-quantized
    in epoch 2 (48 images, batch 8, 2 micro-batches per step: 3 steps per epoch), patch embedding frozen."""
    ckpt = tmp_path_factory.mktemp("qat") / "qat.pt"
    kwargs = dict(data=str(synth_root), loader="torch", img_size=32, batch_size=8, accum_steps=2,
                  epochs=2, warmup_steps=2, num_workers=0, progress=False, device="cpu",
                  qat=True, qat_start_epoch=1, freeze=("patch_embed.*",))
    return kwargs, finetune(FinetuneConfig(**kwargs, checkpoint=str(ckpt))), ckpt


@pytest.mark.slow
def test_qat_run_trains_fake_quantized_and_loss_falls(qat_run):
    _, result, ckpt = qat_run
    assert [e.steps for e in result.epochs] == [3, 3]
    assert result.epochs[1].train_loss < result.epochs[0].train_loss
    assert result.trainable_params < result.total_params  # freezing applies to the QAT model
    state = read_checkpoint(ckpt)
    assert state.config["qat"] and any(".activation_post_process" in k for k in state.model)


@pytest.mark.slow
def test_qat_run_resumes_from_its_checkpoint_with_the_uninterrupted_losses(qat_run, tmp_path):
    kwargs, full, _ = qat_run
    ckpt = tmp_path / "stopped.pt"
    first = finetune(FinetuneConfig(**kwargs, max_steps=4, checkpoint=str(ckpt)))  # inside epoch 2
    assert first.losses == full.losses[:8]
    frozen = read_checkpoint(ckpt).model["graph.patch_embed.proj.weight"]
    resumed = finetune(FinetuneConfig(**kwargs, resume=str(ckpt), checkpoint=str(ckpt)))
    assert resumed.losses == full.losses[8:]
    assert resumed.val_top1 == full.val_top1
    assert read_checkpoint(ckpt).model["graph.patch_embed.proj.weight"].equal(frozen)


@pytest.mark.slow
def test_qat_checkpoint_converts_to_int8_within_one_val_image_of_the_fake_quantized_model(
        qat_run, tmp_path):
    _, result, ckpt = qat_run
    report = export_checkpoint(ckpt, tmp_path / "qat.int8.pt2", quantize="qat",
                               latency_batches=(2,), latency_rounds=1, compile=False)
    assert report.fake_quant_top1 == result.val_top1  # what the run's last evaluation measured
    assert abs(report.int8_top1 - report.fake_quant_top1) <= ONE_VAL_IMAGE
    assert report.quantized_layers == 12 * 4 + 2 and report.size_ratio <= 0.3


@pytest.mark.parametrize("field, value, message", [
    ("amp", "bf16", "amp should be 'off'"),
    ("grad_checkpointing", True, "grad_checkpointing=True"),
    ("compile", True, "compile=True"),
    ("qat_start_epoch", 2, "qat_start_epoch should be an integer in"),
])
def test_qat_refuses_settings_it_cannot_train_with(synth_root, field, value, message):
    config = FinetuneConfig(data=str(synth_root), img_size=32, epochs=2, qat=True, **{field: value})
    with pytest.raises(ValueError, match=message):
        finetune(config)
