"""Which ``collate_fn`` is torchvision's reference MixUp/CutMix collate.

torchvision's ``references/classification/train.py`` collates with::

    def collate_fn(batch):
        return mixup_cutmix(*default_collate(batch))

Said explicitly, that is ``fastload.DataLoader(..., batch_mix=mixup_cutmix)``: the loader's
collate is then a :class:`~.replays.batch_mix.MixCollate` (the same call, as an object that names its mix).
:func:`fused_collate` reads the mix off a :class:`MixCollate`, or, as a shortcut for the
script unchanged, recognises the shape above from the function's bytecode (a function whose
whole body is ``return <mix>(*default_collate(<arg>))``, or an object whose ``__call__`` is
``return self.<attr>(*default_collate(<arg>))``). Bytecode changes between Python releases,
so the shortcut runs only on the interpreters it was checked on (:data:`GUESS_CHECKED`:
CPython 3.10 to 3.13); elsewhere it declines, without an error, and the collate runs as
written (``loader.plan`` then names ``batch_mix=``). With ``<mix>`` a v2 ``MixUp``, ``CutMix``
or ``RandomChoice`` of them (the exact classes, by the registry), it gives the
:class:`~fastload.pipelines.replays.batch_mix.BatchMix` that runs it in place on the batch tensor.
"""

from __future__ import annotations

import builtins
import dis
import sys
from typing import Any

from ..ops import family
from ..registry import lookup
from ..replays.batch_mix import BatchMix, MixCollate

__all__ = ["GUESS_CHECKED", "fused_collate", "guess_supported"]

# The interpreters whose bytecode for ``return mix(*default_collate(batch))`` _mix_of reads:
# (implementation, lowest release, highest release); tests/pipelines/test_batch_mix.py.
GUESS_CHECKED: tuple[str, tuple[int, int], tuple[int, int]] = ("cpython", (3, 10), (3, 13))


def guess_supported(implementation: str | None = None,
                    version: tuple[int, ...] | None = None) -> bool:
    """Whether the bytecode shortcut of :func:`fused_collate` runs on this interpreter (or on
    ``implementation`` ``version``): one in :data:`GUESS_CHECKED`."""
    name, low, high = GUESS_CHECKED
    implementation = sys.implementation.name if implementation is None else implementation
    release = tuple(sys.version_info[:2] if version is None else version[:2])
    return implementation == name and low <= release <= high

_SKIPPED = frozenset({"RESUME", "CACHE", "NOP", "PUSH_NULL", "PRECALL", "COPY_FREE_VARS",
                      "MAKE_CELL"})


def fused_collate(collate_fn: Any) -> BatchMix | None:
    """The :class:`BatchMix` standing for ``collate_fn``, or None where it is not the
    reference script's ``return <MixUp/CutMix>(*default_collate(batch))``: a
    :class:`MixCollate`, or (:func:`guess_supported` interpreters only) a function of that
    shape."""
    if isinstance(collate_fn, MixCollate):
        mix = collate_fn.mix
    elif guess_supported():
        mix = _mix_of(collate_fn)
    else:
        return None
    if mix is None:
        return None
    op = lookup(mix)
    if op is None or family(mix) != "v2":  # v1's RandomChoice draws from Python's random
        return None
    if op.container:
        if op.name != "RandomChoice":
            return None
        inplace = [getattr(lookup(c), "batch_mix", None) for c in mix.transforms]
        if not inplace or None in inplace:
            return None
        return BatchMix(mix, True, inplace)
    return None if op.batch_mix is None else BatchMix(mix, False, [op.batch_mix])


def _mix_of(collate_fn: Any) -> Any:
    """The object ``collate_fn`` calls on ``*default_collate(batch)``, or None (read from its
    bytecode, as CPython 3.10 to 3.13 compile it)."""
    from torch.utils.data import default_collate

    fn, owner = collate_fn, None
    if not hasattr(fn, "__code__"):  # a callable object: its class's own __call__
        owner, fn = collate_fn, type(collate_fn).__dict__.get("__call__")
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & 0x0C or code.co_kwonlyargcount \
            or code.co_argcount != (1 if owner is None else 2):
        return None
    ins = [i for i in dis.get_instructions(code) if i.opname not in _SKIPPED]
    arg = code.co_varnames[code.co_argcount - 1]
    shape = [i.opname for i in ins]
    head, tail = shape[:-5], shape[-5:]
    if tail[1:] not in (["LOAD_FAST", "CALL", "CALL_FUNCTION_EX", "RETURN_VALUE"],
                        ["LOAD_FAST", "CALL_FUNCTION", "CALL_FUNCTION_EX", "RETURN_VALUE"]):
        return None
    if ins[-4].argval != arg or ins[-3].argval != 1 or _load(fn, ins[-5]) is not default_collate:
        return None
    if owner is not None:  # self.<attr>
        if head != ["LOAD_FAST", "LOAD_ATTR"] or ins[0].argval != code.co_varnames[0]:
            return None
        return getattr(owner, ins[1].argval, None)
    return _load(fn, ins[0]) if len(head) == 1 else None


def _load(fn: Any, ins: dis.Instruction) -> Any:
    """What a LOAD_GLOBAL / LOAD_DEREF instruction of ``fn`` loads (None for others)."""
    if ins.opname == "LOAD_GLOBAL":
        return fn.__globals__.get(ins.argval, getattr(builtins, ins.argval, None))
    if ins.opname == "LOAD_DEREF" and ins.argval in fn.__code__.co_freevars:
        cell = fn.__closure__[fn.__code__.co_freevars.index(ins.argval)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell
            return None
    return None
