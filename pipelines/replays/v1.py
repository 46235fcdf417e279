"""Replays of ``torchvision.transforms`` (v1) transforms: their draws from an explicit generator.

Each maker gives, for a transform, a function ``(x, generator) -> x`` that makes the same
random calls as the transform's ``forward`` does on torch's default generator, in the same
order (:mod:`~fastload.pipelines.draws`), then applies torchvision's own ops, all through
:func:`apply_op`. The registry (:mod:`~fastload.pipelines.registry`) names the maker of each
class; :func:`~fastload.pipelines.suffix.replay.replay` calls it. v1 ``RandomChoice`` and
``RandomOrder`` draw from Python's ``random``: their replays use the thread's own generator
(:mod:`~fastload.pipelines.replays.thread_rng`) and are marked ``python_rng``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import draws
from ..seams.torch_private import augmentation_space, augmix_parameter_max
from . import common
from .common import Replay

__all__ = ["apply_op"]


def apply_op(img: Any, op_name: str, magnitude: Any, interpolation: Any = None,
             fill: Any = None) -> Any:
    """``img`` with one op applied: the one place v1 replays apply ops.

    ``op_name`` is one of torchvision's auto-augment ops (``"Rotate"``, ``"Posterize"``, ...),
    applied as torchvision's ``_apply_op`` with the float ``magnitude``, ``interpolation`` and
    ``fill``; or the name of a ``torchvision.transforms.functional`` function (``"hflip"``,
    ``"erase"``, ``"adjust_hue"``, ...), called with ``magnitude``, a dict, as its keyword
    arguments (``interpolation`` and ``fill`` then unused). Both go through :mod:`.fast_ops`
    where it has an exact faster path (the same values, bit for bit)."""
    from ..fast import (
        ops_v1 as fast_ops,  # torchvision's values, bit for bit, faster on uint8 CPU tensors
    )

    if op_name in common.AUTOAUGMENT_OPS:
        return fast_ops.apply_op(img, op_name, magnitude, interpolation=interpolation, fill=fill)
    fast = fast_ops.adjust(img, op_name, magnitude)
    if fast is not None:
        return fast
    from torchvision.transforms import functional as F

    return getattr(F, op_name)(img, **magnitude)


def _spaces(t: Any) -> Callable[..., Any]:
    """``t``'s augmentation space, made once per bins and image size for this replay (it
    builds a dozen ``linspace`` tensors: ~20 us a sample); only read afterwards."""
    return functools.lru_cache(maxsize=16)(augmentation_space(t))


def _fill(t, img) -> Any:
    """``t.fill`` as the v1 transforms pass it for ``img`` (a float per channel on tensors)."""
    from torchvision.transforms import functional as F

    fill = t.fill
    if isinstance(img, torch.Tensor):
        channels = F.get_dimensions(img)[0]
        if isinstance(fill, (int, float)):
            return [float(fill)] * channels
        if fill is not None:
            return [float(f) for f in fill]
    return fill


def _randint(high: int, gen: torch.Generator) -> int:
    return draws.randint(0, high, gen)


def rand_augment(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    space_of = _spaces(t)

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        space = space_of(t.num_magnitude_bins, (height, width))
        names = list(space)
        for _ in range(t.num_ops):
            op = names[_randint(len(space), gen)]
            magnitudes, signed = space[op]
            magnitude = float(magnitudes[t.magnitude].item()) if magnitudes.ndim > 0 else 0.0
            if signed and _randint(2, gen):
                magnitude = -magnitude
            img = apply_op(img, op, magnitude, t.interpolation, fill)
        return img

    return run


def trivial_augment(t) -> Replay:
    space_of = _spaces(t)

    def run(img, gen):
        fill = _fill(t, img)
        space = space_of(t.num_magnitude_bins)
        op = list(space)[_randint(len(space), gen)]
        magnitudes, signed = space[op]
        magnitude = 0.0
        if magnitudes.ndim > 0:
            pick = torch.randint(len(magnitudes), (1,), dtype=torch.long, generator=gen)
            magnitude = float(magnitudes[pick].item())
        if signed and _randint(2, gen):
            magnitude = -magnitude
        return apply_op(img, op, magnitude, t.interpolation, fill)

    return run


def auto_augment(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    space_of = _spaces(t)

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        policy = _randint(len(t.policies), gen)
        probs = torch.rand((2,), generator=gen)
        signs = torch.randint(2, (2,), generator=gen)
        space = space_of(10, (height, width))
        for i, (op, p, magnitude_id) in enumerate(t.policies[policy]):
            if probs[i] <= p:
                magnitudes, signed = space[op]
                magnitude = float(magnitudes[magnitude_id].item()) if magnitude_id is not None else 0.0
                if signed and signs[i] == 0:
                    magnitude = -magnitude
                img = apply_op(img, op, magnitude, t.interpolation, fill)
        return img

    return run


def augmix(t) -> Replay:
    from torchvision.transforms import functional as F

    space_of = _spaces(t)

    def run(orig, gen):
        fill = _fill(t, orig)
        _, height, width = F.get_dimensions(orig)
        img = orig if isinstance(orig, torch.Tensor) else F.pil_to_tensor(orig)
        space = space_of(augmix_parameter_max(t), (height, width))
        names = list(space)
        dims = list(img.shape)
        batch = img.view([1] * max(4 - img.ndim, 0) + dims)
        batch_dims, weights, first = common.augmix_mixing(t, batch, gen)
        chains = []
        for _ in range(t.mixture_width):
            aug = batch
            for _ in range(common.augmix_depth(t, gen)):
                op = names[_randint(len(space), gen)]
                magnitudes, signed = space[op]
                magnitude = 0.0
                if magnitudes.ndim > 0:
                    pick = torch.randint(t.severity, (1,), dtype=torch.long, generator=gen)
                    magnitude = float(magnitudes[pick].item())
                if signed and _randint(2, gen):
                    magnitude *= -1.0
                aug = apply_op(aug, op, magnitude, t.interpolation, fill)
            chains.append(aug)
        mix = common.augmix_combine(batch, batch_dims, first, weights, chains).view(dims)
        return mix if isinstance(orig, torch.Tensor) else F.to_pil_image(mix)

    return run


def coin_op(op: str, arg: str | None = None) -> Callable[[Any], Replay]:
    """The replay maker of a transform that applies ``op`` (with ``t.<arg>``) with
    probability ``t.p`` (``RandomInvert``, ``RandomPosterize``, ...)."""

    def make(t) -> Replay:
        kwargs = {} if arg is None else {arg: getattr(t, arg)}

        def run(img, gen):
            if draws.coin(t.p, gen):
                return apply_op(img, op, kwargs)
            return img

        return run

    return make


def random_grayscale(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        channels = get_dimensions(img)[0]
        if draws.coin(t.p, gen):
            return apply_op(img, "rgb_to_grayscale", {"num_output_channels": channels})
        return img

    return run


def color_jitter(t) -> Replay:
    return common.color_jitter(t, lambda *args: apply_op(*args))


def random_choice(t, steps: Sequence[Replay]) -> Replay:
    """v1 ``RandomChoice``: ``random.choices`` over the children, from the thread's generator."""

    def run(img, gen):
        from .thread_rng import thread_random

        return thread_random().choices(steps, weights=t.p)[0](img, gen)

    run.python_rng = True  # type: ignore[attr-defined]
    return run


