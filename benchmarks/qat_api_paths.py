"""The quantized paths of ``benchmarks/qat_api_compare.py`` besides fastload's own, and what each
path quantizes: torchao's QAT API (prepare, then the two converts of one trained model) and the
inventories of a converted PT2E graph and of a module tree. Imported by that script only.
"""

from __future__ import annotations

import collections
import copy

import torch
from torch import nn

from fastload.train.quantize import quantized_layer_count

# ---------------------------------------------------------------- torchao's QAT API

def _ao_base_config():
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerAxis

    return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))


def ao_prepare(model: nn.Module) -> nn.Module:
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    quantize_(model, QATConfig(_ao_base_config(), step="prepare"))
    return model


def ao_convert_intx(prepared: nn.Module) -> nn.Module:
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    model = copy.deepcopy(prepared)
    quantize_(model, QATConfig(_ao_base_config(), step="convert"))
    return model.eval()


def ao_convert_int8(prepared: nn.Module) -> nn.Module:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, MappingType, quantize_
    from torchao.quantization.qat import QATConfig

    model = copy.deepcopy(prepared)
    quantize_(model, QATConfig(step="convert"))  # FakeQuantizedLinear -> nn.Linear
    # set_inductor_config=False: it would change Inductor's global settings for the fp32 model too
    quantize_(model, Int8DynamicActivationInt8WeightConfig(act_mapping_type=MappingType.ASYMMETRIC,
                                                           set_inductor_config=False))
    return model.eval()


# ---------------------------------------------------------------- what each path quantizes

def _short(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def pt2e_inventory(graph: torch.fx.GraphModule) -> dict:
    """Compute ops of the converted graph fed by a dequantize node (int8 in, under Inductor one int8
    kernel) and those that stay float."""
    compute = ("linear", "conv2d", "matmul", "bmm", "mm", "addmm", "scaled_dot_product_attention",
               "_scaled_dot_product_flash_attention_for_cpu", "add", "layer_norm", "gelu", "softmax")
    quantized, float_ops = collections.Counter(), collections.Counter()
    modules: dict[str, set] = collections.defaultdict(set)
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        op = _short(node.target)
        if op not in compute:
            continue
        fed = [a for a in node.args if isinstance(a, torch.fx.Node) and "dequantize" in str(a.target)]
        if fed:
            quantized[op] += 1
            stack = node.meta.get("nn_module_stack") or {}
            if stack and op in ("linear", "conv2d"):
                path = list(stack.values())[-1][0]
                modules[op].add(".".join(p for p in path.split(".") if not p.isdigit()))
        else:
            float_ops[op] += 1
    return {"int8_weight_layers": quantized_layer_count(graph), "quantized_ops": dict(quantized),
            "float_ops": dict(float_ops), "quantized_modules": {k: sorted(v) for k, v in modules.items()}}


def module_inventory(model: nn.Module) -> dict:
    """Modules with weights, by type, and the weight's type (a torchao tensor subclass when
    quantized); fake-quantized modules by class."""
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or module is model:
            continue
        generic = ".".join(p for p in name.split(".") if not p.isdigit())
        rows[f"{type(module).__name__}[{type(weight).__name__}]"][generic] += 1
    return {k: dict(v) for k, v in rows.items()}
