"""Python's and NumPy's global generators, private to a thread for a block of code.

Transforms that draw from ``random`` and ``numpy.random`` (timm's auto-augmentations,
torchvision v1's ``RandomChoice``/``RandomOrder``) would otherwise have to run one sample at
a time. Inside :func:`python_rng`, the calling thread has its own ``random.Random(seed)`` and
``numpy.random.RandomState(seed & 0xFFFFFFFF)``: the very streams ``random.seed(seed)`` and
``np.random.seed(seed & 0xFFFFFFFF)`` start, so a sample draws what it would draw from the
seeded global generators, in any thread. Code reaches them through :func:`thread_random`
or through the stand-ins :data:`RANDOM` and :data:`NUMPY`, which forward to the thread's
generators inside ``python_rng`` and to the real modules everywhere else.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["NUMPY", "RANDOM", "python_rng", "thread_random"]

_LOCAL = threading.local()


class _StandIn:
    """Stands in for ``module`` (``random``, ``numpy.random``): the attributes of the thread's
    own generator ``_LOCAL.<slot>`` inside :func:`python_rng`, the module's elsewhere."""

    def __init__(self, slot: str, module: Any) -> None:
        self._slot, self._module = slot, module

    def __getattr__(self, name: str) -> Any:
        own = getattr(_LOCAL, self._slot, None)
        if own is not None and hasattr(own, name):
            return getattr(own, name)
        return getattr(self._module, name)


class _ThreadNumpy:
    """Stands in for ``numpy``: ``np.random`` is the thread's ``RandomState`` inside
    :func:`python_rng` (NumPy's global generator outside it); everything else is numpy's."""

    random = _StandIn("numpy", np.random)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


@contextmanager
def python_rng(seed: int) -> Iterator[None]:
    """Within the block, this thread's Python and NumPy draws (through the stand-ins) come
    from generators seeded as ``random.seed(seed)`` and ``np.random.seed(seed & 0xFFFFFFFF)``."""
    saved = getattr(_LOCAL, "random", None), getattr(_LOCAL, "numpy", None)
    own = getattr(_LOCAL, "own", None)
    if own is None or saved[0] is not None:  # first use in this thread, or nested
        own = random.Random(), np.random.RandomState()
        if saved[0] is None:
            _LOCAL.own = own  # reseeding is ~1 us, making a RandomState ~80 us
    own[0].seed(seed)
    own[1].seed(seed & 0xFFFFFFFF)
    _LOCAL.random, _LOCAL.numpy = own
    try:
        yield
    finally:
        _LOCAL.random, _LOCAL.numpy = saved


def thread_random() -> random.Random:
    """The calling thread's ``random.Random`` inside :func:`python_rng`."""
    own = getattr(_LOCAL, "random", None)
    if own is None:
        raise RuntimeError("thread_random() is only valid inside python_rng(seed)")
    return own


RANDOM, NUMPY = _StandIn("random", random), _ThreadNumpy()
