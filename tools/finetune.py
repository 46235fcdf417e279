"""``fastload finetune DATA``: the reference ViT fine-tuning loop, or ``--compare`` for the A/B table."""

from __future__ import annotations

import argparse
import logging
import os
import sys

_DATA_HELP = (
    "folder with train/ and val/ ImageFolder trees (fastload synth) or train.lmdb/ and "
    "val.lmdb/ (fastload convert); LMDBs win when both exist unless --data-format folder"
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from fastload.tools.cli import output_file

    p = subparsers.add_parser(
        "finetune", help="fine-tune a timm ViT and measure the input pipeline's effect",
        description="Fine-tune a timm model on DATA with each speed technique switchable.",
    )
    p.add_argument("data", nargs="?", metavar="DATA", help=_DATA_HELP)
    d = p.add_argument_group("data")
    d.add_argument("--train-lmdb", help="training LMDB directory (overrides DATA)")
    d.add_argument("--val-lmdb", help="validation LMDB directory")
    d.add_argument("--data-format", choices=("auto", "folder", "lmdb"), default="auto")
    d.add_argument("--loader", choices=("torch", "fastload"), default="fastload",
                   help="torch.utils.data.DataLoader or fastload.DataLoader (default)")
    d.add_argument("--workers", type=int, default=2,
                   help="torch: worker processes; fastload: DALI CPU threads (default 2)")
    d.add_argument("--img-size", type=int, default=224, help="training resolution (default 224)")
    m = p.add_argument_group("model")
    m.add_argument("--model", default="vit_tiny_patch16_224", help="any timm model name")
    m.add_argument("--weights", help="local .safetensors or torch state dict; default random init")
    m.add_argument("--freeze", nargs="+", default=[], metavar="PATTERN",
                   help="freeze parameters whose names match these fnmatch patterns")
    m.add_argument("--grad-checkpointing", action="store_true",
                   help="recompute activations in backward (less memory, more time)")
    m.add_argument("--compile", action="store_true", help="torch.compile the model")
    m.add_argument("--qat", action="store_true",
                   help="quantization-aware training (PT2E fake int8; export with fastload export "
                        "--quantize qat); needs --amp off, no --grad-checkpointing, no --compile")
    m.add_argument("--qat-start-epoch", type=int, default=0, metavar="E",
                   help="--qat: first epoch (0-based) trained fake-quantized; float before (default 0)")
    m.add_argument("--skip-quantize", nargs="+", default=[], metavar="PATTERN",
                   help="--qat: keep modules whose names match these fnmatch patterns in float")
    m.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    o = p.add_argument_group("optimization")
    o.add_argument("--optimizer", choices=("adamw", "lamb"), default="adamw")
    o.add_argument("--lr", type=float, help="peak learning rate (default 2e-5 with --weights, else 1e-3)")
    o.add_argument("--weight-decay", type=float, default=0.01)
    o.add_argument("--warmup-epochs", type=float, default=0.0)
    o.add_argument("--warmup-steps", type=int, help="warm-up in optimizer steps (overrides --warmup-epochs)")
    o.add_argument("--epochs", type=int, default=2)
    o.add_argument("--batch-size", type=int, default=64, help="per process and micro-batch")
    o.add_argument("--accum-steps", type=int, default=1, help="micro-batches per optimizer step")
    o.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    o.add_argument("--seed", type=int, default=0)
    a = p.add_argument_group("mixed precision and the NaN guard")
    a.add_argument("--amp", choices=("off", "fp16", "bf16"), default="off")
    a.add_argument("--init-scale", type=float, default=65536.0, help="fp16 GradScaler initial scale")
    a.add_argument("--growth-factor", type=float, default=2.0)
    a.add_argument("--backoff-factor", type=float, default=0.5)
    a.add_argument("--growth-interval", type=int, default=2000)
    a.add_argument("--max-skips", type=int, default=25,
                   help="stop after this many consecutive non-finite steps (default 25)")
    r = p.add_argument_group("checkpoints, logs, devices")
    r.add_argument("--checkpoint", help="checkpoint file, written at each epoch end")
    r.add_argument("--checkpoint-every", type=int, default=0, help="also every N optimizer steps")
    r.add_argument("--resume", metavar="CHECKPOINT", help="continue from this checkpoint")
    r.add_argument("--log", "--log-file", dest="log", metavar="FILE",
                   help="append JSON lines (start, step, skip, epoch, end); under torchrun "
                        "write --log-file, as torchrun takes --log for its own --log-dir")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available)")
    c = p.add_argument_group("A/B table")
    c.add_argument("--compare", nargs="?", const="all", metavar="ROWS",
                   help="run the A/B table instead (rows: all, or a comma list of "
                        "baseline,fastload,amp,gc,accum,freeze; cumulative)")
    c.add_argument("--compare-out", metavar="JSON", type=output_file,
                   help="write the A/B rows as JSON")
    p.set_defaults(run=run, option_defaults={a.dest: a.default for a in p._actions})
    return p


def take_resumed_settings(args: argparse.Namespace) -> list[str]:
    """With ``--resume``: each option of the run's trajectory (``fastload.train.resume``) left
    at its default takes the checkpoint's value, so ``--resume run.pt`` alone continues the run;
    one given with another value is refused later, naming both. Returns the flags taken (as
    ``--flag value``); [] when the checkpoint cannot be read (its check says why)."""
    from fastload.train.checkpoint import read_checkpoint
    from fastload.train.resume import saved_settings

    defaults = getattr(args, "option_defaults", {})
    try:
        saved = saved_settings(read_checkpoint(args.resume, mmap=True).config)
    except (OSError, ValueError):
        return []
    taken = []
    for name, value in saved.items():
        if name in defaults and getattr(args, name) == defaults[name] and value != defaults[name]:
            setattr(args, name, value)
            flag = "--" + name.replace("_", "-")
            if value is True:
                taken.append(flag)
            elif isinstance(value, list):
                taken.append(" ".join([flag, *map(str, value)]))
            else:
                taken.append(f"{flag} {value}")
    return taken


