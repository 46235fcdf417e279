"""Whether a set's ``"jpeg_check": "strict"`` claim may be trusted on this machine.

A set says its JPEGs passed the strict decode at conversion, and the loader then skips
its own check of each record. A set made elsewhere (downloaded, copied from a colleague,
read from a bucket) or edited since makes the same claim in plain JSON, so the claim is
trusted only with an *attestation*: an HMAC-SHA256, under a key that only this user on
this machine holds, over the claim and what pins the records' bytes:

* a database (``fastload.json``): its record count and the SHA-256 of its
  ``checksums.crc32`` (each record's CRC-32, checked at every read);
* a sharded set (``fastload-set.json``): its count and each shard's path, range, count
  and the CRC-32 of its ``checksums.crc32`` (checked at the shard's first read).

Conversion writes the attestation when the strict check ran (``check="decode"``) and, for
a manifest, only when every shard's own attestation verifies. Any set whose attestation
is missing or does not verify with this key (made under another key, its claim or checksums
edited) gets the loader's strict check of each record at its first read, as a set
converted with ``check="markers"`` does. The key is ``attest.key`` (32 random bytes, mode
0600, in a 0700 folder) in ``$FASTLOAD_KEY_DIR``, else ``$XDG_CONFIG_HOME/fastload``,
else ``~/.config/fastload``; it is created by the first conversion and only read by the
loader. A key file that others can read, or that another user owns, is not used.

The attestation tells a set converted here from anything else; it is not a signature
against someone who can rewrite the set's files on purpose (CRC-32s can be forged).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import warnings
from array import array
from pathlib import Path

from fastload.data.format.constants import (
    CHECKSUM_DTYPE,
    JPEG_CHECK_STRICT,
    META_JPEG_ATTESTATION,
    META_JPEG_CHECK,
    little_endian_bytes,
)

__all__ = ["KEY_DIR_ENV", "KEY_FILE", "attest_database", "attest_manifest", "key_dir",
           "trusted_jpeg_check"]

KEY_DIR_ENV = "FASTLOAD_KEY_DIR"
KEY_FILE = "attest.key"
KEY_BYTES = 32
_SCHEME = "hmac-sha256-v1:"


def key_dir() -> Path:
    """``$FASTLOAD_KEY_DIR``, else ``$XDG_CONFIG_HOME/fastload``, else ``~/.config/fastload``."""
    if os.environ.get(KEY_DIR_ENV):
        return Path(os.environ[KEY_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "fastload"


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` when it is this user's private regular file of the right size."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077
                or info.st_uid != os.geteuid() or info.st_size != KEY_BYTES):
            return None
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None


def _create_key(folder: Path) -> bytes:
    """This user's key, made in ``folder`` when there is none (``OSError`` when it cannot be):
    written to a private temporary file, then linked into place, so processes converting at
    once agree on one key."""
    path = folder / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return key
    if path.exists() or path.is_symlink():
        raise PermissionError(f"{str(path)!r} is not a private key file of this user (mode "
                              "0600, 32 bytes): remove it to have a new one made")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = folder / f".{KEY_FILE}.{os.getpid()}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(part, path)
    except FileExistsError:
        pass  # another process made it first: use that one
    finally:
        part.unlink()
    key = _read_key(path)
    if key is None:
        raise PermissionError(f"{str(path)!r} could not be made a private key file")
    return key


def _sign(key: bytes, subject: dict) -> str:
    message = json.dumps(subject, sort_keys=True, separators=(",", ":")).encode()
    return _SCHEME + hmac.new(key, message, hashlib.sha256).hexdigest()


def _database_subject(count: int, checksums) -> dict:
    return {"claim": {META_JPEG_CHECK: JPEG_CHECK_STRICT}, "kind": "database",
            "count": int(count),
            "checksums_sha256": hashlib.sha256(_checksum_bytes(checksums)).hexdigest()}


def _checksum_bytes(checksums) -> bytes:
    """The CRC-32s as ``checksums.crc32`` holds them (little-endian uint32). The writer's
    ``array('I')`` needs no numpy: a conversion that imports numpy also starts OpenBLAS's
    threads, which spin on a core for about 0.1 s (benchmarks/NOTES.md C24)."""
    if isinstance(checksums, array) and checksums.itemsize == 4:
        return little_endian_bytes(checksums)
    import numpy as np

    return np.asarray(checksums, dtype=np.uint32).astype(CHECKSUM_DTYPE).tobytes()


def _manifest_subject(manifest: dict, shards=None) -> dict:
    if shards is not None:  # a reader's checked entries (its meta has no shards list)
        shards = shards.attested_rows()
    else:
        shards = [[entry["path"], entry["count"], entry["start"], entry["stop"],
                   entry["checksum_file_crc32"]] for entry in manifest["shards"]]
    return {"claim": {META_JPEG_CHECK: JPEG_CHECK_STRICT}, "kind": "set",
            "count": manifest["count"], "shards": shards}


def _conversion_key() -> bytes | None:
    """The key to attest with, made if needed; None (with a warning saying what it costs and
    the fix) when there is none to be had."""
    folder = key_dir()
    try:
        return _create_key(folder)
    except OSError as exc:
        warnings.warn(
            f"fastload cannot use its key in {str(folder)!r} ({exc}), so this set is written "
            "without the attestation that lets the loader trust its strict JPEG check: the "
            "loader will check each record at its first read. Set "
            f"{KEY_DIR_ENV} to a folder of yours that fastload may write", UserWarning,
            stacklevel=3)
        return None


def attest_database(count: int, checksums) -> str | None:
    """The attestation of a strictly checked database of ``count`` records with these
    CRC-32s (``checksums.crc32``'s values), or None when no key can be had (warned)."""
    key = _conversion_key()
    return None if key is None else _sign(key, _database_subject(count, checksums))


def attest_manifest(manifest: dict) -> str | None:
    """The attestation of a sharded set's ``manifest`` (its shard entries and count), or
    None when no key can be had (warned)."""
    key = _conversion_key()
    return None if key is None else _sign(key, _manifest_subject(manifest))


def trusted_jpeg_check(meta: dict, checksums=None, *, shards=None) -> bool:
    """True when ``meta`` (a database's sidecar, with its records' ``checksums``, or a sharded
    set's manifest) claims the strict JPEG check and its attestation verifies with this
    user's key; False otherwise (no claim, no key, made elsewhere, edited). A reader's
    manifest keeps no ``shards`` list: pass its checked entries as ``shards``
    (:attr:`~fastload.data.sets.shards.ShardedReader.entries`)."""
    from fastload.data.format.constants import jpeg_checked
    from fastload.data.sets.schema import MANIFEST_FORMAT

    attestation = meta.get(META_JPEG_ATTESTATION)
    if not jpeg_checked(meta) or not isinstance(attestation, str):
        return False
    key = _read_key(key_dir() / KEY_FILE)
    if key is None:
        return False
    try:
        if meta.get("format") == MANIFEST_FORMAT:
            subject = _manifest_subject(meta, shards)
        elif checksums is not None and len(checksums) == meta.get("count"):
            subject = _database_subject(meta["count"], checksums)
        else:
            return False
    except (KeyError, TypeError, ValueError):
        return False
    return hmac.compare_digest(_sign(key, subject), attestation)
