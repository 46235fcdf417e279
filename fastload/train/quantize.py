"""Static int8 quantization of a ViT through PT2E (``torchao``): post-training with calibration,
quantization-aware training, layers kept in float, and the saved program.

The flow is ``torch.export.export(model).module()`` -> ``prepare_pt2e`` (observers) or
``prepare_qat_pt2e`` (fake quantizers) with the ``X86InductorQuantizer`` -> calibration or
training -> ``convert_pt2e``. The quantizer gives every ``Linear`` and the patch ``Conv2d``
per-channel symmetric int8 weights and per-tensor uint8 activations; under ``torch.compile``
Inductor fuses each quantize/dequantize pair with its layer into one int8 kernel (oneDNN).

The converted graph is saved as an ``ExportedProgram`` (``.pt2``): it loads with
``torch.export.load`` in a process that imports only ``torch`` and ``torchao`` (the latter
registers the ``quantized_decomposed`` operators the graph calls)::

    import torch, torchao  # noqa: F401  (torchao registers the int8 operators)
    model = torch.export.load("run.int8.pt2").module()
    logits = model(images)  # float32 (N, 3, H, W), any N

Only PT2E-specific calls live here; measuring and writing reports is :mod:`fastload.train.export`.
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
from collections.abc import Iterable, Sequence

import torch
from torch import nn

__all__ = [
    "QatModel",
    "calibrate",
    "capture",
    "check_qat_config",
    "convert",
    "layer_groups",
    "load_program",
    "prepare_qat",
    "prepare_static",
    "quantized_layer_count",
    "resolve_skip",
    "save_program",
]

_MAX_BATCH = 4096  # upper bound of the exported program's dynamic batch dimension


def _example(img_size: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, img_size, img_size, generator=torch.Generator().manual_seed(0))


def _batch_dim() -> tuple[dict[int, object]]:
    return ({0: torch.export.Dim("batch", min=1, max=_MAX_BATCH)},)


def capture(model: nn.Module, img_size: int) -> torch.fx.GraphModule:
    """``model``'s forward as an ATen graph (``torch.export``, any batch size), sharing its
    parameters (same objects, ``requires_grad`` kept) — what the PT2E prepare calls take."""
    device = next(model.parameters()).device
    example = (_example(img_size).to(device),)
    return torch.export.export(model, example, dynamic_shapes=_batch_dim()).module()


def resolve_skip(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Module names of ``model`` matching any fnmatch pattern in ``patterns`` (e.g. ``"head"``,
    ``"blocks.0"``, ``"blocks.*.attn.proj"``); a pattern that matches nothing is an error."""
    names = [name for name, _ in model.named_modules() if name]
    matched: list[str] = []
    for pattern in patterns:
        hits = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            sample = ", ".join(names[:3] + [n for n in names if n.startswith("blocks.0.")][:3])
            raise ValueError(
                f"skip_quantize pattern {pattern!r} matches no module name (names look like: "
                f"{sample}, ..., head); use fnmatch patterns of model.named_modules() names")
        matched += [name for name in hits if name not in matched]
    return matched


def layer_groups(model: nn.Module) -> list[str]:
    """The groups ``sensitivity`` quantizes one at a time: the patch embedding, each block, the head
    (top-level children, with ``blocks`` split into its members), those that hold a layer."""
    groups: list[str] = []
    for name, child in model.named_children():
        if isinstance(child, (nn.Sequential, nn.ModuleList)):
            groups += [f"{name}.{i}" for i, _ in enumerate(child)]
        elif any(isinstance(m, (nn.Linear, nn.Conv2d)) for m in child.modules()):
            groups.append(name)
    return groups


def _quantizer(model: nn.Module, *, qat: bool, skip: Sequence[str], only: str | None):
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    config = get_default_x86_inductor_quantization_config(is_qat=qat)
    quantizer = X86InductorQuantizer()
    if only is not None:  # one group quantized, the rest float
        quantizer.set_module_name_qconfig(only, config)
        return quantizer
    for name in resolve_skip(model, skip):
        quantizer.set_module_name_qconfig(name, None)
    return quantizer.set_global(config)


def prepare_static(model: nn.Module, img_size: int, skip_quantize: Sequence[str] = (),
                   only: str | None = None) -> torch.fx.GraphModule:
    """``model`` (eval mode) captured with observers on every quantizable layer except those in
    ``skip_quantize`` (fnmatch patterns of module names) — or only on module ``only``. Run
    calibration batches through it, then :func:`convert`."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    model.eval()
    quantizer = _quantizer(model, qat=False, skip=skip_quantize, only=only)
    return prepare_pt2e(capture(model, img_size), quantizer)


@torch.no_grad()
def calibrate(prepared: torch.fx.GraphModule, batches: Iterable, count: int) -> int:
    """Feed the images of up to ``count`` ``(images, labels)`` batches to the observers; return
    how many were fed."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"calibration_batches should be a positive integer, but got {count!r}")
    fed = 0
    for images, _ in batches:
        prepared(images.float())
        fed += 1
        if fed == count:
            break
    return fed


