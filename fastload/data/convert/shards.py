"""The sharded conversion behind ``convert_folder(..., shards=N[, shard_index=i])``.

Shard ``k`` of ``N`` holds source files ``[k * n // N, (k + 1) * n // N)`` and is an ordinary
fastload LMDB (see :mod:`fastload.data.convert.folder`); the manifest is written once every shard is
finished (:func:`fastload.data.sets.manifest.complete_manifest`). A sharded conversion resumes
like a single one: rerunning the same call after a crash, a kill or a full disk checks and
keeps the finished shards, resumes the partial ones and starts the missing ones.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastload.data.convert.check_batches import CheckBatches
from fastload.data.convert.database import (
    ConvertReport,
    convert_one,
    is_complete,
    stored_nothing,
)
from fastload.data.convert.destination import REPLACEMENT, move_replacement_in, prepare_destination
from fastload.data.convert.dst_lock import (
    lock_destination,
    locked_here,
    set_lock,
    unlock_destination,
)
from fastload.data.convert.read_ahead import ReadAhead
from fastload.data.format.constants import META_FILE
from fastload.data.sets.manifest import (
    LOCK_FILE,
    MANIFEST_FILE,
    SET_LABELS_FILE,
    complete_manifest,
    describe_shards,
    identity_differences,
    load_manifest,
    shard_bounds,
    shard_folders,
    shard_name,
)

__all__ = ["check_set_folder", "claim_shard_count", "convert_shards", "finished_shard",
           "identity_of_shard", "move_set_in", "newest_shard", "remove_shard",
           "shard_differences"]

log = logging.getLogger(__name__)  # which shards are kept: debug records


def convert_shards(samples, dst_path: Path, identity: dict, total_bytes: int, overwrite: bool,
                   run: tuple, shards: int, shard_index: int | None, *,
                   manifest: bool = True) -> ConvertReport:
    """Convert the shards of a set (all, or ``shard_index`` only), then complete the manifest
    if every shard is done (not with ``manifest=False``: a staging folder, whose finished
    shards another thread uploads and removes). The report sums the shards converted by
    this call.

    Like a single database, a rerun of the same call resumes: a finished shard is checked
    (it opens and was made from this source with these options) and kept, a partial one
    resumes, a missing one starts. Which shards this process converts is decided under the
    set's lock, so processes giving another ``shards`` for the same folder are refused."""
    check_set_folder(dst_path, len(samples), shards)
    bounds = shard_bounds(len(samples), shards)
    todo = range(shards) if shard_index is None else [shard_index]
    # an overwritten set stays whole until every new shard is finished (here, or by the
    # processes converting the other shard indexes), then they move in together: a
    # conversion that stops loses nothing
    replace_at_end = overwrite and manifest
    total = ConvertReport(path=dst_path, stored=0, skipped=0, seen=0)
    claimed: list[tuple[int, Path, dict, dict]] = []  # (index, folder, identity, progress)
    checks = CheckBatches(run[0])  # one strict check's threads for every shard (if it runs)
    ahead = None  # the next shard's first records, read while the one before finished
    try:
        with set_lock(dst_path, LOCK_FILE):
            replacing = replace_at_end and (dst_path / MANIFEST_FILE).exists()
            claim_shard_count(dst_path, shards, shard_index, overwrite,
                              keep_until_replaced=replace_at_end)
            for k in todo:
                begin, stop = bounds[k]
                folder = dst_path / shard_name(k, shards)
                shard_identity = identity_of_shard(identity, k, shards, bounds)
                if not overwrite and finished_shard(folder, shard_identity, stop - begin):
                    total.finished_shards.append(k)
                    continue
                claimed.append((k, folder, shard_identity,
                                prepare_destination(folder, shard_identity, overwrite=overwrite)))
        while claimed:
            k, folder, shard_identity, progress_state = claimed[0]
            begin, stop = bounds[k]
            share = total_bytes * (stop - begin) // max(1, len(samples))
            part = ahead.samples if ahead is not None else samples[begin:stop]
            following = None
            if len(claimed) > 1:
                k_next, _, _, state_next = claimed[1]
                following = ReadAhead(samples[slice(*bounds[k_next])], int(state_next["seen"]))
            report = convert_one(part, folder, shard_identity, share, False, run,
                                 progress_state, checks, ahead, following,
                                 move_in=not replace_at_end)
            ahead = following
            claimed.pop(0)
            _add_shard(total, report, begin)
    finally:
        checks.shutdown(cancel_futures=True)
        for _, folder, _, progress_state in claimed:  # claimed, not converted: for a rerun
            unlock_destination(folder)
            if "replacing" in progress_state:
                unlock_destination(Path(progress_state["replacing"]))
    if replacing and shard_index is None and stored_nothing(total.seen, total.stored):
        total.kept_old = True  # every file skipped: the finished set stays as it was
        return total
    if replace_at_end and not move_set_in(
            dst_path, [identity_of_shard(identity, k, shards, bounds) for k in range(shards)],
            [stop - begin for begin, stop in bounds]):
        total.replacing = replacing  # a finished set kept until the other indexes finish
        return total
    total.manifest = complete_manifest(dst_path, shards) if manifest else None
    return total


