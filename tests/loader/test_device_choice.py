"""``device=None`` picks the GPU this process trains on, as torch users pick it: the current
device the script set, else ``LOCAL_RANK``'s under torchrun (no GPU needed to check the rule;
the ``gpu`` test checks it on a real device)."""

from __future__ import annotations

import os

import pytest
import torch

from fastload.loader.devices import default_cuda_index


def test_device_none_under_torchrun_without_set_device_follows_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    # torch.cuda.current_device() is 0 when the script never called torch.cuda.set_device
    assert default_cuda_index(0, 8, os.environ) == 3


def test_a_device_the_script_set_wins_over_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert default_cuda_index(5, 8, os.environ) == 5  # torch.cuda.set_device(5)


def test_without_torchrun_the_current_device_is_used(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert default_cuda_index(0, 8, os.environ) == 0
    assert default_cuda_index(2, 8, os.environ) == 2


def test_one_visible_gpu_per_rank_is_that_gpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "6")  # CUDA_VISIBLE_DEVICES=6 for this rank: it is cuda:0
    assert default_cuda_index(0, 1, os.environ) == 0


@pytest.mark.parametrize("local_rank, message", [
    ("5", "LOCAL_RANK=5 but this process sees 4 CUDA devices"),
    ("first", "LOCAL_RANK='first' is not an integer"),
])
def test_a_local_rank_that_names_no_visible_gpu_is_a_clear_error(monkeypatch, local_rank,
                                                                  message):
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    with pytest.raises(ValueError, match=message):
        default_cuda_index(0, 4, os.environ)


@pytest.mark.gpu
def test_a_loader_under_torchrun_makes_its_batches_on_local_ranks_gpu(monkeypatch, synth_root):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    import fastload

    last = torch.cuda.device_count() - 1
    monkeypatch.setenv("LOCAL_RANK", str(last))
    dataset = ImageFolder(synth_root / "val", T.Compose([T.Resize(16), T.CenterCrop(16),
                                                         T.ToTensor()]))
    images, labels = next(iter(fastload.DataLoader(dataset, batch_size=4)))
    assert images.device == labels.device == torch.device("cuda", last)
