"""What runs where for a ``fastload.DataLoader``: DALI graph, torch suffix, collate.

``loader.plan`` is a :class:`LoaderPlan`; ``print(loader.plan)`` shows the stages. On the
DALI path a batch is made as: the DALI prefix decodes and transforms the batch; the torch
suffix (if any) runs on each sample, in ``num_workers`` threads when its draws are replayed
(see ``fastload.pipelines.suffix.replay``); then ``collate_fn`` receives the list of per-sample
``(image, label)`` pairs torch's DataLoader would give it — or, with neither a suffix nor a
custom ``collate_fn``, the batch tensor is returned as ``default_collate`` would make it. A
suffix ending in per-channel steps (``ToDtype``, ``Normalize`` ...) writes each sample's
output straight into the batch through one lookup table (``fastload.pipelines.suffix.tail``). On
the CPU the suffix of batch k+1 runs in the epoch's stage thread while the caller works on
batch k (``fastload.loader.epoch``), when nothing it runs touches the global generators of
this process: a suffix whose draws are replayed, or one run in worker processes. A suffix
run on the seeded global generators here, and a custom ``collate_fn`` (your code, which may
draw from them), run in ``__next__``, on the caller's thread, when the batch is handed out.
This module only describes; ``fastload.loader.stage`` runs the suffix and the collate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.utils.data import default_collate

__all__ = ["LoaderPlan"]


@dataclass(frozen=True)
class LoaderPlan:
    """A loader's stages. ``split``: the pipelines ``SplitPlan`` (None when falling back)."""

    split: Any
    collate: str
    device: str
    threads: int
    fallback_reason: str | None = None
    stage: Any = None  # the loader's SampleStage (loader/stage.py): where the suffix runs

    def __str__(self) -> str:
        if self.fallback_reason is not None:
            return f"torch.utils.data.DataLoader (fallback: {self.fallback_reason})"
        from fastload.pipelines import describe_decode

        stage = f"\n{self.stage.describe()}" if self.stage is not None and self.split.suffix else ""
        ahead = ""
        if self.stage is not None and self.stage.active and self.device == "cpu":
            ahead = f"\n{self.stage.describe_ahead()}"
        return (f"DALI on {self.device}, {self.threads} thread(s)\n{self.split.describe()}{stage}\n"
                f"{describe_decode(self.split.prefix, self.device)}\ncollate: {self.collate}{ahead}")


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def _is_mix_collate(collate_fn: Any) -> bool:
    try:
        from fastload.pipelines import MixCollate
    except ImportError:  # an unchecked torch/torchvision: the loader falls back anyway
        return False
    return isinstance(collate_fn, MixCollate)


def _guess_supported() -> bool:
    try:
        from fastload.pipelines import collate_guess_supported
    except ImportError:
        return True  # nothing to say: the loader falls back anyway
    return collate_guess_supported()


def make_plan(split: Any, collate_fn: Any, device: str, threads: int,
              reason: str | None, stage: Any = None) -> LoaderPlan:
    """The LoaderPlan of a loader (``split`` None when ``reason`` says why it falls back)."""
    if collate_fn is None or collate_fn is default_collate:
        if split is None or not split.suffix:
            collate = "default_collate (batch tensor from DALI)"
        elif split.suffix.tail is not None:
            collate = ("default_collate: the suffix's table-lookup tail writes each sample into "
                       "the batch tensor (per-sample outputs stacked where it cannot)")
        else:
            collate = "default_collate of the per-sample suffix outputs"
    elif (mix := getattr(collate_fn, "mix", None)) is not None and _is_mix_collate(collate_fn):
        collate = f"default_collate, then batch_mix={_name(mix)}"
        collate += (f": {stage.batch_mix.describe()}"
                    if device == "cpu" and getattr(stage, "batch_mix", None) is not None
                    else ", run as given on the batch")
    elif device == "cpu" and getattr(stage, "batch_mix", None) is not None:
        collate = (f"{_name(collate_fn)} on the batch tensor, recognised as default_collate "
                   f"then {stage.batch_mix.describe()}")
    else:
        collate = f"{_name(collate_fn)} on the list of per-sample (image, label)"
        if not _guess_supported():
            collate += (" (a MixUp/CutMix collate runs in place on the batch when passed as "
                        "batch_mix=; it is read from a collate_fn on CPython 3.10-3.13 only)")
    return LoaderPlan(split, collate, device, threads, reason, stage)
