"""The op registry: one entry per class, the facts each entry states hold for that class."""

from __future__ import annotations

import importlib

import pytest
import torch
import torchvision.transforms as T
from torchvision.transforms import v2

from fastload.pipelines.ops import ANY, PUBLIC_MODULES, State
from fastload.pipelines.registry import OPS, lookup
from fastload.pipelines.suffix.replay import replay
from fastload.pipelines.translate import UnsupportedTransform, translate, translate_list

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize("op", OPS, ids=lambda op: f"{op.name}-{'/'.join(op.families)}")
def test_every_entry_names_a_class_its_families_export(op):
    for fam in op.families:
        if fam.startswith("timm"):
            pytest.importorskip("timm")
        module = importlib.import_module(PUBLIC_MODULES[fam])
        assert isinstance(getattr(module, op.name, None), type), (fam, op.name)


def test_no_class_is_registered_twice_and_every_refusal_has_a_hint():
    keys = [(fam, op.name) for op in OPS for fam in op.families]
    assert len(keys) == len(set(keys))
    assert all(op.hint for op in OPS if op.needs != ANY)


def test_a_user_subclass_has_no_entry_so_it_is_neither_translated_nor_replayed():
    class MyFlip(T.RandomHorizontalFlip):
        pass

    assert lookup(T.RandomHorizontalFlip()) is not None and lookup(MyFlip()) is None
    assert replay(MyFlip()) is None
    with pytest.raises(UnsupportedTransform, match="MyFlip .* no DALI translation"):
        translate(T.Compose([T.RandomResizedCrop(8), MyFlip(), T.ToTensor()]))


def test_translation_moves_through_the_states_the_entries_leave():
    steps = [T.RandomResizedCrop(8), T.PILToTensor(), T.ConvertImageDtype(torch.float32),
             T.Normalize(MEAN, STD)]
    states = [translate_list(steps[:k], pil_end=True)[1] for k in range(1, 5)]
    assert states == [State.PIL, State.UINT8, State.FLOAT, State.NORMALIZED]
    assert states[1] == "uint8" and str(states[3]) == "normalized"


@pytest.mark.parametrize(("steps", "words"), [
    ([T.PILToTensor(), T.Normalize(MEAN, STD)], "Normalize needs a float tensor"),
    ([T.ToTensor(), T.Normalize(MEAN, STD), T.CenterCrop(4)], "CenterCrop .* after Normalize"),
    ([T.PILToTensor(), T.ColorJitter(0.2)], "ColorJitter on tensors is not supported"),
    ([v2.ToPureTensor()], "it would return a PIL image"),
])
def test_an_entry_refuses_the_states_it_does_not_take_with_its_hint(steps, words):
    with pytest.raises(UnsupportedTransform, match=words):
        translate_list(steps, pil_end=True)


# One instance per per-pixel class (a new per-pixel entry needs one here), and the input it
# takes: "pil", "uint8" or "float".
_PER_PIXEL_EXAMPLES = {
    "ToTensor": (lambda m: m.ToTensor(), "pil"),
    "PILToTensor": (lambda m: m.PILToTensor(), "pil"),
    "ToImage": (lambda m: m.ToImage(), "pil"),
    "ConvertImageDtype": (lambda m: m.ConvertImageDtype(torch.float16), "uint8"),
    "ToDtype": (lambda m: m.ToDtype(torch.float32, scale=True), "uint8"),
    "Normalize": (lambda m: m.Normalize(MEAN, STD), "float"),
    "ToPureTensor": (lambda m: m.ToPureTensor(), "uint8"),
    "MaybeToTensor": (lambda m: m.MaybeToTensor(), "pil"),
    "MaybePILToTensor": (lambda m: m.MaybePILToTensor(), "pil"),
}
_PER_PIXEL = [(fam, op.name) for op in OPS if op.per_pixel for fam in op.families]


def _as_input(image: torch.Tensor, kind: str):
    from PIL import Image

    if kind == "pil":
        return Image.fromarray(image.permute(1, 2, 0).numpy())
    return image if kind == "uint8" else image.float() / 255


@pytest.mark.filterwarnings("ignore:The transform `ToTensor\\(\\)` is deprecated")
@pytest.mark.parametrize(("fam", "name"), _PER_PIXEL, ids=lambda v: v)
def test_a_per_pixel_entry_maps_each_channel_value_alone(fam, name):
    """What lets the suffix replace it by a table: its output at a pixel depends only on that
    pixel's value in that channel."""
    if fam.startswith("timm"):
        pytest.importorskip("timm")
    make, kind = _PER_PIXEL_EXAMPLES[name]
    transform = make(importlib.import_module(PUBLIC_MODULES[fam]))
    assert lookup(transform).per_pixel
    image = torch.randint(0, 256, (3, 9, 11), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    ramp = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256).contiguous()
    out = torch.as_tensor(transform(_as_input(image, kind)))
    table = torch.as_tensor(transform(_as_input(ramp, kind))).reshape(3, 256)
    expected = torch.stack([table[c][image[c].long()] for c in range(3)])
    assert torch.equal(out, expected)
