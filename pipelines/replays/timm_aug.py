"""timm's auto-augmentations and RandomErasing, with their draws private to a thread.

timm's ``RandAugment``, ``AutoAugment`` and ``AugMixAugment`` (``timm.data.auto_augment``)
draw from that module's globals ``random`` and ``np``. fastload leaves timm's module as it is
installed: it runs a *twin* of each such transform, bound to a private copy of the module (the
same source file, executed under another name and kept out of ``sys.modules``) whose ``random``
and ``np`` are the stand-ins of :mod:`~fastload.pipelines.replays.thread_rng`. Inside
``python_rng(seed)`` those are the thread's own generators seeded as the suffix's
seeded-global path seeds the real ones, so a sample gets the same draws, and the same image,
in any thread (Pillow's operations release the GIL, so samples run in parallel). Any other
caller of timm, in any thread, sees timm's own module and the global generators.

In that copy the geometric ops (``rotate``, ``shear_x``/``_y``, ``translate_*``) compute
Pillow's affine transform of an RGB image with :mod:`~fastload.pipelines.fast.pil_affine`'s C
kernel: the same pixels, bit for bit (bicubic shears and translations in about a third of
Pillow's time, rotations in about 60%: benchmarks/NOTES.md R10); other modes and filters,
or an unchecked Pillow, go to Pillow as timm's code does.

timm's ``RandomErasing`` also draws its noise from torch's default generator; its replay
makes the same calls with the thread's ``random.Random`` and the sample's explicit
generator.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from ..fast import pil_affine
from ..ops import family
from ..seams.torch_private import timm_auto_augment, timm_check_args_tf
from .thread_rng import NUMPY, RANDOM, thread_random

__all__ = ["replay"]

_AUTO_AUGMENT = frozenset({"RandAugment", "AutoAugment", "AugMixAugment"})

# The twins rely on timm's auto_augment structure as checked in torch_seams (timm 1.0): ops
# are AugmentOp objects whose aug_fn/level_fn come from NAME_TO_OP/LEVEL_TO_ARG by op name,
# held in RandAugment.ops, AugMixAugment.ops and AutoAugment.policy (sub-policy lists).


class _NoTwin(Exception):
    """The transform is not built as the checked timm versions build it."""


@functools.lru_cache(maxsize=1)
def _private_module() -> ModuleType | None:
    """A private copy of ``timm.data.auto_augment`` drawing through the stand-ins, or None
    (with one warning) for a timm release the twins were not checked on."""
    real = timm_auto_augment()  # the version-checked seam: None (warned) for other releases
    if real is None:
        return None
    spec = importlib.util.spec_from_file_location("_fastload_timm_auto_augment", real.__file__)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = real.__package__  # its relative imports, if any, resolve to timm's
    spec.loader.exec_module(module)
    if module.random is not random or module.np is not np:
        return None
    module.random, module.np = RANDOM, NUMPY
    if pil_affine.available():
        _fast_geometry(module)
    return module


# timm 1.0's affine ops (timm.data.auto_augment): function name -> its matrix of (img, v)
_AFFINE_OPS: dict[str, Callable[[Any, float], tuple]] = {
    "shear_x": lambda img, v: (1, v, 0, 0, 1, 0),
    "shear_y": lambda img, v: (1, 0, 0, v, 1, 0),
    "translate_x_rel": lambda img, v: (1, 0, v * img.size[0], 0, 1, 0),
    "translate_y_rel": lambda img, v: (1, 0, 0, 0, 1, v * img.size[1]),
    "translate_x_abs": lambda img, v: (1, 0, v, 0, 1, 0),
    "translate_y_abs": lambda img, v: (1, 0, 0, 0, 1, v),
}
_TF_KWARGS = frozenset({"resample", "fillcolor"})  # what timm's AugmentOp passes


def _fast_geometry(module: ModuleType) -> None:
    """Point the private copy's affine ops (its functions and ``NAME_TO_OP``) at
    :mod:`pil_affine`. Each still runs the copy's ``_check_args_tf`` first: its choice of a
    random filter is a draw from the copy's ``random``, in timm's order."""
    check = timm_check_args_tf(module)

    def fast_op(original: Callable, compute: Callable[..., Any]) -> Callable:
        def op(img: Any, v: float, **kwargs: Any) -> Any:
            if not kwargs.keys() <= _TF_KWARGS:
                return original(img, v, **kwargs)
            check(kwargs)
            return compute(img, v, **kwargs)
        return op

    def affine(matrix: Callable[[Any, float], tuple]) -> Callable[..., Any]:
        return lambda img, v, **kwargs: pil_affine.transform(img, img.size, matrix(img, v),
                                                             **kwargs)

    fast = {"rotate": fast_op(module.rotate, pil_affine.rotate)}
    fast.update({name: fast_op(getattr(module, name), affine(matrix))
                 for name, matrix in _AFFINE_OPS.items()})
    by_original = {getattr(module, name): fn for name, fn in fast.items()}
    module.NAME_TO_OP = {k: by_original.get(fn, fn) for k, fn in module.NAME_TO_OP.items()}
    for name, fn in fast.items():
        setattr(module, name, fn)


def _twin(obj: Any, real: ModuleType, private: ModuleType) -> Any:
    """``obj`` (a timm auto-augment object) re-bound to ``private``'s classes and functions."""
    name = type(obj).__name__
    if type(obj) is not getattr(real, name, None):  # a subclass, or not timm's
        raise _NoTwin(name)
    twin = copy.copy(obj)
    twin.__class__ = getattr(private, name)
    if name == "AugmentOp":
        for attr, table in (("aug_fn", "NAME_TO_OP"), ("level_fn", "LEVEL_TO_ARG")):
            if getattr(obj, attr) is not getattr(real, table).get(obj.name, _NoTwin):
                raise _NoTwin(f"{name}.{attr}")  # a function timm's table does not hold
            setattr(twin, attr, getattr(private, table)[obj.name])
    elif name in ("RandAugment", "AugMixAugment"):
        twin.ops = [_twin(op, real, private) for op in obj.ops]
    elif name == "AutoAugment":
        twin.policy = [[_twin(op, real, private) for op in sub] for sub in obj.policy]
    else:
        raise _NoTwin(name)
    return twin


