"""The `make demo` report: a Markdown page with four PNG charts, from measured results only.

Inputs are the plain records the demo already wrote: the ``fastload bench`` JSON (rows with
``images_per_s``, spreads and ``ratio_to_a``) and the fine-tune A/B rows of
:func:`fastload.train.compare.run_compare` (each with its per-epoch records). Nothing here
measures; every number on the page is one of those records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DemoHeadline", "TechniqueRow", "headline", "write_report"]

_BASELINE_COLOUR = "#ff7f0e"
_FASTLOAD_COLOUR = "#1f77b4"
_CEILING_COLOUR = "#7f7f7f"


_TECHNIQUES = {  # what each A/B row after the loader's is, in one phrase
    "amp": "a precision technique",
    "gc": "a memory technique: activations recomputed in backward",
    "accum": "a memory technique: half the micro-batch, two per step",
    "freeze": "a compute technique: half the blocks not trained",
}


@dataclass(frozen=True)
class TechniqueRow:
    """One A/B row after the loader's, against the row above it."""

    label: str
    what: str
    speedup: float  # images/s / the row above's
    memory_change: float | None  # training's own peak memory / the row above's, minus 1


@dataclass(frozen=True)
class DemoHeadline:
    """The figures the demo prints at the end: first what the loader did end to end (the
    A/B's fastload row against its torch-loader baseline, same precision), then the loader
    alone (the bench), then each technique row for what it is."""

    e2e_speedup: float | None  # A/B: fastload row's images/s / the baseline's (both fp32)
    baseline_stall: float | None  # share of the baseline epoch spent waiting for input
    fastload_stall: float | None  # the same for the fastload row
    baseline_memory_mb: float | None  # peak PSS of the baseline row's process tree
    fastload_memory_mb: float | None  # the same for the fastload row
    loader_speedup: float | None  # bench: fastload on the same files (LMDB, else folder)
    ceiling_share: float | None  # that row as a share of the decode ceiling
    resized_speedup: float | None  # fastload on the LMDB stored with max_side / torchvision's
    recipe: str | None = None  # the augmentation recipe measured, and fastload's ratio on it
    recipe_speedup: float | None = None
    techniques: tuple[TechniqueRow, ...] = ()

    def lines(self) -> list[str]:
        out = []
        if self.e2e_speedup is not None:
            line = (f"end to end (fine-tune A/B, same fp32 training): fastload.DataLoader "
                    f"x{self.e2e_speedup:.2f} images/s against torchvision's DataLoader; "
                    f"data stall {100 * (self.baseline_stall or 0):.0f}% -> "
                    f"{100 * (self.fastload_stall or 0):.0f}% of each epoch")
            if self.baseline_memory_mb and self.fastload_memory_mb:
                line += (f"; memory {self.baseline_memory_mb:,.0f} -> "
                         f"{self.fastload_memory_mb:,.0f} MiB (peak PSS of the whole process "
                         "tree, loader workers included)")
            out.append(line)
        if self.loader_speedup is not None:
            share = ("" if self.ceiling_share is None
                     else f", {100 * self.ceiling_share:.0f}% of the JPEG decode ceiling")
            resized = ("" if self.resized_speedup is None
                       else f"; x{self.resized_speedup:.2f} from an LMDB stored pre-resized")
            out.append(f"loader alone (bench on photographs): fastload x{self.loader_speedup:.2f} "
                       f"against torchvision's DataLoader{share}{resized}")
        if self.recipe_speedup is not None:
            out.append(f"augmentation recipe '{self.recipe}' (torchvision's reference preset, "
                       f"photographs): fastload x{self.recipe_speedup:.2f} against "
                       "torchvision's DataLoader")
        for t in self.techniques:
            memory = ("" if t.memory_change is None
                      else f", training's peak memory {100 * t.memory_change:+.0f}%")
            out.append(f"{t.label} ({t.what}): x{t.speedup:.2f} images/s against the row "
                       f"above{memory}")
        return out


def _measured(bench: dict) -> list[dict]:
    return [r for r in bench.get("rows", []) if r.get("images_per_s")]


