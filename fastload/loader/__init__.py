"""``fastload.DataLoader``: torch's DataLoader contract, batches made by a DALI graph.

dataloader (the drop-in class, the fallback to torch's), epoch (one epoch: ``EpochIterator``,
the caller's side, composing a ``Maker`` that owns the maker thread and the hand-off),
in_flight (a batch from its indices to a typed outcome), recovery (a plain ``Recovery`` of
damaged samples), context (what an epoch receives from its loader), stage (the torch suffix
and custom collate), plan (what runs where), datasets (what a ``dataset=`` path names),
sample_sources (each kind's reads and labels; image_headers: sizes from headers), sampling
(the one seed rule, epoch order, sharding; keyed_order: the order of large sets),
batch_order (the position in the epochs, saved and resumed), shard_order (sharded sets),
state_fields (a loaded ``state_dict``'s checks), presets (ImageNet transforms), stall (the
data-wait meter), damage (the damaged-JPEG check), read_buffers, devices, iter_draws.

This module is the package's face (names load lazily). Imports ``fastload.data`` and
``fastload.pipelines`` (through its face).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload.utils.lazy import lazy_exports

_EXPORTS = {
    "DataLoader": (".dataloader", "DataLoader"),
    "FallbackWarning": (".dataloader", "FallbackWarning"),
    "SampleError": (".sample_sources", "SampleError"),
    "StallMeter": (".stall", "StallMeter"),
}

__all__ = ["DataLoader", "FallbackWarning", "SampleError", "StallMeter"]

if TYPE_CHECKING:
    from .dataloader import DataLoader, FallbackWarning
    from .sample_sources import SampleError
    from .stall import StallMeter


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
