"""A resume continues its checkpoint's run exactly: a setting of the run's trajectory that
differs from the checkpoint's, a run with nothing left to do, and options that would be
ignored are refused before any work, each naming what to change; the checkpoint is kept."""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest

from fastload.tools.cli import main as cli
from fastload.train.amp import ScalerConfig
from fastload.train.checkpoint import load_checkpoint, save_checkpoint
from fastload.train.finetune import FinetuneConfig, finetune
from fastload.utils.checks import is_json_lines


def _common(data) -> dict:
    return dict(train_lmdb=str(data), img_size=32, batch_size=8, epochs=2, num_workers=0,
                progress=False, warmup_steps=1, device="cpu")


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def checkpoint(sharded_set, tmp_path_factory):
    """A run on the 3-class set (8 micro-batches an epoch, 2 epochs) stopped after one step."""
    path = tmp_path_factory.mktemp("resume_settings") / "run.pt"
    finetune(FinetuneConfig(**_common(sharded_set), max_steps=1, checkpoint=str(path)))
    return path


@pytest.mark.parametrize("change, shown", [
    ({"lr": 1e-7}, "lr=None"),
    ({"weight_decay": 0.5}, "weight_decay=0.01"),
    ({"accum_steps": 3}, "accum_steps=1"),
    ({"seed": 5}, "seed=0"),
    ({"optimizer": "lamb"}, "optimizer='adamw'"),
    ({"freeze": ("blocks.0.*",)}, "freeze=[]"),
    ({"epochs": 3}, "epochs=2"),
    ({"batch_size": 4}, "batch_size=8"),
    ({"img_size": 48}, "img_size=32"),
    ({"scaler": ScalerConfig(init_scale=1024.0)}, "init_scale=65536.0"),
])
def test_a_resume_with_another_trajectory_setting_is_refused_naming_both_values(
        checkpoint, sharded_set, change, shown):
    before = _digest(checkpoint)
    config = {**_common(sharded_set), **change}
    with pytest.raises(ValueError) as error:
        finetune(FinetuneConfig(**config, resume=str(checkpoint)))
    message = str(error.value)
    name = shown.split("=")[0]
    assert f"was trained with {shown}, but got {name}=" in message
    assert "start a new run from its weights" in message
    assert _digest(checkpoint) == before


def test_a_resume_past_max_steps_is_refused_as_nothing_left_to_do(checkpoint, sharded_set):
    with pytest.raises(ValueError, match=r"has done 1 optimizer steps, and max_steps=1 "):
        finetune(FinetuneConfig(**_common(sharded_set), max_steps=1, resume=str(checkpoint)))


def test_a_resume_of_a_finished_run_is_refused_naming_the_way_to_train_further(
        checkpoint, sharded_set, tmp_path):
    state = load_checkpoint(checkpoint)
    state["loader"] = {**state["loader"], "epoch": 2, "micro_step": 0}  # as its last epoch ends
    finished = save_checkpoint(tmp_path / "finished.pt",
                               {k: v for k, v in state.items() if k not in ("format", "version")})
    with pytest.raises(ValueError, match=r"finished its run \(all 2 epochs\): nothing is left "
                                         r"to resume; to train further, start a new run from "
                                         r"its weights instead"):
        finetune(FinetuneConfig(**_common(sharded_set), resume=str(finished)))


def test_the_cli_resume_alone_takes_the_checkpoints_settings_and_refuses_a_changed_one(
        checkpoint, sharded_set, tmp_path, capsys):
    resumed = tmp_path / "resumed.pt"
    resumed.write_bytes(checkpoint.read_bytes())
    common = ["finetune", "--train-lmdb", str(sharded_set), "--workers", "0", "--device", "cpu",
              "--no-progress", "--resume", str(resumed)]
    assert cli([*common, "--img-size", "48"]) == 2  # given, and not the checkpoint's
    assert ("was trained with --img-size 32, but got --img-size 48"
            in capsys.readouterr().err)
    assert cli([*common, "--max-steps", "2"]) == 0  # the rest left out: the checkpoint's
    out = capsys.readouterr().out
    assert (f"resuming {resumed} with its settings: --img-size 32 --batch-size 8 "
            "--warmup-steps 1" in out)
    assert "| 1 (resumed at batch 1/8) |" in out and "steps: 2" in out


def test_the_cli_names_resume_for_a_file_that_is_not_a_checkpoint(tmp_path, sharded_set, capsys):
    picture = tmp_path / "img.jpg"
    picture.write_bytes(b"\xff\xd8\xff\xe0" + bytes(100))
    code = cli(["finetune", "--train-lmdb", str(sharded_set), "--resume", str(picture),
                "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"--resume '{picture}'" in err and "--checkpoint" not in err
    assert picture.read_bytes()[:4] == b"\xff\xd8\xff\xe0"


@pytest.mark.parametrize("argv, named", [
    (["--growth-factor", "1"], "should be a number > 1, but got --growth-factor 1.0"),
    (["--init-scale", "0"], "should be a number > 0, but got --init-scale 0.0"),
    (["--backoff-factor", "1"], "should be a number in (0, 1), but got --backoff-factor 1.0"),
    (["--growth-interval", "0"], "should be an integer >= 1, but got --growth-interval 0"),
    (["--model", "vit_nosuch_model"], "but got --model 'vit_nosuch_model'"),
    (["--val-lmdb", "elsewhere.lmdb"], "applies beside a training database (--train-lmdb ...)"),
    (["--qat-start-epoch", "1"], "applies to quantization-aware training only"),
    (["--skip-quantize", "head"], "applies to quantization-aware training only"),
    (["--checkpoint-every", "1"], "needs a checkpoint file to write (--checkpoint ...)"),
])
def test_a_setting_out_of_range_or_without_effect_is_a_usage_error(sharded_set, tmp_path,
                                                                   capsys, argv, named):
    data = tmp_path / "DATA"
    data.mkdir()
    (data / "train.lmdb").symlink_to(sharded_set)
    code = cli(["finetune", str(data), "--device", "cpu", "--no-progress", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in err and "Traceback" not in err


def test_the_log_is_appended_to_a_log_only(tmp_path, sharded_set, capsys):
    checkpoint = tmp_path / "victim.jpg"
    checkpoint.write_bytes(b"\xff\xd8\xff\xe0" + bytes(64))
    code = cli(["finetune", "--train-lmdb", str(sharded_set), "--log", str(checkpoint),
                "--device", "cpu", "--no-progress"])
    assert code == 2 and "is an existing file that is not a JSON lines log" in capsys.readouterr().err
    assert checkpoint.read_bytes() == b"\xff\xd8\xff\xe0" + bytes(64)
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"event": "start"}) + "\n")
    assert is_json_lines(log) and is_json_lines(tmp_path / "empty") is False
    (tmp_path / "empty").write_bytes(b"")
    assert is_json_lines(tmp_path / "empty") and not is_json_lines(checkpoint)


def test_a_warm_up_longer_than_the_run_warns_that_the_rate_never_decays(sharded_set):
    config = {**_common(sharded_set), "warmup_steps": 1000, "epochs": 1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune(FinetuneConfig(**config, max_steps=1))
    messages = [str(w.message) for w in caught]
    assert any("warmup_steps=1000 is 1000 optimizer steps, longer than the run's 8" in m
               and "never decays" in m for m in messages), messages
