"""Training checkpoints: one file holding everything a resume needs, written atomically.

Contents (a dict of state dicts and plain values, read back with ``weights_only=True``)::

    {"format": "fastload-finetune-checkpoint", "version": 1,
     "model": ..., "optimizer": ..., "scaler": ..., "scheduler": ...,
     "loader": {"epoch": e, "micro_step": micro-batches done in epoch e, "kind": "torch"|"fastload",
                "consumed": samples of this rank's shard done, "seed": s,
                "fastload": fastload.DataLoader.state_dict() (fastload loader only)},
     "epoch": e, "step": optimizer steps done, "skipped_total": NaN-guard skips so far,
     "rng": torch CPU RNG state, "classes": [...], "config": FinetuneConfig as JSON text}
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from typing import Any

import torch

__all__ = ["CHECKPOINT_FORMAT", "save_checkpoint", "load_checkpoint"]

CHECKPOINT_FORMAT = "fastload-finetune-checkpoint"
CHECKPOINT_VERSION = 1


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> pathlib.Path:
    """Write ``state`` to ``path`` atomically: a temporary file in the same directory is
    flushed, fsynced and renamed over ``path``, so a crash leaves the old file or the new one."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **state}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors and plain data only)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError(f"checkpoint {str(path)!r} could not be read: {error}") from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{str(path)!r} is not a fastload fine-tuning checkpoint (no format tag "
            f"{CHECKPOINT_FORMAT!r}); pass a file written by fastload finetune --checkpoint"
        )
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"checkpoint {str(path)!r} has version {state.get('version')}, this fastload reads "
            f"version {CHECKPOINT_VERSION}"
        )
    return state