def _techniques(ab_rows: list[dict]) -> tuple[TechniqueRow, ...]:
    out = []
    names = [r["row"] for r in ab_rows]
    start = names.index("fastload") + 1 if "fastload" in names else 1
    for before, row in zip(ab_rows[start - 1:], ab_rows[start:], strict=False):
        if not before["images_per_s"]:
            continue
        memory = None
        if before.get("peak_mem_mb"):
            memory = row["peak_mem_mb"] / before["peak_mem_mb"] - 1
        out.append(TechniqueRow(row["label"], _TECHNIQUES.get(row["row"], "a technique"),
                                row["images_per_s"] / before["images_per_s"], memory))
    return tuple(out)


def headline(bench: dict | None, ab_rows: list[dict] | None,
             recipe: dict | None = None) -> DemoHeadline:
    """The headline figures of a bench JSON, an A/B run and a recipe bench JSON (None where
    one is missing)."""
    speedup = share = resized = None
    rows = {r["row"]: r for r in _measured(bench or {})}
    same_files = rows.get("d") or rows.get("c")  # (e) decodes smaller files: not comparable
    if "a" in rows and same_files:
        speedup = same_files["images_per_s"] / rows["a"]["images_per_s"]
        if "f" in rows:
            share = same_files["images_per_s"] / rows["f"]["images_per_s"]
    if "a" in rows and "e" in rows:
        resized = rows["e"]["images_per_s"] / rows["a"]["images_per_s"]
    e2e = base_stall = fast_stall = base_mem = fast_mem = None
    techniques: tuple[TechniqueRow, ...] = ()
    by_name = {r["row"]: r for r in ab_rows or []}
    base, fast = by_name.get("baseline"), by_name.get("fastload")
    if base and fast and base["images_per_s"] > 0:
        e2e = fast["images_per_s"] / base["images_per_s"]
        base_stall, fast_stall = base["data_stall_share"], fast["data_stall_share"]
        base_mem, fast_mem = base.get("tree_pss_mb"), fast.get("tree_pss_mb")
    if ab_rows:
        techniques = _techniques(ab_rows)
    name = recipe_ratio = None
    recipe_rows = {r["row"]: r for r in _measured(recipe or {})}
    if "a" in recipe_rows and "c" in recipe_rows:
        name = (recipe or {}).get("config", {}).get("recipe")
        recipe_ratio = recipe_rows["c"]["images_per_s"] / recipe_rows["a"]["images_per_s"]
    return DemoHeadline(e2e, base_stall, fast_stall, base_mem, fast_mem, speedup, share,
                        resized, name, recipe_ratio, techniques)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _throughput_chart(bench: dict, title: str, path: Path) -> Path:
    rows = _measured(bench)
    figure = _figure(9.5, 1.4 + 0.5 * len(rows))
    axes = figure.add_subplot(1, 1, 1)
    base = next((r["images_per_s"] for r in rows if r["row"] == "a"), None)
    labels, values, low, high, colours = [], [], [], [], []
    for r in reversed(rows):
        labels.append(f"({r['row']}) {r['loader']}")
        values.append(r["images_per_s"])
        low.append(r["images_per_s"] - (r.get("spread_min") or r["images_per_s"]))
        high.append((r.get("spread_max") or r["images_per_s"]) - r["images_per_s"])
        colours.append(_CEILING_COLOUR if r["row"] == "f" else
                       _BASELINE_COLOUR if r["row"] in "ab" else _FASTLOAD_COLOUR)
    axes.barh(range(len(rows)), values, xerr=[low, high], color=colours, capsize=3)
    axes.set_yticks(range(len(rows)), labels)
    for y, (value, above) in enumerate(zip(values, high, strict=True)):
        note = f"{value:,.0f}" + (f"  x{value / base:.2f}" if base else "")
        axes.text(value + above, y, "  " + note, va="center", fontsize=8)  # past the whisker
    axes.set_xlim(0, max(v + h for v, h in zip(values, high, strict=True)) * 1.3)
    axes.set_xlabel("images per second (median of measured epochs; whiskers: min-max)")
    axes.set_title(title, fontsize=9)
    figure.savefig(path)
    return path


