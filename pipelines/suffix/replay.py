"""torchvision's and timm's random transforms with their draws made from an explicit generator.

:func:`replay` gives, for a transform, a function ``(x, generator) -> x`` that makes the same
random calls as the transform's ``forward`` does on torch's default generator, in the same
order, then applies the transform's own ops. So seeding the default generator with ``s`` and
calling the transform gives exactly what the replay gives with a generator seeded ``s`` — and
replays can run in parallel threads. The registry (:mod:`~fastload.pipelines.registry`) names
each class's maker (v1: :mod:`~fastload.pipelines.replays.v1`, v2:
:mod:`~fastload.pipelines.replays.v2`, timm: :mod:`~fastload.pipelines.replays.timm_aug`);
deterministic transforms replay as themselves. Others give None (the suffix then runs them
on the seeded global generator, one sample at a time): classes without a maker, subclasses,
and containers holding one.
"""

from __future__ import annotations

from ..ops import family
from ..registry import lookup
from ..replays.common import Replay

__all__ = ["Replay", "replay"]


def replay(t) -> Replay | None:
    """The explicit-generator form of ``t``, or None when its draws are not replayed.

    A replay marked ``python_rng`` (``t`` is or holds a transform drawing from Python's or
    NumPy's generators: v1 ``RandomChoice``/``RandomOrder``, timm's augmentations) must run
    inside :func:`~fastload.pipelines.replays.thread_rng.python_rng`.
    """
    op = lookup(t)
    maker = None if op is None else op.replay.get(family(t))
    if maker is None:
        return None
    if not op.container:
        return maker(t)
    steps = [replay(c) for c in t.transforms]
    if any(s is None for s in steps):
        return None
    step = maker(t, steps)
    if any(getattr(s, "python_rng", False) for s in steps):
        step.python_rng = True  # type: ignore[attr-defined]
    return step
