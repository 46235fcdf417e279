"""The reference fine-tuning loop learns generated classes through every data path."""

from __future__ import annotations

import pytest

from fastload.train.finetune import FinetuneConfig, resolve_data
from fastload.train.model import create_model, freeze_parameters

CHANCE = 0.25  # 4 classes


@pytest.mark.parametrize("loader, data_format", [("torch", "folder"), ("fastload", "lmdb")])
def test_two_epochs_beat_chance_so_labels_line_up(two_epoch_run, loader, data_format):
    kwargs, result = two_epoch_run(loader)
    assert resolve_data(FinetuneConfig(data=kwargs["data"]))[0] == data_format
    assert result.classes == ["class_00", "class_01", "class_02", "class_03"]
    assert [e.images for e in result.epochs] == [48, 48]
    assert [e.steps for e in result.epochs] == [3, 3] and len(result.losses) == 12
    assert result.val_top1 >= 0.75 > CHANCE
    assert result.epochs[1].train_loss < result.epochs[0].train_loss
    last = result.epochs[-1]
    assert 0.0 <= last.data_stall_share <= 1.0 and last.images_per_s > 0
    # on CPU the growth above the pre-training RSS can be 0 in a process whose earlier frees
    # were returned to the system meanwhile; the epoch's own peak is always measured
    assert last.peak_rss_mb > 0 and 0 <= last.peak_mem_mb <= last.peak_rss_mb


def test_freeze_patterns_leave_only_matching_parameters_trainable():
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    trainable, total = freeze_parameters(model, ["patch_embed.*", "blocks.[0-5].*", "cls_token"])
    assert 0 < trainable < total == sum(p.numel() for p in model.parameters())
    assert not model.blocks[5].mlp.fc1.weight.requires_grad
    assert model.blocks[6].mlp.fc1.weight.requires_grad and model.head.weight.requires_grad


def test_freeze_pattern_that_matches_nothing_names_the_pattern():
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    with pytest.raises(ValueError, match="'block.*'"):
        freeze_parameters(model, ["block.*"])


def test_missing_data_folder_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="train.lmdb"):
        resolve_data(FinetuneConfig(data=str(tmp_path)))


def test_a_data_folder_that_does_not_exist_is_named_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'.*nothing' does not exist; pass a folder with "
                                                r"train/ and val/ \(make one with `fastload synth"):
        resolve_data(FinetuneConfig(data=str(tmp_path / "nothing")))


def test_local_weights_load_except_a_classifier_of_another_size(tmp_path):
    from safetensors.torch import save_file

    from fastload.train.optim import default_lr

    source = create_model("vit_tiny_patch16_224", num_classes=10, img_size=32)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32, weights=path)
    assert model.head.weight.shape == (4, 192)
    assert model.blocks[3].attn.qkv.weight.equal(source.blocks[3].attn.qkv.weight)
    assert not model.head.weight.equal(source.head.weight[:4])
    assert default_lr(from_weights=True) == 2e-5 and default_lr(from_weights=False) == 1e-3


def test_compare_rows_add_one_technique_at_a_time(tmp_path):
    from fastload.train.compare import format_table, row_configs

    base = FinetuneConfig(data=str(tmp_path), img_size=32, batch_size=16, amp="fp16",
                          loader="fastload", freeze=("head.*",))
    import torch

    state = torch.get_rng_state()
    rows = row_configs(base, ["baseline", "fastload", "amp", "gc", "accum", "freeze"])
    assert torch.equal(torch.get_rng_state(), state)  # the freeze row's probe model drew nothing
    names = [name for name, _ in rows]
    assert names == ["baseline", "fastload", "amp", "gc", "accum", "freeze"]
    configs = dict(rows)
    first = configs["baseline"]
    assert (first.loader, first.data_format, first.amp, first.freeze) == ("torch", "folder", "off", ())
    assert not first.grad_checkpointing and first.accum_steps == 1 and first.batch_size == 16
    assert configs["fastload"].loader == "fastload" and configs["fastload"].data_format == "lmdb"
    assert configs["amp"].amp == "bf16" and configs["amp"].loader == "fastload"
    assert configs["gc"].grad_checkpointing and configs["gc"].amp == "bf16"
    assert (configs["accum"].batch_size, configs["accum"].accum_steps) == (8, 2)
    assert configs["freeze"].freeze[0] == "patch_embed.*" and "blocks.5.*" in configs["freeze"].freeze
    assert "blocks.6.*" not in configs["freeze"].freeze and configs["freeze"].grad_checkpointing
    only_gc = row_configs(base, ["gc", "baseline"])  # a subset stays cumulative, in table order
    assert [n for n, _ in only_gc] == ["baseline", "gc"] and only_gc[1][1].loader == "torch"
    table = format_table([{"label": "a", "time_per_epoch_s": 2.0, "images_per_s": 10.0,
                           "data_stall_share": 0.5, "peak_mem_mb": 100.0, "val_top1": 0.5,
                           "tree_pss_mb": 1500.0, "tree_uss_mb": 1200.0},
                          {"label": "b", "time_per_epoch_s": 1.0, "images_per_s": 20.0,
                           "data_stall_share": 0.1, "peak_mem_mb": 50.0, "val_top1": None,
                           "tree_pss_mb": 900.0, "tree_uss_mb": None}])
    assert "peak PSS, process tree (MiB) | peak USS, process tree (MiB)" in table
    assert "| b | 1.00 | 20.0 | 2.00x | 10% | 900 | n/a | n/a |" in table
    with pytest.raises(ValueError, match="'fast'"):
        row_configs(base, ["fast"])


def test_a_run_leaves_the_callers_global_random_state_as_it_found_it(synth_lmdb_data):
    import torch

    from fastload.train.finetune import finetune

    torch.manual_seed(1234)
    before = torch.get_rng_state()
    expected_next = torch.rand(3)
    torch.set_rng_state(before)
    finetune(FinetuneConfig(data=str(synth_lmdb_data), loader="fastload", img_size=32,
                            batch_size=16, epochs=1, num_workers=0, progress=False,
                            warmup_steps=1, device="cpu", seed=7))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(torch.rand(3), expected_next)


@pytest.mark.skipif(not __import__("torch").cuda.is_available()
                    or __import__("torch").cuda.device_count() < 2, reason="needs two GPUs")
def test_a_run_on_a_named_gpu_trains_there_and_gives_back_the_callers_current_device(
        synth_lmdb_data, tmp_path):
    import json

    import torch

    from fastload.train.finetune import finetune

    torch.cuda.set_device(0)
    log = tmp_path / "run.jsonl"
    finetune(FinetuneConfig(data=str(synth_lmdb_data), loader="fastload", img_size=32,
                            batch_size=16, epochs=1, num_workers=0, progress=False,
                            warmup_steps=1, device="cuda:1", log=str(log)))
    start = json.loads(log.read_text().splitlines()[0])
    assert start["device"] == "cuda:1" and torch.cuda.current_device() == 0


def test_weights_torch_refuses_are_named_without_torchs_advice_to_unpickle(tmp_path):
    from fastload.train.model import load_weights

    model = create_model("vit_tiny_patch16_224", num_classes=4, img_size=32)
    text = tmp_path / "notes.pt"
    text.write_text("not weights")
    with pytest.raises(ValueError, match=r"weights='.*notes.pt' could not be read as a "
                                         r"safetensors or torch state dict") as refused:
        load_weights(model, text)
    assert "weights_only=False" not in str(refused.value)
