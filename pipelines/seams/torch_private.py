"""The one place fastload uses private names of torch, torchvision and timm.

Why: the suffix replays torchvision's transforms exactly (their op application, fill and
augmentation-space helpers are private), the fast paths reuse torchvision's own grid and
matrix helpers, and the resampler writes into a buffer through an ``aten`` kernel. Private
names may move in any release, so each one used is listed in :data:`SEAMS` with the release
it was checked on, and pyproject.toml caps each package below the next, unchecked, release.

At import the installed torch and torchvision are checked against :data:`SUPPORTED` and
every one of their names here is resolved: another release fails at once, with one
:class:`UncheckedVersionError` (an ImportError) naming the package, the name and the fix.
``fastload.DataLoader`` then falls back to torch's DataLoader with a ``FallbackWarning``
saying so, instead of failing inside a batch. timm is optional: its names are checked and
resolved when first used (:func:`timm_auto_augment`).
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "PILLOW_AFFINE", "SEAMS", "SUPPORTED", "UncheckedVersionError", "augmentation_space",
    "augmix_parameter_max", "autoaugment_apply_op", "check_version", "foreach_norm",
    "gen_affine_grid", "inductor_freezing", "interpolation_modes_from_int",
    "inverse_affine_matrix", "perspective_coeffs", "pillow_affine_checked", "sample_dirichlet",
    "timm_auto_augment", "timm_check_args_tf", "upsample_aa_out",
    "v2_affine_grid", "v2_apply_autoaugment_op", "v2_augmentation_space", "v2_default_labels_getter",
    "v2_fill", "v2_get_fill",
    "v2_inverse_affine_matrix", "v2_labels_getter", "v2_policies",
]

# package -> (lowest release pyproject.toml allows, highest release the names were checked on)
SUPPORTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "torch": ((2, 1), (2, 14)),
    "torchvision": ((0, 16), (0, 29)),
    "timm": ((1, 0), (1, 0)),
}

# Pillow releases whose affine transform (libImaging/Geometry.c: its filters, engines and
# their double arithmetic) pipelines/_affine*.c was checked against, bit for bit
# (tests/pipelines/test_pil_affine.py). Outside it, timm's geometric ops run on Pillow itself.
PILLOW_AFFINE: tuple[tuple[int, int], tuple[int, int]] = ((13, 0), (13, 0))


@dataclass(frozen=True)
class Seam:
    """One private name: ``path`` (a module attribute, or ``Class.attribute``), the package
    it belongs to, the release it was checked on and why fastload needs it."""

    path: str
    package: str
    checked: str
    why: str


SEAMS: tuple[Seam, ...] = (
    Seam("torch._sample_dirichlet", "torch", "2.14",
         "AugMix's Dirichlet draws from an explicit generator (torch.distributions takes none)"),
    Seam("torch.ops.aten._upsample_bilinear2d_aa.out", "torch", "2.14",
         "antialiased bilinear resize into a channels-last batch buffer (out=)"),
    Seam("torch.ops.aten._upsample_bicubic2d_aa.out", "torch", "2.14",
         "antialiased bicubic resize into a channels-last batch buffer (out=)"),
    Seam("torch._foreach_norm", "torch", "2.14", "the training loop's gradient norm, one kernel"),
    Seam("torch._inductor.config", "torch", "2.14", "freezing for the compiled export latency"),
    Seam("torchvision.transforms.autoaugment._apply_op", "torchvision", "0.29",
         "v1 auto-augment ops, exactly as RandAugment & co. apply them"),
    Seam("torchvision.transforms.functional._get_inverse_affine_matrix", "torchvision", "0.29",
         "the affine fast path's matrix, torchvision's own arithmetic"),
    Seam("torchvision.transforms._functional_tensor._gen_affine_grid", "torchvision", "0.29",
         "the affine fast path's sampling grid, torchvision's own"),
    Seam("torchvision.transforms.functional._interpolation_modes_from_int", "torchvision",
         "0.29", "an interpolation given as a PIL int constant"),
    Seam("torchvision.transforms.AutoAugment._augmentation_space", "torchvision", "0.29",
         "v1 auto-augment magnitudes (RandAugment, TrivialAugmentWide, AutoAugment, AugMix)"),
    Seam("torchvision.transforms.AugMix._PARAMETER_MAX", "torchvision", "0.29",
         "AugMix's magnitude bins (v1 and v2)"),
    Seam("torchvision.transforms.v2.RandAugment._apply_image_or_video_transform", "torchvision",
         "0.29", "v2 auto-augment ops, exactly as v2's RandAugment & co. apply them"),
    Seam("torchvision.transforms.v2.RandAugment._AUGMENTATION_SPACE", "torchvision", "0.29",
         "v2 auto-augment magnitudes"),
    Seam("torchvision.transforms.v2.AugMix._PARTIAL_AUGMENTATION_SPACE", "torchvision", "0.29",
         "v2 AugMix's ops with all_ops=False"),
    Seam("torchvision.transforms.v2.AutoAugment._policies", "torchvision", "0.29",
         "v2 AutoAugment's policy table"),
    Seam("torchvision.transforms.v2.RandomRotation._fill", "torchvision", "0.29",
         "a v2 transform's fill per input type"),
    Seam("torchvision.transforms.v2._utils._get_fill", "torchvision", "0.29",
         "a v2 fill for one input type"),
    Seam("torchvision.transforms.v2._utils._find_labels_default_heuristic", "torchvision",
         "0.29", "whether a v2 MixUp/CutMix finds its labels the default way"),
    Seam("torchvision.transforms.v2.MixUp._labels_getter", "torchvision", "0.29",
         "the labels getter a v2 MixUp/CutMix was built with"),
    Seam("torchvision.transforms.v2.functional._geometry._get_perspective_coeffs", "torchvision",
         "0.29", "v2 RandomPerspective's coefficients from its points"),
    Seam("torchvision.transforms.v2.functional._geometry._get_inverse_affine_matrix",
         "torchvision", "0.29", "the v2 affine fast path's matrix, v2's own arithmetic"),
    Seam("torchvision.transforms.v2.functional._geometry._affine_grid", "torchvision", "0.29",
         "the v2 affine fast path's sampling grid, v2's own"),
    Seam("timm.data.auto_augment.random", "timm", "1.0",
         "timm's auto-augment ops read Python's random through this module global"),
    Seam("timm.data.auto_augment.np", "timm", "1.0",
         "timm's auto-augment ops read NumPy's generator through this module global"),
    Seam("timm.data.auto_augment._check_args_tf", "timm", "1.0",
         "timm's choice of an affine op's random filter, run before the fast affine path"),
)

# Attributes set in __init__ are found on an instance: (class path, constructor arguments).
_INSTANCES = {
    "torchvision.transforms.AugMix": (),
    "torchvision.transforms.v2.AutoAugment": (),
    "torchvision.transforms.v2.MixUp": (),
    "torchvision.transforms.v2.RandomRotation": (0,),
}
_LAZY = {"torch._inductor.config"}  # imports the compiler: resolved where it is used


class UncheckedVersionError(ImportError):
    """The installed release of a package is outside what fastload's private names were
    checked on, or lacks one of them."""


def _release(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (-1, -1)


def _dotted(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))


def check_version(package: str, version: str | None = None) -> str:
    """Return ``package``'s installed version (``version`` if given); raise
    :class:`UncheckedVersionError` when its release is outside :data:`SUPPORTED`."""
    if version is None:
        version = str(importlib.import_module(package).__version__)
    low, high = SUPPORTED[package]
    if not low <= _release(version) <= high:
        raise UncheckedVersionError(
            f"{package} {version} is installed, but fastload uses private names of {package} "
            f"checked on {package} {_dotted(high)}.x (pyproject.toml allows "
            f"{package}>={_dotted(low)},<{high[0]}.{high[1] + 1}); install a release in that "
            "range (constraints.txt names the one CI runs), or check the names in "
            "fastload/pipelines/torch_seams.py against it and update SUPPORTED"
        )
    return version


@functools.cache
def resolve(path: str) -> Any:
    """The object a :data:`SEAMS` path names; UncheckedVersionError where it is missing."""
    seam = next(s for s in SEAMS if s.path == path)
    parts = path.split(".")
    try:
        for k in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                obj = importlib.import_module(".".join(parts[:k]))
                break
            except ImportError:
                continue
        prefix = ".".join(parts[:k])
        for name in parts[k:]:
            prefix = f"{prefix}.{name}"
            if prefix in _INSTANCES:
                obj = getattr(obj, name)(*_INSTANCES[prefix])
            else:
                obj = getattr(obj, name)
    except (AttributeError, ImportError) as err:
        version = importlib.import_module(seam.package).__version__
        raise UncheckedVersionError(
            f"{seam.package} {version} has no {path} (a private name fastload.pipelines uses "
            f"for {seam.why}; checked on {seam.package} {seam.checked}): install the release in "
            "constraints.txt or update fastload/pipelines/torch_seams.py"
        ) from err
    return obj


def _check(package: str) -> None:
    """The release check, then every name of ``package`` here resolved (but the lazy ones)."""
    check_version(package)
    for seam in SEAMS:
        if seam.package == package and seam.path not in _LAZY:
            resolve(seam.path)


_check("torch")
_check("torchvision")

# ---------------------------------------------------------------- torch
sample_dirichlet: Callable[..., torch.Tensor] = resolve("torch._sample_dirichlet")
foreach_norm: Callable[..., Any] = resolve("torch._foreach_norm")
_UPSAMPLE_AA_OUT = {
    "bilinear": resolve("torch.ops.aten._upsample_bilinear2d_aa.out"),
    "bicubic": resolve("torch.ops.aten._upsample_bicubic2d_aa.out"),
}


def upsample_aa_out(mode: str) -> Callable[..., torch.Tensor]:
    """The antialiased kernel ``F.interpolate(mode=mode, antialias=True)`` runs, with ``out=``."""
    return _UPSAMPLE_AA_OUT[mode]


def inductor_freezing() -> Any:
    """``torch._inductor.config.patch(freezing=True)``: a context manager."""
    return resolve("torch._inductor.config").patch(freezing=True)


# ---------------------------------------------------------------- torchvision
autoaugment_apply_op: Callable[..., Any] = resolve("torchvision.transforms.autoaugment._apply_op")
inverse_affine_matrix: Callable[..., list[float]] = resolve(
    "torchvision.transforms.functional._get_inverse_affine_matrix")
gen_affine_grid: Callable[..., torch.Tensor] = resolve(
    "torchvision.transforms._functional_tensor._gen_affine_grid")
interpolation_modes_from_int: Callable[[int], Any] = resolve(
    "torchvision.transforms.functional._interpolation_modes_from_int")
v2_get_fill: Callable[..., Any] = resolve("torchvision.transforms.v2._utils._get_fill")
v2_default_labels_getter: Callable[..., Any] = resolve(
    "torchvision.transforms.v2._utils._find_labels_default_heuristic")
perspective_coeffs: Callable[..., list[float]] = resolve(
    "torchvision.transforms.v2.functional._geometry._get_perspective_coeffs")
v2_inverse_affine_matrix: Callable[..., list[float]] = resolve(
    "torchvision.transforms.v2.functional._geometry._get_inverse_affine_matrix")
v2_affine_grid: Callable[..., torch.Tensor] = resolve(
    "torchvision.transforms.v2.functional._geometry._affine_grid")


def augmentation_space(t: Any) -> Callable[..., dict]:
    """A v1 auto-augment transform's ``_augmentation_space(bins, image_size)`` method."""
    return t._augmentation_space