def _step_time_chart(ab_rows: list[dict], title: str, path: Path) -> Path:
    figure = _figure(9.5, 1.4 + 0.5 * len(ab_rows))
    axes = figure.add_subplot(1, 1, 1)
    labels, wait_ms, compute_ms = [], [], []
    for r in reversed(ab_rows):
        timed = r["epochs"][1:] or r["epochs"]  # the first epoch pays start-up costs
        steps = sum(e["steps"] for e in timed) or 1
        labels.append(r["label"])
        wait_ms.append(1000 * sum(e["data_wait_s"] for e in timed) / steps)
        compute_ms.append(1000 * sum(e["compute_s"] for e in timed) / steps)
    positions = range(len(labels))
    axes.barh(positions, wait_ms, color=_BASELINE_COLOUR, label="waiting for data")
    axes.barh(positions, compute_ms, left=wait_ms, color=_FASTLOAD_COLOUR, label="compute")
    axes.set_yticks(positions, labels)
    for y, (wait, compute) in enumerate(zip(wait_ms, compute_ms, strict=True)):
        share = wait / (wait + compute) if wait + compute else 0.0
        axes.text(wait + compute, y, f"  {100 * share:.0f}% stall", va="center", fontsize=8)
    axes.set_xlim(0, max(w + c for w, c in zip(wait_ms, compute_ms, strict=True)) * 1.25)
    axes.set_xlabel("milliseconds per optimizer step (mean over timed epochs)")
    axes.legend(loc="lower right", fontsize=8)
    axes.set_title(title, fontsize=9)
    figure.savefig(path)
    return path


def _training_chart(ab_rows: list[dict], title: str, path: Path) -> Path:
    figure = _figure(10.0, 4.2 + 0.2 * len(ab_rows))
    loss_axes, top1_axes = figure.subplots(1, 2)
    for r in ab_rows:
        epochs = [e["epoch"] + 1 for e in r["epochs"]]
        loss_axes.plot(epochs, [e["train_loss"] for e in r["epochs"]], marker="o",
                       label=r["label"])
        top1 = [None if e["val_top1"] is None else 100 * e["val_top1"] for e in r["epochs"]]
        top1_axes.plot(epochs, top1, marker="o", label=r["label"])
    loss_axes.set(xlabel="epoch", ylabel="training loss (cross-entropy)", title="training loss")
    top1_axes.set(xlabel="epoch", ylabel="validation top-1 (%)", title="validation accuracy")
    for axes in (loss_axes, top1_axes):
        axes.xaxis.get_major_locator().set_params(integer=True)
        axes.grid(alpha=0.3)
    handles, labels = loss_axes.get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
    figure.suptitle(title, fontsize=9)
    figure.savefig(path)
    return path


def _memory_chart(ab_rows: list[dict], title: str, gpu: bool, path: Path) -> Path:
    figure = _figure(9.5, 1.4 + 0.5 * len(ab_rows))
    axes = figure.add_subplot(1, 1, 1)
    key = "peak_mem_mb" if gpu else "tree_pss_mb"
    labels = [r["label"] for r in reversed(ab_rows)]
    values = [r.get(key) or 0.0 for r in reversed(ab_rows)]
    axes.barh(range(len(labels)), values, color=_FASTLOAD_COLOUR)
    axes.set_yticks(range(len(labels)), labels)
    for y, value in enumerate(values):
        axes.text(value, y, f"  {value:,.0f}", va="center", fontsize=8)
    axes.set_xlim(0, max(max(values), 1.0) * 1.2)
    axes.set_xlabel("peak GPU memory (MiB)" if gpu else
                    "peak PSS of the whole process tree: training process + loader workers (MiB)")
    axes.set_title(title, fontsize=9)
    figure.savefig(path)
    return path


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _bench_table(bench: dict) -> list[str]:
    lines = ["| row | loader | images/s | min-max | x torchvision | share of ceiling | "
             "peak PSS, process tree (MiB) |", "|---|---|---:|---:|---:|---:|---:|"]
    rows = _measured(bench)
    ceiling = next((r["images_per_s"] for r in rows if r["row"] == "f"), None)
    for r in rows:
        ratio = "-" if r.get("ratio_to_a") is None else f"{r['ratio_to_a']:.2f}x"
        share = f"{100 * r['images_per_s'] / ceiling:.0f}%" if ceiling else "-"
        lines.append(f"| ({r['row']}) | {r['loader']} | {r['images_per_s']:,.0f} | "
                     f"{r.get('spread_min') or 0:,.0f}-{r.get('spread_max') or 0:,.0f} | "
                     f"{ratio} | {share} | {_mib(r.get('peak_pss_mib'))} |")
    return lines


