"""Which device a ``fastload.DataLoader`` makes its batches on.

``device=None`` means the GPU this process trains on, as torch users pick it. A script that
calls ``torch.cuda.set_device(k)`` has made ``k`` torch's current device
(``torch.cuda.current_device()`` returns ``k``; it returns 0 when nothing was set). Under
torchrun (``LOCAL_RANK`` set) a script that never calls ``set_device`` still puts its model
on ``cuda:LOCAL_RANK``; taking the current device there would put every rank's batches on
GPU 0. So: the current device when it is not 0, else ``LOCAL_RANK``'s GPU (GPU 0 when each
process sees a single GPU, e.g. one ``CUDA_VISIBLE_DEVICES`` entry per rank), else 0.
(A rank other than 0 that sets device 0 on purpose cannot be told from one that set
nothing: pass ``device="cuda:0"``.) ``"cuda"`` without an index keeps torch's meaning,
the current device.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["default_cuda_index", "resolve_device"]


def default_cuda_index(current: int, device_count: int,
                       environ: Mapping[str, str] = os.environ) -> int:
    """The CUDA device index for ``device=None``, from torch's current device ``current``,
    the number of visible devices and the environment (``LOCAL_RANK``); see the module."""
    if current != 0:
        return current
    local = environ.get("LOCAL_RANK")
    if local is None or local.strip() == "":
        return 0
    try:
        rank = int(local)
    except ValueError:
        raise ValueError(f"LOCAL_RANK={local!r} is not an integer; fix the launcher's "
                         "environment or pass device='cuda:N'") from None
    if 0 <= rank < device_count:
        return rank
    if device_count == 1:
        return 0
    raise ValueError(f"LOCAL_RANK={rank} but this process sees {device_count} CUDA devices; "
                     "call torch.cuda.set_device(...) or pass device='cuda:N'")


def resolve_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device`` with an index for CUDA (``None``: see the module)."""
    if device is None:
        if torch.cuda.is_available():
            index = default_cuda_index(torch.cuda.current_device(), torch.cuda.device_count())
            return torch.device("cuda", index)
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device should be None, 'cpu', 'cuda' or 'cuda:N', but got device={device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} needs CUDA, but torch.cuda.is_available() is "
                             "False; use device='cpu' or leave device=None")
        return torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
    return dev