def augmix_parameter_max(t: Any) -> int:
    """AugMix's number of magnitude bins (v1 and v2)."""
    return t._PARAMETER_MAX


def v2_augmentation_space(t: Any, partial: bool = False) -> dict:
    """A v2 auto-augment transform's ops (``partial``: AugMix's ``all_ops=False`` subset)."""
    return t._PARTIAL_AUGMENTATION_SPACE if partial else t._AUGMENTATION_SPACE


def v2_policies(t: Any) -> list:
    """v2 ``AutoAugment``'s policy table."""
    return t._policies


def v2_fill(t: Any) -> Any:
    """A v2 transform's fill, per input type."""
    return t._fill


def v2_labels_getter(t: Any) -> Callable[..., Any]:
    """The labels getter a v2 ``MixUp``/``CutMix`` was built with (:data:`v2_default_labels_getter`
    for ``labels_getter="default"``)."""
    return t._labels_getter


@functools.cache
def _autoaugment_base() -> Any:
    # v2's auto-augment op application is a method that does not use its instance.
    from torchvision.transforms import v2

    return v2.RandAugment()


def v2_apply_autoaugment_op(img: Any, op_name: str, magnitude: float, interpolation: Any,
                            fill: Any) -> Any:
    """v2's ``_AutoAugmentBase._apply_image_or_video_transform``."""
    return _autoaugment_base()._apply_image_or_video_transform(
        img, op_name, magnitude, interpolation=interpolation, fill=fill)


