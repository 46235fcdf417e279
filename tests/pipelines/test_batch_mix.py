"""The reference MixUp/CutMix collate, run in place on the batch, gives torchvision's values."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import default_collate
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

import fastload
from fastload import FallbackWarning
from fastload.pipelines import MixCollate
from fastload.pipelines.suffix import collate as collate_module
from fastload.pipelines.suffix.collate import fused_collate, guess_supported

CLASSES = 5


def _reference(mix):
    def collate_fn(batch):  # torchvision's references/classification/train.py
        return mix(*default_collate(batch))

    return collate_fn


class _Collate:
    def __init__(self, mix):
        self.mix = mix

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


def _pairs(seed: int, n: int = 6, size: int = 23) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(3, size, size + 3, generator=g) * 4 - 2,
             int(torch.randint(CLASSES, (), generator=g))) for _ in range(n)]


MIXES = {
    "mixup": lambda: v2.MixUp(alpha=0.2, num_classes=CLASSES),
    "cutmix": lambda: v2.CutMix(alpha=1.0, num_classes=CLASSES),
    "choice": lambda: v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES),
                                       v2.CutMix(alpha=1.0, num_classes=CLASSES)], p=[0.3, 0.7]),
}


@pytest.mark.parametrize("name", sorted(MIXES))
@pytest.mark.parametrize("shape", [_reference, _Collate, MixCollate],
                         ids=["closure", "object", "batch_mix"])
@pytest.mark.parametrize("c_kernels", [True, False], ids=["C", "torch-ops"])
def test_fused_mix_equals_the_collate_on_the_same_global_draws(name, shape, c_kernels,
                                                                monkeypatch):
    from fastload.pipelines.fast import kernels

    if c_kernels and not kernels.AVAILABLE:
        pytest.skip("the C extension is not built")
    monkeypatch.setattr(kernels, "AVAILABLE", c_kernels)
    collate = shape(MIXES[name]())
    fused = fused_collate(collate)
    assert fused is not None
    for seed in range(25):
        pairs = _pairs(seed, n=1 + seed % 7)
        torch.manual_seed(seed)
        want_images, want_labels = collate(pairs)
        after_collate = torch.get_rng_state()
        torch.manual_seed(seed)
        images, labels = default_collate(pairs)
        got_images, got_labels = fused(images, labels)
        assert torch.equal(torch.get_rng_state(), after_collate), seed  # the same draws
        assert torch.equal(got_images, want_images) and torch.equal(got_labels, want_labels), seed
        assert got_images.data_ptr() == images.data_ptr()  # in place


def test_only_the_reference_shape_with_torchvisions_mixes_is_recognised():
    mix = MIXES["choice"]()

    class MyMixUp(v2.MixUp):
        pass

    def two_steps(batch):
        images, labels = default_collate(batch)
        return mix(images, labels)

    assert fused_collate(default_collate) is None
    assert fused_collate(two_steps) is None
    assert fused_collate(lambda batch: mix(*default_collate(batch))) is not None
    assert fused_collate(_reference(MyMixUp(alpha=0.2, num_classes=CLASSES))) is None
    assert fused_collate(_reference(v2.RandomChoice([v2.MixUp(num_classes=CLASSES),
                                                     v2.RandomHorizontalFlip()]))) is None
    assert fused_collate(_reference(T.RandomChoice([v2.MixUp(num_classes=CLASSES)]))) is None
    assert fused_collate(_reference(v2.Compose([v2.MixUp(num_classes=CLASSES)]))) is None


def test_batches_off_the_plain_layout_run_torchvision_itself():
    fused = fused_collate(_reference(MIXES["mixup"]()))
    images, labels = default_collate(_pairs(1))
    soft = torch.nn.functional.one_hot(labels, CLASSES).float()
    torch.manual_seed(3)
    want = v2.MixUp(alpha=0.2, num_classes=CLASSES)(images.clone(), soft)
    torch.manual_seed(3)
    got = fused(images.clone(), soft)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="batch size"):
        fused(images[:3], labels)  # torchvision's own error


def test_loader_mixes_the_batch_in_place_with_the_collates_values(synth_root):
    num_classes = len(ImageFolder(synth_root / "train").classes)
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                           v2.CutMix(alpha=1.0, num_classes=num_classes)])

    def collate_fn(batch):
        return mix(*default_collate(batch))

    def unrecognised(batch):  # the same collate, written so fastload cannot see through it
        collated = default_collate(batch)
        return mix(*collated)

    train = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                       T.PILToTensor(), T.ConvertImageDtype(torch.float)])
    dataset = ImageFolder(synth_root / "train", train)
    batches = {}
    for name, collate in (("fused", collate_fn), ("plain", unrecognised)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2, seed=5,
                                         collate_fn=collate, drop_last=True)
        assert ("in place on the batch tensor" in str(loader.plan)) == (name == "fused")
        torch.manual_seed(11)
        batches[name] = list(loader)
    assert len(batches["fused"]) == len(batches["plain"]) > 1
    for (images, labels), (ref_images, ref_labels) in zip(batches["fused"], batches["plain"],
                                                          strict=True):
        assert torch.equal(images, ref_images) and torch.equal(labels, ref_labels)


def test_the_bytecode_guess_runs_only_on_the_interpreters_it_was_checked_on(monkeypatch):
    assert guess_supported("cpython", (3, 10)) and guess_supported("cpython", (3, 13, 2))
    assert not guess_supported("cpython", (3, 9)) and not guess_supported("cpython", (3, 14))
    assert not guess_supported("pypy", (3, 11))
    here = sys.implementation.name == "cpython" and (3, 10) <= sys.version_info[:2] <= (3, 13)
    assert guess_supported() == here
    mix = MIXES["choice"]()
    monkeypatch.setattr(collate_module, "GUESS_CHECKED", ("cpython", (3, 0), (3, 1)))
    assert not guess_supported()
    assert fused_collate(_reference(mix)) is None  # declined, no error: the collate runs as is
    assert fused_collate(MixCollate(mix)) is not None  # the opt-in needs no guess


def test_mix_collate_is_the_reference_collate_and_refuses_what_cannot_be_called():
    mix = MIXES["mixup"]()
    pairs = _pairs(2)
    torch.manual_seed(4)
    want = _reference(mix)(pairs)
    torch.manual_seed(4)
    got = MixCollate(mix)(pairs)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert repr(MixCollate(mix)).startswith("MixCollate(MixUp(")
    with pytest.raises(TypeError, match=r"batch_mix should be a callable .*batch_mix=3"):
        MixCollate(3)


def test_loader_batch_mix_gives_the_reference_collates_batches_and_says_so(synth_root):
    num_classes = len(ImageFolder(synth_root / "train").classes)
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                           v2.CutMix(alpha=1.0, num_classes=num_classes)])
    dataset = ImageFolder(synth_root / "train", T.Compose([T.RandomResizedCrop(32),
                                                           T.ToTensor()]))
    batches = {}
    for name, kwargs in (("opt-in", {"batch_mix": mix}),
                         ("collate", {"collate_fn": _reference(mix)})):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            loader = fastload.DataLoader(dataset, batch_size=8, seed=5, drop_last=True, **kwargs)
        torch.manual_seed(11)
        batches[name] = list(loader)
    assert loader.batch_mix is None
    opt_in = fastload.DataLoader(dataset, batch_size=8, batch_mix=mix)
    assert opt_in.batch_mix is mix and isinstance(opt_in.collate_fn, MixCollate)
    assert "default_collate, then batch_mix=RandomChoice: RandomChoice of torchvision v2 in place" \
        in str(opt_in.plan)
    assert len(batches["opt-in"]) == len(batches["collate"]) > 1
    for (images, labels), (ref_images, ref_labels) in zip(batches["opt-in"], batches["collate"],
                                                          strict=True):
        assert torch.equal(images, ref_images) and torch.equal(labels, ref_labels)


def test_loader_batch_mix_excludes_collate_fn_and_needs_a_callable(synth_root):
    dataset = ImageFolder(synth_root / "train", T.ToTensor())
    with pytest.raises(ValueError, match="batch_mix option is mutually exclusive with collate_fn"):
        fastload.DataLoader(dataset, collate_fn=list, batch_mix=MIXES["mixup"]())
    with pytest.raises(TypeError, match="batch_mix should be a callable"):
        fastload.DataLoader(dataset, batch_mix="mixup")
    loader = fastload.DataLoader(dataset, collate_fn=default_collate, batch_mix=MIXES["mixup"]())
    assert isinstance(loader.collate_fn, MixCollate)


def test_loader_batch_mix_runs_in_torchs_loader_on_a_fallback():
    pairs = [(torch.rand(3, 8, 8), i % CLASSES) for i in range(8)]  # a dataset torch reads
    with pytest.warns(FallbackWarning):
        loader = fastload.DataLoader(pairs, batch_size=4, batch_mix=MIXES["cutmix"]())
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 8, 8) and labels.shape == (4, CLASSES)  # one-hot, mixed


def test_the_plan_names_batch_mix_where_the_guess_does_not_run(synth_root, monkeypatch):
    dataset = ImageFolder(synth_root / "train", T.ToTensor())
    collate = _reference(MIXES["mixup"]())
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=collate)
    assert "batch_mix=" not in str(loader.plan)
    monkeypatch.setattr(collate_module, "GUESS_CHECKED", ("cpython", (3, 0), (3, 1)))
    loader = fastload.DataLoader(dataset, batch_size=4, collate_fn=collate)
    assert "on the list of per-sample (image, label)" in str(loader.plan)
    assert "passed as batch_mix=" in str(loader.plan)