def _thread_twin(t: Any) -> Any:
    """``t``'s twin drawing through the thread's generators, or None where it has none."""
    private = _private_module()
    if private is None:
        return None
    import timm.data.auto_augment as real

    try:
        return _twin(t, real, private)
    except (_NoTwin, AttributeError, TypeError):
        return None


def replay(t: Any) -> Callable[[Any, torch.Generator], Any] | None:
    """The thread-safe form of a timm transform ``t`` (marked ``python_rng``: it must run inside
    :func:`~fastload.pipelines.replays.thread_rng.python_rng`), or None."""
    kind, name = family(t), type(t).__name__
    if kind == "timm.auto_augment" and name in _AUTO_AUGMENT:
        own = _thread_twin(t)
        if own is None:
            return None

        def run(x: Any, gen: torch.Generator) -> Any:
            return own(x)
    elif kind == "timm.random_erasing" and name == "RandomErasing":
        def run(x: Any, gen: torch.Generator) -> Any:
            if not isinstance(x, torch.Tensor) or x.ndim != 3:
                raise TypeError(f"timm's RandomErasing in the suffix expects a C x H x W tensor, "
                                f"but got {type(x).__name__} of shape {getattr(x, 'shape', '?')}")
            _erase(t, x, thread_random(), gen)
            return x
    else:
        return None
    run.python_rng = True  # type: ignore[attr-defined]
    return run


def _erase(t: Any, img: torch.Tensor, rnd: random.Random, gen: torch.Generator) -> None:
    """timm's ``RandomErasing._erase`` on ``img`` (in place), drawing from ``rnd`` and ``gen``
    in the order timm draws from ``random`` and torch's default generator."""
    chan, img_h, img_w = img.shape
    if rnd.random() > t.probability:
        return
    area = img_h * img_w
    count = t.min_count if t.min_count == t.max_count else rnd.randint(t.min_count, t.max_count)
    for _ in range(count):
        for _attempt in range(10):
            target_area = rnd.uniform(t.min_area, t.max_area) * area / count
            aspect_ratio = math.exp(rnd.uniform(*t.log_aspect_ratio))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < img_w and h < img_h:
                top = rnd.randint(0, img_h - h)
                left = rnd.randint(0, img_w - w)
                if t.per_pixel or t.rand_color:  # drawn on the CPU generator, then moved
                    shape = (chan, h, w) if t.per_pixel else (chan, 1, 1)
                    pixels = torch.empty(shape, dtype=img.dtype).normal_(generator=gen)
                else:
                    pixels = torch.zeros((chan, 1, 1), dtype=img.dtype)
                img[:, top:top + h, left:left + w] = pixels.to(img.device)
                break
