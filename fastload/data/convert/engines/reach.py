"""Whether a cluster's address answers at all, asked before an engine is started on it: Ray
retries a refused address for ever, Spark's JVM for over a minute and Dask's client for 30 s,
each without fastload's advice; one TCP connection says at once."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

__all__ = ["REACH_TIMEOUT_S", "check_reachable", "host_ports"]

REACH_TIMEOUT_S = 10.0  # a connection not made in this long: no cluster answers there


def host_ports(address: str, schemes: tuple[str, ...]) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of ``address`` (``host:port``, or ``scheme://h1:p1,h2:p2``
    for a scheme in ``schemes``); [] for any other form (``auto``, ``local[4]``, ``yarn``),
    which the engine resolves itself."""
    text = address.strip()
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if scheme.lower() not in schemes:
            return []
        text = rest
    pairs = []
    for part in text.split("/", 1)[0].split(","):
        try:
            parsed = urlsplit(f"//{part}")
            port = parsed.port
        except ValueError:  # not host:port (local[4], a bracketed name that is no address)
            return []
        if parsed.hostname is None or port is None:
            return []
        pairs.append((parsed.hostname, port))
    return pairs


def check_reachable(engine: str, address: str, schemes: tuple[str, ...],
                    timeout: float = REACH_TIMEOUT_S) -> None:
    """Raise ``ConnectionError`` naming ``address`` when none of its hosts accepts a TCP
    connection within ``timeout`` seconds."""
    pairs = host_ports(address, schemes)
    errors = []
    for host, port in pairs:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if errors:
        raise ConnectionError(
            f"no {engine} cluster answers at engine_address={address!r} ({'; '.join(errors)}); "
            f"start the cluster, or pass the address it prints, or leave the address out to "
            f"run a local {engine} on this machine")
