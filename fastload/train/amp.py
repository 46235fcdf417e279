"""Mixed precision: autocast dtype, the fp16 GradScaler, and the non-finite step guard.

``amp="bf16"`` runs matmuls in bfloat16 (fast on CPUs with AMX-BF16 and on Ampere+ GPUs) and
needs no loss scaling; ``amp="fp16"`` needs a :class:`torch.amp.GradScaler`. The loss is
always computed on ``logits.float()`` so softmax and cross-entropy stay in fp32.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = [
    "AMP_MODES",
    "AmpChoice",
    "autocast_speed_ratio",
    "training_step_seconds",
    "choose_amp",
    "native_bf16",
    "warn_if_emulated",
    "ScalerConfig",
    "autocast_dtype",
    "autocast",
    "make_scaler",
    "NanGuard",
    "NonFiniteTrainingError",
    "grad_norm",
]

AMP_MODES = ("off", "fp16", "bf16")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
log = logging.getLogger("fastload.train.finetune")


@dataclass(frozen=True)
class ScalerConfig:
    """fp16 loss-scaler settings (``torch.amp.GradScaler`` arguments)."""

    init_scale: float = 65536.0  # first loss scale, 2**16
    growth_factor: float = 2.0  # scale multiplier after growth_interval clean steps
    backoff_factor: float = 0.5  # scale multiplier after a step with inf/NaN gradients
    growth_interval: int = 2000  # clean steps between growths


def autocast_dtype(mode: str, device_type: str) -> torch.dtype | None:
    """The autocast dtype for ``amp=mode`` on ``device_type`` (None for ``off``)."""
    if mode not in AMP_MODES:
        raise ValueError(f"amp should be one of {', '.join(AMP_MODES)}, but got amp={mode!r}")
    if mode == "off":
        return None
    if device_type == "cuda" and mode == "bf16" and not torch.cuda.is_bf16_supported():
        raise ValueError("amp='bf16' needs a GPU with bfloat16 support; use amp='fp16'")
    if device_type == "cpu" and mode == "fp16":
        warnings.warn(
            "amp='fp16' on CPU: float16 matmuls have no fast CPU kernels on most machines and "
            "run slower than fp32; amp='bf16' is the CPU choice (AMX-BF16/AVX512-BF16)",
            stacklevel=2,
        )
    return _DTYPES[mode]


def native_bf16(device_type: str) -> bool:
    """Whether bf16 matmuls run natively on ``device_type``: a GPU with bfloat16 support, or
    a CPU with AVX512-BF16 or AMX-BF16 (``fastload doctor`` shows the flags). Elsewhere
    torch emulates them, several times slower than fp32."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    from fastload.utils.machine import cpu_info

    return cpu_info().native_bf16


def warn_if_emulated(mode: str, device_type: str) -> bool:
    """Warn (a ``UserWarning``) when ``amp='bf16'`` is asked for on a CPU without native
    bf16; whether it warned."""
    if mode != "bf16" or device_type != "cpu" or native_bf16("cpu"):
        return False
    from fastload.utils.machine import onednn_bf16_cap

    capped = onednn_bf16_cap()
    why = (f"{capped} keeps oneDNN from the CPU's bf16 instructions" if capped else
           "no avx512_bf16 or amx_bf16")
    warnings.warn(
        f"amp='bf16' on a CPU without native bf16 ({why}): torch emulates "
        "bfloat16 matmuls here, several times slower than fp32 (about 0.12x measured on an "
        "AVX2 AMD EPYC); amp='off' is faster on this machine", stacklevel=2)
    return True


@dataclass(frozen=True)
class AmpChoice:
    """What the A/B's AMP row does on this machine: ``mode`` ('bf16', 'fp16', or None to
    skip the row), ``native``, the measured bf16/fp32 speed ``ratio`` (None when not
    measured) and one sentence saying so."""

    mode: str | None
    native: bool
    ratio: float | None
    sentence: str


