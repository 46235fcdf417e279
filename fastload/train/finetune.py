"""The reference ViT fine-tuning loop: ``finetune(FinetuneConfig(...)) -> FinetuneResult``.

Data (``FinetuneConfig.data``) is either a folder made by ``fastload synth`` — ``DATA/train``
and ``DATA/val`` ImageFolder trees — or LMDB directories made by ``fastload convert``:
``DATA/train.lmdb`` and ``DATA/val.lmdb`` (or ``train_lmdb=``/``val_lmdb=``). When both exist,
``data_format="auto"`` takes the LMDBs. ``loader="torch"`` reads them with
``torch.utils.data.DataLoader``, ``loader="fastload"`` with ``fastload.DataLoader``; the loop is
the same for both (same datasets, transforms and arguments).

Order and resume: the fastload loader shuffles and shards by itself (``seed=``, ``set_epoch``,
DistributedSampler-style sharding) and its ``state_dict()`` is the checkpoint's loader state.
torch's DataLoader has no state, so it gets a :class:`ResumableSampler` (a permutation of
``seed + epoch``, same sharding rule, restartable mid-epoch) and a :class:`SeededDataset`
(each sample's augmentation drawn from a seed of ``(seed, epoch, index)``). Either way a
resumed fp32 CPU run repeats the uninterrupted run's losses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import pathlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from fastload.train.amp import NanGuard, ScalerConfig, autocast, grad_norm, make_scaler
from fastload.train.finetune_data import (
    ResumableSampler,
    SeededDataset,
    make_loader,
    open_dataset,
    train_val_transforms,
)
from fastload.train.metrics import EpochStats, JsonLog, MemoryMonitor, StepTimer, all_reduce, to_mib

__all__ = ["FinetuneConfig", "FinetuneResult", "finetune", "resolve_data"]

LOADERS = ("torch", "fastload")
DATA_FORMATS = ("auto", "folder", "lmdb")
log = logging.getLogger("fastload.train.finetune")


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
    progress: bool = True  # tqdm bar on rank 0
    device: str | None = None  # None: cuda when available, else cpu


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
        raise ValueError(f"--data-format should be one of {DATA_FORMATS}, got {config.data_format!r}")
    if config.train_lmdb is not None:
        val = pathlib.Path(config.val_lmdb) if config.val_lmdb else None
        return "lmdb", pathlib.Path(config.train_lmdb), val
    if config.data is None:
        raise ValueError("give DATA (a folder with train/ and val/) or --train-lmdb")
    root = pathlib.Path(config.data)
    if not root.is_dir():
        raise FileNotFoundError(f"DATA folder {str(root)!r} does not exist")
    lmdb = (root / "train.lmdb").is_dir()
    folder = (root / "train").is_dir()
    fmt = config.data_format
    if fmt == "auto":
        fmt = "lmdb" if lmdb else "folder" if folder else None
    if fmt is None or (fmt == "lmdb" and not lmdb) or (fmt == "folder" and not folder):
        raise FileNotFoundError(
            f"DATA folder {str(root)!r} holds neither train/ (ImageFolder, from `fastload synth`)"
            " nor train.lmdb/ (from `fastload convert DATA/train DATA/train.lmdb`)"
            if fmt is None else f"DATA folder {str(root)!r} has no {'train.lmdb' if fmt == 'lmdb' else 'train'}/"
        )
    train = root / ("train.lmdb" if fmt == "lmdb" else "train")
    val = root / ("val.lmdb" if fmt == "lmdb" else "val")
    return fmt, train, val if val.is_dir() else None


def _validate(config: FinetuneConfig) -> None:
    from fastload.train.amp import AMP_MODES
    from fastload.train.optim import OPTIMIZERS

    if config.loader not in LOADERS:
        raise ValueError(f"--loader should be one of {LOADERS}, but got {config.loader!r}")
    if config.amp not in AMP_MODES:
        raise ValueError(f"--amp should be one of {AMP_MODES}, but got {config.amp!r}")
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"--optimizer should be one of {OPTIMIZERS}, but got {config.optimizer!r}")
    for name in ("epochs", "batch_size", "accum_steps", "img_size"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} should be a positive integer, but got {name}={value!r}")
    if config.num_workers < 0:
        raise ValueError(f"num_workers should be >= 0, but got num_workers={config.num_workers}")
    if config.max_steps is not None and config.max_steps < 1:
        raise ValueError(f"max_steps should be >= 1, but got max_steps={config.max_steps}")


def _init_distributed(device_arg: str | None) -> tuple[int, int, torch.device, bool]:
    """``(rank, world_size, device, we_initialized)``; starts the process group under torchrun."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available() if device_arg is None else device_arg.startswith("cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if device_arg is not None and not use_cuda:
        device = torch.device(device_arg)
    if use_cuda:
        torch.cuda.set_device(device)
    started = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        started = True
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), device, started
    return 0, 1, device, started


