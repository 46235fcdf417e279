"""A custom collate_fn keeps the DALI path and receives what torch's DataLoader gives it."""

from __future__ import annotations

import warnings

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import default_collate
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

import fastload
from fastload import FallbackWarning

EVAL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def _fast(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return fastload.DataLoader(dataset, batch_size=8, num_workers=2, **kwargs)


def test_collate_fn_receives_the_list_of_per_sample_image_label_pairs(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL)
    ours = next(iter(_fast(dataset, collate_fn=list)))
    theirs = next(iter(TorchDataLoader(dataset, batch_size=8, collate_fn=list)))
    assert type(ours) is list and len(ours) == len(theirs) == 8
    for (image, label), (ref_image, ref_label) in zip(ours, theirs, strict=True):
        assert type(label) is type(ref_label) is int and label == ref_label
        assert image.shape == ref_image.shape and image.dtype == ref_image.dtype
        assert (image - ref_image).abs().mean() < 0.02  # DALI's vs Pillow's decode and resize


def test_collate_fn_result_is_returned_as_it_comes(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL)
    batch = next(iter(_fast(dataset, collate_fn=lambda pairs: {"n": len(pairs)})))
    assert batch == {"n": 8}


def test_collate_fn_sees_target_transform_outputs(synth_root):
    dataset = ImageFolder(synth_root / "val", EVAL, target_transform=lambda t: f"class{t}")
    ours = next(iter(_fast(dataset, collate_fn=list)))
    assert [label for _, label in ours] == [f"class{t}" for t in dataset.targets[:8]]


def test_reference_mixup_cutmix_collate_runs_on_dali(synth_root):
    num_classes = len(ImageFolder(synth_root / "train").classes)
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                           v2.CutMix(alpha=1.0, num_classes=num_classes)])

    def collate_fn(batch):
        return mix(*default_collate(batch))

    train = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                       T.PILToTensor(), T.ConvertImageDtype(torch.float)])
    dataset = ImageFolder(synth_root / "train", train)
    loader = _fast(dataset, collate_fn=collate_fn, drop_last=True)
    assert "collate: test_reference_mixup_cutmix_collate_runs_on_dali.<locals>.collate_fn on" in str(loader.plan)
    for images, targets in loader:
        assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
        assert targets.shape == (8, num_classes) and targets.dtype == torch.float32
        assert torch.allclose(targets.sum(dim=1), torch.ones(8))


def test_a_custom_collate_runs_in_next_on_the_callers_thread_in_order(synth_root):
    import threading

    calls = []

    def collate(pairs):
        calls.append(threading.current_thread().name)
        return torch.stack([image for image, _ in pairs]), [label for _, label in pairs]

    transform = T.Compose([T.RandomResizedCrop(24), T.PILToTensor()])
    dataset = ImageFolder(synth_root / "train", transform)
    loader = fastload.DataLoader(dataset, batch_size=4, seed=3, collate_fn=collate)
    iterator = iter(loader)
    first = next(iterator)
    # the next batches' pairs are made ahead; their collates wait for their next()
    assert calls == [threading.current_thread().name]
    assert loader.state_dict()["batches_yielded"] == 1  # only what was handed out counts
    rest = list(iterator)
    assert set(calls) == {threading.current_thread().name}
    alone = list(fastload.DataLoader(dataset, batch_size=4, seed=3, collate_fn=collate))
    assert all(torch.equal(a[0], b[0]) for a, b in zip([first, *rest], alone, strict=True))


def test_collates_drawing_from_torchs_generator_run_in_batch_order(synth_root):
    def collate(pairs):
        images = torch.stack([image for image, _ in pairs]).float()
        return images + torch.rand(()), [label for _, label in pairs]

    transform = T.Compose([T.RandomResizedCrop(24), T.RandAugment(), T.PILToTensor()])
    dataset = ImageFolder(synth_root / "train", transform)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        loader = fastload.DataLoader(dataset, batch_size=2, seed=3, collate_fn=collate,
                                     num_workers=2)
        runs.append(torch.cat([images for images, _ in loader]))
    assert torch.equal(runs[0], runs[1])
