"""The streaming-peers benchmark's table: each system's raw results (run.py's JSON)
summarised as one column of figures, ranges across rounds, in markdown (the README's table).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

NAMES = {"mosaic": "Mosaic Streaming", "litdata": "LitData", "fastload": "fastload"}


def progress(phase: str, result) -> str:
    """One line on what a phase of one system gave (run.py prints it as it goes)."""
    if phase == "convert":
        return f"{result['seconds']:.1f} s"
    if phase.startswith("reads"):
        return ", ".join(str(e["img_s"]) for e in result["epochs"]) + " img/s (cold, warm...)"
    if phase == "resume":
        second = result.get("second", {})
        return (f"works={result.get('works')}, downloaded again "
                f"{second.get('downloaded_bytes', 0) / (1 << 20):.1f} MiB")
    return "done"


def _span(values, fmt="{:,.0f}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def summarize(system: str, r: dict) -> dict[str, str]:
    s: dict[str, str] = {}
    if "error" in r:
        s["error"] = r["error"].splitlines()[0][:300]
    retried = [f for f in r.get("failures", [])  # failed, then passed
               if f["phase"].split()[0] in r and not r.get("error", "").startswith(f["phase"])]
    if retried:
        s["failed runs (then passed on retry)"] = "; ".join(
            f"{f['phase']}: {f['error'].split(': ', 1)[-1][:120]}" for f in retried)
    reads = r.get("reads", [])
    cold = [x["epochs"][0] for x in reads]
    warm = [e for x in reads for e in x["epochs"][1:]]
    mib = 1 << 20
    if "convert" in r:
        c = r["convert"]
        s["conversion (write + upload), s"] = f"{c['seconds']:.1f}"
        if "process_seconds" in c:  # fastload's: also as a fresh `fastload convert` process
            s["conversion (write + upload), s"] += f" (whole process {c['process_seconds']:.1f})"
        s["conversion CPU-s"] = f"{c['cpu_s']:.1f}"
        if "remote_bytes" in c:
            s["set in the bucket"] = f"{c['remote_bytes'] / mib:,.1f} MiB, {c['remote_objects']} objects"
    if reads:
        s["img/s, cold cache"] = _span([e["img_s"] for e in cold])
        s["img/s, warm cache"] = _span([e["img_s"] for e in warm])
        s["time to first batch, cold, s"] = _span([e["first_batch_s"] for e in cold], "{:.2f}")
        s["cache on disk after an epoch"] = _span([e["cache"]["bytes_on_disk"] / mib for e in cold], "{:,.1f} MiB")
        s["CPU-ms per image, cold"] = _span([e["cpu_s_per_image"] * 1000 for e in cold], "{:.2f}")
        s["CPU-ms per image, warm"] = _span([e["cpu_s_per_image"] * 1000 for e in warm], "{:.2f}")
    if "resume" in r:
        z = r["resume"]
        if not z.get("works") and "error" in z:
            s["resume 2 → 1 ranks"] = f"fails: {z['error'][:160]}"
        elif "second" in z:
            if "duplicates" in z:
                verdict = ("works" if z["works"] else "resumes") + (
                    f": {z['first']['images']} + {z['second']['images']} images, "
                    f"{z['duplicates']} twice, {z['missing']} not seen")
            else:
                verdict = (f"{'works' if z['works'] else 'resumes'}: {z['first']['images']} + "
                           f"{z['second']['images']} of {z.get('images_expected', '?')} images")
            s["resume 2 → 1 ranks"] = verdict
            s["resume: downloaded again"] = (f"{z['second']['downloaded_bytes'] / mib:,.1f} MiB, "
                                             f"{z['second']['cache_files_new_or_changed_count']} cache files")
    if "link" in r:
        k = r["link"]
        local = [e["img_s"] for e in k["local"]["epochs"][1:]] or [k["local"]["epochs"][0]["img_s"]]
        slow_warm = [e["img_s"] for e in k["slow"]["epochs"][1:]]
        slow_cold = k["slow"]["epochs"][0]
        loc = statistics.median(local)
        s["img/s, local disk"] = _span(local)
        if "rtt_ms" in k:
            s["slow link: connect + first response, ms"] = f"{k['rtt_ms']:.0f}"
        s["img/s, slow link, cold"] = (f"{slow_cold['img_s']:,.0f} (after the first batch "
                                       f"{slow_cold['img_s_after_first'] or 0:,.0f})")
        s["img/s, slow link, warm"] = _span(slow_warm)
        s["slow link warm / local disk"] = f"{statistics.median(slow_warm) / loc:.2f}" if slow_warm and loc else "—"
        s["slow link cold after 1st batch / local"] = (f"{(slow_cold['img_s_after_first'] or 0) / loc:.2f}"
                                                       if loc else "—")
        s["time to first batch, slow link, cold, s"] = f"{slow_cold['first_batch_s']:.2f}"
    return s


def markdown(results: dict) -> str:
    systems = list(results["systems"])
    rows: list[str] = []
    summaries = {name: summarize(name, results["systems"][name]) for name in systems}
    for summary in summaries.values():
        for key in summary:
            if key not in rows:
                rows.append(key)
    lines = ["| figure | " + " | ".join(NAMES[n] for n in systems) + " |",
             "|---|" + "---|" * len(systems)]
    for key in rows:
        lines.append(f"| {key} | " + " | ".join(summaries[n].get(key, "—") for n in systems) + " |")
    return "\n".join(lines)


def render(paths: list[str]) -> dict:
    """Results merged from earlier runs' JSON files: a later file's phases replace an
    earlier one's, system by system (e.g. a `--skip reads,resume` rerun of the link)."""
    merged: dict = {"meta": {"merged_from": paths}, "systems": {}}
    for path in paths:
        data = json.loads(Path(path).read_text())
        merged["meta"].setdefault("runs", []).append(data["meta"])
        for system, phases in data["systems"].items():
            target = merged["systems"].setdefault(system, {})
            if "error" in phases and any(k in phases for k in ("convert", "reads")):
                target.pop("error", None)
            target.update(phases)
    return merged
