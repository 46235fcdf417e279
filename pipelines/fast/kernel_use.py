"""Which optional C kernels a plan runs, and which of them this process lacks.

The kernels (``fastload.pipelines._normalize``, ``_augment``, ``_affine``, ``_jpegroi``) are
built by setup.py where a C compiler (and, for ``_jpegroi``, libjpeg-turbo's headers) is
there; each module that calls one imports it in a ``try`` and keeps torch's or Pillow's ops
(same values, slower) when it is missing. :func:`missing_kernels` imports them the same way;
:func:`kernels_used` reads a ``SplitPlan`` for the ones its batches would run, so the loader
can say once which slower path a missing one gives (``fastload.loader.kernel_check``).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

__all__ = ["KERNELS", "kernels_used", "missing_kernels"]

# kernel -> what runs instead where it is missing
KERNELS: dict[str, str] = {
    "_normalize": "torch ops normalize and lay out each sample (same values, slower)",
    "_augment": "torch ops run the colour, mix and grid augmentations (same values, slower)",
    "_affine": "Pillow itself runs timm's geometric augmentations (same values, slower)",
    "_jpegroi": "large JPEGs are decoded whole at their DCT scale, then cropped (slower)",
}
# suffix transforms that run none of _augment's loops
_NO_AUGMENT = frozenset({"RandomErasing", "ToPureTensor"})


def missing_kernels() -> dict[str, str]:
    """``{kernel: why it did not import}`` for each optional C kernel this process lacks."""
    missing = {}
    for name in KERNELS:
        try:
            importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{name}")
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken shared object
            missing[name] = f"{type(exc).__name__}: {exc}"
    return missing


def kernels_used(split: Any, device: str, *, scaled_decode: str = "auto",
                 batch_mix: bool = False) -> dict[str, str]:
    """``{kernel: what of the plan runs it}`` for the batches of ``split`` (a ``SplitPlan``)
    made on ``device`` (``"cpu"`` or ``"cuda"``/``"gpu"``): the kernels work on CPU tensors,
    so a GPU plan uses none. ``batch_mix``: a MixUp/CutMix runs on each CPU batch."""
    if device != "cpu":
        return {}
    from ..decode import resample, scaled
    from ..suffix.tail import is_pointwise

    used: dict[str, str] = {}
    prefix, suffix = split.prefix, split.suffix
    if resample.eligible(prefix):
        if prefix.output_dtype == torch.float32:
            used["_normalize"] = "the resample's normalize into the batch"
        if scaled_decode == "auto" and scaled.available():
            used["_jpegroi"] = "the region decodes of large JPEGs"
    if suffix.tail is not None:
        used.setdefault("_normalize", "the suffix's table-lookup tail")
    ops = [t for t in suffix.transforms
           if not is_pointwise(t) and type(t).__name__ not in _NO_AUGMENT]
    if ops:
        used["_augment"] = f"the suffix's {type(ops[0]).__name__}"
    elif batch_mix:
        used["_augment"] = "batch_mix"
    timm = [t for t in suffix.transforms
            if type(t).__module__.startswith("timm.data.auto_augment")]
    if timm:
        used["_affine"] = f"timm's {type(timm[0]).__name__}"
    return used
