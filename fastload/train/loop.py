"""One epoch of the fine-tuning loop: micro-batches, accumulation, the optimizer step, evaluation
and the epoch's figures over all ranks. :func:`fastload.train.finetune.finetune` builds the
:class:`Run` and calls :func:`train_one_epoch` and :func:`evaluate` once per epoch."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from fastload.loader.stall import EpochStall
from fastload.train.amp import NanGuard, autocast, grad_norm
from fastload.train.config import FinetuneConfig
from fastload.train.metrics import EpochStats, JsonLog, all_reduce, to_mib

__all__ = ["EpochTotals", "Run", "epoch_stats", "evaluate", "optimizer_step", "train_one_epoch"]


@torch.no_grad()
def evaluate(model, loader, device: torch.device, amp: str, channels_last: bool) -> tuple[int, int, float]:
    """``(correct, total, loss_sum)`` of ``model`` over ``loader`` (this process's shard)."""
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast(amp, device.type):
            logits = model(images)
        loss_sum += float(F.cross_entropy(logits.float(), labels, reduction="sum"))
        correct += int((logits.argmax(dim=1) == labels).sum())
        total += int(labels.numel())
    return correct, total, loss_sum

@dataclass
class Run:
    """What the steps of one run share: the model and its optimisation state, the step count
    and every micro-batch loss. Built once by :func:`finetune`."""

    config: FinetuneConfig
    model: torch.nn.Module
    train_model: torch.nn.Module  # the DDP wrapper when world > 1
    forward: Any  # train_model, or its torch.compile
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    guard: NanGuard
    device: torch.device
    world: int
    jlog: JsonLog
    micro_per_epoch: int
    loss_hook: Any = None
    step: int = 0
    losses: list[float] = field(default_factory=list)
    params: list[torch.nn.Parameter] = field(init=False)  # the trainable ones, for grad_norm

    def __post_init__(self) -> None:
        self.params = [p for p in self.model.parameters() if p.requires_grad]


@dataclass
class EpochTotals:
    """This process's figures of one epoch's training part."""

    images: int = 0
    loss_sum: float = 0.0  # over the finite micro-batch losses, weighted by batch size
    loss_count: int = 0
    micro: int = 0  # micro-batches of the epoch done (resumed ones included)
    resumed_at: int = 0  # micro-batches done before this run (a resume), not in these sums
    stopped: bool = False  # max_steps was reached


def optimizer_step(run: Run, epoch: int, loss: float, inputs_ok: bool, losses_ok: bool) -> None:
    """End of an accumulation window: step unless anything was non-finite on any rank."""
    scaler, optimizer = run.scaler, run.optimizer
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    norm = grad_norm(run.params)
    ok = inputs_ok and losses_ok and math.isfinite(norm)
    ok = all_reduce([0.0 if ok else 1.0], "max", run.world)[0] == 0.0
    scale = scaler.get_scale() if scaler.is_enabled() else None
    if ok:
        scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    current_lr = optimizer.param_groups[0]["lr"]
    run.scheduler.step()
    run.step += 1
    run.jlog({"event": "step", "epoch": epoch, "step": run.step, "loss": loss, "lr": current_lr,
              "grad_norm": norm, "loss_scale": scale, "skipped": not ok})
    if ok:
        run.guard.record_ok()
    else:
        run.guard.record_skip(step=run.step, epoch=epoch, loss=loss, grad_norm=norm,
                              loss_scale=scale, lr=current_lr, inputs_finite=inputs_ok,
                              model=run.model)


def train_one_epoch(run: Run, train_loader, epoch: int, first: int, bar, save) -> EpochTotals:
    """Micro-batches ``first..`` of ``epoch``; an optimizer step at the end of each window of
    ``accum_steps`` (DDP syncs gradients only then); ``save(epoch, micro)`` every
    ``checkpoint_every`` steps."""
    config, device = run.config, run.device
    totals = EpochTotals(micro=first, resumed_at=first)
    inputs_ok = losses_ok = True  # over the micro-batches of the current window
    for images, labels in train_loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        if config.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        inputs_ok &= bool(torch.isfinite(images).all())
        window_start = (totals.micro // config.accum_steps) * config.accum_steps
        window = min(config.accum_steps, run.micro_per_epoch - window_start)
        last = totals.micro + 1 == window_start + window
        sync = run.train_model.no_sync() if run.world > 1 and not last else contextlib.nullcontext()
        with sync:
            with autocast(config.amp, device.type):
                logits = run.forward(images)
            loss = F.cross_entropy(logits.float(), labels)
            if run.loss_hook is not None:
                loss = run.loss_hook(run.step, loss)
            run.scaler.scale(loss / window).backward()
        value = float(loss.detach())
        losses_ok &= math.isfinite(value)
        run.losses.append(value)
        if math.isfinite(value):
            totals.loss_sum += value * labels.numel()
            totals.loss_count += labels.numel()
        totals.images += labels.numel()
        totals.micro += 1
        bar.update(1)
        if not last:
            continue
        optimizer_step(run, epoch, value, inputs_ok, losses_ok)
        inputs_ok = losses_ok = True
        bar.set_postfix(loss=f"{value:.3f}", refresh=False)
        if config.checkpoint_every and run.step % config.checkpoint_every == 0:
            save(epoch, totals.micro)
        if config.max_steps is not None and run.step >= config.max_steps:
            totals.stopped = True
            break
    return totals


def epoch_stats(run: Run, epoch: int, totals: EpochTotals, val: tuple[int, int, float],
                 train_time: float, stall: EpochStall, peaks: tuple[int, int],
                 steps: int) -> EpochStats:
    """One epoch's figures over all ranks: counts and losses summed, times and memory maxed."""
    peak, peak_above = peaks
    sums = all_reduce([totals.images, totals.loss_sum, totals.loss_count, *val], "sum", run.world)
    maxes = all_reduce([train_time, stall.wait_s, stall.busy_s, peak_above, peak], "max", run.world)
    return EpochStats(
        epoch=epoch, images=int(sums[0]), epoch_time_s=maxes[0], data_wait_s=maxes[1],
        compute_s=maxes[2], train_loss=sums[1] / sums[2] if sums[2] else float("nan"),
        peak_mem_mb=to_mib(maxes[3]), peak_rss_mb=to_mib(maxes[4]),
        val_top1=sums[3] / sums[4] if sums[4] else None,
        val_loss=sums[5] / sums[4] if sums[4] else None,
        lr=run.optimizer.param_groups[0]["lr"], steps=steps,
        skipped_steps=run.guard.skipped_total, resumed_at=totals.resumed_at,
        epoch_batches=run.micro_per_epoch)

