"""``fastload doctor``: what this machine gives fastload (versions, C kernels, libjpeg-turbo,
CPU, GPUs, cache disk, extras), with one line of advice for each gap; ``--json`` for tools."""

from __future__ import annotations

import argparse
import json
import sys

# MachineReport fields -> what a shell user types (the advice speaks the library's words).
_FLAGS = {"amp": "--amp", "max_side": "--max-side"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="what this machine gives fastload, and what to install or change",
        description=(
            "Report the versions of torch, torchvision, DALI (and the CUDA each is built for) "
            "and timm; which C kernels loaded and what runs instead of a missing one; the "
            "libjpeg the region decoder uses; the CPU (model, torch's capability, AVX2, "
            "AVX-512, AMX, native bf16), cores, GPUs and their JPEG decoders; the free disk "
            "of the shard cache ($FASTLOAD_CACHE); the extras installed. Each gap gets one "
            "line of advice. Needs only the core install. Exits 0 whatever it finds."
        ),
    )
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object on stdout")
    parser.set_defaults(run=run)
    return parser


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def format_report(report) -> str:
    """The report as aligned text lines, advice last."""
    from fastload.tools.cli import shell_words

    v = report.versions
    dali = v.get("nvidia-dali") or "missing"
    if report.dali_cuda:
        dali += f" (CUDA {report.dali_cuda}; {', '.join(report.dali_distributions) or '?'})"
    lines = [
        ("fastload", f"{report.fastload or 'not installed as a distribution'}, "
                     f"Python {report.python}, {report.platform}"),
        ("torch", f"{v.get('torch') or 'missing'}"
                  + (f" (CUDA {report.torch_cuda})" if report.torch_cuda else " (CPU build)")),
        ("torchvision", v.get("torchvision") or "missing"),
        ("DALI", dali),
        ("timm", v.get("timm") or "missing ([train] extra)"),
    ]
    for kernel in report.kernels:
        if kernel.loaded:
            text = "loaded"
            if kernel.name == "_jpegroi" and report.libjpeg:
                kind = "libjpeg-turbo" if report.libjpeg_turbo else "libjpeg (not turbo)"
                text += f", {kind} {report.libjpeg}"
            if kernel.name == "_jpegcheck" and report.check_files_at_once:
                isa = {"avx512": "AVX-512", "avx2": "AVX2", "avx2-loads": "AVX2"}.get(
                    report.check_pass or "")
                text += (f", the strict JPEG check decodes {report.check_files_at_once} files "
                         f"at once ({isa or 'without AVX2 or AVX-512'})")
        else:
            text = f"MISSING ({kernel.detail}); instead: {kernel.fallback}"
        lines.append((f"kernel {kernel.name}", text))
    cpu = report.cpu
    flags = ", ".join(f"{name} {_yes(on)}" for name, on in cpu.flags.items())
    lines += [
        ("CPU", f"{cpu.model} ({cpu.machine}), torch capability {cpu.capability or '?'}"),
        ("CPU flags", f"{flags}; native bf16 {_yes(cpu.native_bf16)}"
                      + (f" ({cpu.bf16_capped_by})" if cpu.bf16_capped_by else "")),
        ("cores", f"{cpu.usable_cores} usable of {cpu.cores}"),
    ]
    if report.gpus:
        for gpu in report.gpus:
            decoder = "hardware + CUDA" if gpu.hardware_jpeg_decoder else "CUDA (no hardware)"
            lines.append((f"GPU {gpu.index}", f"{gpu.name}, sm_{gpu.capability[0]}"
                          f"{gpu.capability[1]}, {gpu.memory_gib} GiB, JPEG decode: {decoder}"))
    else:
        lines.append(("GPU", "none usable (torch.cuda.is_available() is False): DALI decodes "
                             "and augments on CPU threads"))
    free = ("?" if report.cache_free_bytes is None
            else f"{report.cache_free_bytes / 2**30:.1f} GiB free")
    lines.append(("cache", f"{report.cache_dir}: {free}"))
    if report.extras:
        lines.append(("extras", ", ".join(f"{e} {_yes(ok)}" for e, ok in report.extras.items())))
    width = max(len(k) for k, _ in lines)
    text = [f"{key:<{width}}  {value}" for key, value in lines]
    if report.advice:
        text.append("advice:")
        text += [f"  - {shell_words(line, _FLAGS)}" for line in report.advice]
    else:
        text.append("advice: none, fastload has what it uses on this machine")
    return "\n".join(text)


def run(args: argparse.Namespace) -> int:
    """Exit status 0: the report is the result, gaps included."""
    from fastload.data.remote.cache import default_cache_dir
    from fastload.utils.machine import machine_report

    report = machine_report(default_cache_dir())
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0