def config_from_args(args: argparse.Namespace):
    """The :class:`FinetuneConfig` for parsed arguments."""
    from fastload.train.amp import ScalerConfig
    from fastload.train.finetune import FinetuneConfig

    return FinetuneConfig(
        data=args.data, train_lmdb=args.train_lmdb, val_lmdb=args.val_lmdb,
        data_format=args.data_format, model=args.model, weights=args.weights,
        img_size=args.img_size, loader=args.loader, num_workers=args.workers, amp=args.amp,
        scaler=ScalerConfig(args.init_scale, args.growth_factor, args.backoff_factor,
                            args.growth_interval),
        grad_checkpointing=args.grad_checkpointing, accum_steps=args.accum_steps,
        freeze=tuple(args.freeze), qat=args.qat, qat_start_epoch=args.qat_start_epoch,
        skip_quantize=tuple(args.skip_quantize), optimizer=args.optimizer, lr=args.lr,
        weight_decay=args.weight_decay, warmup_epochs=args.warmup_epochs,
        warmup_steps=args.warmup_steps, epochs=args.epochs, batch_size=args.batch_size,
        compile=args.compile, channels_last=args.channels_last, seed=args.seed,
        max_steps=args.max_steps, max_skips=args.max_skips,
        checkpoint=args.checkpoint or args.resume, checkpoint_every=args.checkpoint_every,
        resume=args.resume, log=args.log, progress=not args.no_progress, device=args.device,
    )


def _print_epochs(result) -> None:
    print("| epoch | time (s) | images/s | data stall | peak mem (MiB) | train loss | val top-1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for e in result.epochs:
        top1 = "n/a (no val/ folder in DATA)" if e.val_top1 is None else f"{100 * e.val_top1:.1f}%"
        label = f"{e.epoch + 1}"
        if getattr(e, "resumed_at", 0):
            label += f" (resumed at batch {e.resumed_at}/{e.epoch_batches})"
            notes.append(f"epoch {e.epoch + 1} was resumed from a checkpoint: its time, images/s, "
                         f"data stall and train loss cover only batches {e.resumed_at + 1}-"
                         f"{e.epoch_batches} of {e.epoch_batches}, run after the resume")
        print(f"| {label} | {e.epoch_time_s:.2f} | {e.images_per_s:.1f} | "
              f"{100 * e.data_stall_share:.0f}% | {e.peak_mem_mb:.0f} | {e.train_loss:.4f} | {top1} |")
    for note in notes:
        print(note)
    print(f"trainable parameters: {result.trainable_params:,} of {result.total_params:,}; "
          f"steps: {result.steps}; skipped: {result.skipped_steps}")


def field_flags() -> dict[str, str]:
    """``{FinetuneConfig / ScalerConfig field: the flag that sets it}``, for error messages."""
    import dataclasses

    from fastload.train.amp import ScalerConfig
    from fastload.train.config import FinetuneConfig

    names = [f.name for f in dataclasses.fields(FinetuneConfig) + dataclasses.fields(ScalerConfig)]
    flags = {name: "--" + name.replace("_", "-") for name in names}
    flags.update(data="DATA", num_workers="--workers", log="--log-file",
                 max_consecutive="--max-skips", rows="--compare")
    return flags


def run(args: argparse.Namespace) -> int:
    """Exit status as ``fastload --help`` says: 2 for a wrong option value (checked before
    any work), 1 for a run that failed (missing data, a non-finite stop, ...)."""
    import timm  # noqa: F401  (the [train] extra; a missing one is reported by the dispatcher)

    from fastload.tools.cli import EXIT_FAILURE, EXIT_USAGE, report_error, shell_words
    from fastload.train.amp import NonFiniteTrainingError
    from fastload.train.config import validate_config

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("fastload.train.finetune").setLevel(logging.INFO)
    flags = field_flags()
    rows = None
    try:
        if args.resume:
            taken = take_resumed_settings(args)
            if taken:
                print(f"resuming {args.resume} with its settings: {' '.join(taken)}",
                      flush=True)
        config = config_from_args(args)
        validate_config(config)
        if args.compare and args.compare != "all":
            from fastload.train.compare import check_rows

            rows = [r.strip() for r in args.compare.split(",")]
            check_rows(rows)
    except (ValueError, TypeError) as error:
        return report_error("finetune", error, flags, EXIT_USAGE)
    except OSError as error:  # the resumed checkpoint missing or damaged
        return report_error("finetune", error, flags, EXIT_FAILURE)
    try:
        if args.compare:
            from fastload.train.compare import format_table, run_compare

            results = run_compare(config, rows, args.compare_out, progress=config.progress)
            print(format_table(results))
            return 0
        from fastload.train.finetune import finetune

        result = finetune(config)
    except NonFiniteTrainingError as error:
        print(f"fastload finetune: {shell_words(error.diagnosis, flags)}", file=sys.stderr)
        return EXIT_FAILURE
    except (ValueError, OSError, TypeError, RuntimeError) as error:
        return report_error("finetune", error, flags, EXIT_FAILURE)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 prints
        _print_epochs(result)
    return 0
