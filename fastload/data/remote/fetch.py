"""Moving files to and from a URL, with retries: the one owner of the retry policy.

A server error, a timeout, a dropped connection or a download shorter than the size the
server lists is retried with exponential backoff (:data:`DEFAULT_RETRY`), then raised as
:class:`RemoteError` naming the URL. A missing object or a refused credential is raised at
once (retrying cannot change it). The backoff's jitter comes from a generator of this
module's own, never the global ``random`` one (this runs in fastload's prefetch threads).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fastload.data.remote.url import RemoteLocation

__all__ = ["DEFAULT_RETRY", "PartialTransfer", "RemoteError", "Retry", "download",
           "download_files", "listing",
           "read_bytes", "read_head", "remove", "retrying", "upload", "upload_files", "write_bytes"]

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a remote operation is tried."""

    attempts: int = 6  # tries in all, the first included
    first_backoff_s: float = 0.25  # wait after the first failure; doubles after each
    max_backoff_s: float = 8.0


DEFAULT_RETRY = Retry()  # waits 0.25 + 0.5 + 1 + 2 + 4 s (plus jitter) before giving up
_JITTER = random.Random()  # seeded from os.urandom; never the global generator
_JITTER_LOCK = threading.Lock()


class RemoteError(OSError):
    """A remote operation failed on every attempt; the message names the URL."""


class PartialTransfer(OSError):
    """A transfer moved fewer bytes than the object holds (a dropped connection): retried."""


# Errors no retry can change: the object is not there, or the credentials are refused.
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
# Backends' own "no usable credentials" errors (botocore, google-auth, azure-identity), by
# name: fastload imports none of those packages.
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                   "DefaultCredentialsError", "ClientAuthenticationError"}
_CREDENTIALS_FIX = ("set the credentials the way the backend reads them (for S3: "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                    "~/.aws/credentials) or pass storage_options")


def retrying(action: Callable[[], T], url: str, what: str, retry: Retry | None = None) -> T:
    """``action()``, tried up to ``retry.attempts`` times; :class:`RemoteError` naming
    ``url`` (and ``what`` was being done) after the last failure."""
    retry = retry or DEFAULT_RETRY
    wait = retry.first_backoff_s
    for attempt in range(1, retry.attempts + 1):
        try:
            return action()
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{url} does not exist ({what}): {exc}") from None
        except PermissionError as exc:
            raise PermissionError(f"{what} {url} was refused ({exc}): {_CREDENTIALS_FIX}") \
                from None
        except _PERMANENT:
            raise
        except Exception as exc:  # noqa: BLE001 - server errors of any backend's own types
            if type(exc).__name__ in _NO_CREDENTIALS:
                raise PermissionError(f"{what} {url} needs credentials ({exc}): "
                                      f"{_CREDENTIALS_FIX}") from None
            if attempt == retry.attempts:
                raise RemoteError(
                    f"{what} {url} failed {retry.attempts} times, the last with "
                    f"{type(exc).__name__}: {exc}; check that the server is reachable and "
                    "rerun (a rerun resumes: what was fetched or uploaded is kept)") from exc
        with _JITTER_LOCK:
            jitter = _JITTER.uniform(0.5, 1.0)
        time.sleep(min(wait, retry.max_backoff_s) * jitter)
        wait *= 2
    raise AssertionError("unreachable")  # pragma: no cover


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

    return retrying(ls, location.url, "listing", retry)


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

    retrying(get, location.url, "downloading", retry)


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

    retrying(get, folder.url, "downloading", retry)


def read_bytes(location: RemoteLocation, size: int, retry: Retry | None = None) -> bytes:
    """The ``size`` bytes (as listed) of the small object ``location``."""
    fs = location.fs()

    def cat() -> bytes:
        data = fs.cat_file(location.path)
        if len(data) != size:
            raise PartialTransfer(f"read {len(data)} of the {size} bytes the server lists")
        return data

    return retrying(cat, location.url, "reading", retry)


def read_head(location: RemoteLocation, length: int, retry: Retry | None = None) -> bytes:
    """The first ``length`` bytes (or fewer, for a shorter object) of ``location``."""
    fs = location.fs()
    return retrying(lambda: fs.cat_file(location.path, start=0, end=length), location.url,
                    "reading", retry)


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

    retrying(put, location.url, "uploading to", retry)


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

    retrying(put, folder.url, "uploading to", retry)


def write_bytes(data: bytes, location: RemoteLocation, retry: Retry | None = None) -> None:
    """Write ``data`` as the object ``location`` (one PUT: atomic on object stores)."""
    fs = location.fs()

    def pipe() -> None:
        fs.pipe_file(location.path, data)
        fs.invalidate_cache(location.path)
        listed = int(fs.info(location.path).get("size") or 0)
        if listed != len(data):
            raise PartialTransfer(f"the server lists {listed} of the {len(data)} bytes written")

    retrying(pipe, location.url, "writing", retry)


def remove(location: RemoteLocation, retry: Retry | None = None) -> None:
    """Delete the object or folder ``location`` (recursively); absent is fine."""
    fs = location.fs()

    def rm() -> None:
        try:
            fs.rm(location.path, recursive=True)
        except FileNotFoundError:
            pass
        fs.invalidate_cache(location.path)

    retrying(rm, location.url, "removing", retry)
