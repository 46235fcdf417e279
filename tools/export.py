"""``fastload export CHECKPOINT --quantize {dynamic,static,qat}``: int8 model with size, latency
and accuracy; ``--sensitivity`` for the top-1 cost of quantizing each layer group."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    from fastload.tools.cli import at_least

    p = subparsers.add_parser(
        "export", help="quantize a fine-tuned checkpoint to int8 and measure it",
        description="Int8 quantization of a `fastload finetune` checkpoint: dynamic (qint8 Linear "
                    "layers), static (PT2E, calibrated) or qat (a --qat checkpoint converted); "
                    "reports size ratio, CPU latency ratio and val top-1 change against fp32.",
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="file written by fastload finetune --checkpoint")
    p.add_argument("--quantize", choices=("dynamic", "static", "qat"),
                   help="dynamic: Linear weights int8, activations quantized per batch at run time; "
                        "static: weights and activations int8, ranges calibrated on training batches; "
                        "qat: convert a checkpoint trained with fastload finetune --qat")
    p.add_argument("--calibration-batches", type=at_least(1), default=8, metavar="N",
                   help="static: training batches of 32 images to calibrate on (default 8)")
    p.add_argument("--skip-quantize", nargs="+", default=[], metavar="PATTERN",
                   help="static: keep modules whose names match these fnmatch patterns in float "
                        "(e.g. head blocks.0 'blocks.*.attn.proj')")
    p.add_argument("--sensitivity", action="store_true",
                   help="quantize one layer group at a time (static) and print each one's top-1 cost")
    p.add_argument("--output", "-o", help="int8 file (default CHECKPOINT.int8.pt, .int8.pt2 for static/qat)")
    p.add_argument("--data", help="DATA for calibration and val top-1 (default: the data the checkpoint trained on)")
    p.add_argument("--latency-batches", type=int, nargs="+", default=[8, 64], metavar="B",
                   help="batch sizes to time (default 8 64)")
    p.add_argument("--no-compile", action="store_true",
                   help="time both models eagerly instead of under torch.compile with freezing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)
    return p


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _print_report(report) -> None:
    change = report.top1_change
    kind = "qint8 Linear layers" if report.quantize == "dynamic" else "layers with int8 weights"
    print(f"wrote {report.output} ({report.quantized_layers} {kind}"
          + (f"; kept in float: {', '.join(report.skipped)}" if report.skipped else "") + ")")
    print(f"size:     {report.fp32_bytes / 2**20:.2f} MiB -> {report.int8_bytes / 2**20:.2f} MiB "
          f"(ratio {report.size_ratio:.2f})")
    mode = "torch.compile, freezing" if report.compiled else "eager"
    for row in report.latency:
        print(f"latency:  {row['fp32_ms']:.1f} ms -> {row['int8_ms']:.1f} ms per batch of {row['batch']} "
              f"on CPU, {mode} (ratio {row['ratio']:.2f}, median of interleaved rounds)")
    if report.fake_quant_top1 is not None:
        print(f"fake-quantized (QAT) val top-1: {_percent(report.fake_quant_top1)}")
    print(f"val top-1: {_percent(report.fp32_top1)} -> {_percent(report.int8_top1)}"
          + ("" if change is None else f" (change {100 * change:+.1f} points)"))


_FLAGS = {"quantize": "--quantize", "calibration_batches": "--calibration-batches",
          "skip_quantize": "--skip-quantize", "data": "--data", "output": "--output",
          "latency_batches": "--latency-batches", "checkpoint": "CHECKPOINT"}


def run(args: argparse.Namespace) -> int:
    """Exit status 2 for a wrong option or checkpoint kind, 1 for missing files or a failed export."""
    from fastload.tools.cli import EXIT_FAILURE, EXIT_USAGE, report_error
    from fastload.train.export import export_checkpoint, sensitivity

    if args.sensitivity and (args.quantize is not None or args.output is not None):
        given = " and ".join(flag for flag, value in (("--quantize", args.quantize),
                                                       ("--output", args.output)) if value)
        print(f"fastload export: error: --sensitivity prints each layer group's cost and writes "
              f"no model, so {given} would do nothing; drop it, or export without --sensitivity",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.sensitivity:
            base, costs = sensitivity(args.checkpoint, args.data,
                                      calibration_batches=args.calibration_batches)
            if args.json:
                print(json.dumps({"fp32_top1": base, "groups": [c.__dict__ for c in costs]}, indent=2))
                return 0
            print(f"fp32 val top-1: {_percent(base)}; one layer group quantized at a time (static):")
            print("| layer group | val top-1 | change (points) | val loss change |")
            print("|---|---:|---:|---:|")
            for cost in costs:
                print(f"| {cost.group} | {_percent(cost.top1)} | {100 * cost.change:+.1f} | "
                      f"{cost.loss_change:+.4f} |")
            print("keep the costly groups in float with --skip-quantize GROUP ...")
            return 0
        if args.quantize is None:
            print("fastload export: error: give --quantize dynamic, static or qat (or --sensitivity)",
                  file=sys.stderr)
            return EXIT_USAGE
        report = export_checkpoint(
            args.checkpoint, args.output, args.data, quantize=args.quantize,
            calibration_batches=args.calibration_batches, skip_quantize=tuple(args.skip_quantize),
            latency_batches=tuple(args.latency_batches), compile=not args.no_compile)
    except ValueError as error:
        return report_error("export", error, _FLAGS, EXIT_USAGE)
    except (OSError, RuntimeError) as error:
        return report_error("export", error, _FLAGS, EXIT_FAILURE)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    _print_report(report)
    return 0
