"""Side by side on one real S3 server: fastload, Mosaic Streaming and LitData write the same
ImageFolder to object storage and read it back with the same transform and batch size.

Run with the peers venv's Python (it has boto3 and ``weed``); the fastload rows run in
fastload's venv (``--fastload-python``), all in one invocation. The systems take turns
phase by phase (each converts, then each reads a fresh-cache round, the next round in a
rotated order, then each resumes), so a change in the machine's load falls on all of them.
See README.md beside this file for the figures' definitions. Every row runs in a fresh
process; this script only orchestrates and counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import seaweed
import slowlink
from peers_common import disk_usage, file_sizes
from report import NAMES, markdown, progress, render

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUCKET = "bench"
ROWS = {"mosaic": "row_mosaic.py", "litdata": "row_litdata.py", "fastload": "row_fastload.py"}
_FASTLOAD_CLI = "import sys; from fastload.tools.cli import main; sys.exit(main())"


class RowError(RuntimeError):
    pass


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", default="fastload,mosaic,litdata",
                   help="comma-separated: fastload, mosaic, litdata (default: all three)")
    p.add_argument("--workdir", default="/tmp/streaming-peers", help="images, server data, caches")
    p.add_argument("--src", default=None, help="an ImageFolder (default: WORKDIR/images-N/train: "
                                               "--images of WORKDIR/images/train, which "
                                               "`fastload synth` makes if missing)")
    p.add_argument("--images", type=int, default=1000,
                   help="images of the set (default 1000, about 78 MiB)")
    p.add_argument("--peers-python", default=sys.executable,
                   help="Python of the peers venv (default: this one)")
    p.add_argument("--fastload-python", default=str(REPO / ".venv" / "bin" / "python"))
    p.add_argument("--shard-mb", type=float, default=8.0,
                   help="shard size for all three: Mosaic size_limit, LitData chunk_bytes, "
                        "fastload --shard-size (default 8: about 10 shards of 1,000 images)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="loader workers / threads")
    p.add_argument("--rounds", type=int, default=2, help="fresh-cache read processes per system")
    p.add_argument("--warm-epochs", type=int, default=1, help="warm epochs after each cold one")
    p.add_argument("--link", choices=("proxy", "netem", "none"), default="none",
                   help="the cloud-like link phase: none (default: skipped), a delaying relay "
                        "(proxy), or tc netem in a network namespace (needs sch_netem)")
    p.add_argument("--delay-ms", type=float, default=20.0, help="one-way delay of the link")
    p.add_argument("--rate-mbit", type=float, default=1000.0, help="bandwidth of the link, each way")
    p.add_argument("--skip", default="", help="comma-separated phases to skip: reads, resume, link")
    p.add_argument("--json", default=None, help="output JSON (default: WORKDIR/results.json)")
    p.add_argument("--render", nargs="+", metavar="JSON", default=None,
                   help="run nothing: print the table of earlier results (later files' phases "
                        "replace earlier ones'); with --json, write the merged results there")
    p.add_argument("--row-timeout", type=float, default=1200.0)
    p.add_argument("--retries", type=int, default=1,
                   help="a failed phase is run again this many times; failures are kept in the JSON")
    return p.parse_args(argv)


# -- running rows -------------------------------------------------------------------------

_LOGS: list[Path] = []  # the folder every row's output goes to (set by main)
_ERROR_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit)\b")


def _error_line(text: str) -> str:
    """The last exception line of a row's output (not torchrun's own ChildFailedError)."""
    lines = [ln.strip() for ln in text.splitlines()
             if _ERROR_LINE.match(ln.strip()) and "ChildFailedError" not in ln]
    if lines:
        return lines[-1]
    rest = [ln for ln in text.strip().splitlines() if ln.strip()]
    return rest[-1] if rest else "(no output)"


def run_row(python: str, system: str, argv: list[str], env: dict, *, prefix=(), ranks: int = 1,
            timeout: float) -> list[dict]:
    """Run one row command in a fresh process (``ranks`` > 1: under torchrun, gloo) and
    return its ``RESULT`` lines; a failure raises :class:`RowError` naming its exception.
    Everything the process printed goes to WORKDIR/logs/."""
    script = str(HERE / ROWS[system])
    launcher = [python]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    cmd = [*prefix, *launcher, script, *argv]
    log = None
    if _LOGS:
        _LOGS[0].mkdir(parents=True, exist_ok=True)
        log = _LOGS[0] / f"{time.strftime('%H%M%S')}-{system}-{argv[0]}.log"
    t0 = time.perf_counter()
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE)
    except subprocess.TimeoutExpired as error:
        raise RowError(f"{system} {argv[0]} ran past {timeout:.0f} s") from error
    if log is not None:
        log.write_text(f"$ {' '.join(cmd)}\nexit {run.returncode}\n--- stdout\n{run.stdout}"
                       f"\n--- stderr\n{run.stderr}")
    results = [json.loads(line[len("RESULT "):]) for line in run.stdout.splitlines()
               if line.startswith("RESULT ")]
    if run.returncode != 0 or len(results) < ranks:
        raise RowError(f"{system} {argv[0]} exited {run.returncode}: "
                       f"{_error_line(run.stderr + chr(10) + run.stdout)} (log: {log})")
    for result in results:
        result["process_s"] = round(time.perf_counter() - t0, 2)
    return results


def ensure_images(args, work: Path) -> Path:
    """The ImageFolder every system writes: ``--src``, else ``--images`` files of
    WORKDIR/images/train (made by `fastload synth` when it has too few), hard-linked into
    WORKDIR/images-N/train, the same classes in the same proportions."""
    if args.src:
        return Path(args.src)
    full = work / "images" / "train"
    if not (full.is_dir() and sum(1 for _ in full.rglob("*.jpg")) >= args.images):
        if not Path(args.fastload_python).exists():
            raise SystemExit(f"run.py: no images: pass --src DIR (an ImageFolder), or a fastload "
                             f"venv as --fastload-python to make them (not found: "
                             f"{args.fastload_python})")
        shutil.rmtree(work / "images", ignore_errors=True)
        subprocess.run([args.fastload_python, "-c", _FASTLOAD_CLI, "synth", str(work / "images"),
                        "--train", str(args.images), "--val", "0", "--no-progress"], check=True)
    files = sorted(full.rglob("*.jpg"))
    if len(files) == args.images:
        return full
    src = work / f"images-{args.images}" / "train"
    if src.is_dir() and sum(1 for _ in src.rglob("*.jpg")) == args.images:
        return src
    shutil.rmtree(src.parent, ignore_errors=True)
    step = len(files) / args.images  # every step-th file: each class keeps its share
    for path in (files[int(i * step)] for i in range(args.images)):
        target = src / path.relative_to(full)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, target)
    return src


def _python_for(args, system: str) -> str:
    return args.fastload_python if system == "fastload" else args.peers_python


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _read_argv(args, remote: str, cache: Path, epochs: int) -> list[str]:
    return ["read", "--remote", remote, "--cache", str(cache), "--epochs", str(epochs),
            "--batch-size", str(args.batch_size), "--workers", str(args.workers)]


def _download(server: seaweed.SeaweedServer, prefix: str, dest: Path) -> None:
    """A local copy of what a system wrote (its own format), for the local-disk rate."""
    client = seaweed.s3_client(server.endpoint)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            target = dest / item["Key"][len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(BUCKET, item["Key"], str(target))


# -- phases -------------------------------------------------------------------------------

def phase_convert(args, system, src, env, server, prefix=()) -> dict:
    remote = f"s3://{BUCKET}/{system}"
    if server is not None:  # a retried conversion starts from an empty prefix
        server.delete_prefix(BUCKET, system + "/")
    argv = ["convert", "--src", str(src), "--remote", remote, "--shard-mb", f"{args.shard_mb:g}",
            "--workers", str(args.workers)]
    result = run_row(_python_for(args, system), system, argv, env, prefix=prefix,
                     timeout=args.row_timeout)[0]
    if server is not None:
        objects, size = server.bucket_bytes(BUCKET, system + "/")
        if objects == 0:
            raise RowError(f"{system} convert reported success but s3://{BUCKET}/{system}/ is empty")
        result.update(remote_objects=objects, remote_bytes=size)
    return result


def phase_read_round(args, system, env, work: Path, round_: int) -> dict:
    """One fresh-cache read process: a cold epoch, then ``--warm-epochs`` warm ones."""
    cache = _fresh(work / "cache" / f"{system}-round{round_}")
    return run_row(_python_for(args, system), system,
                   _read_argv(args, f"s3://{BUCKET}/{system}", cache, 1 + args.warm_epochs),
                   env, timeout=args.row_timeout)[0]


def _seen(path: Path) -> tuple[list[int], int]:
    ids, images = [], 0
    for part in sorted(path.parent.glob(path.name + ".rank*")):
        data = json.loads(part.read_text())
        ids += data["ids"]
        images += data.get("images", len(data["ids"]))
    return ids, images


def phase_resume(args, system, env, work: Path, server: seaweed.SeaweedServer, count: int) -> dict:
    """Half an epoch at world size 2 (torchrun, gloo), its state saved; the rest at world size 1
    from that state, same node, same cache folder. The second run talks to the server through
    a zero-delay relay that counts what it downloads."""
    cache = _fresh(work / "cache" / f"{system}-resume")
    base = _fresh(work / "resume" / system)
    base.mkdir(parents=True)
    state, seen_a, seen_b = base / "state", base / "seen-a", base / "seen-b"
    per_rank = -(-count // 2) // args.batch_size // 2  # half of each rank's batches
    common = ["--remote", f"s3://{BUCKET}/{system}", "--cache", str(cache), "--state", str(state),
              "--batch-size", str(args.batch_size), "--workers", str(args.workers)]
    py = _python_for(args, system)
    out: dict = {"first": {"world_size": 2, "batches_per_rank": per_rank}}
    first = run_row(py, system, ["resume", *common, "--seen", str(seen_a), "--batches",
                                 str(per_rank)], env, ranks=2, timeout=args.row_timeout)
    out["first"]["images"] = sum(r["images"] for r in first)
    cache_before = file_sizes(cache)
    port = int(server.endpoint.rsplit(":", 1)[1])
    with slowlink.SlowLink(port, delay_ms=0, rate_mbit=0) as counter:
        env_b = {**env, **seaweed.client_env(counter.endpoint)}
        try:
            second = run_row(py, system, ["resume", *common, "--seen", str(seen_b)], env_b,
                             timeout=args.row_timeout)[0]
        except RowError as error:
            out.update(works=False, error=str(error).splitlines()[0])
            return out
        _up, down = counter.bytes_moved()
    cache_after = file_sizes(cache)
    fetched = sorted(k for k, v in cache_after.items() if cache_before.get(k) != v)
    ids_a, images_a = _seen(seen_a)
    ids_b, images_b = _seen(seen_b)
    out["second"] = {"world_size": 1, "images": images_b, "seconds": second["seconds"],
                     "downloaded_bytes": down, "cache_files_new_or_changed": fetched[:20],
                     "cache_files_new_or_changed_count": len(fetched)}
    out["images_total"] = images_a + images_b
    out["images_expected"] = count
    if ids_a or ids_b:  # the peers' rows return each sample's id
        both = ids_a + ids_b
        out.update(distinct=len(set(both)), duplicates=len(both) - len(set(both)),
                   missing=count - len(set(both)))
        out["works"] = out["missing"] == 0 and out["duplicates"] == 0
    else:
        out["works"] = images_a + images_b == count
    return out


def phase_link(args, system, src, env, work, server) -> dict:
    """The local-disk rate (the peers: their set copied from the bucket; fastload: its own
    local conversion) against the same reads over a cloud-like link (cold cache, then warm)."""
    py = _python_for(args, system)
    epochs = 1 + args.warm_epochs
    local = _fresh(work / "local" / system)
    if system == "fastload":  # its own local set: `fastload convert SRC DIR`, same shard size
        run_row(py, system, ["convert", "--src", str(src), "--remote", str(local), "--shard-mb",
                             f"{args.shard_mb:g}", "--workers", str(args.workers)], env,
                timeout=args.row_timeout)
    else:  # the peers read their own format from a local folder: a copy of the bucket's
        _download(server, system, local)
    out = {"local": run_row(py, system, _read_argv(args, str(local), _fresh(work / "cache" / f"{system}-unused"),
                                                   epochs), env, timeout=args.row_timeout)[0]}
    cache = _fresh(work / "cache" / f"{system}-slow")
    if args.link == "netem":
        ns = slowlink.NetemNamespace(delay_ms=args.delay_ms, rate_mbit=args.rate_mbit).start()
        try:
            with seaweed.SeaweedServer(work / "weed-netns", prefix=ns.prefix,
                                       buckets=[BUCKET]) as ns_server:
                env_ns = {**env, **seaweed.client_env(ns_server.endpoint)}
                out["convert"] = phase_convert(args, system, src, env_ns, None, prefix=ns.prefix)
                out["slow"] = run_row(py, system, _read_argv(args, f"s3://{BUCKET}/{system}", cache, epochs),
                                      env_ns, prefix=ns.prefix, timeout=args.row_timeout)[0]
        finally:
            ns.stop()
    else:
        port = int(server.endpoint.rsplit(":", 1)[1])
        with slowlink.SlowLink(port, delay_ms=args.delay_ms, rate_mbit=args.rate_mbit) as link:
            out["rtt_ms"] = round(slowlink._ping_rtt_ms(link.port), 1)
            env_slow = {**env, **seaweed.client_env(link.endpoint)}
            out["slow"] = run_row(py, system, _read_argv(args, f"s3://{BUCKET}/{system}", cache, epochs),
                                  env_slow, timeout=args.row_timeout)[0]
            out["slow"]["downloaded_bytes"] = link.bytes_moved()[1]
    return out


def _attempt(args, system: str, r: dict, phase: str, call) -> bool:
    """``call()`` into ``r[phase]`` (a read round: appended to ``r["reads"]``), retried
    ``--retries`` times, each failure kept in ``r["failures"]``; False when it never passed
    (``r["error"]`` says why, and the system's later phases are skipped)."""
    for attempt in range(1 + args.retries):
        try:
            result = call()
        except RowError as error:
            r.setdefault("failures", []).append({"phase": phase, "error": str(error)})
            print(f"   {NAMES[system]} {phase} failed (try {attempt + 1}): {error}", flush=True)
            if "no object-storage support yet" in str(error):  # no use trying again
                break
            continue
        if phase.startswith("reads"):
            r.setdefault("reads", []).append(result)
        else:
            r[phase] = result
        print(f"   {NAMES[system]} {phase}: {progress(phase, result)}", flush=True)
        return True
    r["error"] = f"{phase}: {r['failures'][-1]['error']}"
    return False


def run_interleaved(args, systems: list[str], results: dict, save, *, src, env, server, work,
                    count, skip) -> None:
    """Every phase of every system, phase by phase: all convert, then each read round
    for all (each round in a rotated order, so none always goes first), then all resume,
    then the link. A system whose phase fails for good skips its later phases."""
    steps = [("convert", systems, lambda s: partial(phase_convert, args, s, src, env, server))]
    if "reads" not in skip:
        for k in range(args.rounds):
            turn = systems[k % len(systems):] + systems[:k % len(systems)]
            steps.append((f"reads {k + 1}/{args.rounds}", turn,
                          lambda s, k=k: partial(phase_read_round, args, s, env, work, k)))
    if "resume" not in skip:
        steps.append(("resume", systems,
                      lambda s: partial(phase_resume, args, s, env, work, server, count)))
    if "link" not in skip and args.link != "none":
        steps.append(("link", systems,
                      lambda s: partial(phase_link, args, s, src, env, work, server)))
    for phase, turn, make in steps:
        print(f"== {phase}: {', '.join(NAMES[s] for s in turn)}", flush=True)
        for system in turn:
            r = results["systems"][system]
            if "error" not in r:
                _attempt(args, system, r, phase, make(system))
                save()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        merged = render(args.render)
        if args.json:
            Path(args.json).write_text(json.dumps(merged, indent=1))
        print(markdown(merged))
        return 0
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in ROWS]
    if unknown:
        raise SystemExit(f"run.py: unknown --systems {unknown}; choose from {sorted(ROWS)}")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.link == "netem":
        ok, why = slowlink.netem_available()
        if not ok:
            raise SystemExit(f"run.py: --link netem: {why}; use --link proxy")
    t_start = time.perf_counter()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = ensure_images(args, work)
    count = sum(1 for p in src.rglob("*") if p.is_file())
    results: dict = {
        "meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "images": count, "src": str(src),
                 "src_bytes": disk_usage(src)["bytes"], "shard_mb": args.shard_mb,
                 "batch_size": args.batch_size, "workers": args.workers, "rounds": args.rounds,
                 "warm_epochs": args.warm_epochs, "link": args.link, "delay_ms": args.delay_ms,
                 "rate_mbit": args.rate_mbit, "cpus": os.cpu_count(),
                 "loadavg_start": os.getloadavg(), "command": " ".join(sys.argv)},
        "systems": {}}
    json_path = Path(args.json or work / "results.json")
    _LOGS[:] = [work / "logs"]
    with seaweed.SeaweedServer(_fresh(work / "weed"), buckets=[BUCKET]) as server:
        server.create_bucket(BUCKET)
        results["meta"]["endpoint"] = server.endpoint
        env = {**os.environ, **seaweed.client_env(server.endpoint),
               "LITDATA_DISABLE_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}
        results["systems"] = {system: {} for system in systems}
        run_interleaved(args, systems, results,
                        lambda: json_path.write_text(json.dumps(results, indent=1)), src=src,
                        env=env, server=server, work=work, count=count, skip=skip)
    results["meta"]["loadavg_end"] = os.getloadavg()
    results["meta"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    json_path.write_text(json.dumps(results, indent=1))
    table = markdown(results)
    (json_path.with_suffix(".md")).write_text(table + "\n")
    print(table)
    print(f"\n{json_path} ({results['meta']['wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
