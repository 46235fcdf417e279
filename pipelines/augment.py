"""torchvision's random transforms with their draws made from an explicit generator.

:func:`replay` gives, for a transform, a function ``(x, generator) -> x`` that makes the
same random calls as the transform's ``forward`` does on torch's default generator, in the
same order, then applies torchvision's own ops, all through :func:`_apply_op` (v2 transforms:
:mod:`~fastload.pipelines.augment_v2` and its ``_apply_op_v2``). So seeding the default
generator with ``s`` and calling the transform gives exactly what the replay gives with a
generator seeded ``s`` — and replays can run in parallel threads. Deterministic transforms
replay as themselves; others give None (the suffix then runs them on the seeded global
generator, one sample at a time): transforms not listed here and containers holding one.
v1 ``RandomChoice``/``RandomOrder`` and timm's augmentations draw from Python's ``random``:
their replays use the thread's own generator (:mod:`~fastload.pipelines.thread_rng`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from . import draws

__all__ = ["replay"]

Replay = Callable[[Any, torch.Generator], Any]

_DETERMINISTIC = frozenset({
    "ToTensor", "PILToTensor", "ToImage", "ToPureTensor", "ConvertImageDtype", "ToDtype",
    "Normalize", "CenterCrop", "Resize", "Grayscale", "Pad", "MaybeToTensor",
    "MaybePILToTensor",
})

# The op names torchvision's auto-augment ``_apply_op`` knows.
_AUTOAUGMENT_OPS = frozenset({
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
    "Invert",
})


def replay(t) -> Replay | None:
    """The explicit-generator form of ``t``, or None when its draws are not replayed.

    A replay marked ``python_rng`` (``t`` is or holds a transform drawing from Python's or
    NumPy's generators) must run inside :func:`~fastload.pipelines.thread_rng.python_rng`.
    """
    step = _replay(t)
    if step is not None and _draws_python(t):
        step.python_rng = True  # type: ignore[attr-defined]
    return step


def _draws_python(t) -> bool:
    """``t`` or a transform it holds draws from Python's ``random`` or NumPy's generator."""
    cls = type(t)
    if cls.__module__.startswith("timm.data.") and cls.__module__ != "timm.data.transforms":
        return True
    if cls.__module__ == "torchvision.transforms.transforms" and cls.__name__ in (
            "RandomChoice", "RandomOrder"):
        return True
    children = getattr(t, "transforms", None)
    return isinstance(children, (list, tuple)) and any(_draws_python(c) for c in children)


def _replay(t) -> Replay | None:
    """:func:`replay` before its ``python_rng`` mark.

    Only torchvision's (and timm's deterministic) classes themselves replay, not subclasses:
    a subclass may draw differently. ``torchvision.transforms.v2`` classes replay through
    :mod:`~fastload.pipelines.augment_v2`, timm's auto-augmentations and erasing through
    :mod:`~fastload.pipelines.augment_timm`."""
    cls = type(t)
    module, name = cls.__module__, cls.__name__
    if module == "timm.data.transforms" and name in _DETERMINISTIC:
        return lambda x, gen: t(x)
    if module.startswith("timm.data."):
        from .augment_timm import replay as replay_timm

        return replay_timm(t)  # marked python_rng: the suffix runs it inside python_rng(seed)
    if not module.startswith("torchvision.transforms"):
        return None
    if name in _DETERMINISTIC:
        return lambda x, gen: t(x)
    if module.startswith("torchvision.transforms.v2"):
        from .augment_v2 import replay_v2

        return replay_v2(t)
    maker = _makers().get(cls)
    return None if maker is None else maker(t)


def _apply_op(img: Any, op_name: str, magnitude: Any, interpolation: Any = None,
              fill: Any = None) -> Any:
    """``img`` with one op applied: the one place v1 replays apply ops.

    ``op_name`` is one of torchvision's auto-augment ops (``"Rotate"``, ``"Posterize"``, ...),
    applied as torchvision's ``_apply_op`` with the float ``magnitude``, ``interpolation`` and
    ``fill``; or the name of a ``torchvision.transforms.functional`` function (``"hflip"``,
    ``"erase"``, ``"adjust_hue"``, ...), called with ``magnitude``, a dict, as its keyword
    arguments (``interpolation`` and ``fill`` then unused). Both go through :mod:`.fast_ops`
    where it has an exact faster path (the same values, bit for bit)."""
    from . import fast_ops  # torchvision's values, bit for bit, faster on uint8 CPU tensors

    if op_name in _AUTOAUGMENT_OPS:
        return fast_ops.apply_op(img, op_name, magnitude, interpolation=interpolation, fill=fill)
    fast = fast_ops.adjust(img, op_name, magnitude)
    if fast is not None:
        return fast
    from torchvision.transforms import functional as F

    return getattr(F, op_name)(img, **magnitude)


def _spaces(t: Any) -> Callable[..., Any]:
    """``t._augmentation_space``, made once per bins and image size for this replay (it
    builds a dozen ``linspace`` tensors: ~20 us a sample); only read afterwards."""
    return functools.lru_cache(maxsize=16)(t._augmentation_space)


@functools.cache
def _makers() -> dict[type, Callable[[Any], Replay | None]]:
    import torchvision.transforms as T

    return {
        T.RandAugment: _rand_augment,
        T.TrivialAugmentWide: _trivial_augment,
        T.AutoAugment: _auto_augment,
        T.AugMix: _augmix,
        T.RandomErasing: _random_erasing,
        T.RandomHorizontalFlip: _flip,
        T.RandomVerticalFlip: _flip,
        T.RandomGrayscale: _random_grayscale,
        T.ColorJitter: _color_jitter,
        T.Compose: _compose,
        T.RandomApply: _random_apply,
        T.RandomRotation: _random_rotation,
        T.RandomAffine: _random_affine,
        T.RandomPerspective: _random_perspective,
        T.GaussianBlur: _gaussian_blur,
        T.RandomCrop: _random_crop,
        T.RandomResizedCrop: _random_resized_crop,
        T.RandomInvert: _coin_op("invert"),
        T.RandomEqualize: _coin_op("equalize"),
        T.RandomAutocontrast: _coin_op("autocontrast"),
        T.RandomPosterize: _coin_op("posterize", "bits"),
        T.RandomSolarize: _coin_op("solarize", "threshold"),
        T.RandomAdjustSharpness: _coin_op("adjust_sharpness", "sharpness_factor"),
        # these two draw from Python's ``random``: the thread's own inside python_rng
        T.RandomChoice: _random_choice,
        T.RandomOrder: _random_order,
    }


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


def _rand_augment(t) -> Replay:
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
            img = _apply_op(img, op, magnitude, t.interpolation, fill)
        return img

    return run


def _trivial_augment(t) -> Replay:
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
        return _apply_op(img, op, magnitude, t.interpolation, fill)

    return run


def _auto_augment(t) -> Replay:
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
                img = _apply_op(img, op, magnitude, t.interpolation, fill)
        return img

    return run


def _augmix(t) -> Replay:
    from torchvision.transforms import functional as F

    space_of = _spaces(t)

    def run(orig, gen):
        fill = _fill(t, orig)
        _, height, width = F.get_dimensions(orig)
        img = orig if isinstance(orig, torch.Tensor) else F.pil_to_tensor(orig)
        space = space_of(t._PARAMETER_MAX, (height, width))
        names = list(space)
        dims = list(img.shape)
        batch = img.view([1] * max(4 - img.ndim, 0) + dims)
        batch_dims, weights, mix = _augmix_mixing(t, batch, gen)
        for i in range(t.mixture_width):
            aug = batch
            for _ in range(_augmix_depth(t, gen)):
                op = names[_randint(len(space), gen)]
                magnitudes, signed = space[op]
                magnitude = 0.0
                if magnitudes.ndim > 0:
                    pick = torch.randint(t.severity, (1,), dtype=torch.long, generator=gen)
                    magnitude = float(magnitudes[pick].item())
                if signed and _randint(2, gen):
                    magnitude *= -1.0
                aug = _apply_op(aug, op, magnitude, t.interpolation, fill)
            mix.add_(weights[:, i].view(batch_dims) * aug)
        mix = mix.view(dims).to(dtype=img.dtype)
        return mix if isinstance(orig, torch.Tensor) else F.to_pil_image(mix)

    return run


def _augmix_mixing(t, batch: torch.Tensor,
                   gen: torch.Generator) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """AugMix's first draws (v1 and v2 alike): ``(batch_dims, chain weights, mix)``, mix
    being the original's share of the result."""
    batch_dims = [batch.size(0)] + [1] * (batch.ndim - 1)
    alpha = torch.tensor([t.alpha, t.alpha], device=batch.device).expand(batch_dims[0], -1)
    m = torch._sample_dirichlet(alpha, generator=gen)
    width_alpha = torch.tensor([t.alpha] * t.mixture_width, device=batch.device)
    weights = torch._sample_dirichlet(width_alpha.expand(batch_dims[0], -1), generator=gen)
    weights = weights * m[:, 1].reshape([batch_dims[0], -1])
    return batch_dims, weights, m[:, 0].reshape(batch_dims) * batch


