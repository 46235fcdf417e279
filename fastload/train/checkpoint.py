"""Training checkpoints: one file holding everything a resume needs, written atomically.

Contents (a dict of state dicts and plain values, read back with ``weights_only=True``)::

    {"format": "fastload-finetune-checkpoint", "version": 1,
     "model": ..., "optimizer": ..., "scaler": ..., "scheduler": ...,
     "loader": {"epoch": e, "micro_step": micro-batches done in epoch e, "kind": "torch"|"fastload",
                "consumed": samples of this rank's shard done, "seed": s,
                "fastload": fastload.DataLoader.state_dict() (fastload loader only)},
     "epoch": e, "step": optimizer steps done, "skipped_total": NaN-guard skips so far,
     "rng": torch CPU RNG state, "classes": [...], "config": FinetuneConfig as JSON text}

This module owns that layout: :func:`pack_checkpoint` builds it, :func:`unpack_checkpoint`
reads it back into a :class:`Checkpoint`; nothing else indexes the dict.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import tempfile
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CHECKPOINT_FORMAT",
    "Checkpoint",
    "load_checkpoint",
    "pack_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
    "unpack_checkpoint",
]

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


def load_checkpoint(path: str | os.PathLike, *, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors and plain data only);
    ``mmap``: its tensors mapped from the file, not read (a look at its settings)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint {str(path)!r} is a folder; pass the checkpoint "
                         "file that finetune() wrote (FinetuneConfig.checkpoint)")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist; pass the checkpoint "
                                "file that finetune() wrote (FinetuneConfig.checkpoint)")
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80":  # torch's zip, or its legacy pickle
        what = "is empty (0 bytes)" if not head else f"is not a torch checkpoint (it starts {head!r})"
        raise ValueError(f"checkpoint {str(path)!r} {what}; pass the file that finetune() wrote "
                         "(FinetuneConfig.checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True,
                           mmap=mmap and head[:4] == b"PK\x03\x04")  # torch maps its zip only
    except Exception as error:  # a torch file, damaged or cut short: an OSError, as a read's
        raise OSError(f"checkpoint {str(path)!r} could not be read (damaged or cut short?): "
                      f"{error}; pass an intact copy") from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{str(path)!r} is not a fastload fine-tuning checkpoint (no format tag "
            f"{CHECKPOINT_FORMAT!r}); pass a file written by finetune() with FinetuneConfig.checkpoint set"
        )
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"checkpoint {str(path)!r} has version {state.get('version')}, this fastload reads "
            f"version {CHECKPOINT_VERSION}"
        )
    return state


@dataclass
class Checkpoint:
    """A checkpoint unpacked: the state dicts, where the run stopped, and what it trained."""

    model: dict[str, Any]
    optimizer: dict[str, Any]
    scaler: dict[str, Any]
    scheduler: dict[str, Any]
    epoch: int  # the epoch to continue
    micro_step: int  # micro-batches of ``epoch`` already done
    loader_kind: str | None  # FinetuneConfig.loader of the run that wrote it
    loader_state: dict[str, Any] | None  # fastload.DataLoader.state_dict(), fastload loader only
    step: int  # optimizer steps done
    skipped_total: int
    rng: torch.Tensor
    classes: list[str]
    config: dict[str, Any]  # the FinetuneConfig fields of the run that wrote it


def pack_checkpoint(
    *,
    model: dict[str, Any],
    optimizer: dict[str, Any],
    scaler: dict[str, Any],
    scheduler: dict[str, Any],
    epoch: int,
    micro_step: int,
    loader_kind: str,
    batch_size: int,
    seed: int,
    loader_state: dict[str, Any] | None,
    step: int,
    skipped_total: int,
    classes: list[str],
    config: dict[str, Any],
) -> dict[str, Any]:
    """The dict :func:`save_checkpoint` writes (layout in the module docstring), from state dicts
    and plain values; the torch CPU RNG state is taken now."""
    loader = {"epoch": epoch, "micro_step": micro_step, "kind": loader_kind,
              "consumed": micro_step * batch_size, "seed": seed}
    if loader_state is not None:
        loader["fastload"] = loader_state
    return {"model": model, "optimizer": optimizer, "scaler": scaler, "scheduler": scheduler,
            "loader": loader, "epoch": epoch, "step": step, "skipped_total": skipped_total,
            "rng": torch.get_rng_state(), "classes": list(classes), "config": json.dumps(config)}


def unpack_checkpoint(state: dict[str, Any]) -> Checkpoint:
    """The :class:`Checkpoint` of a dict read by :func:`load_checkpoint`."""
    loader = state["loader"]
    return Checkpoint(
        model=state["model"], optimizer=state["optimizer"], scaler=state["scaler"],
        scheduler=state["scheduler"], epoch=int(loader["epoch"]), micro_step=int(loader["micro_step"]),
        loader_kind=loader.get("kind"), loader_state=loader.get("fastload"), step=int(state["step"]),
        skipped_total=int(state.get("skipped_total", 0)), rng=state["rng"],
        classes=list(state["classes"]), config=json.loads(state["config"]))


def read_checkpoint(path: str | os.PathLike, *, mmap: bool = False) -> Checkpoint:
    """:func:`load_checkpoint` then :func:`unpack_checkpoint`."""
    return unpack_checkpoint(load_checkpoint(path, mmap=mmap))