class QatModel(nn.Module):
    """A model prepared for quantization-aware training: fake quantizers after each quantizable
    layer, parameters shared with the model it came from.

    ``set_epoch(e)`` turns fake quantization on from ``start_epoch`` (float training before);
    ``train()`` observes activation ranges while fake quantization is on, ``eval()`` freezes
    them, so an evaluation between epochs leaves the state a checkpoint holds unchanged.

    The graph is captured in eval mode: dropout and drop-path (zero in the loop's models) are
    not in it. torchao's ``move_exported_model_to_train`` is not used: its pattern rewrite
    ignores literals and turns a ``p=0`` dropout into ``p=0.5`` (torchao 0.18).
    """

    def __init__(self, graph: torch.fx.GraphModule, start_epoch: int = 0) -> None:
        super().__init__()
        self.graph = graph
        self.start_epoch = start_epoch
        self.active = start_epoch == 0
        self.train()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.graph(images)

    def set_epoch(self, epoch: int) -> None:
        self.active = epoch >= self.start_epoch
        self.train(self.training)

    def train(self, mode: bool = True) -> QatModel:
        from torchao.quantization.pt2e import (
            disable_fake_quant,
            disable_observer,
            enable_fake_quant,
            enable_observer,
        )

        self.training = mode
        self.graph.apply(enable_fake_quant if self.active else disable_fake_quant)
        self.graph.apply(enable_observer if self.active and mode else disable_observer)
        return self


def check_qat_config(config) -> None:
    """Raise ``ValueError`` for a ``FinetuneConfig`` with ``qat=True`` that cannot train
    fake-quantized: autocast (torchao's fused fake-quantize kernel takes float32 only, so bf16
    fails inside it and an fp16 GradScaler has nothing to protect), gradient checkpointing and
    ``compile`` (the model is already one ``torch.export`` graph, which neither re-enters)."""
    if config.amp != "off":
        raise ValueError(
            f"qat=True trains in float32 (torchao's fake-quantize kernel takes float32 only), "
            f"so amp should be 'off', but got amp={config.amp!r}")
    for name in ("grad_checkpointing", "compile"):
        if getattr(config, name):
            raise ValueError(
                f"qat=True cannot be combined with {name}=True: the fake-quantized model is one "
                f"torch.export graph; set {name}=False")
    start = config.qat_start_epoch
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < config.epochs:
        raise ValueError(
            f"qat_start_epoch should be an integer in [0, epochs={config.epochs}), "
            f"but got qat_start_epoch={start!r}")


def prepare_qat(model: nn.Module, img_size: int, skip_quantize: Sequence[str] = (),
                start_epoch: int = 0) -> QatModel:
    """``model`` with fake quantizers (``prepare_qat_pt2e``) on every quantizable
    layer except those in ``skip_quantize``, as a :class:`QatModel` fake-quantizing from
    ``start_epoch``. Build the optimizer after this call or before: parameters are shared."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    if isinstance(start_epoch, bool) or not isinstance(start_epoch, int) or start_epoch < 0:
        raise ValueError(f"qat_start_epoch should be an integer >= 0, but got qat_start_epoch={start_epoch!r}")
    model.eval()  # no dropout in the graph (see QatModel); gradients flow all the same
    quantizer = _quantizer(model, qat=True, skip=skip_quantize, only=None)
    return QatModel(prepare_qat_pt2e(capture(model, img_size), quantizer), start_epoch)


def convert(prepared: torch.fx.GraphModule | QatModel) -> torch.fx.GraphModule:
    """The int8 graph of a calibrated or QAT-trained model (``convert_pt2e``, eval mode), with the
    float weights it no longer reads dropped, so that saving it stores int8 weights only."""
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    graph = prepared.graph if isinstance(prepared, QatModel) else prepared
    converted = convert_pt2e(graph)
    used = {node.target for node in converted.graph.nodes if node.op == "get_attr"}
    unused = [n for n, _ in converted.named_parameters(remove_duplicate=False) if n not in used]
    unused += [n for n, _ in converted.named_buffers(remove_duplicate=False) if n not in used]
    for name in unused:
        owner, _, attr = name.rpartition(".")
        module = converted.get_submodule(owner) if owner else converted
        if hasattr(module, attr):
            delattr(module, attr)
    return allow_exported_model_train_eval(converted)  # eval() works, as on any module


def quantized_layer_count(graph: torch.fx.GraphModule) -> int:
    """Layers of a converted graph whose weights are int8 (one per-channel dequantize each)."""
    return sum(1 for node in graph.graph.nodes
               if node.op == "call_function" and "dequantize_per_channel" in str(node.target))


def save_program(graph: torch.fx.GraphModule, path: str | os.PathLike, img_size: int) -> pathlib.Path:
    """Write ``graph`` as an ``ExportedProgram`` file (``torch.export.save``) taking any batch of
    ``img_size`` images. Left out of the file, as running it needs none of them: the example
    input (1.2 MB at 224 px) and each node's source location and module path."""
    path = pathlib.Path(path)
    program = torch.export.export(graph, (_example(img_size),), dynamic_shapes=_batch_dim())
    program.example_inputs = None
    for node in program.graph.nodes:
        for key in ("stack_trace", "from_node", "nn_module_stack", "source_fn_stack", "torch_fn"):
            node.meta.pop(key, None)
    torch.export.save(program, path)
    return path


def load_program(path: str | os.PathLike) -> nn.Module:
    """The module of an ``ExportedProgram`` file written by :func:`save_program`; ValueError
    for a file whose loading would unpickle more than tensors
    (:func:`fastload.train.program_file.check_program_file`)."""
    import torchao  # noqa: F401  (registers the quantized_decomposed operators)

    from fastload.train.program_file import check_program_file

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"int8 program {str(path)!r} does not exist")
    check_program_file(path)
    return torch.export.load(path).module()