def _ab_table(ab_rows: list[dict]) -> list[str]:
    lines = ["| configuration | images/s | x row above | x baseline | data stall | "
             "peak PSS, process tree (MiB) | peak USS, process tree (MiB) | "
             "training's own peak (MiB) | val top-1 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = ab_rows[0]["images_per_s"] or 1.0
    above = base
    for r in ab_rows:
        top1 = "n/a" if r["val_top1"] is None else f"{100 * r['val_top1']:.1f}%"
        lines.append(f"| {r['label']} | {r['images_per_s']:.1f} | "
                     f"{r['images_per_s'] / (above or 1.0):.2f}x | "
                     f"{r['images_per_s'] / base:.2f}x | {100 * r['data_stall_share']:.0f}% | "
                     f"{_mib(r.get('tree_pss_mb'))} | {_mib(r.get('tree_uss_mb'))} | "
                     f"{r['peak_mem_mb']:,.0f} | {top1} |")
        above = r["images_per_s"]
    return lines


def write_report(out_dir: str | Path, *, bench: dict | None, ab_rows: list[dict] | None,
                 machine: str, data: str, commands: dict[str, str],
                 gpu: bool = False, recipe: dict | None = None,
                 notes: list[str] | None = None) -> Path:
    """Write ``out_dir/report.md`` and its charts; return the report's path.

    ``machine`` and ``data`` are one-line descriptions put in every chart title;
    ``commands`` maps a section ("bench", "recipe", "finetune") to the command that
    reproduces it; ``recipe`` is the bench JSON of one augmentation recipe (rows a and c);
    ``notes`` are decisions the demo took on this machine (e.g. the AMP row's), listed
    under the headline.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{machine}\n{data}"
    lines = ["# fastload demo report", "", f"Machine: {machine}.  ", f"Data: {data}.", ""]
    lines += [f"- {line}" for line in headline(bench, ab_rows, recipe).lines()] + [""]
    if notes:
        lines += ["Decided on this machine:", ""] + [f"- {note}" for note in notes] + [""]
    if bench and _measured(bench):
        chart = _throughput_chart(bench, "Loader throughput, same images, same cores - "
                                  + title, out / "throughput.png")
        lines += ["## Loader throughput", "",
                  "Each row is a loader running in its own process over the same images, "
                  "rounds interleaved; (f) is the JPEG decode ceiling of these cores.", "",
                  f"![loader throughput]({chart.name})", ""] + _bench_table(bench)
        lines += ["", f"Command: `{commands.get('bench', '')}`", ""]
    if recipe and _measured(recipe):
        name = recipe.get("config", {}).get("recipe", "")
        lines += [f"## An augmentation recipe: `{name}`", "",
                  "torchvision's reference training preset with this auto-augmentation "
                  "(RandomResizedCrop, flip, the augmentation, Normalize) in both loaders; "
                  "fastload runs the augmentation in its torch suffix's threads with "
                  "torchvision's exact random draws.", ""] + _bench_table(recipe)
        lines += ["", f"Command: `{commands.get('recipe', '')}`", ""]
    if ab_rows:
        charts = [
            _step_time_chart(ab_rows, "Where a training step's time goes - " + title,
                             out / "step_time.png"),
            _training_chart(ab_rows, "Loss and accuracy by epoch - " + title,
                            out / "training.png"),
            _memory_chart(ab_rows, "Peak memory by configuration - " + title, gpu,
                          out / "memory.png"),
        ]
        lines += ["## Fine-tuning A/B", "",
                  "One row per configuration, each in a fresh process; every row adds one "
                  "technique to the row above it. The first two rows differ only in the "
                  "loader (both fp32): their ratio is what the loader did end to end. Data "
                  "stall is the share of an epoch the loop spent waiting for its next batch. "
                  "Memory: the peak PSS and USS of the row's whole process tree (the "
                  "training process and torch's loader workers, from smaps_rollup), and the "
                  "training process's own peak above its level before training (CUDA memory "
                  "on a GPU), which is what the memory techniques change.", ""]
        lines += _ab_table(ab_rows) + [""]
        lines += [f"![{c.stem}]({c.name})" for c in charts]
        lines += ["", f"Command: `{commands.get('finetune', '')}`", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report
