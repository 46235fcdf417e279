"""CPU milliseconds per image of the strict JPEG check: today's and before (issue 41).

    python benchmarks/strict_check_cost.py FOLDER [--rounds 5] [--limit 2000]

Reads every ``*.jpg`` under FOLDER (e.g. ``fastload synth --photos --train 2000 --val 0
FOLDER``: crops of real photographs) into memory, then times, one thread, rounds
alternating so that load on a shared machine falls on both alike:

* ``strict decode``: ``decoded_error``, libjpeg-turbo's strict 1/8-scale grey decode
  (simplejpeg), the check before issue 41;
* ``entropy check``: ``strict_decode_error`` as it runs now: the C entropy-only check
  (``_jpegcheck``), the strict decode only where it does not find a file intact;
* ``entropy, 4 a call``: ``strict_decode_errors`` over the files four at a time (two
  decoded at once);
* ``entropy, 64 a call``: the same 64 at a time, as ``fastload convert`` gives them to a
  check thread (32 to 128): with AVX-512, 32 decoded at once (``wide.c``), with AVX2 16
  (``wide_avx2.c``);
* ``64, avx2`` (each wide pass the CPU runs but the default): the C check of 64 a call by
  that pass (on an AVX-512 machine: what a CPU with AVX2 alone runs);
* ``64, two at once``: the C check of 64 a call with ``wide=False`` (where the CPU has a
  wide pass: what it saves);
* ``markers``: ``parse_jpeg``, what ``check="markers"`` reads of every file.

With ``--against SO`` (another build of the ``_jpegcheck`` extension, e.g. an older
commit's ``fastload/data/format/_jpegcheck*.so``) its ``check`` is timed in the same rounds
(``other build``, one file a call; ``other, 64 a call`` where it has ``check_many``), and
its verdicts compared.

Prints, for each, the median CPU-ms per image (``time.process_time``) with the range over
rounds, the ratio strict decode / entropy check, and how many files the entropy check left
to the strict decode. Nothing is asserted: see benchmarks/NOTES.md.

    python benchmarks/strict_check_cost.py FOLDER --convert [--rounds 5] [--shard-size MB]
        [--no-before] [--tree OTHER_CHECKOUT] [--capability avx2 ...]

instead times whole conversions of FOLDER (an ImageFolder tree, e.g. FOLDER/train), each
in a fresh process (``fastload convert SRC DST --no-progress --json -``, all cores),
rounds alternating: ``--check markers``, the strict check as it is now, the strict check
with the entropy check switched off (the strict decode for every file, as before issue 41;
not with ``--no-before``), with ``--tree`` the strict check and the markers one of another
checkout (built in place), and with ``--capability NAME`` the strict check with
FASTLOAD_CPU_CAPABILITY=NAME (``avx2``: the pass a CPU without AVX-512 takes; ``default``:
two files at a time). The conversion's own seconds (its ``--json`` report), the process's
wall seconds and CPU seconds (the process and its children), medians and ranges, and each
strict / markers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from fastload.data.format import jpeg_damage
from fastload.data.format.jpeg import parse_jpeg


def _cpu_ms_per_image(fn, files: list[bytes]) -> float:
    start = time.process_time()
    for data in files:
        fn(data)
    return (time.process_time() - start) * 1000 / len(files)


def _groups(files: list[bytes], size: int) -> list[list[bytes]]:
    return [files[i:i + size] for i in range(0, len(files), size)]


# The command line of the checkout on PYTHONPATH: its fastload/, and its tools/ as
# fastload.tools (an editable install maps fastload.tools to the installed checkout's tools/)
_CONVERT = """
import importlib.util, os, sys
tools = os.path.join(os.environ["PYTHONPATH"].split(os.pathsep)[0], "tools")
spec = importlib.util.spec_from_file_location(
    "fastload.tools", os.path.join(tools, "__init__.py"), submodule_search_locations=[tools])
sys.modules["fastload.tools"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["fastload.tools"])
from fastload.data.format import jpeg_damage
if sys.argv[1] == "before":
    jpeg_damage._jpegcheck = None  # the strict decode for every file
from fastload.tools.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _convert_rounds(src: Path, rounds: int, shard_size: float | None, before: bool,
                    tree: Path | None, capabilities: list[str]) -> None:
    import json
    import resource
    import shutil
    import subprocess
    import sys
    import tempfile

    here = Path(__file__).resolve().parents[1]
    src = src.resolve()  # the conversions run in a temporary folder
    # name -> (tree, convert's arguments, FASTLOAD_CPU_CAPABILITY)
    runs = {"markers": (here, ["--check", "markers"], None), "strict": (here, [], None)}
    if before:
        runs["strict, before"] = (here, [], None)
    if tree is not None:
        runs[f"strict at {tree.name}"] = (tree.resolve(), [], None)
        runs[f"markers at {tree.name}"] = (tree.resolve(), ["--check", "markers"], None)
    for capability in capabilities:
        runs[f"strict, {capability}"] = (here, [], capability)
    shards = [] if shard_size is None else ["--shard-size", str(shard_size)]
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    own: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, (root, extra, capability) in runs.items():
                env = {**os.environ, "PYTHONPATH": str(root)}
                if capability is not None:
                    env["FASTLOAD_CPU_CAPABILITY"] = capability
                dst = Path(tmp) / "out"
                shutil.rmtree(dst, ignore_errors=True)
                before_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", _CONVERT, "before" if "before" in name else "now",
                     "convert", str(src), str(dst), "--no-progress", "--json", "-",
                     *shards, *extra],
                    check=True, capture_output=True, cwd=tmp, env=env)
                wall[name].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime - before_usage.ru_utime + after.ru_stime -
                                 before_usage.ru_stime)
                own[name].append(json.loads(done.stdout)["seconds"])
    print(f"{rounds} rounds, load average {os.getloadavg()[0]:.1f} at the end")
    for name in runs:
        print(f"  {name:15s} conversion {statistics.median(own[name]):6.3f} s "
              f"(range {min(own[name]):.3f}-{max(own[name]):.3f}), "
              f"process wall {statistics.median(wall[name]):5.2f} s "
              f"(range {min(wall[name]):.2f}-{max(wall[name]):.2f}), "
              f"CPU {statistics.median(cpu[name]):5.2f} s "
              f"(range {min(cpu[name]):.2f}-{max(cpu[name]):.2f})")
    for name in list(runs)[1:]:
        o = statistics.median(own[name]) / statistics.median(own["markers"])
        w = statistics.median(wall[name]) / statistics.median(wall["markers"])
        c = statistics.median(cpu[name]) / statistics.median(cpu["markers"])
        print(f"  {name} / markers: conversion {o:.2f}x, process wall {w:.2f}x, CPU {c:.2f}x")


