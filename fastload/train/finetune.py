"""The reference ViT fine-tuning loop: ``finetune(FinetuneConfig(...)) -> FinetuneResult``.

Data (``FinetuneConfig.data``, see :mod:`fastload.train.config`) is ImageFolder trees or LMDB
directories. ``loader="torch"`` reads them with ``torch.utils.data.DataLoader``,
``loader="fastload"`` with ``fastload.DataLoader``; the loop is the same for both (same
datasets, transforms and arguments).

Order and resume: the fastload loader shuffles and shards by itself (``seed=``, ``set_epoch``,
DistributedSampler-style sharding) and its ``state_dict()`` is the checkpoint's loader state.
torch's DataLoader has no state, so it gets a :class:`ResumableSampler` (the fastload
loader's own order and sharding rule, restartable mid-epoch) and a :class:`SeededDataset`
(each sample's augmentation drawn from ``mix_seed(seed, epoch, index)``). Either way a
resumed fp32 CPU run repeats the uninterrupted run's losses.

One run, in order: :func:`_prepare_model` (create, freeze, checkpointing, device — the place
to change the model before training), the optimizer, the loaders, the schedule, a resume
(:func:`_restore`), the DDP/compile wrappers, then per epoch
:func:`fastload.train.loop.train_one_epoch`, a checkpoint and
:func:`fastload.train.loop.evaluate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator

import torch

from fastload.loader.stall import StallMeter
from fastload.train.amp import NanGuard, make_scaler
from fastload.train.config import FinetuneConfig, FinetuneResult, resolve_data, validate_config
from fastload.train.finetune_data import (
    ResumableSampler,
    SeededDataset,
    make_loader,
    open_dataset,
    train_val_transforms,
)
from fastload.train.loop import Run, epoch_stats, evaluate, train_one_epoch
from fastload.train.metrics import EpochStats, JsonLog, MemoryMonitor

__all__ = ["FinetuneConfig", "FinetuneResult", "evaluate", "finetune", "resolve_data"]

log = logging.getLogger("fastload.train.finetune")


def _init_distributed(device_arg: str | None) -> tuple[int, int, torch.device, bool]:
    """``(rank, world_size, device, we_initialized)``; starts the process group under torchrun."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available() if device_arg is None else device_arg.startswith("cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if device_arg is not None and (not use_cuda or world == 1):
        device = torch.device(device_arg)  # under torchrun each rank takes its LOCAL_RANK's
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", local_rank)
    if use_cuda:
        torch.cuda.set_device(device)
    started = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        started = True
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), device, started
    return 0, 1, device, started


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


def _prepare_model(config: FinetuneConfig, num_classes: int,
                   device: torch.device) -> tuple[torch.nn.Module, int, int]:
    """``(model, trainable, total)``: the model built, frozen, checkpointed and on ``device``,
    ready for the optimizer. A change to the model before training (e.g. quantization-aware
    training) belongs here."""
    from fastload.train.model import create_model, enable_grad_checkpointing, freeze_parameters

    model = create_model(config.model, num_classes, config.img_size, config.weights)
    trainable, total = freeze_parameters(model, config.freeze)
    if config.qat:  # fake-quantized from config.qat_start_epoch, see QatModel.set_epoch
        from fastload.train.quantize import prepare_qat

        model = prepare_qat(model, config.img_size, config.skip_quantize, config.qat_start_epoch)
    if config.grad_checkpointing:
        enable_grad_checkpointing(model)
    model.to(device)
    if config.channels_last:
        model.to(memory_format=torch.channels_last)
    return model, trainable, total


def _restore(run: Run, train_loader, own_order: bool, classes: list[str],
             data: os.PathLike) -> tuple[int, int]:
    """Load ``run.config.resume`` into the run; ``(epoch, micro-batches of it done)``. A
    checkpoint trained on other classes than ``classes`` (those of ``data``) is refused."""
    from fastload.train.checkpoint import read_checkpoint

    config = run.config
    state = read_checkpoint(config.resume)
    if state.classes != list(classes):
        raise ValueError(
            f"checkpoint {config.resume!r} was trained on {_class_list(state.classes)}, but "
            f"{str(data)!r} has {_class_list(classes)}; resume it on the data it was trained "
            "on, or start a new run (without resume=) to train on this data")
    # the settings of the run's trajectory were compared with the checkpoint's before any
    # work (fastload.train.resume, from validate_config)
    run.model.load_state_dict(state.model)
    run.optimizer.load_state_dict(state.optimizer)
    run.scaler.load_state_dict(state.scaler)
    run.scheduler.load_state_dict(state.scheduler)
    run.step = state.step
    if state.micro_step and state.loader_kind != config.loader:
        raise ValueError(
            f"checkpoint {config.resume!r} was written mid-epoch with loader={state.loader_kind!r}; "
            f"resume it with the same loader, but got loader={config.loader!r}")
    if state.micro_step and own_order:
        train_loader.load_state_dict(state.loader_state)
    run.guard.skipped_total = state.skipped_total
    torch.set_rng_state(state.rng)
    return state.epoch, state.micro_step


