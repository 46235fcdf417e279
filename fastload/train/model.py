"""Model set-up for the reference fine-tuning loop: timm creation, local weights, freezing,
gradient checkpointing.

Nothing here downloads: ``pretrained`` is never passed to timm; weights come from a local
file (safetensors, or a torch state dict read with ``weights_only=True``).
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
from collections.abc import Sequence

import torch
from torch import nn

from fastload.utils.checks import check_positive_int

__all__ = [
    "create_model",
    "model_to_load",
    "load_weights",
    "freeze_parameters",
    "enable_grad_checkpointing",
    "classifier_names",
]

_CHECKPOINT_KEYS = ("model", "state_dict", "model_state_dict")


def create_model(
    name: str,
    num_classes: int,
    img_size: int | None = None,
    weights: str | os.PathLike | None = None,
) -> nn.Module:
    """A timm model ``name`` with a fresh ``num_classes``-way classifier.

    ``img_size`` is passed to models that take it (ViTs build their position embedding for
    it; convolutional models accept any size and ignore it). ``weights`` is a local file
    loaded with :func:`load_weights`; its classifier is dropped when the class count differs.
    """
    import timm

    check_positive_int("num_classes", num_classes)
    if not timm.is_model(name):
        raise ValueError(
            f"model {name!r} is not a timm model name; list them with timm.list_models()"
        )
    kwargs = {"pretrained": False, "num_classes": num_classes}
    if img_size is not None:
        try:
            model = timm.create_model(name, img_size=img_size, **kwargs)
        except TypeError as error:
            if "img_size" not in str(error):
                raise
            model = timm.create_model(name, **kwargs)
    else:
        model = timm.create_model(name, **kwargs)
    if weights is not None:
        load_weights(model, weights)
    return model


def model_to_load(name: str, num_classes: int, img_size: int | None = None) -> nn.Module:
    """:func:`create_model` for a model whose weights are loaded next, or whose weights do not
    matter (names, shapes, timing): its random initialisation does not advance torch's global
    generator, so the caller's random stream is as it was."""
    with torch.random.fork_rng(devices=[]):
        return create_model(name, num_classes, img_size)


def classifier_names(model: nn.Module) -> list[str]:
    """Module names of the classifier (timm's ``pretrained_cfg['classifier']``, else ``head``/``fc``)."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    names = cfg.get("classifier") or ("head", "fc", "classifier")
    if isinstance(names, str):
        names = (names,)
    modules = dict(model.named_modules())
    return [n for n in names if n in modules]


def _read_state_dict(path: pathlib.Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # unpickling refused or not a torch file
        # torch's own text advises weights_only=False, which would run the file's code
        raise ValueError(
            f"weights={str(path)!r} could not be read as a safetensors or torch state dict of "
            f"tensors ({type(error).__name__}); save one with torch.save(model.state_dict(), "
            "path) or safetensors"
        ) from error
    for key in _CHECKPOINT_KEYS:
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(
            f"weights={str(path)!r} does not hold a state dict of tensors; save one with "
            "torch.save(model.state_dict(), path) or safetensors"
        )
    return state


def load_weights(model: nn.Module, path: str | os.PathLike) -> list[str]:
    """Load a local weight file into ``model``; return the keys left at their initial value.

    ``module.`` / ``_orig_mod.`` prefixes (DDP, torch.compile) are stripped, a ViT position
    embedding is resampled to the model's grid, and classifier tensors whose shape differs
    (another class count) are skipped. Any other missing or mismatched key is an error.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"weights={str(path)!r} is a folder; pass a local weight file "
                                "in it (.safetensors, .pt or .bin)")
    if not path.is_file():
        raise FileNotFoundError(f"weights={str(path)!r} does not exist; pass a local weight file")
    state = _read_state_dict(path)
    state = {_strip_prefixes(k): v for k, v in state.items()}
    own = model.state_dict()
    heads = tuple(f"{n}." for n in classifier_names(model))
    skipped = []
    for key in list(state):
        if key not in own or state[key].shape == own[key].shape:
            continue
        if key.endswith("pos_embed") and state[key].ndim == 3:
            state[key] = _resample_pos_embed(model, state[key])
        elif key.startswith(heads):
            del state[key]
            skipped.append(key)
        else:
            raise ValueError(
                f"weights={str(path)!r}: {key} has shape {tuple(state[key].shape)} but the "
                f"model expects {tuple(own[key].shape)}; is it the same architecture?"
            )
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith(heads)]
    if missing:
        raise ValueError(
            f"weights={str(path)!r} lacks {len(missing)} model tensors (first: {missing[0]}); "
            "is it the same architecture?"
        )
    return sorted(set(skipped) | set(result.missing_keys))


def _strip_prefixes(key: str) -> str:
    for prefix in ("module.", "_orig_mod."):
        while key.startswith(prefix):
            key = key[len(prefix) :]
    return key


def _resample_pos_embed(model: nn.Module, pos_embed: torch.Tensor) -> torch.Tensor:
    from timm.layers import resample_abs_pos_embed

    grid = tuple(model.patch_embed.grid_size)
    prefix = 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 1)
    return resample_abs_pos_embed(pos_embed, new_size=grid, num_prefix_tokens=prefix)


def freeze_parameters(model: nn.Module, patterns: Sequence[str]) -> tuple[int, int]:
    """Set ``requires_grad=False`` on parameters whose name matches any fnmatch pattern.

    Returns ``(trainable, total)`` element counts. A pattern that matches no parameter is
    an error (a typo would otherwise silently train everything).
    """
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            sample = ", ".join(names[:4])
            raise ValueError(
                f"freeze pattern {pattern!r} matches no parameter name (names look like: {sample}, ...)"
            )
    for name, param in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            param.requires_grad_(False)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total


class _Checkpointed(nn.Module):
    """Runs the wrapped module under ``torch.utils.checkpoint`` while training."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        if self.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self.module, *args, use_reentrant=False, **kwargs)
        return self.module(*args, **kwargs)


def enable_grad_checkpointing(model: nn.Module) -> str:
    """Recompute activations in backward instead of storing them; return the method used.

    timm models use their own ``set_grad_checkpointing``; other models get each child of
    their longest ``Sequential``/``ModuleList`` wrapped in ``torch.utils.checkpoint``.
    """
    if hasattr(model, "set_grad_checkpointing"):
        try:
            model.set_grad_checkpointing(True)
            return "timm set_grad_checkpointing"
        except (AssertionError, NotImplementedError):
            pass
    stacks = [m for m in model.modules() if isinstance(m, (nn.Sequential, nn.ModuleList))]
    if not stacks:
        raise ValueError(
            f"{type(model).__name__} has no set_grad_checkpointing and no Sequential/ModuleList "
            "of blocks to checkpoint; set grad_checkpointing=False"
        )
    stack = max(stacks, key=len)
    for index in range(len(stack)):
        stack[index] = _Checkpointed(stack[index])
    # Wrapping renames parameters ("blocks.0.x" -> "blocks.0.module.x"); state dicts differ.
    return f"torch.utils.checkpoint over {len(stack)} blocks"
