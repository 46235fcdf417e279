"""How much the demo's fine-tune A/B trains on this machine.

The A/B's cost is its training steps: on a 2-core Zen 1 EPYC (AVX2 on 128-bit units) an fp32
step of ViT-Tiny takes about four times a Zen 4's, by issue 39's figures, and the demo's
other steps (decoding, the install) are slower there too. So ``make demo`` times a few fp32
steps first (:func:`fastload.train.compare.measure_training_pace`) and generates the largest
training set of :data:`TRAIN_SIZES` whose predicted A/B fits :data:`AB_BUDGET_S`; it says
what it chose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AB_BUDGET_S", "TRAIN_SIZES", "VAL_SHARE", "ABPlan", "plan_ab", "predict_ab_seconds",
           "technique_row_steps", "technique_rows", "val_images"]

AB_BUDGET_S = 240.0  # the A/B's predicted seconds at most, where a smaller set can do it
TRAIN_SIZES = (2000, 1000, 500, 250)  # training images to generate, the largest that fits
VAL_SHARE = 0.2  # validation images per training image
# A row's training step over the probe's forward+backward (data loading on the same cores,
# the optimizer, validation), and its fixed cost (a fresh process, imports, the loader's
# set-up), the largest of three fits:
# - `make demo`'s four rows on a 2-core Zen 4 EPYC: 410 steps took 148 and 175 s in two runs,
#   after a probed step of 0.13 s (2.2x and 2.7x after 4 x 8 s);
# - its three rows on that CPU limited to 0.6 CPU and AVX2, a Zen 1 stand-in: 96 steps took
#   178 s after a probed 0.50 s (3.2x). The data loading shares slower cores there.
STEP_FACTOR = 3.2
ROW_START_S = 8.0


def val_images(train: int) -> int:
    """Validation images for ``train`` training images: :data:`VAL_SHARE` of them, at least
    one."""
    return max(1, round(train * VAL_SHARE))


def technique_rows(rows: list[str]) -> list[str]:
    """The A/B's technique rows: those after the loader rows (baseline, fastload), which
    stop early (:func:`technique_row_steps`); their speed is measured, not their accuracy."""
    return rows[rows.index("fastload") + 1:] if "fastload" in rows else []


def technique_row_steps(per_epoch: int, epochs: int, technique_steps: int | None) -> int | None:
    """Optimizer steps after which a technique row (after the loader rows) stops:
    ``technique_steps`` into its last epoch; None (every epoch) where that is the whole run."""
    if technique_steps and epochs > 1 and technique_steps < per_epoch:
        return (epochs - 1) * per_epoch + technique_steps
    return None


def predict_ab_seconds(train: int, *, step_s: float, batch_size: int, epochs: int,
                       rows: list[str], technique_steps: int | None) -> float:
    """Seconds the A/B's ``rows`` are predicted to take with ``train`` training images, from
    ``step_s``, one measured fp32 step."""
    per_epoch = math.ceil(train / batch_size)
    cut = technique_row_steps(per_epoch, epochs, technique_steps)
    techniques = technique_rows(rows)
    steps = sum(cut if row in techniques and cut is not None else epochs * per_epoch
                for row in rows)
    return len(rows) * ROW_START_S + STEP_FACTOR * steps * step_s


@dataclass(frozen=True)
class ABPlan:
    """The A/B's generated set (``train`` and ``val`` images), its ``predicted_s`` and the
    ``sentence`` that states the choice."""

    train: int
    val: int
    predicted_s: float
    sentence: str


def plan_ab(step_s: float, *, batch_size: int, epochs: int, rows: list[str],
            technique_steps: int | None, model: str = "the model", img_size: int = 0,
            budget_s: float = AB_BUDGET_S, sizes: tuple[int, ...] = TRAIN_SIZES) -> ABPlan:
    """The largest of ``sizes`` whose A/B is predicted within ``budget_s`` (the smallest
    where none is), for one fp32 step of ``step_s`` seconds."""
    from fastload.utils.progress import format_duration

    predicted = {n: predict_ab_seconds(n, step_s=step_s, batch_size=batch_size, epochs=epochs,
                                       rows=rows, technique_steps=technique_steps)
                 for n in sorted(sizes, reverse=True)}  # largest first
    largest = next(iter(predicted))
    train = next((n for n, s in predicted.items() if s <= budget_s), min(predicted))
    pixels = f" at {img_size} px" if img_size else ""
    sentence = (f"an fp32 training step takes {step_s:.2f} s here ({model}, {batch_size} "
                f"images{pixels}): the A/B trains on {train:,} generated images")
    if train != largest:
        sentence += f" ({largest:,} would take about {format_duration(predicted[largest])})"
    sentence += (f", about {format_duration(predicted[train])} predicted for "
                 f"{len(rows)} rows (budget {format_duration(budget_s)})")
    return ABPlan(train, val_images(train), predicted[train], sentence)
