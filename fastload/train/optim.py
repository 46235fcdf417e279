"""Optimizers (AdamW, LAMB) and the cosine learning-rate schedule with linear warm-up."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["OPTIMIZERS", "create_optimizer", "cosine_schedule", "default_lr"]

OPTIMIZERS = ("adamw", "lamb")

FINETUNE_LR = 2e-5  # from pretrained weights: small steps keep what the weights know
SCRATCH_LR = 1e-3  # random init: large enough that a tiny ViT learns generated data in 2 epochs


def default_lr(from_weights: bool) -> float:
    """The default peak learning rate: 2e-5 when fine-tuning from weights, 1e-3 from scratch."""
    return FINETUNE_LR if from_weights else SCRATCH_LR


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases, norms, tokens and embeddings (ndim <= 1 or
    named ``*_token``/``pos_embed``) are not decayed, as in timm."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(("_token", "pos_embed")):
            no_decay.append(param)
        else:
            decay.append(param)
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def create_optimizer(
    model: nn.Module,
    name: str = "adamw",
    lr: float = SCRATCH_LR,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Optimizer:
    """AdamW (``torch.optim``) or LAMB (``timm.optim``; torch has none) over the trainable
    parameters of ``model``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer should be one of {', '.join(OPTIMIZERS)}, but got optimizer={name!r}")
    if not lr > 0:
        raise ValueError(f"lr should be positive, but got lr={lr}")
    groups = _param_groups(model, weight_decay)
    if not groups:
        raise ValueError("no trainable parameters left: the freeze patterns matched every parameter")
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, weight_decay=weight_decay)
    from timm.optim import Lamb

    return Lamb(groups, lr=lr, betas=betas, weight_decay=weight_decay)


def cosine_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int = 0,
    min_factor: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-optimizer-step schedule: linear warm-up from ``lr/warmup_steps`` to ``lr`` over
    ``warmup_steps``, then cosine decay to ``min_factor * lr`` at ``total_steps``."""
    if total_steps < 1:
        raise ValueError(f"total_steps should be at least 1, but got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"warm-up should last between 0 and {total_steps} steps, but got {warmup_steps}"
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