def newest_shard(folder: Path) -> Path:
    """Where a shard's newest copy is written: its replacement's folder beside a finished
    shard that an overwrite replaces, else the shard's folder."""
    replacement = folder / REPLACEMENT
    return replacement if replacement.is_dir() else folder


def move_set_in(dst_path: Path, identities: list[dict], files: list[int]) -> bool:
    """Replace an overwritten set once every shard's newest copy (:func:`newest_shard`) is
    finished with this conversion's ``identities`` (``files`` source files each) and no
    process writes one: the set's manifest and shards of another count removed (as an
    overwrite removes them), then every finished replacement moved in. Returns False, and
    changes nothing, while a shard is unfinished or written. A crash between leaves no
    manifest, and the rerun converts again.

    Under the set's lock, which every conversion takes to claim a shard: a shard found
    unlocked here stays so until the end (one shard's lock is held at a time: a set may
    have more shards than a process may open files)."""
    shards = len(identities)
    folders = [dst_path / shard_name(k, shards) for k in range(shards)]
    with set_lock(dst_path, LOCK_FILE):
        for folder, identity, count in zip(folders, identities, files, strict=True):
            if not folder.is_dir() or locked_here(folder):  # a thread here converts it
                return False
            try:
                lock_destination(folder)
            except FileExistsError:  # its process still converts it
                return False
            try:
                if not finished_shard(newest_shard(folder), identity, count):
                    return False
            except FileExistsError:  # the set replaced, not yet this shard
                return False
            finally:
                unlock_destination(folder)
        claim_shard_count(dst_path, shards, None, overwrite=True)
        for folder in folders:
            if (folder / REPLACEMENT / META_FILE).exists():
                lock_destination(folder)
                try:
                    move_replacement_in(folder, folder / REPLACEMENT)
                finally:
                    unlock_destination(folder)
    return True


def check_set_folder(dst_path: Path, files: int, shards: int) -> None:
    """Refuse more shards than source files, and a destination holding an unsharded
    database or files that are not a sharded set's; then make the folder."""
    if shards > max(1, files):
        raise ValueError(f"shards={shards} exceeds the {files} source files; pass at "
                         "most one shard per file")
    if (dst_path / META_FILE).exists():
        raise FileExistsError(f"destination {str(dst_path)!r} is an unsharded fastload "
                              "database; write the sharded set to a new folder")
    if dst_path.is_dir():
        foreign = sorted(e.name for e in os.scandir(dst_path) if not e.name.startswith(
            (".", "shard-")) and e.name not in (MANIFEST_FILE, SET_LABELS_FILE))
        if foreign:
            raise FileExistsError(
                f"destination {str(dst_path)!r} holds files that are not part of a sharded "
                f"fastload set ({', '.join(foreign[:3])}); choose a new or empty folder")
    dst_path.mkdir(parents=True, exist_ok=True)


