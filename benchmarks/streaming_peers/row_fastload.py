"""fastload row: ``fastload convert SRC s3://… --shard-size MB`` to write,
``fastload.DataLoader("s3://…", transform=…)`` to read (issue 23's API).

Runs in fastload's own venv (``.venv/bin/python``). The endpoint comes from
``AWS_ENDPOINT_URL``, the credentials from the standard AWS variables, the cache folder from
``FASTLOAD_CACHE``; run.py sets them. Without the S3 support merged, every command stops
with one sentence saying so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import peers_common as pc

_MISSING = ("this fastload ({where}) has no object-storage support yet (issue 23: `fastload "
            "convert SRC s3://… --shard-size MB`, `fastload.DataLoader('s3://…')`): {why}. "
            "Merge the S3 reading, shard cache and upload first, then rerun.")


def _fastload_cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from fastload.tools.cli import main; sys.exit(main())"]


def _missing(why: str) -> SystemExit:
    import fastload

    return SystemExit(_MISSING.format(where=os.path.dirname(fastload.__file__), why=why))


def _require_convert_api() -> None:
    run = subprocess.run([*_fastload_cli(), "convert", "-h"], capture_output=True, text=True)
    if "--shard-size" not in run.stdout:
        raise _missing("`fastload convert -h` lists no --shard-size")


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def convert(args) -> dict:
    """Time ``fastload convert`` as the peers' rows time their writers: in this process,
    after the tool's import (Mosaic's row imports ``MDSWriter``, LitData's ``optimize``,
    before the clock starts); a fresh process's whole run (interpreter, imports) is
    reported beside it as ``process_seconds``."""
    remote = _is_remote(args.remote)
    if remote:
        _require_convert_api()
    samples, _classes = pc.image_folder_samples(args.src)
    argv = ["convert", args.src, args.remote, "--no-progress",
            "--workers", str(args.workers), "--shard-size", f"{args.shard_mb:g}",
            *shlex.split(os.environ.get("FASTLOAD_CONVERT_FLAGS", ""))]
    process_seconds = _process_seconds(argv, remote)  # first: it also reads the files once
    from fastload.tools.cli import main as fastload_main

    # In a scratch folder: a fastload without URL support would write a local folder
    # named "s3:" into the current directory (the bug issue 23 names), found below.
    with tempfile.TemporaryDirectory(prefix="fastload-convert-cwd-") as cwd:
        here = os.getcwd()
        os.chdir(cwd)
        try:
            cpu0, t0 = pc.tree_cpu_seconds(), time.perf_counter()
            code = fastload_main(argv)
            seconds = time.perf_counter() - t0
            cpu = pc.tree_cpu_seconds() - cpu0
        finally:
            os.chdir(here)
        stray = [p.name for p in Path(cwd).iterdir()]
    if code != 0:
        raise SystemExit(f"`fastload {shlex.join(argv)}` failed ({code})")
    if remote and stray:
        raise _missing(f"`fastload convert` wrote a local {stray[0]!r} folder instead of uploading")
    return {"images": len(samples), "seconds": round(seconds, 3), "cpu_s": round(cpu, 3),
            "process_seconds": round(process_seconds, 3),
            "command": shlex.join(["fastload", *argv])}


def _process_seconds(argv: list[str], remote: bool) -> float:
    """The same conversion as a user's shell runs it: a fresh process, imports included (to
    a sibling URL new in every run, so that neither run resumes the other's). It runs
    before the timed one, so both find the images in the page cache, as the later peers
    do."""
    target = argv[2].rstrip("/") + f"-process-{os.getpid()}"  # new in every run
    again = [*argv[:2], target, *argv[3:]]
    with tempfile.TemporaryDirectory(prefix="fastload-convert-cwd-") as cwd:
        t0 = time.perf_counter()
        run = subprocess.run([*_fastload_cli(), *again], cwd=cwd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if not remote:
        shutil.rmtree(target, ignore_errors=True)
    if run.returncode != 0:
        raise SystemExit(f"`fastload {shlex.join(again)}` failed ({run.returncode}): "
                         f"{(run.stderr or run.stdout).strip()[-1500:]}")
    return seconds


def _make(args, *, remote: str, cache: str):
    os.environ["FASTLOAD_CACHE"] = cache
    import fastload

    if _is_remote(remote):
        _require_convert_api()  # the same code brings the URL reading
    return fastload.DataLoader(remote, batch_size=args.batch_size, shuffle=True,
                               num_workers=args.workers, persistent_workers=True,
                               seed=args.seed, strict=True, transform=pc.train_transform())


def _preimport() -> None:
    """Import what fastload imports lazily on its first loader (DALI and its torch plugin),
    so that, as for the peers' rows, module imports are not counted as the dataset's setup."""
    import importlib

    import fastload  # noqa: F401
    for name in ("nvidia.dali", "nvidia.dali.fn", "nvidia.dali.math", "nvidia.dali.plugin.pytorch",
                 "fastload.pipelines", "fastload.loader"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def read(args) -> dict:
    _preimport()
    return pc.time_epochs(args, lambda: _make(args, remote=args.remote, cache=args.cache),
                          cache_figures=_is_remote(args.remote))


def resume(args) -> dict:
    import torch

    _preimport()
    rank, world = pc.distributed_rank()
    loader = _make(args, remote=args.remote, cache=args.cache)
    result: dict = {"rank": rank, "world_size": world}
    if args.batches is None:  # the second run: load the state, read the rest
        loader.load_state_dict(torch.load(args.state, weights_only=True))
    figures = pc.time_epoch(loader, batch_size=args.batch_size, max_batches=args.batches)
    result.update(figures)
    if args.batches is not None and rank == 0:  # the README: save it from any rank
        torch.save(loader.state_dict(), args.state)
    # fastload's batches carry no sample ids: the exactly-once check is its tests'
    # (tests/ with DDP); here the counts are compared.
    pc.write_seen(args.seen, [], {"images": figures["images"]})
    pc.distributed_barrier_and_close()
    return result


def main() -> None:
    args = pc.row_parser(__doc__.splitlines()[0]).parse_args()
    pc.preload()
    pc.emit({"convert": convert, "read": read, "resume": resume}[args.command](args))


if __name__ == "__main__":
    main()