def training_step_seconds(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
                          mode: str = "off", steps: int = 3) -> float:
    """Seconds of one forward+backward pass of ``model`` on ``images`` under autocast
    ``mode``: the median of ``steps`` timed one by one after a warm-up (a few seconds for a
    small model; the median, as a step that shares the cores with something else is long)."""
    import statistics
    import time

    import torch.nn.functional as F

    if steps < 1:
        raise ValueError(f"steps should be a positive integer, but got steps={steps}")
    device_type = images.device.type
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps + 1):
            start = time.perf_counter()
            with autocast(mode, device_type):
                logits = model(images)
            F.cross_entropy(logits.float(), labels).backward()
            model.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def autocast_speed_ratio(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
                         mode: str = "bf16", steps: int = 3) -> float:
    """Training steps per second under autocast ``mode`` over those in fp32, each the
    :func:`training_step_seconds` of ``steps`` forward+backward passes (CPU; a few seconds
    for a small model): 0.12 means autocast is 8x slower."""
    fp32 = training_step_seconds(model, images, labels, "off", steps)
    mixed = training_step_seconds(model, images, labels, mode, steps)
    return fp32 / mixed if mixed > 0 else float("inf")


def choose_amp(device_type: str, measure: Callable[[], float] | None = None,
               native: bool | None = None) -> AmpChoice:
    """The AMP the hardware runs natively: on a GPU bf16 (fp16 where it has no bf16); on a
    CPU bf16 where it is native, else no AMP, with ``measure()`` (a bf16/fp32 speed ratio,
    see :func:`autocast_speed_ratio`) stated when given. ``native`` overrides the probe."""
    if device_type == "cuda":
        if native if native is not None else native_bf16("cuda"):
            return AmpChoice("bf16", True, None, "bf16 autocast: native on this GPU")
        return AmpChoice("fp16", True, None, "fp16 autocast with loss scaling: this GPU has "
                         "no bf16")
    if native if native is not None else native_bf16("cpu"):
        return AmpChoice("bf16", True, None, "bf16 autocast: native on this CPU "
                         "(avx512_bf16/amx_bf16)")
    ratio = measure() if measure is not None else None
    measured = "" if ratio is None else f" (measured ratio x{ratio:.2f})"
    return AmpChoice(None, False, ratio, f"bf16 is emulated on this CPU: skipped{measured}")