@torch.no_grad()
def evaluate(model, loader, device: torch.device, amp: str, channels_last: bool) -> tuple[int, int, float]:
    """``(correct, total, loss_sum)`` of ``model`` over ``loader`` (this process's shard)."""
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast(amp, device.type):
            logits = model(images)
        loss_sum += float(F.cross_entropy(logits.float(), labels, reduction="sum"))
        correct += int((logits.argmax(dim=1) == labels).sum())
        total += int(labels.numel())
    return correct, total, loss_sum


@dataclass
class _Run:
    """What the steps of one run share: the model and its optimisation state, the step count
    and every micro-batch loss. Built once by :func:`finetune`."""

    config: FinetuneConfig
    model: torch.nn.Module
    train_model: torch.nn.Module  # the DDP wrapper when world > 1
    forward: Any  # train_model, or its torch.compile
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    guard: NanGuard
    device: torch.device
    world: int
    jlog: JsonLog
    micro_per_epoch: int
    loss_hook: Any = None
    step: int = 0
    losses: list[float] = field(default_factory=list)
    params: list[torch.nn.Parameter] = field(init=False)  # the trainable ones, for grad_norm

    def __post_init__(self) -> None:
        self.params = [p for p in self.model.parameters() if p.requires_grad]


@dataclass
class _EpochTotals:
    """This process's figures of one epoch's training part."""

    images: int = 0
    loss_sum: float = 0.0  # over the finite micro-batch losses, weighted by batch size
    loss_count: int = 0
    micro: int = 0  # micro-batches of the epoch done (resumed ones included)
    stopped: bool = False  # max_steps was reached


def _train_loaders(config: FinetuneConfig, train_ds, val_ds, rank: int, world: int,
                   device: torch.device):
    """``(train_loader, sampler, fed_train, val_loader, fallback)``. ``sampler`` is None when
    the fastload loader orders the epoch itself; otherwise the order is a
    :class:`ResumableSampler` over ``fed_train`` (a :class:`SeededDataset`)."""

    def resumable():
        return (ResumableSampler(len(train_ds), shuffle=True, seed=config.seed, rank=rank,
                                 world_size=world), SeededDataset(train_ds, config.seed))

    sampler, fed_train = None, train_ds
    if config.loader == "torch":
        sampler, fed_train = resumable()
    train_loader = make_loader(config.loader, fed_train, config.batch_size, sampler,
                               config.num_workers, device, config.seed)
    fallback = getattr(train_loader, "fallback_reason", None)
    if fallback is not None:  # fastload runs torch's loader: resume needs our own order
        sampler, fed_train = resumable()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the first loader already warned with the reason
            train_loader = make_loader(config.loader, fed_train, config.batch_size, sampler,
                                       config.num_workers, device, config.seed)
    val_loader = None
    if val_ds is not None:
        val_sampler = ResumableSampler(len(val_ds), shuffle=False, rank=rank, world_size=world, pad=False)
        val_loader = make_loader(config.loader, val_ds, config.batch_size, val_sampler, config.num_workers, device)
    return train_loader, sampler, fed_train, val_loader, fallback


