"""Fixtures of the training tests: one fine-tuned checkpoint for the export tests."""

from __future__ import annotations

import pytest
from shared_build import built_once

from fastload.train.finetune import FinetuneConfig, finetune


@pytest.fixture(scope="session")
def fp32_checkpoint(synth_root, tmp_path_factory):
    """A 2-epoch fp32 fine-tune of ViT-Tiny at 32 px on the generated set (val top-1 >= 0.75),
    trained once for the session (both pytest-xdist workers read it; do not modify)."""

    def train(folder) -> None:
        result = finetune(FinetuneConfig(data=str(synth_root), loader="torch", img_size=32,
                                         batch_size=8, epochs=2, warmup_steps=2, num_workers=0,
                                         progress=False, device="cpu",
                                         checkpoint=str(folder / "run.pt")))
        assert result.val_top1 >= 0.75

    return built_once(tmp_path_factory, "fp32-checkpoint", train) / "run.pt"
