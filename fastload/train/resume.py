"""What a resume may change: a resume continues the checkpoint's run exactly, so the settings
that shape its trajectory (the model, the data's order and augmentation, the optimizer and its
schedule, the precision, what trains) must be the checkpoint's. The rest may differ: where it
runs (device, workers, compile, channels_last, gradient checkpointing), what it writes (log,
checkpoint and its interval, progress), ``max_steps``, ``max_skips``, and ``weights`` (the
checkpoint's own replace them).

:func:`check_resume` reads the checkpoint before any work, so a refused resume costs nothing.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastload.train.config import FinetuneConfig

__all__ = ["TRAJECTORY", "check_resume", "saved_settings"]

# FinetuneConfig fields a resume must keep (``scaler`` compared field by field)
TRAJECTORY = ("model", "img_size", "batch_size", "accum_steps", "seed", "optimizer", "lr",
              "weight_decay", "warmup_epochs", "warmup_steps", "epochs", "amp", "scaler",
              "freeze", "qat", "qat_start_epoch", "skip_quantize")


def saved_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The trajectory settings of a FinetuneConfig as JSON gives them back (tuples as lists),
    the scaler's spread into its own fields."""
    values = {}
    for name in TRAJECTORY:
        if name not in config:  # written by an older fastload: not compared
            continue
        if name == "scaler" and isinstance(config[name], dict):
            values.update(config[name])
        else:
            values[name] = config[name]
    return values


def check_resume(config: FinetuneConfig) -> None:
    """Raise ``ValueError`` where ``config`` cannot resume ``config.resume``: a file that is
    not a fine-tuning checkpoint, settings of the run's trajectory that differ from the
    checkpoint's (each named with both values), or a run with nothing left to do."""
    from fastload.train.checkpoint import read_checkpoint

    path = config.resume
    try:
        state = read_checkpoint(path, mmap=True)
    except (OSError, ValueError) as error:  # missing or damaged (OSError), or no checkpoint
        raise type(error)(f"resume={path!r}: {error}") from None
    saved = saved_settings(state.config)
    given = saved_settings(json.loads(json.dumps(dataclasses.asdict(config))))
    differs = [name for name in saved if name in given and saved[name] != given[name]]
    if differs:
        raise ValueError(
            f"checkpoint {path!r} was trained with "
            + ", ".join(f"{name}={saved[name]!r}" for name in differs) + ", but got "
            + ", ".join(f"{name}={given[name]!r}" for name in differs)
            + "; a resume continues that run exactly: pass its settings, or start a new run "
            f"from its weights instead (weights={path!r})")
    if state.epoch >= config.epochs:
        raise ValueError(
            f"checkpoint {path!r} finished its run (all {config.epochs} epochs): nothing is "
            f"left to resume; to train further, start a new run from its weights instead "
            f"(weights={path!r})")
    if config.max_steps is not None and state.step >= config.max_steps:
        raise ValueError(
            f"checkpoint {path!r} has done {state.step} optimizer steps, and max_steps="
            f"{config.max_steps} counts the run's steps from its start: nothing is left to do; "
            "pass a larger max_steps, or none to finish the run")
