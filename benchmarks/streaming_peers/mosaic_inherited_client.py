"""Why Mosaic Streaming's first cold batch sometimes takes a minute in the peers harness.

    /tmp/peers-venv/bin/python benchmarks/streaming_peers/mosaic_inherited_client.py \\
        --src IMAGEFOLDER --rounds 12

``StreamingDataset`` fetches ``index.json`` in the reading process with an S3 client it keeps;
``StreamingDataLoader`` then forks its workers, which inherit that client and its open
connection. Two workers sending requests down one socket can read each other's responses;
one then waits for a body that never comes, until the download timeout (60 s by default).
This script writes SRC to a fresh SeaweedFS server with ``row_mosaic.py convert``, then runs
``row_mosaic.py read`` (one cold epoch, fresh cache) ``--rounds`` times each way, in turns:
as the harness does, and with the reading process dropping its client before the fork
(``PEERS_MOSAIC_DROP_PARENT_CLIENT``). A read not done within ``--stall-s`` counts as a
stall and is killed; one that fails is counted with its error's last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import seaweed
from row_mosaic import DROP_PARENT_CLIENT

HERE = Path(__file__).resolve().parent
ROW = str(HERE / "row_mosaic.py")


def read_once(env: dict, cache: Path, stall_s: float) -> float | str:
    """The first batch's seconds of one cold read; "stall" (killed) or the error's last line."""
    cmd = [sys.executable, ROW, "read", "--remote", "s3://bench/mosaic", "--cache", str(cache),
           "--epochs", "1", "--batch-size", "64", "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=HERE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=stall_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return "stall"
    if "RESULT " not in out:
        lines = [line for line in err.splitlines() if line.strip()]
        return "error: " + (lines[-1] if lines else f"exit {proc.returncode}")
    return json.loads(out.split("RESULT ", 1)[1])["epochs"][0]["first_batch_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="an ImageFolder (a few hundred images)")
    parser.add_argument("--rounds", type=int, default=12, help="cold reads each way")
    parser.add_argument("--stall-s", type=float, default=15.0)
    parser.add_argument("--shard-mb", type=float, default=8.0)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mosaic-client-"))
    results: dict[str, list] = {"as the harness": [], "client dropped before the fork": []}
    try:
        with seaweed.SeaweedServer(work / "weed", buckets=["bench"]) as server:
            server.create_bucket("bench")
            env = {**os.environ, **seaweed.client_env(server.endpoint)}
            env.pop(DROP_PARENT_CLIENT, None)
            subprocess.run([sys.executable, ROW, "convert", "--src", args.src, "--remote",
                            "s3://bench/mosaic", "--shard-mb", str(args.shard_mb)],
                           env=env, cwd=HERE, check=True, capture_output=True)
            for r in range(args.rounds):
                for way, extra in (("as the harness", {}),
                                   ("client dropped before the fork", {DROP_PARENT_CLIENT: "1"})):
                    first = read_once({**env, **extra}, work / f"cache-{r}-{len(extra)}",
                                      args.stall_s)
                    results[way].append(first)
                    print(f"round {r} {way}: " + (first if isinstance(first, str)
                                                   else f"first batch {first:.2f} s"), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for way, firsts in results.items():
        done = sorted(f for f in firsts if not isinstance(f, str))
        failed = [f for f in firsts if isinstance(f, str)]
        print(f"{way}: {failed.count('stall')} stalls and {len(failed) - failed.count('stall')} "
              f"errors in {len(firsts)} cold reads"
              + (f"; first batch {done[len(done) // 2]:.2f} s median, {done[0]:.2f}-{done[-1]:.2f}"
                 if done else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
