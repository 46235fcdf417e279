"""Which paths are URLs, and the fsspec file system a supported URL names.

A string ``scheme://...`` (two or more scheme characters, so ``C:/`` is a drive) is a URL.
``file://`` URLs are local paths. Any other scheme is read through `fsspec`_ when fsspec
knows it and its backend is installed (``s3://`` needs ``s3fs``, the ``remote`` extra;
``gs://`` needs ``gcsfs``; ``az://`` ``adlfs``); otherwise :func:`locate` refuses it with
one sentence, and it is never read or written as a local folder named ``s3:``.

Credentials and endpoints come from where each backend's own users set them: for S3 the
``AWS_*`` environment variables (``AWS_ENDPOINT_URL`` for an S3-compatible server such as
MinIO or SeaweedFS) and ``~/.aws/config``; anything else as fsspec ``storage_options``
(``{"endpoint_url": ..., "key": ..., "secret": ...}``), as pandas and fsspec take them.

.. _fsspec: https://filesystem-spec.readthedocs.io
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["RemoteLocation", "canonical_url", "is_url", "locate", "url_scheme"]

# Two or more scheme characters (a Windows drive "C:/" is not a URL); one slash after the
# colon as well, since pathlib collapses "s3://b" to "s3:/b"; "a::b://" is fsspec chaining.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)(:/|::)")
_S3 = ("s3", "s3a")
S3_CONNECT_TIMEOUT_S = 5.0  # botocore's connect_timeout unless storage_options set it
S3_READ_TIMEOUT_S = 10.0  # botocore's read_timeout (per read of a response) unless set


def url_scheme(path: object) -> str | None:
    """The scheme of ``path`` when it is a URL (``"s3"``), else None (a local path)."""
    try:
        text = os.fsdecode(path)
    except TypeError:
        return None
    match = _URL.match(text)
    return match.group(1).lower() if match else None


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL fastload reads through fsspec.

    A string ``scheme://...`` with two or more scheme characters (``C:/`` is a drive);
    ``file://`` URLs are local paths. Whether the scheme is supported is not checked here.

    Args:
        path: anything; a str, bytes or ``os.PathLike`` may be a URL, nothing else is.

    Returns:
        True when ``path`` is a ``scheme://`` URL other than ``file://`` (a local path).
    """
    return url_scheme(path) not in (None, "file")


def canonical_url(text: str) -> str:
    """``text`` with its scheme lower-cased and ``://`` after it, as fsspec reads a URL
    (``S3://b/x`` and pathlib's ``s3:/b/x`` are ``s3://b/x``); anything else as given."""
    match = _URL.match(text)
    if match is None or match.group(2) == "::":
        return text
    rest = text[match.end():]
    return f"{match.group(1).lower()}:/{rest if rest.startswith('/') else '/' + rest}"


class RemoteLocation:
    """A folder or object at a URL: its fsspec protocol, path and ``storage_options``.

    Pickles without its file system, which is made once per process on first use (an
    fsspec file system does not survive ``fork``)."""

    def __init__(self, url: str, storage_options: dict | None = None) -> None:
        from fsspec.core import split_protocol, strip_protocol

        self.url = canonical_url(url).rstrip("/")
        protocol, _ = split_protocol(self.url)
        self.protocol = protocol
        self.storage_options = _with_defaults(protocol, dict(storage_options or {}))
        _filesystem_class(protocol, url)  # an unknown scheme or a missing backend, named
        self.path = strip_protocol(self.url).rstrip("/")
        self._shared: dict[str, Any] = {}  # {"fs", "pid"}: one file system for all children

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_shared": {}}

    def __repr__(self) -> str:
        return f"RemoteLocation({self.url!r})"

    def fs(self) -> Any:
        """This process's fsspec file system for the location (its own instance: a change of
        credentials in the environment is seen by the next location made)."""
        shared = self._shared
        if shared.get("pid") != os.getpid():
            import fsspec

            fs = fsspec.filesystem(self.protocol, skip_instance_cache=True,
                                   **self.storage_options)
            if self.protocol in _S3:
                fs.retries = 1  # this instance's own retries off: fastload's are bounded
            shared["fs"], shared["pid"] = fs, os.getpid()
        return shared["fs"]

    def attempt_bound_s(self) -> float | None:
        """The longest one try of a request here can take (None when unknown)."""
        return _s3_attempt_bound(self.storage_options) if self.protocol in _S3 else None

    def child(self, *parts: str) -> RemoteLocation:
        """The location ``parts`` below this one (the same file system object)."""
        other = object.__new__(RemoteLocation)  # not copy.copy: __getstate__ drops the fs
        other.__dict__.update(self.__dict__)
        other.url = "/".join([self.url, *parts])
        other.path = "/".join([self.path, *parts])
        return other


