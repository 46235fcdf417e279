"""Int8 export: PyTorch dynamic quantization of every ``nn.Linear`` (weights qint8, activations
quantized on the fly per batch), measured against the fp32 model it came from.

ViT compute is almost all ``Linear`` (qkv, attention projection, MLP, head), so dynamic
quantization covers most of it without calibration data. The API used,
``torch.ao.quantization.quantize_dynamic``, is deprecated upstream in favour of ``torchao``
but still ships (and works) in the pinned torch; its deprecation warnings are silenced here.
"""

from __future__ import annotations

import io
import os
import pathlib
import statistics
import time
import warnings
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ExportReport", "quantize_dynamic_int8", "export_checkpoint", "model_from_checkpoint"]

_LATENCY_BATCH = 8  # images per timed forward pass
_LATENCY_REPEATS = 5  # timed passes (median), after one warm-up pass


@dataclass
class ExportReport:
    """Size, latency and accuracy of the int8 model relative to fp32."""

    output: str
    fp32_bytes: int
    int8_bytes: int
    fp32_latency_ms: float
    int8_latency_ms: float
    fp32_top1: float | None
    int8_top1: float | None
    quantized_layers: int

    @property
    def size_ratio(self) -> float:
        return self.int8_bytes / self.fp32_bytes

    @property
    def latency_ratio(self) -> float:
        return self.int8_latency_ms / self.fp32_latency_ms

    @property
    def top1_change(self) -> float | None:
        if self.fp32_top1 is None or self.int8_top1 is None:
            return None
        return self.int8_top1 - self.fp32_top1

    def as_dict(self) -> dict:
        return {**self.__dict__, "size_ratio": self.size_ratio,
                "latency_ratio": self.latency_ratio, "top1_change": self.top1_change}


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (fp32, eval mode) with every ``nn.Linear`` dynamically quantized to qint8."""
    import copy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)


def _state_bytes(model: nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


@torch.no_grad()
def _latency_ms(model: nn.Module, img_size: int) -> float:
    images = torch.randn(_LATENCY_BATCH, 3, img_size, img_size, generator=torch.Generator().manual_seed(0))
    model(images)  # warm-up: kernel selection, weight packing
    times = []
    for _ in range(_LATENCY_REPEATS):
        start = time.perf_counter()
        model(images)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def model_from_checkpoint(path: str | os.PathLike) -> tuple[nn.Module, dict]:
    """The fp32 model saved in a ``fastload finetune`` checkpoint, and that run's config dict."""
    from fastload.train.checkpoint import read_checkpoint
    from fastload.train.model import create_model

    state = read_checkpoint(path)
    config = state.config
    model = create_model(config["model"], len(state.classes), config["img_size"])
    model.load_state_dict(state.model)
    return model.eval(), config


def _val_loader(config: dict, data: str | None):
    from fastload.train.finetune import FinetuneConfig, resolve_data
    from fastload.train.finetune_data import open_dataset, train_val_transforms

    fields = {k: v for k, v in config.items() if k in ("data", "train_lmdb", "val_lmdb", "data_format")}
    if data is not None:
        fields = {"data": data, "data_format": "auto"}
    try:
        fmt, _, val_path = resolve_data(FinetuneConfig(**fields))
    except (ValueError, FileNotFoundError):
        return None
    if val_path is None:
        return None
    _, val_tf = train_val_transforms(config["img_size"])
    dataset = open_dataset(fmt, val_path, val_tf)
    return torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=0)


def export_checkpoint(
    checkpoint: str | os.PathLike,
    output: str | os.PathLike | None = None,
    data: str | None = None,
) -> ExportReport:
    """Quantize the model in ``checkpoint`` and write its int8 state dict to ``output``
    (default: ``CHECKPOINT`` with suffix ``.int8.pt``). Val top-1 is measured on ``data``
    (or the data the checkpoint was trained on) when it can be found, else reported as None.

    The int8 file loads with ``torch.load(weights_only=True)`` into
    ``quantize_dynamic_int8(create_model(...))``.
    """
    from fastload.train.finetune import evaluate

    fp32, config = model_from_checkpoint(checkpoint)
    int8 = quantize_dynamic_int8(fp32)
    layers = sum(1 for m in int8.modules() if type(m).__name__ == "Linear" and hasattr(m, "_packed_params"))
    output = pathlib.Path(output) if output else pathlib.Path(checkpoint).with_suffix(".int8.pt")
    torch.save(int8.state_dict(), output)
    loader = _val_loader(config, data)
    tops: list[float | None] = [None, None]
    if loader is not None:
        for i, model in enumerate((fp32, int8)):
            correct, total, _ = evaluate(model, loader, torch.device("cpu"), "off", False)
            tops[i] = correct / total if total else None
    return ExportReport(
        output=str(output), fp32_bytes=_state_bytes(fp32), int8_bytes=os.path.getsize(output),
        fp32_latency_ms=_latency_ms(fp32, config["img_size"]),
        int8_latency_ms=_latency_ms(int8, config["img_size"]),
        fp32_top1=tops[0], int8_top1=tops[1], quantized_layers=layers,
    )
