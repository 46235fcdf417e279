"""Atomic, durable file writes: a crash leaves the old file or the new one, never half of one.

Used by the LMDB writer (progress records, sidecars) and the sharded set's manifest.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

__all__ = ["start_writeback", "sync_directory", "write_bytes_atomic", "write_json_atomic"]


def write_bytes_atomic(path: Path, payload: bytes, *, durable: bool = True,
                       sync_dir: bool = True) -> None:
    """Write ``payload`` to ``path`` via a temporary file and ``os.replace``.

    ``durable`` fsyncs the file before the rename and (with ``sync_dir``) the folder after.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # honours the umask
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(exc.errno, f"writing {str(path)!r} failed: {exc.strerror}; the disk "
                          "may be full: free space there and rerun the same command to resume "
                          "from the last committed batch") from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable and sync_dir:
        sync_directory(path.parent)


def sync_directory(folder: Path) -> None:
    """fsync a folder, making renames inside it durable."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: Path, obj: dict, *, durable: bool = True,
                      sync_dir: bool = True) -> None:
    payload = json.dumps(obj, indent=1, sort_keys=True).encode() + b"\n"
    write_bytes_atomic(path, payload, durable=durable, sync_dir=sync_dir)



_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range = None


def start_writeback(fd: int | None) -> None:
    """Ask Linux to start writing the database's dirty pages to disk now, without waiting.

    The final fsync then finds most pages already written: disk writes overlap the
    conversion instead of following it. A no-op where ``sync_file_range`` is missing.
    """
    global _sync_file_range
    if fd is None or not sys.platform.startswith("linux"):
        return
    if _sync_file_range is None:
        import ctypes

        try:
            function = ctypes.CDLL(None, use_errno=True).sync_file_range
            function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _sync_file_range = function
        except (OSError, AttributeError):
            _sync_file_range = False
    if _sync_file_range:
        _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