def _augmix_depth(t, gen: torch.Generator) -> int:
    """One chain's length: ``chain_depth``, or drawn from 1..3 where it is not positive."""
    if t.chain_depth > 0:
        return t.chain_depth
    return int(torch.randint(low=1, high=4, size=(1,), generator=gen).item())


def _flip(t) -> Replay:
    op = "hflip" if type(t).__name__ == "RandomHorizontalFlip" else "vflip"

    def run(img, gen):
        return _apply_op(img, op, {}) if draws.coin(t.p, gen) else img

    return run


def _coin_op(op: str, arg: str | None = None) -> Callable[[Any], Replay]:
    """The replay maker of a transform that applies ``op`` (with ``t.<arg>``) with
    probability ``t.p`` (``RandomInvert``, ``RandomPosterize``, ...)."""

    def make(t) -> Replay:
        kwargs = {} if arg is None else {arg: getattr(t, arg)}

        def run(img, gen):
            if draws.coin(t.p, gen):
                return _apply_op(img, op, kwargs)
            return img

        return run

    return make


def _random_grayscale(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        channels = get_dimensions(img)[0]
        if draws.coin(t.p, gen):
            return _apply_op(img, "rgb_to_grayscale", {"num_output_channels": channels})
        return img

    return run


_JITTER = (("adjust_brightness", "brightness_factor"), ("adjust_contrast", "contrast_factor"),
           ("adjust_saturation", "saturation_factor"), ("adjust_hue", "hue_factor"))


def _color_jitter(t, apply: Callable[..., Any] | None = None) -> Replay:
    """v1's (or, with v2's seam as ``apply``, v2's: the same draws) ColorJitter: a random
    order of the four adjustments, then each factor."""
    apply = apply or _apply_op
    ranges = (t.brightness, t.contrast, t.saturation, t.hue)

    def run(img, gen):
        order, factors = draws.color_jitter(ranges, gen)
        for fn_id in order:
            if factors[fn_id] is not None:
                op, arg = _JITTER[fn_id]
                img = apply(img, op, {arg: factors[fn_id]})
        return img

    return run


def _chain(steps: list[Replay], img: Any, gen: torch.Generator) -> Any:
    for step in steps:
        img = step(img, gen)
    return img


def _children(t) -> list[Replay] | None:
    steps = [replay(c) for c in t.transforms]
    return None if any(s is None for s in steps) else steps  # type: ignore[return-value]


def _compose(t) -> Replay | None:
    steps = _children(t)
    if steps is None:
        return None
    return lambda img, gen: _chain(steps, img, gen)


def _random_choice(t) -> Replay | None:
    steps = _children(t)
    if steps is None:
        return None

    def run(img, gen):
        from .thread_rng import thread_random

        return thread_random().choices(steps, weights=t.p)[0](img, gen)

    return run


def _random_order(t) -> Replay | None:
    steps = _children(t)
    if steps is None:
        return None

    def run(img, gen):
        from .thread_rng import thread_random

        order = list(range(len(steps)))
        thread_random().shuffle(order)
        return _chain([steps[i] for i in order], img, gen)

    return run


def _random_apply(t) -> Replay | None:
    steps = _children(t)
    if steps is None:
        return None

    def run(img, gen):
        if t.p < torch.rand(1, generator=gen):
            return img
        return _chain(steps, img, gen)

    return run


def _random_rotation(t) -> Replay:
    def run(img, gen):
        fill = _fill(t, img)
        angle = draws.uniform(float(t.degrees[0]), float(t.degrees[1]), gen)
        return _apply_op(img, "rotate", {"angle": angle, "interpolation": t.interpolation,
                                         "expand": t.expand, "center": t.center, "fill": fill})

    return run


def _random_affine(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        fill = _fill(t, img)
        _, height, width = get_dimensions(img)
        params = draws.affine_params(t.degrees, t.translate, t.scale, t.shear, height, width, gen)
        return _apply_op(img, "affine", {**params, "interpolation": t.interpolation,
                                         "fill": fill, "center": t.center})

    return run


def _random_perspective(t) -> Replay:
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
            return _apply_op(img, "perspective", {"startpoints": start, "endpoints": end,
                                                  "interpolation": t.interpolation, "fill": fill})
        return img

    return run


def _gaussian_blur(t, apply: Callable[..., Any] | None = None) -> Replay:
    """v1's (or, with v2's seam as ``apply``, v2's: the same draw) GaussianBlur."""
    apply = apply or _apply_op

    def run(img, gen):
        sigma = draws.uniform(t.sigma[0], t.sigma[1], gen)
        return apply(img, "gaussian_blur", {"kernel_size": t.kernel_size,
                                            "sigma": [sigma, sigma]})

    return run


def _random_crop(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def pad(img, padding):
        return _apply_op(img, "pad", {"padding": padding, "fill": t.fill,
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
        return _apply_op(img, "crop", {"top": i, "left": j, "height": th, "width": tw})

    return run


def _random_resized_crop(t) -> Replay:
    from torchvision.transforms.functional import get_dimensions

    def run(img, gen):
        _, height, width = get_dimensions(img)
        i, j, h, w = draws.resized_crop_box(height, width, t.scale, t.ratio, gen)
        return _apply_op(img, "resized_crop", {
            "top": i, "left": j, "height": h, "width": w, "size": t.size,
            "interpolation": t.interpolation, "antialias": t.antialias})

    return run


def _random_erasing(t) -> Replay:
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
            return _apply_op(img, "erase", {"i": i, "j": j, "h": h, "w": w,
                                            "v": v.to(img.device), "inplace": t.inplace})
        return img

    return run
