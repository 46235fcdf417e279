"""torchvision v2's ``MixUp``/``CutMix`` collate, run in place on the collated batch.

torchvision's reference training script collates with::

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

(``mixup_cutmix`` a ``v2.MixUp``, a ``v2.CutMix`` or a ``v2.RandomChoice`` of them). Run as
written, that stacks the samples into a new batch, then MixUp makes three more batch-sized
tensors (``roll``, ``mul``, the sum) and CutMix two, all on the caller's thread.
:class:`BatchMix` does the same on the batch tensor the suffix already wrote (no stack), in
place (:func:`~fastload.pipelines.suffix.collate.fused_collate` recognises the collate):

* the draws are the transform's own: ``RandomChoice``'s ``torch.multinomial``, then the
  chosen transform's ``make_params`` (its Beta sample, CutMix's box), on the caller's
  generators in the caller's thread, in torchvision's order; the labels go through the
  transform's own ``transform`` (one-hot, mixed);
* MixUp's images are ``x[i - 1] * (1 - lam) + x[i] * lam`` with torchvision's three
  roundings (one C pass per image, last row first, the last image saved for row 0); CutMix
  copies the box from the previous image, the same copy. Values are torchvision's, bit for bit.

Anything else (another batch layout, a tv_tensors input, a custom ``labels_getter``)
runs the transform itself, exactly as the user's collate would.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["BatchMix", "MixCollate", "cutmix", "mixup"]


def mixup(t: Any, images: Tensor, params: dict[str, Any]) -> None:
    """``v2.MixUp``'s image blend of the float32 batch ``images``, in place."""
    from ..fast import kernels

    lam = params["lam"]
    a, b = 1.0 - lam, lam
    last = images[-1].clone()
    for i in range(images.shape[0] - 1, -1, -1):
        prev = images[i - 1] if i > 0 else last
        if kernels.AVAILABLE:
            kernels.mixup_rows(prev, images[i], a, b)
        else:  # the same three roundings, torch's ops on one image at a time
            scaled = images[i].mul(b)
            torch.mul(prev, a, out=images[i])
            images[i].add_(scaled)


def cutmix(t: Any, images: Tensor, params: dict[str, Any]) -> None:
    """``v2.CutMix``'s box copy from the previous image of the batch, in place."""
    x1, y1, x2, y2 = params["box"]
    last = images[-1, ..., y1:y2, x1:x2].clone()
    for i in range(images.shape[0] - 1, 0, -1):
        images[i, ..., y1:y2, x1:x2] = images[i - 1, ..., y1:y2, x1:x2]
    images[0, ..., y1:y2, x1:x2] = last


class MixCollate:
    """``default_collate``, then ``mix(images, labels)`` on the batch: what the reference
    script's ``collate_fn`` does, built by ``fastload.DataLoader(batch_mix=mix)``. ``mix``: a
    torchvision v2 ``MixUp``, ``CutMix`` or ``RandomChoice`` of them (run in place on the
    batch tensor by :class:`BatchMix`), or any callable taking and returning ``(images,
    labels)`` (run as is). Imports neither the registry nor the seams: the loader builds it
    before it knows whether it falls back to torch's DataLoader, which then runs it."""

    def __init__(self, mix: Any) -> None:
        if not callable(mix):
            raise TypeError("batch_mix should be a callable such as torchvision.transforms.v2."
                            f"MixUp(num_classes=...), but got batch_mix={mix!r}")
        self.mix = mix

    def __call__(self, batch: list[Any]) -> Any:
        from torch.utils.data import default_collate

        return self.mix(*default_collate(batch))

    def __repr__(self) -> str:
        return f"MixCollate({self.mix!r})"


class BatchMix:
    """``mix(images, labels)`` in place on ``images``: ``mix`` a v2 MixUp/CutMix, or a v2
    RandomChoice of them (``choice``), ``inplace`` the in-place image op of each of them
    (:func:`mixup`/:func:`cutmix`, as the registry names them), by position."""

    def __init__(self, mix: Any, choice: bool, inplace: list[Any]) -> None:
        self.mix, self.choice, self.inplace = mix, choice, inplace

    def describe(self) -> str:
        return (f"{type(self.mix).__name__} of torchvision v2 in place on the batch tensor "
                "(its own draws and values)")

    def __call__(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        t, k = self.mix, 0
        if self.choice:  # v2 RandomChoice's draw, as its forward makes it
            k = int(torch.multinomial(torch.tensor(t.p), 1))
            t = t.transforms[k]
        if not _plain_batch(t, images, labels):
            return t(images, labels)  # torchvision itself: its checks, errors and values
        params = {"labels": labels, "batch_size": labels.shape[0], **t.make_params([images])}
        self.inplace[k](t, images, params)
        return images, t.transform(labels, params)


def _plain_batch(t: Any, images: Tensor, labels: Tensor) -> bool:
    from ..seams.torch_private import v2_default_labels_getter, v2_labels_getter

    return (type(images) is Tensor and images.dtype == torch.float32 and images.ndim == 4
            and images.device.type == "cpu" and images.is_contiguous()
            and type(labels) is Tensor and labels.ndim == 1 and labels.shape[0] == images.shape[0]
            and not labels.dtype.is_floating_point and t.num_classes is not None
            and v2_labels_getter(t) is v2_default_labels_getter)
