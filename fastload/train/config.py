"""The settings and result of one fine-tuning run, and where its data is (``FinetuneConfig.data``).

Data is either a folder made by ``fastload synth`` — ``DATA/train`` and ``DATA/val`` ImageFolder
trees — or LMDB directories made by ``fastload convert``: ``DATA/train.lmdb`` and
``DATA/val.lmdb`` (or ``train_lmdb=``/``val_lmdb=``). When both exist, ``data_format="auto"``
takes the LMDBs.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

from fastload.train.amp import ScalerConfig, check_scaler_config
from fastload.train.metrics import EpochStats
from fastload.utils.checks import (
    check_int,
    check_number,
    check_output_file,
    check_positive_int,
    is_json_lines,
    is_torch_file,
)

__all__ = ["DATA_FORMATS", "LOADERS", "FinetuneConfig", "FinetuneResult", "resolve_data", "validate_config"]

LOADERS = ("torch", "fastload")
DATA_FORMATS = ("auto", "folder", "lmdb")


@dataclass
class FinetuneConfig:
    """Every setting of one fine-tuning run (the CLI maps its switches one to one)."""

    data: str | None = None  # DATA folder: train/ + val/ trees, or train.lmdb/ + val.lmdb/
    train_lmdb: str | None = None  # explicit LMDB directories (override DATA)
    val_lmdb: str | None = None
    data_format: str = "auto"  # auto | folder | lmdb
    model: str = "vit_tiny_patch16_224"  # any timm model name
    weights: str | None = None  # local safetensors / torch state dict; None = random init
    img_size: int = 224  # training and evaluation resolution
    loader: str = "fastload"  # torch | fastload
    num_workers: int = 2  # torch: worker processes; fastload: DALI threads
    amp: str = "off"  # off | fp16 | bf16
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    grad_checkpointing: bool = False
    accum_steps: int = 1  # micro-batches per optimizer step
    freeze: tuple[str, ...] = ()  # fnmatch patterns of parameter names to freeze
    qat: bool = False  # quantization-aware training (PT2E fake int8, fastload.train.quantize)
    qat_start_epoch: int = 0  # first epoch trained fake-quantized (float before)
    skip_quantize: tuple[str, ...] = ()  # fnmatch patterns of module names kept in float by qat
    optimizer: str = "adamw"  # adamw | lamb
    lr: float | None = None  # None: 2e-5 with weights, 1e-3 from scratch
    weight_decay: float = 0.01
    warmup_epochs: float = 0.0
    warmup_steps: int | None = None  # overrides warmup_epochs
    epochs: int = 2
    batch_size: int = 64  # per process, per micro-batch
    compile: bool = False
    channels_last: bool = False
    seed: int = 0
    max_steps: int | None = None  # stop after this many optimizer steps (schedule unchanged)
    max_skips: int = 25  # consecutive non-finite steps before stopping
    checkpoint: str | None = None  # file written at each epoch end and at a stop
    checkpoint_every: int = 0  # also every N optimizer steps (0 = off)
    resume: str | None = None  # checkpoint file to continue from
    log: str | None = None  # JSON lines log file
    progress: bool = True  # rank 0: a tqdm bar on a terminal, plain lines in a log
    device: str | None = None  # None: cuda when available, else cpu; "cuda:N" (torchrun: LOCAL_RANK)


@dataclass
class FinetuneResult:
    """What a run measured. ``losses`` holds every micro-batch loss of this process."""

    epochs: list[EpochStats]
    losses: list[float]
    steps: int
    skipped_steps: int
    trainable_params: int
    total_params: int
    classes: list[str]
    val_top1: float | None
    checkpoint: str | None


def resolve_data(config: FinetuneConfig) -> tuple[str, pathlib.Path, pathlib.Path | None]:
    """``(format, train_path, val_path)`` from the config's data convention (see module doc)."""
    if config.data_format not in DATA_FORMATS:
        raise ValueError(
            f"data_format should be one of {DATA_FORMATS}, but got data_format={config.data_format!r}")
    from fastload.data.format.untrusted import refuse_url

    for name in ("data", "train_lmdb", "val_lmdb"):
        if getattr(config, name) is not None:
            refuse_url(getattr(config, name), name)
    if config.train_lmdb is not None:
        val = pathlib.Path(config.val_lmdb) if config.val_lmdb else None
        return "lmdb", pathlib.Path(config.train_lmdb), val
    if config.data is None:
        raise ValueError("give data (a folder with train/ and val/) or train_lmdb (an LMDB directory)")
    root = pathlib.Path(config.data)
    if not root.is_dir():
        raise FileNotFoundError(
            f"data folder {str(root)!r} does not exist; pass a folder with train/ and val/ "
            "(make one with `fastload synth DATA`) or train_lmdb (an LMDB directory)")
    lmdb = (root / "train.lmdb").is_dir()
    folder = (root / "train").is_dir()
    fmt = config.data_format
    if fmt == "auto":
        fmt = "lmdb" if lmdb else "folder" if folder else None
    if fmt is None or (fmt == "lmdb" and not lmdb) or (fmt == "folder" and not folder):
        raise FileNotFoundError(
            f"data folder {str(root)!r} holds neither train/ (ImageFolder, from `fastload synth`)"
            " nor train.lmdb/ (from `fastload convert DATA/train DATA/train.lmdb`)"
            if fmt is None else f"data folder {str(root)!r} has no {'train.lmdb' if fmt == 'lmdb' else 'train'}/"
        )
    train = root / ("train.lmdb" if fmt == "lmdb" else "train")
    val = root / ("val.lmdb" if fmt == "lmdb" else "val")
    return fmt, train, val if val.is_dir() else None


