"""`fastload finetune --resume` refuses data with other classes (naming both lists) before the
model's size check, and labels the row of the epoch it resumed (other settings:
test_resume_settings.py)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fastload.data.convert.folder import convert_folder
from fastload.tools.cli import main as cli
from fastload.train.finetune import FinetuneConfig, finetune


def _common(data) -> dict:
    return dict(train_lmdb=str(data), img_size=32, batch_size=8, epochs=1, num_workers=0,
                progress=False, warmup_steps=1, device="cpu")


@pytest.fixture(scope="module")
def checkpoint(sharded_set, tmp_path_factory):
    """A run on the 3-class set (8 micro-batches an epoch) stopped after its first step."""
    path = tmp_path_factory.mktemp("resume_ckpt") / "run.pt"
    finetune(FinetuneConfig(**_common(sharded_set), max_steps=1, checkpoint=str(path)))
    return path


def _set_with_classes(root, names) -> str:
    rng = np.random.default_rng(0)
    for i in range(2 * len(names)):
        folder = root / "src" / names[i % len(names)]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(
            folder / f"{i}.jpg")
    convert_folder(root / "src", root / "db", workers=1, progress=False)
    return str(root / "db")


@pytest.mark.slow
@pytest.mark.parametrize("names", [["cat", "dog", "fox"], ["a", "b", "c", "d"]])
def test_resume_on_data_with_other_classes_names_both_class_lists(checkpoint, tmp_path, names):
    data = _set_with_classes(tmp_path, names)
    with pytest.raises(ValueError) as error:
        finetune(FinetuneConfig(**_common(data), resume=str(checkpoint)))
    message = str(error.value)
    assert "was trained on 3 classes ['class_0', 'class_1', 'class_2']" in message
    assert f"has {len(names)} classes [{', '.join(repr(n) for n in names)}]" in message
    assert "size mismatch" not in message


@pytest.mark.slow
def test_the_resumed_epoch_row_says_it_covers_only_the_batches_after_the_resume(
        checkpoint, sharded_set, tmp_path, capsys):
    resumed = tmp_path / "resumed.pt"
    resumed.write_bytes(checkpoint.read_bytes())
    code = cli(["finetune", "--train-lmdb", str(sharded_set), "--img-size", "32",
                "--batch-size", "8", "--epochs", "1", "--workers", "0", "--warmup-steps", "1",
                "--device", "cpu", "--no-progress", "--resume", str(resumed)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| 1 (resumed at batch 1/8) |" in out
    assert "epoch 1 was resumed from a checkpoint" in out and "batches 2-8 of 8" in out
