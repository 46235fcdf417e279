"""DALI graph definitions, the torchvision/timm -> DALI translation and the torch suffix.

Installed as ``fastload.pipelines``. This module is the package's face: ``fastload/`` imports
what it uses from here, never from a sub-module. Names load lazily (PEP 562), so
``import fastload`` does not import DALI or build anything.

Layout, by job:

- top level: ``registry`` (one ``Op`` per transform class), ``ops``, ``draws`` (torchvision's
  random draws), ``split`` (prefix and suffix of a transform), ``translate``;
- ``prefix/``: the DALI prefix (plan, per-transform steps, per-sample geometry);
- ``decode/``: a batch through the DALI graph, region and DCT-scaled decodes, resampling,
  output buffers (never reads the registry);
- ``replays/``: torchvision's and timm's random transforms replayed from explicit generators;
- ``fast/``: exact fast ops and the C kernels' Python side;
- ``suffix/``: the torch suffix, its lookup-table tail, the MixUp/CutMix collate;
- ``seams/``: the only users of private names of torch, torchvision, timm and DALI;
- ``csrc/<extension>/``: all C (built as ``fastload.pipelines._normalize``, ``_augment``,
  ``_affine``, ``_jpegroi``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload.utils.lazy import lazy_exports

# exported name -> (module relative to this package, name in it); no exported name is also
# a sub-module's name, which the import system would set on the package first
_EXPORTS = {
    "split_transform": (".split", "split"),
    "BatchDecoder": (".decode.batch_decoder", "BatchDecoder"),
    "BatchDecodeError": (".decode.batch_decoder", "BatchDecodeError"),
    "BatchBuffers": (".decode.buffers", "BatchBuffers"),
    "describe_decode": (".decode.scaled", "describe"),
    "draw_sample": (".prefix.geometry", "draw_sample"),
    "fused_collate": (".suffix.collate", "fused_collate"),
    "MixCollate": (".replays.batch_mix", "MixCollate"),
    "collate_guess_supported": (".suffix.collate", "guess_supported"),
    "process_pool": (".suffix.run", "process_pool"),
    "kernel_fallbacks": (".fast.kernel_use", "KERNELS"),
    "kernels_used": (".fast.kernel_use", "kernels_used"),
    "missing_kernels": (".fast.kernel_use", "missing_kernels"),
}

# the same names as _EXPORTS, listed for readers and linters (tests/project/test_imports.py)
__all__ = ["BatchBuffers", "BatchDecodeError", "BatchDecoder", "MixCollate",
           "collate_guess_supported", "describe_decode", "draw_sample", "fused_collate",
           "kernel_fallbacks", "kernels_used", "missing_kernels", "process_pool",
           "split_transform"]

if TYPE_CHECKING:
    from .decode.batch_decoder import BatchDecodeError, BatchDecoder
    from .decode.buffers import BatchBuffers
    from .decode.scaled import describe as describe_decode
    from .fast.kernel_use import KERNELS as kernel_fallbacks
    from .fast.kernel_use import kernels_used, missing_kernels
    from .prefix.geometry import draw_sample
    from .replays.batch_mix import MixCollate
    from .split import split as split_transform
    from .suffix.collate import fused_collate
    from .suffix.collate import guess_supported as collate_guess_supported
    from .suffix.run import process_pool


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