def _class_list(classes: list[str], shown: int = 10) -> str:
    """``4 classes ['a', 'b', 'c', 'd']``, cut after ``shown`` names."""
    names = ", ".join(repr(c) for c in classes[:shown])
    more = f", ... ({len(classes) - shown} more)" if len(classes) > shown else ""
    return f"{len(classes)} classes [{names}{more}]"


def _checkpointer(run: Run, train_loader, own_order: bool, classes: list[str],
                  rank: int) -> Callable[[int, int], None]:
    """``save(epoch, micro)``: rank 0 writes ``run.config.checkpoint`` (when set); all ranks meet."""
    from fastload.train.checkpoint import pack_checkpoint, save_checkpoint

    config = run.config

    def save(epoch: int, micro: int) -> None:
        if config.checkpoint and rank == 0:
            save_checkpoint(config.checkpoint, pack_checkpoint(
                model=run.model.state_dict(), optimizer=run.optimizer.state_dict(),
                scaler=run.scaler.state_dict(), scheduler=run.scheduler.state_dict(),
                epoch=epoch, micro_step=micro, loader_kind=config.loader,
                batch_size=config.batch_size, seed=config.seed,
                loader_state=train_loader.state_dict() if own_order else None,
                step=run.step, skipped_total=run.guard.skipped_total, classes=classes,
                config=dataclasses.asdict(config)))
        if run.world > 1:
            torch.distributed.barrier()

    return save


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """torch's global generators (the CPU's, and ``device``'s where it is CUDA) seeded with
    ``seed`` inside, and as the caller had them after: a run in a user's process leaves
    their random state as it found it."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        for index in devices:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(seed)
        yield


def finetune(config: FinetuneConfig, *, loss_hook=None) -> FinetuneResult:
    """Train ``config.model`` on ``config.data``; return per-epoch figures and every loss.

    ``loss_hook(step, loss) -> loss``, for tests, may replace the loss of a micro-batch
    (e.g. with NaN) before backward. Raises :class:`fastload.train.amp.NonFiniteTrainingError`
    when ``max_skips`` consecutive steps were non-finite.
    """
    from fastload.train.amp import warn_if_emulated
    from fastload.train.optim import cosine_schedule, create_optimizer, default_lr
    from fastload.utils.progress import progress

    validate_config(config)
    fmt, train_path, val_path = resolve_data(config)
    # the run sets its CUDA device as current; the caller's is set back at the end
    caller_cuda = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    rank, world, device, own_group = _init_distributed(config.device)
    if rank == 0:
        warn_if_emulated(config.amp, device.type)
    jlog = JsonLog(config.log, rank == 0)
    try:
        with _seeded(config.seed, device):
            train_tf, val_tf = train_val_transforms(config.img_size)
            train_ds = open_dataset(fmt, train_path, train_tf)
            val_ds = open_dataset(fmt, val_path, val_tf) if val_path is not None else None
            classes = list(train_ds.classes)
            if val_ds is not None and list(val_ds.classes) != classes:
                raise ValueError(f"{val_path} has classes {val_ds.classes}, but {train_path} has {classes}")
            model, trainable, total = _prepare_model(config, len(classes), device)
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
            if warmup > total_steps:
                given = ("warmup_steps" if config.warmup_steps is not None
                         else "warmup_epochs")
                warnings.warn(f"{given}={getattr(config, given)!r} is {warmup} optimizer steps, "
                              f"longer than the run's {total_steps}: the learning rate rises "
                              "over the whole run and never decays; pass a shorter warm-up",
                              stacklevel=2)
            run = Run(
                config=config, model=model, train_model=model, forward=model, optimizer=optimizer,
                scheduler=cosine_schedule(optimizer, total_steps, min(warmup, total_steps)),
                scaler=make_scaler(config.amp, device.type, config.scaler),
                guard=NanGuard(config.max_skips, config.amp, config.scaler.init_scale, emit=jlog),
                device=device, world=world, jlog=jlog, micro_per_epoch=micro_per_epoch,
                loss_hook=loss_hook)

            start_epoch, micro_done = 0, 0
            if config.resume:
                start_epoch, micro_done = _restore(run, train_loader, sampler is None, classes,
                                                   train_path)

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

            save = _checkpointer(run, train_loader, sampler is None, classes, rank)

            monitor = MemoryMonitor(device)
            monitor.set_baseline()
            # The data-stall meter users get (fastload.StallMeter) splits each epoch into waiting
            # for batches and the loop's work; on CUDA it syncs so queued kernels count as work.
            sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
            metered = StallMeter(train_loader, sync=sync)
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
                if config.qat:
                    model.set_epoch(epoch)
                # a bar on a terminal; in a log, a line every 30 s and one at the epoch's end
                bar = progress(micro_per_epoch, f"epoch {epoch + 1}/{config.epochs}", "batches",
                               initial=first, disable=not (config.progress and rank == 0),
                               leave=False)
                monitor.start()
                started = time.perf_counter()
                steps_before = run.step
                totals = train_one_epoch(run, metered, epoch, first, bar, save)
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
                stats = epoch_stats(run, epoch, totals, val, train_time, metered.last_epoch,
                                     (peak, peak_above),
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
        if device.type == "cuda":
            torch.cuda.set_device(caller_cuda)
