"""``convert`` to a URL: each shard is written in a local staging folder by the sharded
conversion (:mod:`fastload.data.convert.shards`), uploaded as soon as it is finished, then
removed locally; the manifest is uploaded last, once every shard is there.

A shard's files go up with its ``fastload.json`` last (removed first when a shard is
uploaded again), so a remote shard whose sidecar says complete has every file. A rerun of
the same command resumes: a shard already uploaded intact is skipped (its sidecar names
this conversion's source, options and range; its files have the sizes that sidecar and
LMDB's meta pages imply, and the sizes and checksum file of the staged copy when there is
one); a shard finished in staging but not uploaded is uploaded; the rest are converted
(resuming a partial one). With ``shard_index``, N processes or machines each convert and
upload one shard; whichever finds every shard uploaded writes the manifest (from the
shards' sidecars, fetched: the same manifest a local conversion writes).

An overwrite here replaces the set in place; :mod:`fastload.data.remote.replace` converts
and uploads the new set beside a finished one and moves it in once whole, so that a
conversion that stops leaves the finished set readable.

Shard ``k`` uploads in a thread while shard ``k + 1`` converts (:data:`UPLOADS_AHEAD`
finished shards at most wait or upload, so staging holds at most that many plus the one
converting); the manifest waits for every upload to have succeeded, and a failed upload
stops the conversion at the next shard with its error. The sidecars of the shards
uploaded here are kept in memory for the manifest instead of being fetched back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import fastload.data.remote.fetch as fetch
from fastload.data.convert.database import FORK_LOCK, ConvertReport
from fastload.data.convert.destination import REPLACEMENT
from fastload.data.convert.dst_lock import remove_lone_lock
from fastload.data.convert.shards import (
    convert_shards,
    finished_shard,
    identity_of_shard,
    shard_differences,
)
from fastload.data.format.constants import (
    CHECKSUM_FILE,
    DATA_FILE,
    ERRORS_FILE,
    LABELS_DTYPE,
    LABELS_FILE,
    META_FILE,
    STATE_COMPLETE,
    crc32,
)
from fastload.data.format.limits import MAX_META_BYTES
from fastload.data.format.lmdb_meta import HEAD_BYTES, meta_from_head
from fastload.data.format.reader import load_checksums, load_labels, load_meta
from fastload.data.remote.cache import default_cache_dir, set_key
from fastload.data.remote.sets import endpoint_of
from fastload.data.remote.url import RemoteLocation
from fastload.data.sets.manifest import (
    LOCK_FILE,
    MANIFEST_FILE,
    SET_LABELS_FILE,
    build_manifest,
    shard_bounds,
    shard_count_of,
    shard_name,
)

__all__ = ["claim_url_set", "clear_staging", "complete_url_set", "convert_to_url",
           "default_staging", "remove_other_counts", "shard_uploaded", "staging_folder",
           "staging_path", "upload_shard"]

UPLOAD_ORDER = (DATA_FILE, CHECKSUM_FILE, LABELS_FILE, ERRORS_FILE, META_FILE)  # sidecar last
UPLOADS_AHEAD = 2  # finished shards waiting or uploading while the next one converts


def default_staging(location: RemoteLocation) -> Path:
    """Where shards bound for ``location`` are written first: the cache's ``staging/``."""
    return default_cache_dir() / "staging" / set_key(location.url, endpoint_of(location))


def staging_path(location: RemoteLocation, staging: str | os.PathLike | None) -> Path:
    """``staging`` (absolute), else :func:`default_staging`."""
    return Path(os.path.abspath(staging)) if staging is not None else default_staging(location)