def autocast(mode: str, device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``amp=mode``; a null context for ``off``."""
    dtype = autocast_dtype(mode, device_type)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def check_scaler_config(config: ScalerConfig) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` out of GradScaler's range."""
    ranges = (("init_scale", config.init_scale > 0, "a number > 0"),
              ("growth_factor", config.growth_factor > 1, "a number > 1"),
              ("backoff_factor", 0 < config.backoff_factor < 1, "a number in (0, 1)"),
              ("growth_interval", config.growth_interval >= 1, "an integer >= 1"))
    for name, ok, what in ranges:
        if not ok:
            raise ValueError(f"{name} should be {what}, but got {name}={getattr(config, name)!r}")


def make_scaler(mode: str, device_type: str, config: ScalerConfig | None = None) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for ``fp16`` (a disabled scaler passes calls through)."""
    config = config or ScalerConfig()
    check_scaler_config(config)
    return torch.amp.GradScaler(
        device_type,
        init_scale=config.init_scale,
        growth_factor=config.growth_factor,
        backoff_factor=config.backoff_factor,
        growth_interval=config.growth_interval,
        enabled=mode == "fp16",
    )


class NonFiniteTrainingError(RuntimeError):
    """Training stopped after too many consecutive non-finite steps; ``diagnosis`` says why."""

    def __init__(self, diagnosis: str, skipped_total: int, events: list[dict]) -> None:
        super().__init__(diagnosis)
        self.diagnosis = diagnosis
        self.skipped_total = skipped_total
        self.events = events


@dataclass
class NanGuard:
    """Skips optimizer steps whose loss or gradients are not finite.

    Each skip is counted and reported through ``emit`` with the loss scale; after
    ``max_consecutive`` skips in a row :meth:`record_skip` raises
    :class:`NonFiniteTrainingError` with a diagnosis instead of training on garbage.
    """

    max_consecutive: int = 25
    amp: str = "off"
    init_scale: float = 65536.0
    emit: Callable[[dict], None] | None = None
    skipped_total: int = 0
    consecutive: int = 0
    events: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_consecutive < 1:
            raise ValueError(
                f"max_skips should be at least 1, but got max_skips={self.max_consecutive}")

    def record_ok(self) -> None:
        self.consecutive = 0

    def record_skip(
        self,
        *,
        step: int,
        epoch: int,
        loss: float,
        grad_norm: float,
        loss_scale: float | None,
        lr: float,
        inputs_finite: bool,
        model: torch.nn.Module,
    ) -> None:
        """Count one skipped step; raise after ``max_consecutive`` in a row."""
        self.skipped_total += 1
        self.consecutive += 1
        if not inputs_finite:
            reason = "non-finite input batch"
        elif not math.isfinite(loss):
            reason = "non-finite loss"
        else:
            reason = "non-finite gradients"
        event = {
            "event": "skip",
            "step": step,
            "epoch": epoch,
            "reason": reason,
            "loss": loss,
            "grad_norm": grad_norm,
            "loss_scale": loss_scale,
            "lr": lr,
            "consecutive": self.consecutive,
            "skipped_total": self.skipped_total,
        }
        self.events.append(event)
        log.warning(
            "step %d skipped (%s): loss=%s grad_norm=%s loss_scale=%s [%d in a row, %d total]",
            step, reason, loss, grad_norm, loss_scale, self.consecutive, self.skipped_total,
        )
        if self.emit is not None:
            self.emit(event)
        if self.consecutive >= self.max_consecutive:
            diagnosis = self.diagnose(model, lr, loss_scale)
            if self.emit is not None:
                self.emit({"event": "stopped", "step": step, "epoch": epoch, "diagnosis": diagnosis})
            raise NonFiniteTrainingError(diagnosis, self.skipped_total, list(self.events))

    def diagnose(self, model: torch.nn.Module, lr: float, loss_scale: float | None) -> str:
        """One paragraph naming the most likely cause of the run of skipped steps."""
        recent = self.events[-self.max_consecutive :]
        head = (
            f"training stopped: {len(recent)} consecutive optimizer steps had non-finite "
            f"loss or gradients (steps {recent[0]['step']}-{recent[-1]['step']}). "
        )
        if any(e["reason"] == "non-finite input batch" for e in recent):
            return head + (
                "Cause: the input batches hold NaN/Inf values; check the data files and the "
                "transform (e.g. a Normalize std of 0)."
            )
        if self.amp == "fp16" and loss_scale is not None and loss_scale < 1.0:
            return head + (
                f"Cause: the fp16 loss scale collapsed from {self.init_scale:g} to "
                f"{loss_scale:g}: values overflow float16 even unscaled. Use amp='bf16' or "
                f"amp='off', or lower the learning rate (now lr={lr:g})."
            )
        weights_finite = all(torch.isfinite(p).all() for p in model.parameters())
        if not weights_finite:
            return head + (
                f"Cause: the model weights are no longer finite, so training diverged; lower "
                f"the learning rate (now lr={lr:g}) or lengthen the warm-up."
            )
        if any(e["reason"] == "non-finite loss" for e in recent):
            return head + (
                f"Cause: the loss is non-finite although inputs and weights are finite: the "
                f"forward pass overflows (lr={lr:g}, amp={self.amp!r}); try amp='bf16' or "
                "amp='off', or a lower learning rate."
            )
        return head + (
            f"Cause: gradients overflow while the loss is finite; lower the learning rate (now "
            f"lr={lr:g}), lengthen the warm-up, or use amp='bf16' or amp='off'."
        )


def grad_norm(parameters) -> float:
    """The global L2 norm of the gradients (inf or NaN if any gradient is)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    from fastload.pipelines.seams.torch_private import foreach_norm

    norms = foreach_norm(grads, 2.0)
    return float(torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), 2.0))