def _restore(run: _Run, train_loader, own_order: bool) -> tuple[int, int]:
    """Load ``run.config.resume`` into the run; ``(epoch, micro-batches of it done)``."""
    from fastload.train.checkpoint import load_checkpoint

    config = run.config
    state = load_checkpoint(config.resume)
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scaler.load_state_dict(state["scaler"])
    run.scheduler.load_state_dict(state["scheduler"])
    epoch, run.step = int(state["loader"]["epoch"]), int(state["step"])
    micro_done = int(state["loader"]["micro_step"])
    if micro_done and state["loader"].get("kind") != config.loader:
        raise ValueError(
            f"checkpoint {config.resume!r} was written mid-epoch with --loader "
            f"{state['loader'].get('kind')}; resume it with the same --loader")
    if micro_done and own_order:
        train_loader.load_state_dict(state["loader"]["fastload"])
    run.guard.skipped_total = int(state.get("skipped_total", 0))
    torch.set_rng_state(state["rng"])
    return epoch, micro_done


def _optimizer_step(run: _Run, epoch: int, loss: float, inputs_ok: bool, losses_ok: bool,
                    timer: StepTimer) -> None:
    """End of an accumulation window: step unless anything was non-finite on any rank."""
    scaler, optimizer = run.scaler, run.optimizer
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    norm = grad_norm(run.params)
    ok = inputs_ok and losses_ok and math.isfinite(norm)
    ok = all_reduce([0.0 if ok else 1.0], "max", run.world)[0] == 0.0
    scale = scaler.get_scale() if scaler.is_enabled() else None
    if ok:
        scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    current_lr = optimizer.param_groups[0]["lr"]
    run.scheduler.step()
    run.step += 1
    timer.step_done()
    run.jlog({"event": "step", "epoch": epoch, "step": run.step, "loss": loss, "lr": current_lr,
              "grad_norm": norm, "loss_scale": scale, "skipped": not ok})
    if ok:
        run.guard.record_ok()
    else:
        run.guard.record_skip(step=run.step, epoch=epoch, loss=loss, grad_norm=norm,
                              loss_scale=scale, lr=current_lr, inputs_finite=inputs_ok,
                              model=run.model)