def staging_folder(location: RemoteLocation, staging: str | os.PathLike | None) -> Path:
    """:func:`staging_path`, made if missing."""
    folder = staging_path(location, staging)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def clear_staging(location: RemoteLocation, staging: str | os.PathLike | None) -> None:
    """Once the set at ``location`` is complete: remove what its conversion left in the staging
    folder (the set's lock file) and, where it is the default one (the cache's, fastload's
    own), the folder. Left as it is while anything else is in it or another process holds
    the lock."""
    folder = staging_path(location, staging)
    if remove_lone_lock(folder, LOCK_FILE) and staging is None:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


class _Sidecars:
    """A shard's sidecars (no ``data.mdb``), the reader :func:`build_manifest` needs."""

    def __init__(self, folder: Path, *, in_memory: bool = False) -> None:
        self.meta = load_meta(folder)
        self.targets = load_labels(folder, self.meta)
        self.checksums = load_checksums(folder, self.meta)
        if in_memory:  # a copy, not a map of the file: the folder is removed next
            import numpy as np

            self.targets = np.array(self.targets, dtype=LABELS_DTYPE, copy=True)

    def __len__(self) -> int:
        return int(self.meta["count"])


class _Uploads:
    """Finished shards' uploads in one thread, behind the conversion: at most ``ahead``
    waiting or running. After a failure no further upload starts; the first failure is
    raised by the next :meth:`submit` or by :meth:`wait`."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self.pending: deque[Future] = deque()
        self.pool: ThreadPoolExecutor | None = None
        self.failed = False

    def submit(self, fn, *args) -> None:
        self._reap(self.ahead - 1)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="fastload-upload")
        self.pending.append(self.pool.submit(self._run, fn, args))

    def _run(self, fn, args) -> None:
        if self.failed:  # an earlier shard's upload failed: the conversion stops
            return
        try:
            fn(*args)
        except BaseException:
            self.failed = True
            raise

    def wait(self) -> None:
        """Return once every upload has succeeded; raise the first that failed."""
        self._reap(0)

    def _reap(self, keep: int) -> None:
        for future in self.pending:
            if future.done() and future.exception() is not None:
                future.result()  # raises it
        while self.pending and (len(self.pending) > keep or self.pending[0].done()):
            self.pending.popleft().result()

    def close(self) -> None:
        """Cancel the uploads not started, wait for the one running (its shard stays in
        staging until it is up, so a rerun uploads it again if it did not finish)."""
        if self.pool is not None:
            self.failed = self.failed or bool(self.pending)  # stopping early: start no more
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def convert_to_url(samples, location: RemoteLocation, identity: dict, total_bytes: int,
                   overwrite: bool, run: tuple, shards: int, shard_index: int | None,
                   staging: Path | None = None) -> ConvertReport:
    """Convert and upload the shards of a set at ``location`` (all, or ``shard_index``);
    then, if every shard is uploaded, the set's labels and manifest (module docstring).
    The report sums the shards converted here; ``finished_shards`` lists those found
    already uploaded (skipped) or finished in staging (uploaded without converting).

    ``overwrite`` replaces the set's shards in place, its manifest removed first;
    :func:`fastload.data.remote.replace.convert_replacing` keeps a finished set whole
    instead where it can."""
    given_staging, staging = staging, staging_folder(location, staging)
    present = claim_url_set(location, shards, overwrite)
    bounds = shard_bounds(len(samples), shards)
    total = ConvertReport(path=location.url, stored=0, skipped=0, seen=0)  # type: ignore[arg-type]
    intact: set[int] = set()
    kept: dict[int, _Sidecars] = {}  # the sidecars of the shards uploaded here
    uploads = _Uploads(UPLOADS_AHEAD)
    try:
        for k in range(shards) if shard_index is None else [shard_index]:
            name = shard_name(k, shards)
            remote, staged = location.child(name), staging / name
            shard_identity = identity_of_shard(identity, k, shards, bounds)
            files = bounds[k][1] - bounds[k][0]
            # a shard with no folder at the start has nothing uploaded: no request for it
            listed = fetch.listing(remote) if name in present else {}
            if not overwrite and shard_uploaded(remote, shard_identity, files, staged, listed):
                total.finished_shards.append(k)
                intact.add(k)
                continue
            if overwrite or not finished_shard(staged, shard_identity, files):
                for name_ in (MANIFEST_FILE, SET_LABELS_FILE):  # staging is never a set
                    (staging / name_).unlink(missing_ok=True)
                report = convert_shards(samples, staging, identity, total_bytes, overwrite,
                                        run, shards, k, manifest=False)
                _add(total, report)
            else:
                total.finished_shards.append(k)
            uploads.submit(_upload_and_remove, k, staged, remote, META_FILE in listed, kept)
        uploads.wait()
    finally:
        uploads.close()
    intact.update(kept)
    total.manifest = complete_url_set(location, staging, shards, identity, bounds, intact, kept)
    if total.manifest is not None:
        clear_staging(location, given_staging)
    return total


def _upload_and_remove(k: int, staged: Path, remote: RemoteLocation, sidecar_there: bool,
                       kept: dict[int, _Sidecars]) -> None:
    """The upload thread's work for shard ``k``: upload it, keep its sidecars in
    ``kept``, then remove its staged folder (renamed out of the set's names first)."""
    upload_shard(staged, remote, sidecar_there)
    kept[k] = _Sidecars(staged, in_memory=True)
    gone = staged.with_name(f".uploaded-{staged.name}")
    shutil.rmtree(gone, ignore_errors=True)
    os.replace(staged, gone)
    shutil.rmtree(gone)


def claim_url_set(location: RemoteLocation, shards: int, overwrite: bool) -> set[str]:
    """Refuse a URL holding a finished set or shards of another count (unless
    ``overwrite``, which removes them, and the manifest, first). Returns the names of
    the folders of this count's shards found there (none were uploaded elsewhere)."""
    files = fetch.listing(location)
    folders = fetch.listing(location, folders=True)
    if overwrite and REPLACEMENT in folders:  # an overwrite's that stopped: not moved in
        fetch.remove(location.child(REPLACEMENT))
    others = sorted({count for count in map(shard_count_of, folders) if count is not None}
                    - {shards})
    if MANIFEST_FILE in files:
        if not overwrite:
            raise FileExistsError(
                f"destination {location.url} already holds a finished sharded set; pass "
                "overwrite=True to replace it")
        fetch.remove(location.child(MANIFEST_FILE))
    if others:
        if not overwrite:
            raise FileExistsError(
                f"destination {location.url} holds the shards of a {others[0]}-shard set; pass "
                f"shards={others[0]} (the same command as that set's) to continue it, or "
                "overwrite=True to replace it")
        remove_other_counts(location, folders, shards)
    return {name for name in folders if shard_count_of(name) == shards}


def remove_other_counts(location: RemoteLocation, folders: Iterable[str], shards: int) -> None:
    """Remove the shard folders among ``folders`` (names in ``location``) of a shard count
    other than ``shards``: a set of another count is replaced, not mixed in."""
    for name in folders:
        if shard_count_of(name) not in (None, shards):
            fetch.remove(location.child(name))


def shard_uploaded(remote: RemoteLocation, identity: dict, files: int, staged: Path | None,
                   listed: dict[str, int] | None = None) -> bool:
    """True when ``remote`` holds this conversion's shard intact (module docstring); a
    finished remote shard of another conversion is refused. ``staged``: the local copy
    it must match when that folder holds one (None: no such check); ``listed``:
    ``remote``'s listing when the caller just made it."""
    if listed is None:
        listed = fetch.listing(remote)
    if any(name not in listed for name in (META_FILE, DATA_FILE, CHECKSUM_FILE, LABELS_FILE)):
        return False
    if listed[META_FILE] > MAX_META_BYTES:
        return False
    try:
        meta = json.loads(fetch.read_bytes(remote.child(META_FILE), listed[META_FILE]))
    except ValueError:
        return False
    if not isinstance(meta, dict) or meta.get("state") != STATE_COMPLETE:
        return False
    differs = shard_differences(meta, identity, files)
    if differs:
        raise FileExistsError(
            f"shard {remote.url} is finished, but was converted from another source or with "
            f"other options ({', '.join(differs)} differ); rerun the command that made it, "
            "or pass overwrite=True to convert every shard again")
    count = meta.get("count")
    if not isinstance(count, int) or listed[CHECKSUM_FILE] != 4 * count \
            or listed[LABELS_FILE] != 4 * count:
        return False
    lmdb = meta_from_head(fetch.read_head(remote.child(DATA_FILE), HEAD_BYTES))
    if lmdb is None or lmdb.entries != count or listed[DATA_FILE] < lmdb.needed_bytes:
        return False
    if staged is not None and (staged / META_FILE).is_file():  # the staged copy: the same sizes and checksum file
        for name in (DATA_FILE, CHECKSUM_FILE, LABELS_FILE):
            if (staged / name).stat().st_size != listed[name]:
                return False
        remote_sums = fetch.read_bytes(remote.child(CHECKSUM_FILE), listed[CHECKSUM_FILE])
        if crc32(remote_sums) != crc32((staged / CHECKSUM_FILE).read_bytes()):
            return False
    return True


def upload_shard(staged: Path, remote: RemoteLocation, sidecar_there: bool = True) -> None:
    """Upload a finished staged shard: its sidecar removed first (when ``sidecar_there``:
    the listing just made showed one), its other files together, the sidecar last once
    they are all there at their sizes. Each request holds :data:`FORK_LOCK` (this runs
    beside the conversion, which may fork)."""
    if sidecar_there:
        with FORK_LOCK:
            fetch.remove(remote.child(META_FILE))
    names = [name for name in UPLOAD_ORDER[:-1] if (staged / name).is_file()]
    with FORK_LOCK:
        fetch.upload_files(staged, names, remote)
    with FORK_LOCK:
        fetch.upload(staged / META_FILE, remote.child(META_FILE))


def complete_url_set(location: RemoteLocation, staging: Path, shards: int, identity: dict,
              bounds: list[tuple[int, int]], intact: set[int],
              kept: dict[int, _Sidecars]) -> dict | None:
    """Upload the set's labels and manifest when every shard is uploaded (checked for the
    ones this call did not handle); None while some are not. ``kept``: the sidecars of the
    shards this call uploaded (the others' are fetched)."""
    for k in range(shards):
        if k not in intact and not shard_uploaded(
                location.child(shard_name(k, shards)),
                identity_of_shard(identity, k, shards, bounds),
                bounds[k][1] - bounds[k][0], staging / shard_name(k, shards)):
            return None
    build = staging / ".manifest"
    shutil.rmtree(build, ignore_errors=True)

    def open_shard(k: int, name: str) -> _Sidecars:
        if k in kept:
            return kept[k]
        folder = build / name
        folder.mkdir(parents=True)
        remote = location.child(name)
        listed = fetch.listing(remote)
        fetch.download_files(remote, {file: listed[file] for file in (
            META_FILE, CHECKSUM_FILE, LABELS_FILE)}, folder)
        return _Sidecars(folder)

    try:
        manifest, labels = build_manifest(build, shards, open_shard)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    fetch.write_bytes(labels.astype(LABELS_DTYPE).tobytes(), location.child(SET_LABELS_FILE))
    payload = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    fetch.write_bytes(payload, location.child(MANIFEST_FILE))
    return manifest


def _add(total: ConvertReport, report: ConvertReport) -> None:
    total.stored += report.stored
    total.skipped += report.skipped
    total.seen += report.seen
    total.kept += report.kept
    total.reencoded += report.reencoded
    total.errors += report.errors
    total.finished_shards += report.finished_shards
    if report.resumed and not total.resumed:
        total.resumed, total.resumed_from = True, report.resumed_from
