"""Moving files to and from a URL, with retries: the one owner of the retry policy.

Only what a retry can change is retried: a network or server error (a connection refused,
reset or dropped, a timeout, an HTTP 5xx, throttling) or a download shorter than the size
the server lists, with exponential backoff (:data:`DEFAULT_RETRY`), then raised as
:class:`RemoteError` naming the URL. Anything else is raised at once with its own fix: a
missing object, refused credentials, a ``TypeError`` from the backend (a ``storage_options``
key it does not take), a full cache disk, any other local error.

The whole of it is bounded in time: a try starts only while it can end within the retry's
``budget_s`` (30 s), counting the longest a try can take, which the location knows (for S3:
botocore's connect and read timeouts times its own tries; fastload turns s3fs's and
botocore's own retries off unless ``storage_options`` sets them). A server that accepts
connections and never answers so fails within 30 s by default; ``storage_options``'
``config_kwargs`` (``connect_timeout``, ``read_timeout``, ``retries``) change the tries, and
a try longer than the budget is still made once. The backoff's jitter comes from a
generator of this module's own, never the global ``random`` one (this runs in fastload's
prefetch threads).
"""

from __future__ import annotations

import errno
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fastload.data.remote.url import RemoteLocation

__all__ = ["DEFAULT_RETRY", "PartialTransfer", "RemoteError", "Retry", "copies_objects",
           "copy", "download", "download_files", "is_transient", "listing", "read_bytes",
           "read_head", "remove", "retrying", "upload", "upload_files", "write_bytes"]

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a remote operation is tried."""

    attempts: int = 6  # tries in all, the first included
    first_backoff_s: float = 0.25  # wait after the first failure; doubles after each
    max_backoff_s: float = 8.0
    budget_s: float = 30.0  # no try starts unless it can end within this, from the first


DEFAULT_RETRY = Retry()  # waits 0.25 + 0.5 + 1 + 2 + 4 s (plus jitter), 30 s at most in all
_JITTER = random.Random()  # seeded from os.urandom; never the global generator
_JITTER_LOCK = threading.Lock()

log = logging.getLogger(__name__)  # each try, backoff and give-up: debug records


class RemoteError(OSError):
    """A remote operation failed on every attempt; the message names the URL."""


class PartialTransfer(OSError):
    """A transfer moved fewer bytes than the object holds (a dropped connection): retried."""


# Backends' own "no usable credentials" errors (botocore, google-auth, azure-identity), by
# name: fastload imports none of those packages.
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                   "DefaultCredentialsError", "ClientAuthenticationError"}
_CREDENTIALS_FIX = ("set the credentials the way the backend reads them (for S3: "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                    "~/.aws/credentials) or pass storage_options")
# Network errors of the backends (botocore, aiohttp, urllib3, http.client, fsspec, azure,
# google-auth), by class name anywhere in the error's type hierarchy.
_NETWORK = {"HTTPClientError", "EndpointConnectionError", "ConnectionClosedError",
            "ReadTimeoutError", "ConnectTimeoutError", "ResponseStreamingError",
            "IncompleteReadError", "IncompleteRead", "ResponseParserError",
            "ClientConnectionError", "ClientPayloadError", "ServerDisconnectedError",
            "ServerTimeoutError", "ProtocolError", "FSTimeoutError", "ServiceRequestError",
            "ServiceResponseError", "TransportError"}
_NETWORK_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT,
                   errno.EPIPE, errno.ENETDOWN, errno.ENETUNREACH, errno.ENETRESET,
                   errno.EHOSTDOWN, errno.EHOSTUNREACH}
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
              "TooManyRequests", "TooManyRequestsException", "RequestTimeout",
              "RequestTimeoutException", "InternalError", "ServiceUnavailable",
              "ProvisionedThroughputExceededException"}
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _status(exc: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and error code a backend's error carries, where it carries one."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        meta = response.get("ResponseMetadata") or {}
        code = (response.get("Error") or {}).get("Code")
        status = meta.get("HTTPStatusCode")
        return (status if isinstance(status, int) else None), code
    for name in ("status_code", "status", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value, None
    return None, None


def is_transient(exc: BaseException) -> bool:
    """Whether a retry may change ``exc``: a network or server error (module docstring)."""
    for link in _chain(exc):
        if isinstance(link, (PartialTransfer, ConnectionError, TimeoutError)):
            return True
        if isinstance(link, OSError) and link.errno in _NETWORK_ERRNOS:
            return True
        if {cls.__name__ for cls in type(link).__mro__} & _NETWORK:
            return True
        status, code = _status(link)
        if (status is not None and (status >= 500 or status == 429)) or code in _THROTTLED:
            return True
    return False


def _permanent(exc: Exception, url: str, what: str) -> Exception:
    """The error to raise at once for the non-transient ``exc`` (module docstring)."""
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return OSError(exc.errno, f"{what} {url} stopped: the cache disk is full: free space "
                       f"or lower cache_bytes ({exc})")
    if isinstance(exc, FileNotFoundError) and exc.filename is None:
        return FileNotFoundError(f"{url} does not exist ({what}): {exc}")
    if isinstance(exc, PermissionError) and exc.filename is None:  # the server's refusal
        return PermissionError(f"{what} {url} was refused ({exc}): {_CREDENTIALS_FIX}")
    if {cls.__name__ for cls in type(exc).__mro__} & _NO_CREDENTIALS:
        return PermissionError(f"{what} {url} needs credentials ({exc}): {_CREDENTIALS_FIX}")
    if isinstance(exc, TypeError):
        return TypeError(f"{what} {url} failed: its file system did not take an argument "
                         f"({exc}); check the keys of storage_options against the backend's "
                         "arguments (for S3: s3fs.S3FileSystem's)")
    if isinstance(exc, OSError) and exc.filename is not None:
        return exc  # a local error (a folder, a permission): its own message names the file
    return RemoteError(f"{what} {url} failed with {type(exc).__name__}: {exc}; this is not a "
                       "network or server error, so it was not retried")


def retrying(action: Callable[[], T], url: str, what: str, retry: Retry | None = None, *,
             attempt_s: float | None = None) -> T:
    """``action()``, tried while its errors are transient (:func:`is_transient`), up to
    ``retry.attempts`` times and while a try of at most ``attempt_s`` seconds ends within
    ``retry.budget_s``; :class:`RemoteError` naming ``url`` (and ``what`` was being done)
    after the last failure; a permanent error at once, with its own fix."""
    retry = retry or DEFAULT_RETRY
    wait = retry.first_backoff_s
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        log.debug("%s %s: try %d of %d", what, url, attempt, retry.attempts)
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - server errors of any backend's own types
            if not is_transient(exc):
                log.debug("%s %s: %s is not transient: not retried", what, url,
                          type(exc).__name__)
                error = _permanent(exc, url, what)
                if error is exc:
                    raise
                raise error from exc
            with _JITTER_LOCK:
                pause = min(wait, retry.max_backoff_s) * _JITTER.uniform(0.5, 1.0)
            elapsed = time.monotonic() - start
            if attempt >= retry.attempts or (
                    elapsed + pause + (attempt_s or 0.0) > retry.budget_s):
                log.debug("%s %s: giving up after %d tries in %.1f s (%s: %s)", what, url,
                          attempt, elapsed, type(exc).__name__, exc)
                raise RemoteError(
                    f"{what} {url} failed {attempt} times in {elapsed:.1f} s (the retries' "
                    f"bound: {retry.attempts} tries within {retry.budget_s:.0f} s), the last "
                    f"with {type(exc).__name__}: {exc}; check that the server is reachable "
                    "and rerun (a rerun resumes: what was fetched or uploaded is kept)") \
                    from exc
            log.debug("%s %s: try %d failed (%s: %s); retrying in %.2f s", what, url, attempt,
                      type(exc).__name__, exc, pause)
        time.sleep(pause)
        wait *= 2


def listing(location: RemoteLocation, retry: Retry | None = None, *,
            folders: bool = False) -> dict[str, int]:
    """``{name: size}`` of the files (``folders``: the sub-folders, size 0) directly in the
    folder ``location``, fresh (the file system's listing cache is dropped first); an empty
    dict when there is no such folder."""
    fs = location.fs()
    kind = "directory" if folders else "file"

    def ls() -> dict[str, int]:
        fs.invalidate_cache(location.path)
        try:
            entries = fs.ls(location.path, detail=True)
        except FileNotFoundError:
            return {}
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in entries if entry.get("type") == kind}

    return retrying(ls, location.url, "listing", retry, attempt_s=location.attempt_bound_s())


def download(location: RemoteLocation, local: Path, size: int,
             retry: Retry | None = None) -> None:
    """Copy the object ``location`` (of ``size`` bytes, as listed) to the local file
    ``local``; a shorter or longer copy is a :class:`PartialTransfer`, fetched again."""
    fs = location.fs()

    def get() -> None:
        fs.get_file(location.path, str(local))
        got = local.stat().st_size
        if got != size:
            raise PartialTransfer(f"downloaded {got} of the {size} bytes the server lists")

    retrying(get, location.url, "downloading", retry, attempt_s=location.attempt_bound_s())


def download_files(folder: RemoteLocation, files: dict[str, int], local: Path,
                   retry: Retry | None = None) -> None:
    """Copy the objects ``files`` (``{name: listed size}``) of the remote ``folder`` into
    the local folder ``local``, concurrently where the backend can (one request each, in
    one call); a copy of another size is a :class:`PartialTransfer`, all fetched again."""
    fs = folder.fs()
    names = sorted(files)

    def get() -> None:
        fs.get([folder.child(name).path for name in names],
               [str(local / name) for name in names])
        for name in names:
            got = (local / name).stat().st_size if (local / name).exists() else -1
            if got != files[name]:
                raise PartialTransfer(f"{name}: downloaded {got} of the {files[name]} bytes "
                                      "the server lists")

    retrying(get, folder.url, "downloading", retry, attempt_s=folder.attempt_bound_s())


def read_bytes(location: RemoteLocation, size: int, retry: Retry | None = None) -> bytes:
    """The ``size`` bytes (as listed) of the small object ``location``."""
    fs = location.fs()

    def cat() -> bytes:
        data = fs.cat_file(location.path)
        if len(data) != size:
            raise PartialTransfer(f"read {len(data)} of the {size} bytes the server lists")
        return data

    return retrying(cat, location.url, "reading", retry, attempt_s=location.attempt_bound_s())


def read_head(location: RemoteLocation, length: int, retry: Retry | None = None) -> bytes:
    """The first ``length`` bytes (or fewer, for a shorter object) of ``location``."""
    fs = location.fs()
    return retrying(lambda: fs.cat_file(location.path, start=0, end=length), location.url,
                    "reading", retry, attempt_s=location.attempt_bound_s())


def upload(local: Path, location: RemoteLocation, retry: Retry | None = None) -> None:
    """Copy the local file ``local`` to ``location``, then check the size the server lists
    (a short object is uploaded again)."""
    fs = location.fs()
    size = local.stat().st_size

    def put() -> None:
        fs.put_file(str(local), location.path)
        fs.invalidate_cache(location.path)
        listed = int(fs.info(location.path).get("size") or 0)
        if listed != size:
            raise PartialTransfer(f"the server lists {listed} of the {size} bytes uploaded")

    retrying(put, location.url, "uploading to", retry, attempt_s=location.attempt_bound_s())


def upload_files(local: Path, names: list[str], folder: RemoteLocation,
                 retry: Retry | None = None) -> None:
    """Copy the local files ``names`` of the folder ``local`` into the remote ``folder``,
    concurrently where the backend can (one request each, in one call), then check the
    sizes one listing of ``folder`` gives (a short or missing object: all uploaded again)."""
    fs = folder.fs()
    sizes = {name: (local / name).stat().st_size for name in names}

    def put() -> None:
        fs.put([str(local / name) for name in names],
               [folder.child(name).path for name in names])
        fs.invalidate_cache(folder.path)
        listed = {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                  for entry in fs.ls(folder.path, detail=True) if entry.get("type") == "file"}
        for name in names:
            if listed.get(name) != sizes[name]:
                raise PartialTransfer(f"{name}: the server lists {listed.get(name)} of the "
                                      f"{sizes[name]} bytes uploaded")

    retrying(put, folder.url, "uploading to", retry, attempt_s=folder.attempt_bound_s())


def write_bytes(data: bytes, location: RemoteLocation, retry: Retry | None = None) -> None:
    """Write ``data`` as the object ``location`` (one PUT: atomic on object stores)."""
    fs = location.fs()

    def pipe() -> None:
        fs.pipe_file(location.path, data)
        fs.invalidate_cache(location.path)
        listed = int(fs.info(location.path).get("size") or 0)
        if listed != len(data):
            raise PartialTransfer(f"the server lists {listed} of the {len(data)} bytes written")

    retrying(pipe, location.url, "writing", retry, attempt_s=location.attempt_bound_s())


def copies_objects(location: RemoteLocation, source: RemoteLocation, size: int) -> bool:
    """Whether the file system of ``location`` copies an object itself (fsspec's ``cp_file``:
    S3, GCS, Azure, memory...; not FTP or HTTP): the object ``source`` (``size`` bytes) is
    copied to a scratch name in ``location``, then removed."""
    probe = location.child(".fastload-copy-check")
    try:
        copy(source, probe, size)
    except RemoteError as exc:
        if isinstance(exc.__cause__, NotImplementedError):
            return False
        raise
    remove(probe)
    return True


def copy(source: RemoteLocation, location: RemoteLocation, size: int,
         retry: Retry | None = None) -> None:
    """Copy the object ``source`` (of ``size`` bytes, as listed) to ``location`` of the same
    file system, on the server where the backend can (S3's CopyObject, in parts above 5 GB),
    then check the size the server lists (a short copy is made again)."""
    fs = location.fs()

    def cp() -> None:
        fs.copy(source.path, location.path)
        fs.invalidate_cache(location.path)
        listed = int(fs.info(location.path).get("size") or 0)
        if listed != size:
            raise PartialTransfer(f"the server lists {listed} of the {size} bytes copied")

    retrying(cp, location.url, "copying to", retry, attempt_s=location.attempt_bound_s())


def remove(location: RemoteLocation, retry: Retry | None = None) -> None:
    """Delete the object or folder ``location`` (recursively); absent is fine."""
    fs = location.fs()

    def rm() -> None:
        try:
            fs.rm(location.path, recursive=True)
        except FileNotFoundError:
            pass
        fs.invalidate_cache(location.path)

    retrying(rm, location.url, "removing", retry, attempt_s=location.attempt_bound_s())
