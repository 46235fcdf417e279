"""The torch suffix's deterministic tail as one lookup table per channel.

The transforms that end most recipes (``PILToTensor``/``ToImage``, ``ToTensor`` of the uint8
form of a PIL image, ``ConvertImageDtype``/``ToDtype``, ``Normalize``, ``ToPureTensor``, timm's
``MaybeToTensor``/``MaybePILToTensor``) map each uint8 value of a channel to one output value,
whatever the other pixels hold. Running them once on a ramp image (channel ``c``, one row
holding 0..255) therefore gives a table per channel, and a sample's tail output is
``table[c][pixel]``: exactly the transforms' own values (their arithmetic made the table), in
one pass (``lookup_planes`` in ``_normalize.c``: ~40 us for a 224 px image, where
``ConvertImageDtype`` + ``Normalize`` take ~500 us), written straight into the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from ..registry import lookup

try:
    from .._normalize import lookup_planes as _lookup_planes
except ImportError:  # no C compiler at install time: the torch form below (same values)
    _lookup_planes = None

__all__ = ["LookupTail", "is_pointwise"]

_ITEM_VIEWS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def is_pointwise(t: Any) -> bool:
    """``t`` maps each channel's uint8 values one by one (so a table can stand for it): the
    registry's ``per_pixel`` ops."""
    op = lookup(t)
    # v2 ToDtype given per type (a dict) may leave images alone; keep it as it is
    return op is not None and op.per_pixel and not isinstance(getattr(t, "dtype", None), dict)


class LookupTail:
    """``run(x, pil)`` applied through per-channel tables built by running it on a ramp.

    ``run`` applies the tail's transforms to a uint8 C x H x W tensor (``pil``: it stands for
    a PIL image, as in the suffix). A table is made per (channels, input type, pil) the first
    time one is needed; inputs it cannot stand for (not a uint8 CPU C x H x W tensor, a tail
    that fails or changes the shape on the ramp) are left to the caller (``write`` -> None)."""

    def __init__(self, run: Callable[[torch.Tensor, bool], Any]) -> None:
        self._run = run
        self._tables: dict[tuple, tuple[torch.Tensor, type] | None] = {}
        self._lock = threading.Lock()

    def table(self, channels: int, kind: type, pil: bool) -> tuple[torch.Tensor, type] | None:
        """``(table C x 256, output type)`` for inputs of ``channels`` and tensor ``kind``."""
        key = (channels, kind, pil)
        if key not in self._tables:
            with self._lock:
                if key not in self._tables:
                    self._tables[key] = self._probe(channels, kind, pil)
        return self._tables[key]

    def _probe(self, channels: int, kind: type, pil: bool) -> tuple[torch.Tensor, type] | None:
        ramp = torch.arange(256, dtype=torch.uint8).expand(channels, 1, 256).contiguous()
        if kind is not torch.Tensor:
            ramp = ramp.as_subclass(kind)
        try:
            out = self._run(ramp, pil)
        except Exception:  # the real samples then run the transforms and raise as torch does
            return None
        if (not isinstance(out, torch.Tensor) or out.device.type != "cpu"
                or tuple(out.shape) != (channels, 1, 256)
                or out.element_size() not in _ITEM_VIEWS):
            return None
        return out.as_subclass(torch.Tensor).reshape(channels, 256).contiguous(), type(out)

    def layout(self, images: torch.Tensor, pil: bool) -> tuple[torch.dtype, type] | None:
        """``(dtype, output type)`` of the tail's output for a batch of ``images``."""
        found = self.table(images.shape[1], torch.Tensor, pil)
        return None if found is None else (found[0].dtype, found[1])

    def write(self, x: Any, pil: bool, dst: torch.Tensor | None = None) -> torch.Tensor | None:
        """The tail's output for ``x`` (into ``dst`` when given), or None where no table fits:
        ``x`` is not a uint8 CPU C x H x W tensor (a PIL image counts as its uint8 form), or
        ``dst`` has another shape or dtype. A PIL image's interleaved pixels are read in
        place where the kernel is built."""
        if isinstance(x, torch.Tensor):
            if x.dtype != torch.uint8 or x.ndim != 3 or x.device.type != "cpu":
                return None
            kind, shape, interleaved = type(x), tuple(x.shape), False
            pixels = x.as_subclass(torch.Tensor).contiguous()
        else:
            import numpy as np
            from PIL import Image

            if not isinstance(x, Image.Image):
                return None
            if _lookup_planes is None or x.mode not in ("RGB", "L"):
                from torchvision.transforms.functional import pil_to_tensor

                return self.write(pil_to_tensor(x), True, dst)
            pixels = np.ascontiguousarray(np.asarray(x))
            kind, pil, interleaved = torch.Tensor, True, True
            shape = (1 if pixels.ndim == 2 else pixels.shape[2], x.height, x.width)
        found = self.table(shape[0], kind, pil)
        if found is None:
            return None
        table = found[0]
        if dst is None:
            dst = torch.empty(shape, dtype=table.dtype)
        elif tuple(dst.shape) != shape or dst.dtype != table.dtype:
            return None
        if _lookup_planes is not None and dst.is_contiguous():
            view = _ITEM_VIEWS[table.element_size()]
            src = pixels if interleaved else pixels.numpy()
            _lookup_planes(src, dst.view(view).numpy(), table.view(view).numpy(), interleaved)
        elif interleaved:
            return None  # the torch form below reads planar pixels only
        else:
            for c in range(shape[0]):
                dst[c] = table[c][pixels[c].long()]
        return dst
