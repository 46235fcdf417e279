"""Split a transform into the longest prefix DALI runs and a per-sample torch suffix.

:func:`split` flattens the transform (``Compose``, nested, and preset objects that only
delegate to a ``Compose`` in their ``transforms`` attribute, such as torchvision's reference
``ClassificationPresetTrain``/``Eval``), translates the longest prefix to a
:class:`~fastload.pipelines.translate.TransformPlan` and leaves the rest to
:class:`~fastload.pipelines.suffix.run.Suffix`. It raises :class:`UnsupportedTransform` only
when the first transform must see a PIL image and is not one torchvision runs on tensors
(a ``Lambda`` first, say), or when the prefix ends at a size that varies per image.
"""

from __future__ import annotations

import dis
from dataclasses import dataclass, field

from .ops import State, library
from .prefix import geometry as g
from .registry import lookup, named
from .suffix.run import Suffix, tensor_capable
from .translate import TransformPlan, UnsupportedTransform, translate_list

__all__ = ["SplitPlan", "flatten", "reads_through", "split"]

# The instructions of ``def __call__(self, x): return self.transforms(x)`` (CPython 3.10-3.13).
_DELEGATING_OPS = frozenset({
    "RESUME", "LOAD_FAST", "LOAD_FAST_LOAD_FAST", "LOAD_ATTR", "LOAD_METHOD", "PRECALL",
    "CALL", "CALL_FUNCTION", "CALL_METHOD", "PUSH_NULL", "CACHE", "RETURN_VALUE", "NOP",
})


@dataclass(frozen=True)
class SplitPlan:
    """``prefix`` runs as one DALI graph (its output: uint8 CHW when ``state`` is ``"pil"``
    or ``"uint8"``, float otherwise); ``suffix`` then runs per sample with torch."""

    prefix: TransformPlan
    state: State
    suffix: Suffix = field(default_factory=lambda: Suffix([], State.UINT8))

    def describe(self) -> str:
        """What runs where, one line per stage."""
        lines = [f"DALI graph: decode -> {self.prefix.source} -> "
                 f"{str(self.prefix.output_dtype).replace('torch.', '')} CHW"]
        lines.append(f"torch suffix (per sample): {self.suffix.describe()}"
                     if self.suffix else "torch suffix: none")
        return "\n".join(lines)


def reads_through(obj) -> bool:
    """``obj``'s ``__call__`` does nothing but ``return self.transforms(x)`` on a Compose."""
    if not named(getattr(obj, "transforms", None), "Compose"):
        return False
    call = type(obj).__dict__.get("__call__")  # defined by the preset class itself
    code = getattr(call, "__code__", None)
    if code is None or code.co_argcount != 2 or code.co_kwonlyargcount or code.co_flags & 0x0C:
        return False  # not a plain two-argument Python function (no *args/**kwargs)
    if code.co_names != ("transforms",) or code.co_freevars or code.co_cellvars:
        return False
    params = set(code.co_varnames[:2])
    for ins in dis.get_instructions(code):
        if ins.opname not in _DELEGATING_OPS:
            return False
        if ins.opname.startswith("LOAD_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if not set(names) <= params:
                return False
    return True


def flatten(transform) -> list:
    """The leaf transforms in application order: Compose and delegating presets read through."""
    if named(transform, "Compose"):
        return [leaf for t in transform.transforms for leaf in flatten(t)]
    if library(transform) != "torchvision" and reads_through(transform):
        return flatten(transform.transforms)
    return [transform]


def _fixed_size(steps: tuple[g.Step, ...]) -> bool:
    fixed = False
    for s in steps:
        if isinstance(s, (g.RandomResizedCrop, g.CenterCrop, g.RandomCrop)):
            fixed = True
        elif isinstance(s, g.Resize):
            fixed = s.size is not None and len(s.size) == 2
        elif isinstance(s, g.ResizeKeepRatio):
            fixed = False  # keeps each image's aspect ratio: sizes vary until a crop
    return fixed


def _name(t) -> str:
    return type(t).__name__


def split(transform, device: str = "cpu") -> SplitPlan:
    """The split plan of ``transform`` for a graph on ``device`` ("cpu" or "gpu"), or raise
    UnsupportedTransform naming the culprit.

    On the CPU the graph stops before the first op the registry marks ``cpu_suffix``
    (``ColorJitter``) when what precedes it has a fixed size: torch's tensor ops, replayed in
    the suffix's threads, apply it in torchvision's random order at ~0.4 ms per 224 px image,
    where DALI's CPU operators take ~1.8 ms (its saturation and contrast stages; measured,
    benchmarks/NOTES.md)."""
    if transform is None:
        raise UnsupportedTransform(
            "transform=None", "the dataset would yield PIL images, not tensors; add ToTensor()")
    flat = flatten(transform)
    jitter = next((k for k, t in enumerate(flat) if getattr(lookup(t), "cpu_suffix", False)),
                  None)
    if device == "cpu" and jitter is not None:
        try:
            return _split_at(flat, jitter)
        except UnsupportedTransform:
            pass  # e.g. a varying size before it: DALI keeps the jitter
    return _split_at(flat, len(flat))


def _split_at(flat: list, limit: int) -> SplitPlan:
    """The plan whose DALI prefix is the longest translatable one of ``flat[:limit]``."""
    for k in range(limit, -1, -1):
        try:
            prefix, state = translate_list(flat[:k], pil_end=True)
        except UnsupportedTransform:
            continue
        break
    rest = flat[k:]
    if not rest:
        if state == State.PIL:
            raise UnsupportedTransform(" -> ".join(map(_name, flat)) or "Compose([])",
                                       "it yields PIL images, not tensors; add ToTensor()")
        return SplitPlan(prefix, state)
    if k == 0 and not tensor_capable(rest[0]):
        raise UnsupportedTransform(
            _name(rest[0]), "it needs a PIL image before anything DALI can run; put a "
            "translatable step first (e.g. RandomResizedCrop or PILToTensor) or move it after "
            "ToTensor() so it receives a tensor")
    if not _fixed_size(prefix.steps):
        raise UnsupportedTransform(
            _name(rest[0]), "it would start the torch suffix on images of varying size (the "
            f"DALI part ends with {prefix.source}); put a crop such as CenterCrop before it")
    suffix = Suffix(rest, state)
    if suffix.final_state == "pil":
        raise UnsupportedTransform(" -> ".join(map(_name, flat)),
                                   "it yields PIL images, not tensors; add ToTensor()")
    return SplitPlan(prefix, state, suffix)
