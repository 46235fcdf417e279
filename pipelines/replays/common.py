"""What the v1 and v2 replays share: the replay type, containers, and the draws of the
transforms whose ``forward`` is the same in both (ColorJitter, GaussianBlur, AugMix's mixing).

A shared maker takes ``apply``, the op seam of its version (``augment_v1.apply_op`` or
``augment_v2.apply_op_v2``), so each version's ops still go through its one seam.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import draws
from ..seams.torch_private import sample_dirichlet

__all__ = ["AUTOAUGMENT_OPS", "Replay", "augmix_combine", "augmix_depth", "augmix_mixing", "chain",
           "color_jitter", "compose", "gaussian_blur", "itself"]

Replay = Callable[[Any, torch.Generator], Any]

# The op names torchvision's auto-augment ``_apply_op`` (v1) and v2's ``_AutoAugmentBase`` know.
AUTOAUGMENT_OPS = frozenset({
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
    "Invert",
})

_JITTER = (("adjust_brightness", "brightness_factor"), ("adjust_contrast", "contrast_factor"),
           ("adjust_saturation", "saturation_factor"), ("adjust_hue", "hue_factor"))


def itself(t) -> Replay:
    """The replay of a deterministic transform: the transform itself."""
    return lambda x, gen: t(x)


def chain(steps: Sequence[Replay], img: Any, gen: torch.Generator) -> Any:
    for step in steps:
        img = step(img, gen)
    return img


def compose(t, steps: Sequence[Replay]) -> Replay:
    """``Compose`` (v1 and v2): its children's replays in turn."""
    return lambda img, gen: chain(steps, img, gen)


def color_jitter(t, apply: Callable[..., Any]) -> Replay:
    """``ColorJitter`` (v1 and v2 draw alike): a random order of the four adjustments, then
    each factor."""
    ranges = (t.brightness, t.contrast, t.saturation, t.hue)

    def run(img, gen):
        order, factors = draws.color_jitter(ranges, gen)
        for fn_id in order:
            if factors[fn_id] is not None:
                op, arg = _JITTER[fn_id]
                img = apply(img, op, {arg: factors[fn_id]})
        return img

    return run


def gaussian_blur(t, apply: Callable[..., Any]) -> Replay:
    """``GaussianBlur`` (v1 and v2 draw alike): one sigma for both axes."""

    def run(img, gen):
        sigma = draws.uniform(t.sigma[0], t.sigma[1], gen)
        return apply(img, "gaussian_blur", {"kernel_size": t.kernel_size,
                                            "sigma": [sigma, sigma]})

    return run


def augmix_mixing(t, batch: torch.Tensor,
                  gen: torch.Generator) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """AugMix's first draws (v1 and v2 alike): ``(batch_dims, chain weights, first)``,
    ``first`` being the original's weight in the mix, shaped ``batch_dims``."""
    batch_dims = [batch.size(0)] + [1] * (batch.ndim - 1)
    alpha = torch.tensor([t.alpha, t.alpha], device=batch.device).expand(batch_dims[0], -1)
    m = sample_dirichlet(alpha, generator=gen)
    width_alpha = torch.tensor([t.alpha] * t.mixture_width, device=batch.device)
    weights = sample_dirichlet(width_alpha.expand(batch_dims[0], -1), generator=gen)
    weights = weights * m[:, 1].reshape([batch_dims[0], -1])
    return batch_dims, weights, m[:, 0].reshape(batch_dims)


def augmix_combine(batch: torch.Tensor, batch_dims: list[int], first: torch.Tensor,
                   weights: torch.Tensor, chains: Sequence[torch.Tensor]) -> torch.Tensor:
    """AugMix's mix of ``batch`` and its augmented ``chains`` (v1 and v2 alike), cast back to
    the batch's dtype: ``first * batch + sum_i weights[:, i] * chains[i]``, summed in that
    order. A uint8 CPU batch of one image is mixed in one pass (:func:`kernels.augmix_mix`,
    the same float32 roundings)."""
    from ..fast import kernels

    if (kernels.AVAILABLE and batch.dtype == torch.uint8 and batch.device.type == "cpu"
            and batch.shape[0] == 1
            and all(type(c) is torch.Tensor and c.dtype == torch.uint8 and c.shape == batch.shape
                    for c in chains)):
        pairs = [(weights[:, i], chain) for i, chain in enumerate(chains)]
        return kernels.augmix_mix(batch.as_subclass(torch.Tensor), first, pairs)
    mix = first * batch
    for i, chain in enumerate(chains):
        mix.add_(weights[:, i].reshape(batch_dims) * chain)
    return mix.to(dtype=batch.dtype)


def augmix_depth(t, gen: torch.Generator) -> int:
    """One chain's length: ``chain_depth``, or drawn from 1..3 where it is not positive."""
    if t.chain_depth > 0:
        return t.chain_depth
    return int(torch.randint(low=1, high=4, size=(1,), generator=gen).item())