def _load_build(path: Path):
    """The ``_jpegcheck`` extension built at ``path``, beside this tree's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("other_build._jpegcheck", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--against", type=Path, default=None,
                        help="another build of _jpegcheck (.so) to time beside this one")
    parser.add_argument("--convert", action="store_true",
                        help="time whole conversions of FOLDER instead")
    parser.add_argument("--shard-size", type=float, default=None,
                        help="with --convert: write shards of this many MB")
    parser.add_argument("--no-before", action="store_true",
                        help="with --convert: leave out the strict decode of every file")
    parser.add_argument("--tree", type=Path, default=None,
                        help="with --convert: also time the strict and markers conversions "
                        "of another checkout (its root, built), in the same rounds")
    parser.add_argument("--capability", action="append", default=[],
                        choices=["avx512", "avx2", "avx2-loads", "default"],
                        help="with --convert: also time the strict conversion with "
                        "FASTLOAD_CPU_CAPABILITY set to this (repeatable)")
    args = parser.parse_args()
    if args.convert:
        _convert_rounds(args.folder, args.rounds, args.shard_size, not args.no_before,
                        args.tree, args.capability)
        return
    files = [p.read_bytes() for p in sorted(args.folder.rglob("*.jpg"))[:args.limit]]
    if not files:
        raise SystemExit(f"no *.jpg under {args.folder}")
    if jpeg_damage._jpegcheck is None:
        raise SystemExit("the _jpegcheck extension is not built: "
                         "python setup.py build_ext --inplace")
    check = jpeg_damage._jpegcheck.check
    left = sum(check(d) is not None for d in files)
    differ = sum(jpeg_damage.strict_decode_error(d) != jpeg_damage.decoded_error(d)
                 for d in files)
    for size in (4, 64):
        together = [e for group in _groups(files, size)
                    for e in jpeg_damage.strict_decode_errors(group)]
        differ += sum(a != jpeg_damage.decoded_error(d)
                      for a, d in zip(together, files, strict=True))
    candidates = {  # (what is called, over what): CPU-ms per file of the files
        "strict decode": (jpeg_damage.decoded_error, files),
        "entropy check": (jpeg_damage.strict_decode_error, files),
        "entropy, 4 a call": (jpeg_damage.strict_decode_errors, _groups(files, 4)),
        "entropy, 64 a call": (jpeg_damage.strict_decode_errors, _groups(files, 64)),
        "markers": (parse_jpeg, files),
    }
    check_many = jpeg_damage._jpegcheck.check_many
    for name in getattr(jpeg_damage._jpegcheck, "WIDE_PASSES", ()):
        if name == jpeg_damage._jpegcheck.WIDE_PASS:
            continue  # "entropy, 64 a call"
        candidates[f"64, {name}"] = (
            lambda group, name=name: check_many(group, wide=name), _groups(files, 64))
    if getattr(jpeg_damage._jpegcheck, "WIDE_LANES", 0):
        candidates["64, two at once"] = (
            lambda group: check_many(group, wide=False),
            _groups(files, 64))
    if args.against is not None:
        other = _load_build(args.against)
        differ += sum((a is None) != (b is None) for a, b in
                      zip(map(other.check, files), map(check, files), strict=True))
        candidates["other build"] = (other.check, files)
        if hasattr(other, "check_many"):
            candidates["other, 64 a call"] = (other.check_many, _groups(files, 64))
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.rounds):
        for name, (fn, calls) in candidates.items():
            times[name].append(_cpu_ms_per_image(fn, calls) * len(calls) / len(files))
    mean_kb = sum(map(len, files)) / len(files) / 1024
    print(f"{len(files)} files, mean {mean_kb:.1f} KB, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    for name, values in times.items():
        print(f"  {name:18s} {statistics.median(values):7.3f} CPU-ms/image "
              f"(range {min(values):.3f}-{max(values):.3f})")
    ratio = statistics.median(times["strict decode"]) / statistics.median(times["entropy check"])
    ratio64 = (statistics.median(times["entropy check"]) /
               statistics.median(times["entropy, 64 a call"]))
    print(f"  strict decode / entropy check: {ratio:.2f}x; one file a call / 64 a call: "
          f"{ratio64:.2f}x; files left to the strict decode: "
          f"{left}; verdicts that differ: {differ}")


if __name__ == "__main__":
    main()
