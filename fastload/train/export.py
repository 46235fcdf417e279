"""Int8 export of a fine-tuned checkpoint, measured against the fp32 model it came from.

Three ways (``quantize=``):

- ``"dynamic"``: PyTorch dynamic quantization of every ``nn.Linear`` (qint8 weights, activations
  quantized per batch at run time); writes a state dict (``.int8.pt``). The API used,
  ``torch.ao.quantization.quantize_dynamic``, is deprecated upstream in favour of ``torchao``
  but still ships in the pinned torch; its deprecation warnings are silenced here.
- ``"static"``: PT2E static int8 (:mod:`fastload.train.quantize`), activation ranges calibrated
  on ``calibration_batches`` training batches; writes an ``ExportedProgram`` (``.int8.pt2``).
- ``"qat"``: converts a checkpoint trained with ``FinetuneConfig.qat`` (its learned ranges); same file.

The report gives the file size, CPU latency at each batch size and val top-1 of int8 against
fp32. Latency is measured interleaved (fp32, int8, fp32, ...) and the ratio is the median of
the per-round ratios; with ``compile=True`` both models run under ``torch.compile`` with
Inductor's ``freezing`` (weights folded as constants), the setting PT2E's int8 kernels need
(eagerly, its graph runs float ops between quantize/dequantize pairs and is slower than fp32).
Dynamic quantization is always timed eagerly, against eager fp32.
"""

from __future__ import annotations

import copy
import io
import os
import pathlib
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from fastload.utils.checks import check_output_file, check_positive_int, is_torch_file

__all__ = [
    "QUANTIZE_MODES", "ExportReport", "LayerCost", "export_checkpoint", "measure_latency",
    "model_from_checkpoint", "quantize_dynamic_int8", "sensitivity",
]

QUANTIZE_MODES = ("dynamic", "static", "qat")
_LATENCY_REPEATS = 3  # timed passes per model per round (median)


@dataclass
class ExportReport:
    """Size, latency and accuracy of the int8 model relative to fp32. ``latency`` holds one row
    per batch size: ``{"batch", "fp32_ms", "int8_ms", "ratio"}`` (ratio: median per round)."""

    output: str
    quantize: str
    fp32_bytes: int  # the fp32 state dict, saved with torch.save
    int8_bytes: int  # the written int8 file
    latency: list[dict] = field(default_factory=list)
    compiled: bool = False
    fp32_top1: float | None = None
    int8_top1: float | None = None
    fake_quant_top1: float | None = None  # qat: the fake-quantized model the checkpoint holds
    quantized_layers: int = 0
    skipped: list[str] = field(default_factory=list)  # module names kept in float
    calibration_batches: int = 0

    @property
    def size_ratio(self) -> float:
        return self.int8_bytes / self.fp32_bytes

    @property
    def latency_ratio(self) -> float | None:
        """The largest (worst) ratio over the measured batch sizes."""
        return max((row["ratio"] for row in self.latency), default=None)

    @property
    def top1_change(self) -> float | None:
        if self.fp32_top1 is None or self.int8_top1 is None:
            return None
        return self.int8_top1 - self.fp32_top1

    def as_dict(self) -> dict:
        return {**self.__dict__, "size_ratio": self.size_ratio,
                "latency_ratio": self.latency_ratio, "top1_change": self.top1_change}


@dataclass
class LayerCost:
    """Val top-1 with only ``group`` quantized (static, calibrated), and its change from fp32."""

    group: str
    top1: float
    change: float
    loss_change: float  # val cross-entropy change: a finer signal where top-1 ties


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (fp32, eval mode) with every ``nn.Linear`` dynamically quantized to qint8."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)