def random_order(t, steps: Sequence[Replay]) -> Replay:
    """v1 ``RandomOrder``: ``random.shuffle`` of the children, from the thread's generator."""

    def run(img, gen):
        from .thread_rng import thread_random

        order = list(range(len(steps)))
        thread_random().shuffle(order)
        return common.chain([steps[i] for i in order], img, gen)

    run.python_rng = True  # type: ignore[attr-defined]
    return run


def random_apply(t, steps: Sequence[Replay]) -> Replay:
    def run(img, gen):
        if t.p < torch.rand(1, generator=gen):
            return img
        return common.chain(steps, img, gen)

    return run


def random_rotation(t) -> Replay:
    def run(img, gen):
        fill = _fill(t, img)
        angle = draws.uniform(float(t.degrees[0]), float(t.degrees[1]), gen)
        return apply_op(img, "rotate", {"angle": angle, "interpolation": t.interpolation,
                                         "expand": t.expand, "center": t.center, "fill": fill})

    return run


def random_affine(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        params = draws.affine_params(t.degrees, t.translate, t.scale, t.shear, height, width, gen)
        return apply_op(img, "affine", {**params, "interpolation": t.interpolation,
                                         "fill": fill, "center": t.center})

    return run


def random_perspective(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        fill = t.fill
        if isinstance(img, torch.Tensor):  # v1 converts even fill=None here (and fails)
            channels = get_dimensions(img)[0]
            fill = ([float(fill)] * channels if isinstance(fill, (int, float))
                    else [float(f) for f in fill])
        if draws.coin(t.p, gen):
            _, height, width = get_dimensions(img)
            start, end = draws.perspective_points(width, height, t.distortion_scale, gen)
            return apply_op(img, "perspective", {"startpoints": start, "endpoints": end,
                                                  "interpolation": t.interpolation, "fill": fill})
        return img

    return run


def gaussian_blur(t) -> Replay:
    return common.gaussian_blur(t, lambda *args: apply_op(*args))


def random_crop(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def pad(img, padding):
        return apply_op(img, "pad", {"padding": padding, "fill": t.fill,
                                      "padding_mode": t.padding_mode})

    def run(img, gen):
        if t.padding is not None:
            img = pad(img, t.padding)
        _, height, width = get_dimensions(img)
        if t.pad_if_needed and width < t.size[1]:
            img = pad(img, [t.size[1] - width, 0])
        if t.pad_if_needed and height < t.size[0]:
            img = pad(img, [0, t.size[0] - height])
        _, height, width = get_dimensions(img)
        th, tw = t.size
        i, j = draws.crop_offsets(height, width, th, tw, gen)
        return apply_op(img, "crop", {"top": i, "left": j, "height": th, "width": tw})

    return run


def random_resized_crop(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        _, height, width = get_dimensions(img)
        i, j, h, w = draws.resized_crop_box(height, width, t.scale, t.ratio, gen)
        return apply_op(img, "resized_crop", {
            "top": i, "left": j, "height": h, "width": w, "size": t.size,
            "interpolation": t.interpolation, "antialias": t.antialias})

    return run


def random_erasing(t) -> Replay:
    if isinstance(t.value, (int, float)):
        value = [float(t.value)]
    elif isinstance(t.value, str):
        value = None
    else:
        value = [float(v) for v in t.value]

    def run(img, gen):
        if draws.coin(t.p, gen):
            if value is not None and len(value) not in (1, img.shape[-3]):
                raise ValueError(f"RandomErasing value={t.value!r} should have 1 or "
                                 f"{img.shape[-3]} values (one per channel)")
            channels, height, width = img.shape[-3], img.shape[-2], img.shape[-1]
            box = draws.erase_box(channels, height, width, t.scale, t.ratio, value, gen)
            i, j, h, w, v = (0, 0, height, width, img) if box is None else box
            return apply_op(img, "erase", {"i": i, "j": j, "h": h, "w": w,
                                            "v": v.to(img.device), "inplace": t.inplace})
        return img

    return run
