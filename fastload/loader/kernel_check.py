"""Say once per process when a loader's plan would run an optional C kernel that is missing.

The kernels (``fastload.pipelines._normalize``, ``_augment``, ``_affine``, ``_jpegroi``) are
built at install time where a C compiler (and libjpeg-turbo's headers) is there; without one
the same batches come from torch's or Pillow's ops, slower, and nothing else says so. As torch
does for an accelerated kernel it cannot use, the loader warns (a ``FallbackWarning``, a
``UserWarning``: a slower path the user can act on) the first time a plan of this process
would use a missing kernel: one message per kernel, naming it, what runs instead and the fix.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastload.utils.machine import kernel_fix

__all__ = ["missing_kernel_messages"]

log = logging.getLogger(__name__)

_said: set[str] = set()  # kernels already named in this process
_lock = threading.Lock()
_missing: dict[str, str] | None = None  # missing_kernels(), asked once per process


def _missing_kernels() -> dict[str, str]:
    global _missing
    if _missing is None:
        from fastload.pipelines import missing_kernels

        _missing = missing_kernels()
    return _missing


def missing_kernel_messages(split: Any, device: str, *, scaled_decode: str = "auto",
                            batch_mix: bool = False) -> list[str]:
    """The warnings to give for the missing kernels ``split`` (a pipelines ``SplitPlan``)
    would run on ``device``, each kernel's only the first time in this process."""
    missing = _missing_kernels()
    if not missing:
        return []
    from fastload.pipelines import kernel_fallbacks, kernels_used

    used = kernels_used(split, device, scaled_decode=scaled_decode, batch_mix=batch_mix)
    messages = []
    with _lock:
        for name, use in used.items():
            if name not in missing or name in _said:
                continue
            _said.add(name)
            log.debug("plan: C kernel %s is missing (%s), used by %s", name, missing[name], use)
            messages.append(
                f"fastload.DataLoader: the C kernel fastload.pipelines.{name}, which "
                f"{use} runs, is missing ({missing[name]}); instead, "
                f"{kernel_fallbacks[name]}. `fastload doctor` lists what this install lacks; "
                f"to get the kernel, {kernel_fix(name)}")
    return messages