def _state_bytes(model: nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def _median_ms(model, images: torch.Tensor) -> float:
    times = []
    for _ in range(_LATENCY_REPEATS):
        start = time.perf_counter()
        model(images)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def measure_latency(fp32: nn.Module, int8: nn.Module, img_size: int, batches: Sequence[int] = (8, 64),
                    rounds: int = 5, compile: bool = True) -> list[dict]:
    """CPU latency of one forward pass, fp32 and int8 timed in alternating rounds, per batch size.

    ``compile=True`` runs both under ``torch.compile`` with inductor's ``freezing``
    (compiled once per batch size, before timing); else eagerly.
    """
    if rounds < 1 or not batches or any(b < 1 for b in batches):
        raise ValueError(f"batches and rounds should be positive, but got batches={batches!r}, rounds={rounds}")
    rows = []
    from fastload.pipelines.seams.torch_private import inductor_freezing

    with torch.no_grad(), inductor_freezing():
        runners = [torch.compile(m, dynamic=False) if compile else m for m in (fp32, int8)]
        for batch in batches:
            generator = torch.Generator().manual_seed(batch)
            images = torch.randn(batch, 3, img_size, img_size, generator=generator)
            for runner in runners:  # compile, kernel selection, weight packing
                runner(images)
                runner(images)
            pairs = [[_median_ms(r, images) for r in runners] for _ in range(rounds)]
            rows.append({"batch": batch, "fp32_ms": statistics.median(p[0] for p in pairs),
                         "int8_ms": statistics.median(p[1] for p in pairs),
                         "ratio": statistics.median(p[1] / p[0] for p in pairs)})
    return rows


def model_from_checkpoint(path: str | os.PathLike) -> tuple[nn.Module, dict]:
    """The fp32 model saved in a ``fastload finetune`` checkpoint, and that run's config dict.
    For a QAT checkpoint (``config["qat"]``) it is the :class:`~fastload.train.quantize.QatModel`
    (fake quantization on, eval mode); :func:`float_model` gives its float weights alone."""
    from fastload.train.checkpoint import read_checkpoint
    from fastload.train.model import model_to_load

    state = read_checkpoint(path)
    config = state.config
    model = model_to_load(config["model"], len(state.classes), config["img_size"])
    if config.get("qat"):
        from fastload.train.quantize import prepare_qat

        model = prepare_qat(model, config["img_size"], config.get("skip_quantize", ()))
    model.load_state_dict(state.model)
    return model.eval(), config


def float_model(qat_model: nn.Module, config: dict) -> nn.Module:
    """A plain timm model (eval mode) holding the float weights of a QAT model."""
    from fastload.train.model import model_to_load

    weights = {k.removeprefix("graph."): v for k, v in qat_model.state_dict().items()}
    num_classes = weights[f"{_head_name(weights)}.weight"].shape[0]
    model = model_to_load(config["model"], num_classes, config["img_size"])
    model.load_state_dict({k: v for k, v in weights.items() if k in model.state_dict()})
    return model.eval()


def _head_name(weights: dict) -> str:
    for name in ("head", "fc", "classifier"):
        if f"{name}.weight" in weights:
            return name
    raise ValueError("the QAT checkpoint's model has no head, fc or classifier weight; "
                     "it was not written by finetune() with a timm classifier")


def _loaders(config: dict, data: str | None, batch_size: int = 32):
    """``(calibration_loader, val_loader)``: the training and val splits of the checkpoint's data
    (or ``data``), both with the val transform, or None where not found."""
    from fastload.train.config import FinetuneConfig, resolve_data
    from fastload.train.finetune_data import open_dataset, train_val_transforms

    fields = {k: v for k, v in config.items() if k in ("data", "train_lmdb", "val_lmdb", "data_format")}
    if data is not None:
        if not pathlib.Path(data).is_dir():  # given, so not passed over as the run's own data
            raise FileNotFoundError(f"data={str(data)!r} is not a folder; pass the DATA folder "
                                    "the model was trained on (train/ and val/, or train.lmdb "
                                    "and val.lmdb), or leave it out to use the checkpoint's")
        fields = {"data": data, "data_format": "auto"}
    try:
        fmt, train_path, val_path = resolve_data(FinetuneConfig(**fields))
    except (ValueError, FileNotFoundError):
        return None, None
    _, val_tf = train_val_transforms(config["img_size"])
    loaders = []
    for path, shuffle in ((train_path, True), (val_path, False)):
        if path is None or not pathlib.Path(path).exists():
            loaders.append(None)
            continue
        generator = torch.Generator().manual_seed(0)
        loaders.append(torch.utils.data.DataLoader(open_dataset(fmt, path, val_tf), batch_size=batch_size,
                                                   shuffle=shuffle, generator=generator, num_workers=0))
    return loaders[0], loaders[1]


def _top1(model, loader) -> float | None:
    return _evaluate(model, loader)[0]


def _evaluate(model, loader) -> tuple[float | None, float | None]:
    """``(val top-1, mean val cross-entropy)`` on CPU, or Nones without a loader."""
    from fastload.train.loop import evaluate

    if loader is None:
        return None, None
    correct, total, loss_sum = evaluate(model, loader, torch.device("cpu"), "off", False)
    return (correct / total, loss_sum / total) if total else (None, None)


def _convert_static(fp32: nn.Module, img_size: int, calibration, batches: int,
                    skip_quantize: Sequence[str] = (), only: str | None = None) -> tuple[nn.Module, int]:
    """``(int8 graph, batches fed)`` of ``fp32`` calibrated on ``calibration``."""
    from fastload.train.quantize import calibrate, convert, prepare_static

    if calibration is None:
        raise FileNotFoundError(
            "static quantization needs training images to calibrate on, but the checkpoint's "
            "training data was not found; pass data (a DATA folder with train/ or train.lmdb/)")
    prepared = prepare_static(fp32, img_size, skip_quantize, only)
    fed = calibrate(prepared, calibration, batches)
    return convert(prepared), fed


def export_checkpoint(
    checkpoint: str | os.PathLike,
    output: str | os.PathLike | None = None,
    data: str | None = None,
    *,
    quantize: str = "dynamic",
    calibration_batches: int = 8,
    skip_quantize: Sequence[str] = (),
    latency_batches: Sequence[int] = (8, 64),
    latency_rounds: int = 5,
    compile: bool = True,
) -> ExportReport:
    """Quantize the model in ``checkpoint`` (see the module doc for ``quantize``) and write it to
    ``output`` (default: ``CHECKPOINT`` with suffix ``.int8.pt`` for dynamic, ``.int8.pt2``
    otherwise). ``skip_quantize`` (static) keeps modules matching these fnmatch patterns in
    float; a QAT checkpoint keeps those it was trained with. Val top-1 is measured on ``data``
    (or the data the checkpoint was trained on) when found, else None.

    The dynamic file loads with ``torch.load(weights_only=True)`` into
    ``quantize_dynamic_int8(create_model(...))``; the others with ``torch.export.load`` (see
    :mod:`fastload.train.quantize`).
    """
    from fastload.train.quantize import convert, quantized_layer_count, resolve_skip, save_program

    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize should be one of {QUANTIZE_MODES}, but got quantize={quantize!r}")
    if quantize == "dynamic" and skip_quantize:
        raise ValueError(f"skip_quantize applies to quantize='static' (and 'qat' at training time), "
                         f"but got skip_quantize={tuple(skip_quantize)!r} with quantize='dynamic'")
    batches = tuple(latency_batches)
    if not batches or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batches):
        raise ValueError("latency_batches should be positive batch sizes, but got "
                         f"latency_batches={list(batches)!r}")
    check_positive_int("latency_rounds", latency_rounds)
    default = pathlib.Path(checkpoint).with_suffix(
        ".int8.pt" if quantize == "dynamic" else ".int8.pt2")
    output = pathlib.Path(output) if output else default
    if output.resolve() == pathlib.Path(checkpoint).resolve():
        raise ValueError(f"output={str(output)!r} is the checkpoint being exported, and writing "
                         f"it would replace the checkpoint; pass another file, such as "
                         f"{str(default)!r}")
    check_output_file("output", output, replaces=is_torch_file, what="a torch file")
    model, config = model_from_checkpoint(checkpoint)
    is_qat = bool(config.get("qat"))
    if (quantize == "qat") != is_qat:
        raise ValueError(
            f"checkpoint {str(checkpoint)!r} was trained with qat={is_qat}; use quantize='qat' "
            "only for checkpoints trained with FinetuneConfig.qat=True, and 'static' or 'dynamic' otherwise")
    if is_qat and skip_quantize and tuple(skip_quantize) != tuple(config.get("skip_quantize", ())):
        raise ValueError(
            f"skip_quantize of a qat checkpoint is the one it trained with "
            f"({config.get('skip_quantize', ())!r}), but got skip_quantize={tuple(skip_quantize)!r}")
    img_size = config["img_size"]
    calibration, val = _loaders(config, data)
    # torch.compile breaks its graph at every dynamically quantized Linear: dynamic runs eagerly.
    compile = compile and quantize != "dynamic"
    report = ExportReport(output=str(output), quantize=quantize, fp32_bytes=0, int8_bytes=0,
                          compiled=compile)
    if quantize == "qat":
        report.fake_quant_top1 = _top1(model, val)
        skip_quantize = config.get("skip_quantize", ())
        int8 = convert(copy.deepcopy(model))
        fp32 = float_model(model, config)
    else:
        fp32 = model
        if quantize == "dynamic":
            int8 = quantize_dynamic_int8(fp32)
        else:
            int8, report.calibration_batches = _convert_static(
                fp32, img_size, calibration, calibration_batches, skip_quantize)
    report.fp32_top1 = _top1(fp32, val)
    report.fp32_bytes = _state_bytes(fp32)
    if quantize == "dynamic":
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        report.quantized_layers = sum(1 for m in int8.modules() if isinstance(m, DynamicLinear))
        torch.save(int8.state_dict(), output)
    else:
        report.skipped = resolve_skip(fp32, skip_quantize) if skip_quantize else []
        report.quantized_layers = quantized_layer_count(int8)
        save_program(int8, output, img_size)
    report.int8_bytes = os.path.getsize(output)
    report.int8_top1 = _top1(int8, val)
    report.latency = measure_latency(fp32, int8, img_size, latency_batches, latency_rounds, compile)
    return report