def validate_config(config: FinetuneConfig) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` with a value out of range."""
    from fastload.train.amp import AMP_MODES
    from fastload.train.optim import OPTIMIZERS

    if config.loader not in LOADERS:
        raise ValueError(f"loader should be one of {LOADERS}, but got loader={config.loader!r}")
    if config.amp not in AMP_MODES:
        raise ValueError(f"amp should be one of {AMP_MODES}, but got amp={config.amp!r}")
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer should be one of {OPTIMIZERS}, but got optimizer={config.optimizer!r}")
    for name in ("epochs", "batch_size", "accum_steps", "img_size"):
        check_positive_int(name, getattr(config, name))
    if config.num_workers < 0:
        raise ValueError(f"num_workers should be >= 0, but got num_workers={config.num_workers}")
    if config.max_steps is not None and config.max_steps < 1:
        raise ValueError(f"max_steps should be >= 1, but got max_steps={config.max_steps}")
    check_positive_int("max_skips", config.max_skips)
    check_number("lr", config.lr, above=True, allow_none=True)
    check_number("weight_decay", config.weight_decay)
    check_number("warmup_epochs", config.warmup_epochs)
    check_int("warmup_steps", config.warmup_steps, allow_none=True)
    check_int("checkpoint_every", config.checkpoint_every,
              what="an integer >= 0 (0: only at epoch ends)")
    if config.device is not None:  # torch's own error names no option ("no NVIDIA driver")
        from fastload.loader.devices import resolve_device

        resolve_device(config.device)
    check_scaler_config(config.scaler)
    _check_model_name(config.model)
    _check_unused_options(config)
    if config.resume is not None and pathlib.Path(config.resume).is_dir():
        example = str(pathlib.Path(config.resume) / "run.pt")
        raise ValueError(f"resume should be a checkpoint file, but resume={config.resume!r} is a "
                         f"folder; pass the checkpoint file in it, such as {example!r}")
    if config.resume is not None:  # before the checkpoint's own checks: it names resume=
        from fastload.train.resume import check_resume

        check_resume(config)
    check_output_file("checkpoint", config.checkpoint, replaces=is_torch_file,
                      what="a torch checkpoint")
    check_output_file("log", config.log, replaces=is_json_lines,
                      what="a JSON lines log")  # appended to
    if config.qat:
        from fastload.train.quantize import check_qat_config

        check_qat_config(config)


def _check_model_name(name: str) -> None:
    import timm

    if ":" in name:  # hf-hub:..., local-dir:...: timm resolves these when it makes the model
        return
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:5] if name else []
        hint = f" (such as {', '.join(close)})" if close else ""
        raise ValueError(f"model should be a timm model name{hint}, but got model={name!r}; "
                         "timm.list_models() lists them")


def _check_unused_options(config: FinetuneConfig) -> None:
    """Options that only act beside another: refused alone rather than ignored."""
    if config.val_lmdb is not None and config.train_lmdb is None:
        raise ValueError(f"val_lmdb={config.val_lmdb!r} applies beside a training "
                         "database (train_lmdb=...); pass one too, or put val.lmdb in the DATA "
                         "folder")
    if not config.qat and (config.qat_start_epoch or config.skip_quantize):
        given = "qat_start_epoch" if config.qat_start_epoch else "skip_quantize"
        raise ValueError(f"{given}={getattr(config, given)!r} applies to quantization-aware "
                         "training only; pass qat=True too, or drop it")
    if config.checkpoint_every and not config.checkpoint:
        raise ValueError(f"checkpoint_every={config.checkpoint_every} needs a checkpoint file to "
                         "write (checkpoint=...); pass one too, or drop it")