# ---------------------------------------------------------------- timm (optional)
@functools.cache
def timm_auto_augment() -> Any:
    """``timm.data.auto_augment`` once its release is checked (its module globals ``random``
    and ``np`` are what :mod:`~fastload.pipelines.replays.timm_aug`'s private copy of the module
    rebinds to its stand-ins; timm's own module is never changed), or
    None with a warning for another release: timm's augmentations then run on the seeded
    global generators, one sample at a time (the same images, slower)."""
    try:
        check_version("timm")
        resolve("timm.data.auto_augment.random")
        resolve("timm.data.auto_augment.np")
        resolve("timm.data.auto_augment._check_args_tf")
    except UncheckedVersionError as err:
        warnings.warn(f"{err}. timm's augmentations run one sample at a time meanwhile.",
                      RuntimeWarning, stacklevel=2)
        return None
    return importlib.import_module("timm.data.auto_augment")


def timm_check_args_tf(module: Any) -> Callable[[dict], None]:
    """``module._check_args_tf`` of ``timm.data.auto_augment`` or of a copy of it (the copy
    :mod:`~fastload.pipelines.replays.timm_aug` runs): it fills an affine op's keyword
    arguments, drawing the random filter from that module's ``random``."""
    return module._check_args_tf


# ---------------------------------------------------------------- Pillow
def pillow_affine_checked(version: str | None = None) -> bool:
    """Whether the installed Pillow (``version`` if given) is in :data:`PILLOW_AFFINE`: a
    release whose affine arithmetic ``pipelines/_affine*.c`` reproduces. No warning otherwise:
    the callers then use Pillow itself, with its own values."""
    if version is None:
        import PIL

        version = str(PIL.__version__)
    low, high = PILLOW_AFFINE
    return low <= _release(version) <= high