def sensitivity(
    checkpoint: str | os.PathLike,
    data: str | None = None,
    *,
    calibration_batches: int = 8,
    groups: Sequence[str] | None = None,
) -> tuple[float, list[LayerCost]]:
    """``(fp32 top-1, costs)``: val top-1 of the checkpoint's model with one layer group at a time
    statically quantized (default groups: :func:`fastload.train.quantize.layer_groups` — patch
    embedding, each block, head), so the groups that cost accuracy can be kept in float with
    ``skip_quantize``. A QAT checkpoint is measured on its float weights."""
    from fastload.train.quantize import layer_groups, resolve_skip

    model, config = model_from_checkpoint(checkpoint)
    if config.get("qat"):
        model = float_model(model, config)
    calibration, val = _loaders(config, data)
    if val is None:
        raise FileNotFoundError(
            "sensitivity needs val images, but the checkpoint's val data was not found; "
            "pass data (a DATA folder with val/ or val.lmdb/)")
    groups = list(groups) if groups is not None else layer_groups(model)
    resolve_skip(model, groups)  # every group names a module
    base, base_loss = _evaluate(model, val)
    costs = []
    for group in groups:
        int8, _ = _convert_static(model, config["img_size"], calibration, calibration_batches, only=group)
        top1, loss = _evaluate(int8, val)
        costs.append(LayerCost(group=group, top1=top1, change=top1 - base, loss_change=loss - base_loss))
    return base, costs