def locate(path: str | os.PathLike, storage_options: dict | None = None,
           what: str = "path") -> RemoteLocation | str:
    """``path`` as a :class:`RemoteLocation` when it is a supported URL, as a local path
    string when it is one (``file://`` URLs included; ``~`` expanded); ``ValueError`` for an unknown scheme,
    ``ImportError`` naming the package when the scheme's fsspec backend is not installed."""
    scheme = url_scheme(path)
    text = os.fsdecode(path)
    if scheme is None:
        if storage_options:
            raise ValueError(f"storage_options apply to URLs only, but {what} {text!r} is a "
                             "local path; drop storage_options or pass a URL")
        return os.path.expanduser(text)  # "~/data" as torchvision's datasets take it
    if scheme == "file":
        return text.split("://", 1)[1] if "://" in text else text[len("file:"):]
    if "::" in text.split("://", 1)[0]:
        raise ValueError(f"{what} {text!r} chains fsspec file systems, but fastload caches "
                         "shards itself; pass the plain URL (for example s3://bucket/set)")
    try:
        import fsspec  # noqa: F401
    except ImportError:
        raise ImportError(f"{what} {text!r} is a URL ({scheme}://), and reading URLs needs "
                          "fsspec, which the [remote] extra installs: pip install "
                          "'fastload-dali[remote]'") from None
    _filesystem_class(scheme, text, what)
    return RemoteLocation(text, storage_options)


def _filesystem_class(protocol: str, text: str = "", what: str = "path"):
    import fsspec

    try:
        return fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise ValueError(f"{what} {text!r} is a URL of a scheme fsspec does not know "
                         f"({protocol}://), so fastload cannot read or write it; pass a local "
                         "path or an s3://, gs://, az://... URL") from None
    except ImportError as exc:
        extra = " (the [remote] extra installs it: pip install 'fastload-dali[remote]')" \
            if protocol in _S3 else ""
        raise ImportError(f"{what} {text!r} is a {protocol}:// URL, whose fsspec backend is "
                          f"not installed: {exc}{extra}") from None


def _with_defaults(protocol: str, options: dict) -> dict:
    """S3: botocore's own retries off unless asked for (fastload retries, with its own
    generator: botocore's backoff draws from the global ``random`` one), and its connect and
    read timeouts ``S3_CONNECT_TIMEOUT_S`` and ``S3_READ_TIMEOUT_S`` unless set (they bound
    each try: see :mod:`fastload.data.remote.fetch`)."""
    if protocol in _S3:
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", {"total_max_attempts": 1})
        config.setdefault("connect_timeout", S3_CONNECT_TIMEOUT_S)
        config.setdefault("read_timeout", S3_READ_TIMEOUT_S)
        options["config_kwargs"] = config
    return options


def _s3_attempt_bound(options: dict) -> float | None:
    """The longest one S3 request can take under ``options``: botocore's connect plus read
    timeout, times its tries (None when the options make it unknowable)."""
    config = options.get("config_kwargs") or {}
    try:
        once = float(config.get("connect_timeout", S3_CONNECT_TIMEOUT_S)) + float(
            config.get("read_timeout", S3_READ_TIMEOUT_S))
        retries = config.get("retries") or {}
        if "total_max_attempts" in retries:
            tries = int(retries["total_max_attempts"])
        elif "max_attempts" in retries:
            tries = int(retries["max_attempts"]) + 1
        else:
            tries = 5  # botocore's own default when "retries" names no count
    except (TypeError, ValueError, AttributeError):
        return None
    return once * max(1, tries)
