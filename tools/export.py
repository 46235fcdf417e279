"""``fastload export CHECKPOINT --quantize dynamic``: int8 model with size, latency and accuracy."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export", help="quantize a fine-tuned checkpoint to int8 and measure it",
        description="Dynamic int8 quantization (qint8 Linear layers) of a `fastload finetune` "
                    "checkpoint; reports size ratio, CPU latency ratio and val top-1 change.",
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="file written by fastload finetune --checkpoint")
    p.add_argument("--quantize", choices=("dynamic",), required=True,
                   help="dynamic: Linear weights int8, activations quantized per batch at run time")
    p.add_argument("--output", "-o", help="int8 state dict file (default CHECKPOINT.int8.pt)")
    p.add_argument("--data", help="DATA for val top-1 (default: the data the checkpoint trained on)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from fastload.train.export import export_checkpoint

    try:
        report = export_checkpoint(args.checkpoint, args.output, args.data)
    except (ValueError, FileNotFoundError) as error:
        print(f"fastload export: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    top1 = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    change = report.top1_change
    print(f"wrote {report.output} ({report.quantized_layers} Linear layers -> qint8)")
    print(f"size:     {report.fp32_bytes / 2**20:.2f} MiB -> {report.int8_bytes / 2**20:.2f} MiB "
          f"(ratio {report.size_ratio:.2f})")
    print(f"latency:  {report.fp32_latency_ms:.1f} ms -> {report.int8_latency_ms:.1f} ms per batch "
          f"of 8 on CPU (ratio {report.latency_ratio:.2f})")
    print(f"val top-1: {top1(report.fp32_top1)} -> {top1(report.int8_top1)}"
          + ("" if change is None else f" (change {100 * change:+.1f} points)"))
    return 0