def _train_one_epoch(run: _Run, train_loader, epoch: int, first: int, timer: StepTimer, bar,
                     save) -> _EpochTotals:
    """Micro-batches ``first..`` of ``epoch``; an optimizer step at the end of each window of
    ``accum_steps`` (DDP syncs gradients only then); ``save(epoch, micro)`` every
    ``checkpoint_every`` steps."""
    config, device = run.config, run.device
    totals = _EpochTotals(micro=first)
    inputs_ok = losses_ok = True  # over the micro-batches of the current window
    for images, labels in train_loader:
        timer.batch_ready()
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        if config.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        inputs_ok &= bool(torch.isfinite(images).all())
        window_start = (totals.micro // config.accum_steps) * config.accum_steps
        window = min(config.accum_steps, run.micro_per_epoch - window_start)
        last = totals.micro + 1 == window_start + window
        sync = run.train_model.no_sync() if run.world > 1 and not last else contextlib.nullcontext()
        with sync:
            with autocast(config.amp, device.type):
                logits = run.forward(images)
            loss = F.cross_entropy(logits.float(), labels)
            if run.loss_hook is not None:
                loss = run.loss_hook(run.step, loss)
            run.scaler.scale(loss / window).backward()
        value = float(loss.detach())
        losses_ok &= math.isfinite(value)
        run.losses.append(value)
        if math.isfinite(value):
            totals.loss_sum += value * labels.numel()
            totals.loss_count += labels.numel()
        totals.images += labels.numel()
        totals.micro += 1
        bar.update(1)
        if not last:
            timer.step_done()
            continue
        _optimizer_step(run, epoch, value, inputs_ok, losses_ok, timer)
        inputs_ok = losses_ok = True
        bar.set_postfix(loss=f"{value:.3f}", refresh=False)
        if config.checkpoint_every and run.step % config.checkpoint_every == 0:
            save(epoch, totals.micro)
        if config.max_steps is not None and run.step >= config.max_steps:
            totals.stopped = True
            break
    return totals


def _epoch_stats(run: _Run, epoch: int, totals: _EpochTotals, val: tuple[int, int, float],
                 train_time: float, timer: StepTimer, peaks: tuple[int, int],
                 steps: int) -> EpochStats:
    """One epoch's figures over all ranks: counts and losses summed, times and memory maxed."""
    peak, peak_above = peaks
    sums = all_reduce([totals.images, totals.loss_sum, totals.loss_count, *val], "sum", run.world)
    maxes = all_reduce([train_time, timer.data_wait, timer.compute, peak_above, peak], "max", run.world)
    return EpochStats(
        epoch=epoch, images=int(sums[0]), epoch_time_s=maxes[0], data_wait_s=maxes[1],
        compute_s=maxes[2], train_loss=sums[1] / sums[2] if sums[2] else float("nan"),
        peak_mem_mb=to_mib(maxes[3]), peak_rss_mb=to_mib(maxes[4]),
        val_top1=sums[3] / sums[4] if sums[4] else None,
        val_loss=sums[5] / sums[4] if sums[4] else None,
        lr=run.optimizer.param_groups[0]["lr"], steps=steps,
        skipped_steps=run.guard.skipped_total)


def finetune(config: FinetuneConfig, *, loss_hook=None) -> FinetuneResult:
    """Train ``config.model`` on ``config.data``; return per-epoch figures and every loss.

    ``loss_hook(step, loss) -> loss``, for tests, may replace the loss of a micro-batch
    (e.g. with NaN) before backward. Raises :class:`fastload.train.amp.NonFiniteTrainingError`
    when ``max_skips`` consecutive steps were non-finite.
    """
    from tqdm import tqdm

    from fastload.train.checkpoint import save_checkpoint
    from fastload.train.model import create_model, enable_grad_checkpointing, freeze_parameters
    from fastload.train.optim import cosine_schedule, create_optimizer, default_lr

    _validate(config)
    fmt, train_path, val_path = resolve_data(config)
    rank, world, device, own_group = _init_distributed(config.device)
    jlog = JsonLog(config.log, rank == 0)
    try:
        torch.manual_seed(config.seed)
        train_tf, val_tf = train_val_transforms(config.img_size)
        train_ds = open_dataset(fmt, train_path, train_tf)
        val_ds = open_dataset(fmt, val_path, val_tf) if val_path is not None else None
        classes = list(train_ds.classes)
        if val_ds is not None and list(val_ds.classes) != classes:
            raise ValueError(f"{val_path} has classes {val_ds.classes}, but {train_path} has {classes}")
        model = create_model(config.model, len(classes), config.img_size, config.weights)
        trainable, total = freeze_parameters(model, config.freeze)
        if config.grad_checkpointing:
            enable_grad_checkpointing(model)
        model.to(device)
        if config.channels_last:
            model.to(memory_format=torch.channels_last)
        lr = config.lr if config.lr is not None else default_lr(config.weights is not None)
        optimizer = create_optimizer(model, config.optimizer, lr, config.weight_decay)
        train_loader, sampler, fed_train, val_loader, fallback = _train_loaders(
            config, train_ds, val_ds, rank, world, device)

        micro_per_epoch = math.ceil(math.ceil(len(train_ds) / world) / config.batch_size)
        steps_per_epoch = math.ceil(micro_per_epoch / config.accum_steps)
        warmup = config.warmup_steps
        if warmup is None:
            warmup = round(config.warmup_epochs * steps_per_epoch)
        total_steps = config.epochs * steps_per_epoch
        run = _Run(
            config=config, model=model, train_model=model, forward=model, optimizer=optimizer,
            scheduler=cosine_schedule(optimizer, total_steps, min(warmup, total_steps)),
            scaler=make_scaler(config.amp, device.type, config.scaler),
            guard=NanGuard(config.max_skips, config.amp, config.scaler.init_scale, emit=jlog),
            device=device, world=world, jlog=jlog, micro_per_epoch=micro_per_epoch,
            loss_hook=loss_hook)

        start_epoch, micro_done = 0, 0
        if config.resume:
            start_epoch, micro_done = _restore(run, train_loader, own_order=sampler is None)

        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            run.train_model = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
        run.forward = torch.compile(run.train_model) if config.compile else run.train_model
        jlog({"event": "start", "rank_count": world, "device": str(device), "data_format": fmt,
              "trainable_params": trainable, "total_params": total, "lr": lr, "loader_fallback": fallback,
              "config": dataclasses.asdict(config)})
        if rank == 0:
            log.info("trainable parameters: %d of %d", trainable, total)

        def save(epoch: int, micro: int) -> None:
            if config.checkpoint and rank == 0:
                save_checkpoint(config.checkpoint, {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": run.scaler.state_dict(), "scheduler": run.scheduler.state_dict(),
                    "loader": {"epoch": epoch, "micro_step": micro, "kind": config.loader,
                               "consumed": micro * config.batch_size, "seed": config.seed,
                               **({"fastload": train_loader.state_dict()} if sampler is None else {})},
                    "epoch": epoch, "step": run.step, "skipped_total": run.guard.skipped_total,
                    "rng": torch.get_rng_state(), "classes": classes,
                    "config": json.dumps(dataclasses.asdict(config))})
            if world > 1:
                torch.distributed.barrier()

        monitor = MemoryMonitor(device)
        monitor.set_baseline()
        timer = StepTimer(device)
        epochs: list[EpochStats] = []
        for epoch in range(start_epoch, config.epochs):
            first = micro_done if epoch == start_epoch else 0
            if sampler is not None:
                sampler.set_epoch(epoch)
                sampler.set_start(first * config.batch_size)
                fed_train.epoch = epoch
            else:
                train_loader.set_epoch(epoch)  # keeps a resume of this very epoch
            model.train()
            bar = tqdm(total=micro_per_epoch, initial=first, desc=f"epoch {epoch + 1}/{config.epochs}",
                       unit="batch", disable=not (config.progress and rank == 0), leave=False)
            monitor.start()
            started = time.perf_counter()
            timer.reset()
            steps_before = run.step
            totals = _train_one_epoch(run, train_loader, epoch, first, timer, bar, save)
            train_time = time.perf_counter() - started
            peak, peak_above = monitor.stop()
            bar.close()
            if totals.stopped and totals.micro < micro_per_epoch:
                save(epoch, totals.micro)
            else:
                save(epoch + 1, 0)
            val = (0, 0, 0.0)
            if val_loader is not None:
                val = evaluate(model, val_loader, device, config.amp, config.channels_last)
            stats = _epoch_stats(run, epoch, totals, val, train_time, timer, (peak, peak_above),
                                 run.step - steps_before)
            epochs.append(stats)
            jlog(stats.as_dict())
            if rank == 0:
                log.info("epoch %d/%d: %.1f img/s, data stall %.0f%%, loss %.4f, val top-1 %s",
                         epoch + 1, config.epochs, stats.images_per_s, 100 * stats.data_stall_share,
                         stats.train_loss, "n/a" if stats.val_top1 is None else f"{stats.val_top1:.3f}")
            if totals.stopped:
                break
        result = FinetuneResult(
            epochs=epochs, losses=run.losses, steps=run.step, skipped_steps=run.guard.skipped_total,
            trainable_params=trainable, total_params=total, classes=classes,
            val_top1=epochs[-1].val_top1 if epochs else None, checkpoint=config.checkpoint)
        jlog({"event": "end", "steps": run.step, "skipped_steps": run.guard.skipped_total,
              "val_top1": result.val_top1})
        return result
    finally:
        jlog.close()
        if own_group:
            torch.distributed.destroy_process_group()
