"""What fastload knows about one transform class, and the one place a class is identified.

:class:`Op` is the record :mod:`~fastload.pipelines.registry` holds for each supported class
(its DALI prefix step, its replays, the :class:`State` it needs and leaves, whether it is
per-pixel, ...); :func:`family` and :func:`library` are the only readers of a transform's
``__module__`` in fastload, so every check of "is this torchvision's/timm's class?" agrees.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["ANY", "GEOMETRIC", "TENSORS", "Op", "State", "family", "family_of_class", "library"]


class State(str, enum.Enum):
    """What an image is between two transforms, in the order a recipe moves through them.

    ``Compose([RandomResizedCrop(224), PILToTensor(), ConvertImageDtype(torch.float),
    Normalize(m, s)])`` takes a PIL image (``PIL``) and leaves, after each step, ``PIL``,
    ``UINT8``, ``FLOAT``, ``NORMALIZED``. The values are the strings the split plan reports
    (``SplitPlan.state == "uint8"`` holds for ``State.UINT8``).
    """

    PIL = "pil"  # a PIL image (in fastload's graph: its uint8 CHW tensor form)
    UINT8 = "uint8"  # a uint8 CHW tensor
    FLOAT = "float"  # a float CHW tensor (0..1, or 0..255 after ToDtype(scale=False))
    NORMALIZED = "normalized"  # after Normalize

    def __str__(self) -> str:
        return self.value


ANY = frozenset(State)
TENSORS = frozenset({State.UINT8, State.FLOAT, State.NORMALIZED})
GEOMETRIC = frozenset({State.PIL, State.UINT8, State.FLOAT})  # a crop or resize: not normalised

# A replay maker: ``maker(t) -> (x, generator) -> x`` (or None: not replayed); a container's
# maker is called as ``maker(t, steps)`` with the replays of its children.
Maker = Callable[..., Any]
PrefixStep = Callable[[Any, Any], Any]  # step(t, builder); returns False: passes through unrecorded


@dataclass(frozen=True)
class Op:
    """One transform class: everything the prefix, the split and the suffix need to know.

    ``families``: where the class lives (``"v1"`` torchvision.transforms, ``"v2"``
    torchvision.transforms.v2, ``"timm"`` timm.data.transforms, ``"timm.auto_augment"``,
    ``"timm.random_erasing"``); only that exact class matches, not a subclass.
    ``prefix``: its step of the DALI graph (the same on CPU and GPU), or None: the graph stops
    before it. ``needs``: the states that step takes (others raise UnsupportedTransform with
    ``hint``). ``leaves``: the state it leaves the image in (``ToTensor``: FLOAT,
    ``PILToTensor``: UINT8, ``Normalize``: NORMALIZED; None: unchanged, or set by the step
    from its input, as a dtype conversion does). ``replay``: per family, the maker of its
    explicit-generator form (:mod:`~fastload.pipelines.suffix.replay`). ``container``: it holds
    transforms in ``.transforms``. ``per_pixel``: it maps each channel's uint8 values one by
    one, so a lookup table can stand for it (:mod:`~fastload.pipelines.suffix.tail`).
    ``after_tail``: it keeps a sample's shape and dtype, so it may follow that table.
    ``tensor_ok``: it takes a uint8 CHW tensor where it would take a PIL image (torchvision's
    classes but ``Lambda`` and ``ToPILImage``). ``cpu_suffix``: on a CPU graph the torch suffix
    runs it faster than DALI's CPU operators, so :func:`~fastload.pipelines.split.split`
    leaves it there (after a fixed-size step). ``batch_mix``: for a batch transform the
    reference collate applies (v2 ``MixUp``/``CutMix``), its in-place form on a collated
    batch (:mod:`~fastload.pipelines.replays.batch_mix`). ``converts`` (computed): it turns a PIL image
    into a tensor (``leaves`` UINT8 or FLOAT from ``PIL``).
    """

    name: str
    families: tuple[str, ...]
    prefix: PrefixStep | None = None
    needs: frozenset[State] = ANY
    hint: str = ""
    leaves: State | None = None
    replay: Mapping[str, Maker] = field(default_factory=lambda: MappingProxyType({}))
    container: bool = False
    per_pixel: bool = False
    after_tail: bool = False
    tensor_ok: bool = True
    cpu_suffix: bool = False
    batch_mix: Callable[..., Any] | None = None

    converts: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # It turns a PIL image into a tensor: it takes one and leaves UINT8 or FLOAT (read per
        # sample by the suffix, hence computed once).
        object.__setattr__(self, "converts", State.PIL in self.needs
                           and self.leaves in (State.UINT8, State.FLOAT))


# The module a family's classes are exported from (their exact class is looked up there).
PUBLIC_MODULES = {
    "v1": "torchvision.transforms",
    "v2": "torchvision.transforms.v2",
    "timm": "timm.data.transforms",
    "timm.auto_augment": "timm.data.auto_augment",
    "timm.random_erasing": "timm.data.random_erasing",
}


def family(t: Any) -> str | None:
    """``"v1"``/``"v2"`` for a class defined in torchvision.transforms (v2), ``"timm"`` for
    timm.data.transforms, ``"timm.<module>"`` for timm.data's other modules, else None."""
    return family_of_class(type(t))


@functools.cache
def family_of_class(cls: type) -> str | None:
    """:func:`family` of an instance of ``cls``."""
    module = cls.__module__
    if module.startswith("torchvision.transforms.v2"):
        return "v2"
    if module.startswith("torchvision.transforms"):
        return "v1"
    if module == "timm.data.transforms":
        return "timm"
    if module.startswith("timm.data."):
        return "timm." + module[len("timm.data."):]
    return None


def library(t: Any) -> str | None:
    """The top-level package ``t``'s class comes from when it is torchvision or timm."""
    top = type(t).__module__.split(".", 1)[0]
    return top if top in ("torchvision", "timm") else None
