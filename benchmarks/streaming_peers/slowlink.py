"""A cloud-like link in front of the S3 server: one-way delay and bandwidth, loopback only.

The issue asks for ``tc qdisc add dev lo root netem delay 20ms rate 1gbit`` in a network
namespace. Where the kernel has ``sch_netem``, :func:`netem_available` says so and ``run.py
--link netem`` uses it. The kernel of the development VM this was written on is built without
it (``CONFIG_NET_SCH_NETEM is not set``; only ``tbf``/``htb`` exist, neither adds delay), so
the default is this proxy: a TCP relay on 127.0.0.1 that delivers every byte ``delay_s`` after
it arrived, in each direction, paced to ``rate_bps`` per direction (shared by all
connections), and that holds a new connection's first bytes for one more round trip (the TCP
handshake the relay answers at once). Only connections made to the relay's port are slowed.
It also counts the bytes each way, which is how ``run.py`` measures what a phase downloaded.

Standalone: ``python slowlink.py UPSTREAM_PORT [--delay-ms 20] [--rate-mbit 1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import subprocess
import threading
import time

_CHUNK = 256 * 1024


class _Pacer:
    """A shared token bucket: :meth:`slot` returns when ``nbytes`` may leave at ``rate``."""

    def __init__(self, rate_bps: float) -> None:
        self.rate = rate_bps / 8.0  # bytes per second
        self.next_free = 0.0

    def departure(self, now: float, nbytes: int) -> float:
        if self.rate <= 0:
            return now
        start = max(now, self.next_free)
        self.next_free = start + nbytes / self.rate
        return self.next_free


class _Relay:
    def __init__(self, upstream_port: int, delay_s: float, rate_bps: float, counters) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.pacers = {"down": _Pacer(rate_bps), "up": _Pacer(rate_bps)}
        self.counters = counters  # multiprocessing Array('q', 2): bytes up, bytes down

    async def _pipe(self, reader, writer, direction: str, gate: float) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        slot = 0 if direction == "up" else 1

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass

        task = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                now = loop.time()
                sent = self.pacers[direction].departure(now, len(data))
                due = max(sent + self.delay_s, gate)
                with self.counters.get_lock():
                    self.counters[slot] += len(data)
                queue.put_nowait((due, data))
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait((0.0, None))
            try:
                await task
            except (ConnectionError, OSError):
                pass

    async def handle(self, client_reader, client_writer) -> None:
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        # SYN, SYN-ACK, then the request's own one-way trip: nothing reaches the server
        # before three one-way delays after connect().
        gate = accepted + 3 * self.delay_s
        up = asyncio.create_task(self._pipe(client_reader, up_writer, "up", gate))
        # The connection lives as long as the server side does. When the server closes (an
        # idle keep-alive timeout), the client's socket is closed too, not half-closed: a
        # pooled HTTP connection left half-open would take the client's next request and
        # never answer it (it would wait out its read timeout).
        await self._pipe(up_reader, client_writer, "down", 0.0)
        up.cancel()
        for w in (up_writer, client_writer):
            w.close()


def _serve(upstream_port: int, delay_s: float, rate_bps: float, counters, ready, port_box) -> None:
    async def main() -> None:
        relay = _Relay(upstream_port, delay_s, rate_bps, counters)
        server = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
        port_box.value = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class SlowLink:
    """The relay in its own process (its CPU is not counted in any row's process tree)."""

    def __init__(self, upstream_port: int, *, delay_ms: float = 20.0, rate_mbit: float = 1000.0):
        self.upstream_port = upstream_port
        self.delay_s = delay_ms / 1000.0
        self.rate_bps = rate_mbit * 1e6
        ctx = multiprocessing.get_context("spawn")
        self.counters = ctx.Array("q", 2)
        self._ready = ctx.Event()
        self._port = ctx.Value("i", 0)
        self._proc = ctx.Process(target=_serve, daemon=True, args=(
            upstream_port, self.delay_s, self.rate_bps, self.counters, self._ready, self._port))
        self.port = 0

    def start(self) -> SlowLink:
        self._proc.start()
        if not self._ready.wait(30):
            raise RuntimeError("slowlink: the relay did not start within 30 s")
        self.port = self._port.value
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bytes_moved(self) -> tuple[int, int]:
        """(bytes client -> server, bytes server -> client) since start."""
        with self.counters.get_lock():
            return int(self.counters[0]), int(self.counters[1])

    def stop(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)

    def __enter__(self) -> SlowLink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def netem_available() -> tuple[bool, str]:
    """Whether ``tc ... netem`` works here, tried in a throwaway network namespace."""
    name = f"peersprobe{int(time.time() * 1000) % 100000}"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        return False, f"cannot create a network namespace ({error})"
    try:
        run = subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                              "root", "netem", "delay", "1ms"], capture_output=True, text=True)
        if run.returncode != 0:
            return False, f"tc netem refused: {run.stderr.strip()} (kernel without sch_netem)"
        return True, "tc netem works in a network namespace"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class NetemNamespace:
    """A network namespace whose own ``lo`` has ``netem delay D rate R``; :attr:`prefix`
    runs a command inside it (server and clients both, so only their traffic is slowed)."""

    def __init__(self, *, delay_ms: float = 20.0, rate_mbit: float = 1000.0,
                 name: str = "peersbench") -> None:
        self.name = name
        self.delay_ms = delay_ms
        self.rate_mbit = rate_mbit
        self.prefix = ["ip", "netns", "exec", name]

    def start(self) -> NetemNamespace:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run([*self.prefix, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run([*self.prefix, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                        f"{self.delay_ms}ms", "rate", f"{self.rate_mbit}mbit"], check=True)
        return self

    def stop(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def _ping_rtt_ms(endpoint_port: int, tries: int = 5) -> float:
    """Median time of a TCP connect + one HTTP HEAD round trip through the relay."""
    import socket
    times = []
    for _ in range(tries):
        t0 = time.perf_counter()
        with socket.create_connection(("127.0.0.1", endpoint_port)) as sock:
            sock.sendall(b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            sock.recv(1)
        times.append((time.perf_counter() - t0) * 1000)
    return sorted(times)[len(times) // 2]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--rate-mbit", type=float, default=1000.0)
    args = parser.parse_args()
    ok, why = netem_available()
    print(f"netem: {why}")
    with SlowLink(args.upstream_port, delay_ms=args.delay_ms, rate_mbit=args.rate_mbit) as link:
        print(f"relay {link.endpoint} -> 127.0.0.1:{args.upstream_port}; "
              f"connect + first response: {_ping_rtt_ms(link.port):.1f} ms", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
