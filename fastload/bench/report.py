"""Output of ``fastload bench``: the terminal table, the JSON file and the PNG bar chart."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
from pathlib import Path

import psutil

__all__ = ["format_table", "machine_info", "report_json", "write_json", "write_plot"]

JSON_FORMAT_VERSION = 1
_PACKAGES = ("torch", "torchvision", "nvidia-dali-cuda130", "nvidia-dali-cuda120", "pillow", "numpy",
             "lmdb", "ffcv")


def machine_info(device: str = "cpu") -> dict:
    """What the numbers were measured on: CPU model, cores, memory, GPU, package versions."""
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    info = {
        "cpu": cpu_model,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "gpu": None,
    }
    if device == "gpu":
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def format_table(report) -> str:
    """The report as an aligned text table (one line per row, notes below)."""
    floor = any(r.share_of_i is not None for r in report.rows)
    header = ["row", "loader", "img/s", "spread", "× (a)", "% of (f)",
              *(["% of (i)"] if floor else []), "PSS MiB", "USS MiB", "CPU %"]
    lines = []
    notes = []
    for r in report.rows:
        if r.images_per_s is None:
            spread = "-"
        else:
            spread = f"{r.spread_min:,.0f}–{r.spread_max:,.0f}"
        lines.append([
            f"({r.row})",
            r.loader,
            _fmt(r.images_per_s, "{:,.0f}"),
            spread,
            _fmt(r.ratio_to_a, "{:.2f}"),
            _fmt(None if r.share_of_f is None else 100 * r.share_of_f, "{:.0f}%"),
            *([_fmt(None if r.share_of_i is None else 100 * r.share_of_i, "{:.0f}%")]
              if floor else []),
            _fmt(r.peak_pss_mib, "{:,.0f}"),
            _fmt(r.peak_uss_mib, "{:,.0f}"),
            _fmt(r.cpu_percent, "{:.0f}%"),
        ])
        if r.note:
            notes.append(f"({r.row}) {r.status}: {r.note}" if r.status != "ok" else
                         f"({r.row}) {r.note}")
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    left = {0, 1}

    def render(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    cfg = report.config
    title = (f"fastload bench: {cfg['images_per_epoch']} images, {cfg['transforms']} transforms, "
             f"batch {cfg['batch_size']}, {cfg['image_size']} px, {cfg['threads']} threads, "
             f"{cfg['device']}, median of {cfg['epochs']} epochs after {cfg['warmup_epochs']} "
             f"warm-up")
    machine = report.machine
    where = f"machine: {machine['cpu']}, {machine['usable_cores']} cores" + (
        f", GPU {machine['gpu']}" if machine.get("gpu") else "")
    memory = ("memory: peak of each row's whole process tree (loader process + its workers), "
              "PSS summed over the tree (shared pages split among the processes mapping them) "
              "and USS (private pages), from /proc/<pid>/smaps_rollup")
    out = [title, where, memory, render(header), render(["-" * w for w in widths])]
    out += [render(cells) for cells in lines]
    return "\n".join(out + notes)


def report_json(report) -> str:
    """The report as JSON text (``format`` = version, ``config``, ``machine``, ``rows``)."""
    payload = {"format": JSON_FORMAT_VERSION, **dataclasses.asdict(report)}
    return json.dumps(payload, indent=2) + "\n"


def write_json(report, path: str | os.PathLike) -> Path:
    """Write :func:`report_json` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_json(report), encoding="utf-8")
    return path


def write_plot(report, path: str | os.PathLike) -> Path:
    """Write a PNG bar chart of img/s per measured row (min–max whiskers, × (a) labels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    rows = [r for r in report.rows if r.images_per_s is not None]
    if not rows:
        raise ValueError(f"no row was measured, so there is nothing to plot into {str(path)!r}")
    figure = Figure(figsize=(9.0, 1.0 + 0.55 * len(rows)), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    labels = [f"({r.row}) {r.loader}" for r in rows][::-1]
    values = [r.images_per_s for r in rows][::-1]
    low = [r.images_per_s - r.spread_min for r in rows][::-1]
    high = [r.spread_max - r.images_per_s for r in rows][::-1]
    colours = ["#7f7f7f" if r.row in "fi" else "#1f77b4" if r.row in "cde" else "#ff7f0e"
               for r in rows][::-1]
    positions = range(len(rows))
    axes.barh(positions, values, xerr=[low, high], color=colours, capsize=3)
    axes.set_yticks(list(positions), labels, fontsize=8)
    peak = max(r.spread_max for r in rows)
    for pos, r in zip(positions, rows[::-1], strict=True):
        text = f"{r.images_per_s:,.0f}"
        if r.ratio_to_a is not None:
            text += f"  ×{r.ratio_to_a:.2f} (a)"
        if r.share_of_f is not None and r.row != "f":
            text += f"  {100 * r.share_of_f:.0f}% (f)"
        if r.share_of_i is not None and r.row != "i":
            text += f"  {100 * r.share_of_i:.0f}% (i)"
        axes.text(r.spread_max + 0.01 * peak, pos, text, va="center", fontsize=8)
    from matplotlib.patches import Patch

    kinds = [("#ff7f0e", "baselines"), ("#1f77b4", "fastload"),
             ("#7f7f7f", "decode ceiling / floor")]
    shown = set(colours)
    axes.legend(handles=[Patch(color=c, label=label) for c, label in kinds if c in shown],
                loc="lower right", fontsize=8, frameon=False)
    axes.set_xlim(0, peak * 1.45)
    axes.set_xlabel("images / s (median; whiskers: min–max over measured epochs)")
    cfg, machine = report.config, report.machine
    where = machine["cpu"] + (f" + {machine['gpu']}" if machine.get("gpu") else "")
    axes.set_title(f"fastload bench: {cfg['images_per_epoch']} images, {cfg['transforms']} "
                   f"transforms, batch {cfg['batch_size']}, {cfg['threads']} threads, "
                   f"{cfg['device']}, median of {cfg['epochs']} epochs\n{where}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
