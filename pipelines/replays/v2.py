"""Replays (see :mod:`~fastload.pipelines.suffix.replay`) of ``torchvision.transforms.v2`` transforms.

The registry (:mod:`~fastload.pipelines.registry`) names the maker of each class. Each replay
makes the draws the v2 transform's ``forward``/``make_params`` makes on torch's
default generator (``torch.randint(n, ())``, ``torch.rand(1)``, ...), in the same order and
with the same shapes, from an explicit generator, then applies v2's own ops through
:func:`apply_op_v2`. Inputs are what the suffix gives v2 transforms, a plain CHW tensor or a
``tv_tensors.Image``, and the output has the type the transform itself returns for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import draws
from ..seams import torch_private as seams
from . import common
from .common import Replay

__all__ = ["apply_op_v2"]


def apply_op_v2(img: Any, op_name: str, magnitude: Any, interpolation: Any = None,
                fill: Any = None) -> Any:
    """``img`` with one op applied: the one place v2 replays apply ops.

    ``op_name`` is one of v2's auto-augment ops, applied by v2's
    ``_AutoAugmentBase._apply_image_or_video_transform`` with the float ``magnitude``,
    ``interpolation`` and ``fill`` (v2's per-type fill dict); or the name of a
    ``torchvision.transforms.v2.functional`` function (``"horizontal_flip"``, ``"erase"``,
    ...), called with ``magnitude``, a dict, as its keyword arguments. v2's ops are not v1's
    (different kernels, tv_tensor wrapping), hence a seam of their own; both go through
    :mod:`.fast_ops_v2` where it has an exact faster path."""
    from ..fast import (
        ops_v2 as fast_ops_v2,  # v2's values, bit for bit, faster on uint8 CPU tensors
    )

    if op_name in common.AUTOAUGMENT_OPS:
        fast = fast_ops_v2.apply_op(img, op_name, magnitude, interpolation, fill)
        if fast is not None:
            return fast
        return seams.v2_apply_autoaugment_op(img, op_name, magnitude, interpolation, fill)
    fast = fast_ops_v2.adjust(img, op_name, magnitude)
    if fast is not None:
        return fast
    from torchvision.transforms.v2 import functional as F

    return getattr(F, op_name)(img, **magnitude)


def _fill(t, img) -> Any:
    """v2's fill of ``t`` for ``img``'s type."""
    return seams.v2_get_fill(seams.v2_fill(t), type(img))


def _skipped(t, gen: torch.Generator) -> bool:
    """``_RandomApplyTransform``'s draw: True when the transform leaves the input as it is."""
    return not draws.coin(t.p, gen)


def _magnitude(fn: Callable, bins: int, height: int, width: int, index: Callable[[], int],
               signed: bool, gen: torch.Generator) -> float:
    """An auto-augment op's magnitude as v2 draws it: ``index()`` picks the bin, then a sign."""
    magnitudes = fn(bins, height, width)
    if magnitudes is None:
        return 0.0
    magnitude = float(magnitudes[index()])
    if signed and torch.rand((), generator=gen) <= 0.5:
        magnitude *= -1
    return magnitude


def _random_item(space: dict[str, Any], gen: torch.Generator) -> tuple[str, Any]:
    keys = tuple(space)
    key = keys[int(torch.randint(len(keys), (), generator=gen))]
    return key, space[key]


def _size(img) -> tuple[int, int]:
    from torchvision.transforms.v2.functional import get_size

    height, width = get_size(img)
    return height, width


def rand_augment(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        for _ in range(t.num_ops):
            op, (fn, signed) = _random_item(seams.v2_augmentation_space(t), gen)
            magnitude = _magnitude(fn, t.num_magnitude_bins, height, width, lambda: t.magnitude,
                                   signed, gen)
            img = apply_op_v2(img, op, magnitude, t.interpolation, seams.v2_fill(t))
        return img

    return run


def trivial_augment(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        op, (fn, signed) = _random_item(seams.v2_augmentation_space(t), gen)
        magnitude = _magnitude(fn, t.num_magnitude_bins, height, width,
                               lambda: int(torch.randint(t.num_magnitude_bins, (), generator=gen)),
                               signed, gen)
        return apply_op_v2(img, op, magnitude, t.interpolation, seams.v2_fill(t))

    return run


def auto_augment(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        policies = seams.v2_policies(t)
        policy = policies[int(torch.randint(len(policies), (), generator=gen))]
        for op, probability, index in policy:
            if not torch.rand((), generator=gen) <= probability:
                continue
            fn, signed = seams.v2_augmentation_space(t)[op]
            magnitude = _magnitude(fn, 10, height, width, lambda i=index: i, signed, gen)
            img = apply_op_v2(img, op, magnitude, t.interpolation, seams.v2_fill(t))
        return img

    return run


def augmix(t) -> Replay:
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    def run(orig, gen):
        height, width = _size(orig)
        img = orig if isinstance(orig, torch.Tensor) else F.pil_to_tensor(orig)
        space = seams.v2_augmentation_space(t, partial=not t.all_ops)
        dims = list(img.shape)
        ndim = 5 if isinstance(orig, tv_tensors.Video) else 4
        batch = img.reshape([1] * max(ndim - img.ndim, 0) + dims)
        batch_dims, weights, first = common.augmix_mixing(t, batch, gen)
        chains = []
        for _ in range(t.mixture_width):
            aug = batch
            for _ in range(common.augmix_depth(t, gen)):
                op, (fn, signed) = _random_item(space, gen)
                magnitude = _magnitude(fn, seams.augmix_parameter_max(t), height, width,
                                       lambda: int(torch.randint(t.severity, (), generator=gen)),
                                       signed, gen)
                aug = apply_op_v2(aug, op, magnitude, t.interpolation, seams.v2_fill(t))
            chains.append(aug)
        mix = common.augmix_combine(batch, batch_dims, first, weights, chains).reshape(dims)
        if isinstance(orig, (tv_tensors.Image, tv_tensors.Video)):
            return tv_tensors.wrap(mix, like=orig)
        return mix if isinstance(orig, torch.Tensor) else F.to_pil_image(mix)

    return run


def random_erasing(t) -> Replay:
    def run(img, gen):
        if _skipped(t, gen):
            return img
        from torchvision.transforms.v2.functional import get_dimensions

        channels, height, width = get_dimensions(img)
        if t.value is not None and len(t.value) not in (1, channels):
            raise ValueError(f"If value is a sequence, it should have either a single value or "
                             f"{channels} (number of inpt channels)")
        box = draws.erase_box(channels, height, width, t.scale, t.ratio, t.value, gen)
        if box is None:
            return img
        i, j, h, w, v = box
        return apply_op_v2(img, "erase", {"i": i, "j": j, "h": h, "w": w, "v": v,
                                           "inplace": t.inplace})

    return run


def coin_op(op: str, arg: str | None = None) -> Callable[[Any], Replay]:
    """The replay maker of a ``_RandomApplyTransform`` that applies ``op`` (with
    ``t.<arg>``) with probability ``t.p``."""

    def make(t) -> Replay:
        kwargs = {} if arg is None else {arg: getattr(t, arg)}
        return lambda img, gen: img if _skipped(t, gen) else apply_op_v2(img, op, kwargs)

    return make


def random_grayscale(t) -> Replay:
    from torchvision.transforms.v2.functional import get_dimensions

    def run(img, gen):
        if _skipped(t, gen):
            return img
        channels = get_dimensions(img)[0]
        return apply_op_v2(img, "rgb_to_grayscale", {"num_output_channels": channels})

    return run


def channel_permutation(t) -> Replay:
    from torchvision.transforms.v2.functional import get_dimensions

    def run(img, gen):
        permutation = torch.randperm(get_dimensions(img)[0], generator=gen)
        return apply_op_v2(img, "permute_channels", {"permutation": permutation})

    return run


def photometric_distort(t) -> Replay:
    from torchvision.transforms.v2.functional import get_dimensions

    names = ("brightness", "contrast", "saturation", "hue")

    def run(img, gen):
        channels = get_dimensions(img)[0]
        factors = {}
        for name in names:
            low, high = getattr(t, name)
            factors[name] = draws.uniform(low, high, gen) if draws.coin(t.p, gen) else None
        contrast_before = bool(torch.rand((), generator=gen) < 0.5)
        permutation = torch.randperm(channels, generator=gen) if draws.coin(t.p, gen) else None

        def adjust(img, name):
            if factors[name] is None:
                return img
            return apply_op_v2(img, f"adjust_{name}", {f"{name}_factor": factors[name]})

        img = adjust(img, "brightness")
        if contrast_before:
            img = adjust(img, "contrast")
        img = adjust(adjust(img, "saturation"), "hue")
        if not contrast_before:
            img = adjust(img, "contrast")
        if permutation is not None:
            img = apply_op_v2(img, "permute_channels", {"permutation": permutation})
        return img

    return run


def random_apply(t, steps: Sequence[Replay]) -> Replay:
    return lambda img, gen: img if _skipped(t, gen) else common.chain(steps, img, gen)


def random_choice(t, steps: Sequence[Replay]) -> Replay:
    p = torch.tensor(t.p)

    def run(img, gen):
        return steps[int(torch.multinomial(p, 1, generator=gen))](img, gen)

    return run


def random_order(t, steps: Sequence[Replay]) -> Replay:
    def run(img, gen):
        for idx in torch.randperm(len(steps), generator=gen).tolist():
            img = steps[idx](img, gen)
        return img

    return run


def color_jitter(t) -> Replay:
    return common.color_jitter(t, lambda *args: apply_op_v2(*args))


def gaussian_blur(t) -> Replay:
    return common.gaussian_blur(t, lambda *args: apply_op_v2(*args))


def random_rotation(t) -> Replay:
    def run(img, gen):
        angle = draws.uniform(t.degrees[0], t.degrees[1], gen)
        return apply_op_v2(img, "rotate", {"angle": angle, "interpolation": t.interpolation,
                                            "expand": t.expand, "center": t.center,
                                            "fill": _fill(t, img)})

    return run


def random_affine(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        params = draws.affine_params(t.degrees, t.translate, t.scale, t.shear, height, width, gen)
        return apply_op_v2(img, "affine", {**params, "interpolation": t.interpolation,
                                            "fill": _fill(t, img), "center": t.center})

    return run


def random_perspective(t) -> Replay:
    def run(img, gen):
        if _skipped(t, gen):
            return img
        height, width = _size(img)
        start, end = draws.perspective_points(width, height, t.distortion_scale, gen)
        coefficients = seams.perspective_coeffs(start, end)
        return apply_op_v2(img, "perspective", {
            "startpoints": None, "endpoints": None, "fill": _fill(t, img),
            "interpolation": t.interpolation, "coefficients": coefficients})

    return run


def random_crop(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        left = right = top = bottom = 0
        if t.padding is not None:
            left, right, top, bottom = t.padding
            height += top + bottom
            width += left + right
        crop_h, crop_w = t.size
        if t.pad_if_needed:
            if height < crop_h:
                diff = crop_h - height
                top, bottom, height = top + diff, bottom + diff, height + 2 * diff
            if width < crop_w:
                diff = crop_w - width
                left, right, width = left + diff, right + diff, width + 2 * diff
        y, x = draws.crop_offsets_v2(height, width, crop_h, crop_w, gen)
        padding = [left, top, right, bottom]
        if any(padding):
            img = apply_op_v2(img, "pad", {"padding": padding, "fill": _fill(t, img),
                                            "padding_mode": t.padding_mode})
        if height > crop_h or width > crop_w:
            img = apply_op_v2(img, "crop", {"top": y, "left": x, "height": crop_h,
                                             "width": crop_w})
        return img

    return run


def random_resized_crop(t) -> Replay:
    def run(img, gen):
        height, width = _size(img)
        i, j, h, w = draws.resized_crop_box(height, width, t.scale, t.ratio, gen)
        return apply_op_v2(img, "resized_crop", {
            "top": i, "left": j, "height": h, "width": w, "size": t.size,
            "interpolation": t.interpolation, "antialias": t.antialias})

    return run