def claim_shard_count(dst_path: Path, shards: int, shard_index: int | None,
                      overwrite: bool, *, keep_until_replaced: bool = False) -> None:
    """Under the set's lock: refuse a folder holding a set of another shard count (or, with
    ``overwrite``, remove that set), and a finished set unless ``overwrite``. With
    ``keep_until_replaced`` an overwritten set stays (its manifest and shards of another
    count too) for the caller to replace at the end."""
    present = shard_folders(dst_path)
    others = sorted({count for count in present.values() if count != shards})
    if others and not overwrite:
        raise FileExistsError(
            f"destination {str(dst_path)!r} holds {describe_shards(dst_path)}; pass "
            f"shards={others[0]} (the same command as that set's) to continue it, or "
            "overwrite=True to replace it")
    manifest = dst_path / MANIFEST_FILE
    if overwrite:
        if not keep_until_replaced:
            manifest.unlink(missing_ok=True)  # first: a set half removed is never complete
            for name, count in present.items():
                if count != shards:  # a set of another shard count is replaced, not mixed in
                    remove_shard(dst_path / name)
    elif manifest.exists():
        try:
            done = load_manifest(dst_path)
        except (OSError, ValueError):
            return  # unusable: completing the set again rewrites it
        if done["num_shards"] == shards:
            what = "" if shard_index is None else f" (shard_index={shard_index} included)"
            raise FileExistsError(
                f"destination {str(dst_path)!r} already holds a finished sharded set "
                f"({done['count']} records in {shards} shards{what}); pass overwrite=True to "
                "replace it")


def identity_of_shard(identity: dict, k: int, shards: int,
                      bounds: list[tuple[int, int]]) -> dict:
    """The identity a conversion's shard ``k`` of ``shards`` records in its sidecar."""
    begin, stop = bounds[k]
    return {**identity, "shard": {"index": k, "count": shards, "source_start": begin,
                                  "source_stop": stop}}


def shard_differences(meta: dict, identity: dict, files: int) -> list[str]:
    """The keys on which a finished shard's sidecar ``meta`` differs from the shard this
    conversion would make (``identity``, from ``files`` source files); [] when it is that."""
    differs = identity_differences(meta, identity)
    info = meta.get("shard") or {}
    if (info.get("source_start"), info.get("source_stop")) != (
            identity["shard"]["source_start"], identity["shard"]["source_stop"]) \
            or meta.get("seen") != files:
        differs.append("source range")
    return differs


def finished_shard(folder: Path, identity: dict, files: int) -> bool:
    """True when ``folder`` holds a finished shard of this conversion, checked (it opens
    with the reader's checks and was made from ``identity``'s source, options and range);
    False when it is unfinished or absent. A finished shard that fails a check is refused."""
    if not is_complete(folder):
        return False
    from fastload.data.format.reader import LMDBReader  # numpy: only for a finished shard

    try:
        reader = LMDBReader(folder)
    except (OSError, ValueError) as exc:
        raise ValueError(f"shard {str(folder)!r} is finished but does not open ({exc}); "
                         "remove that folder and rerun the same command to convert it "
                         "again, or pass overwrite=True to convert every shard again") from None
    meta = reader.meta
    reader.close()
    differs = shard_differences(meta, identity, files)
    if differs:
        raise FileExistsError(
            f"shard {str(folder)!r} is finished, but was converted from another source or "
            f"with other options ({', '.join(differs)} differ); rerun the command that made "
            "it, or pass overwrite=True to convert every shard again")
    log.debug("convert %s: keep (a finished shard of this conversion, checked)", folder)
    return True


def _add_shard(total: ConvertReport, report: ConvertReport, begin: int) -> None:
    total.stored += report.stored
    total.skipped += report.skipped
    total.seen += report.seen
    total.kept += report.kept
    total.reencoded += report.reencoded
    total.errors += [{**e, "index": e["index"] + begin} for e in report.errors]
    if report.resumed and not total.resumed:  # where the set's first unfinished shard was
        total.resumed, total.resumed_from = True, begin + report.resumed_from


def remove_shard(folder: Path) -> None:
    """Delete a shard folder of fastload files (and the replacement an overwrite left in
    it); one holding anything else is refused."""
    from fastload.data.format.constants import OWNED_FILES

    if (folder / REPLACEMENT).is_dir():
        remove_shard(folder / REPLACEMENT)
    foreign = [e.name for e in os.scandir(folder) if e.name not in OWNED_FILES]
    if foreign:
        raise FileExistsError(f"shard folder {str(folder)!r} holds files that are not part of "
                              f"a fastload database ({', '.join(sorted(foreign)[:3])}); remove "
                              "them first")
    for name in sorted(OWNED_FILES, key=lambda n: n != META_FILE):  # not complete, first
        (folder / name).unlink(missing_ok=True)
    folder.rmdir()
