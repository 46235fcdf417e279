"""What a conversion finds in its destination folder, and what it does about it.

:func:`prepare_destination` locks the folder (``dst_lock``) and decides from what is there:
nothing or an interrupted overwrite's leftovers -> a fresh start; a partial conversion of the
same source and options -> resume from its progress; a finished database -> replaced only
with ``overwrite``; files that are not fastload's -> refused, never touched. A fresh start
writes ``fastload.partial.json`` before the LMDB environment exists (step 1 of the writer's
durability protocol, see ``writer``).

A finished database is replaced by writing its replacement beside it, in the hidden folder
:data:`REPLACEMENT` inside the destination, and moving it in once finished
(:func:`move_replacement_in`): a conversion that stops on the way (a damaged file under
``strict``, Ctrl-C, a full disk) leaves the finished database as it was, and the same
command resumes the replacement.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from fastload.data.convert.dst_lock import lock_destination, unlock_destination
from fastload.data.format.atomic import sync_directory, write_json_atomic
from fastload.data.format.constants import (
    META_FILE,
    OWNED_FILES,
    PARTIAL_FILE,
    STATE_COMPLETE,
    STATE_PARTIAL,
)
from fastload.data.sets.schema import MANIFEST_FILE

__all__ = ["REPLACEMENT", "move_replacement_in", "prepare_destination"]

REPLACEMENT = ".fastload-replacement"  # a finished database's replacement while it is written

log = logging.getLogger(__name__)  # keep, resume or restart: debug records


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _remove_owned(dst: Path) -> None:
    """Delete the fastload files in ``dst``: the completion marker first, the partial last."""
    order = [META_FILE] + [n for n in OWNED_FILES if n not in (META_FILE, PARTIAL_FILE)]
    for name in [*order, PARTIAL_FILE]:
        (dst / name).unlink(missing_ok=True)


def prepare_destination(dst: Path, identity: dict, *, overwrite: bool) -> dict:
    """Make ``dst`` ready for writing and return the progress to resume from.

    ``identity`` (source, fingerprint, options) must equal a partial's to resume it.
    A finished database is replaced only with ``overwrite``: the progress then names the
    folder to write into, ``progress["replacing"]`` (locked too), and
    :func:`move_replacement_in` moves it in once finished. A folder holding anything that is
    not a fastload file is never touched.
    """
    fresh = {"stored": 0, "seen": 0, "skipped": [], "counts": {}}
    if dst.exists() and not dst.is_dir():
        raise FileExistsError(f"destination {str(dst)!r} is a file; pass a new or empty folder")
    dst.mkdir(parents=True, exist_ok=True)
    lock_destination(dst)
    try:
        return _prepare_locked(dst, identity, overwrite, fresh)
    except BaseException:
        unlock_destination(dst)
        raise


def _prepare_locked(dst: Path, identity: dict, overwrite: bool, fresh: dict) -> dict:
    names = {entry.name for entry in os.scandir(dst)}
    foreign = sorted(n for n in names if n not in OWNED_FILES and not n.startswith("."))
    meta = _read_json(dst / META_FILE)
    partial = _read_json(dst / PARTIAL_FILE)
    if MANIFEST_FILE in foreign:
        raise FileExistsError(
            f"destination {str(dst)!r} holds a sharded set ({MANIFEST_FILE}); pass shards=N to "
            "convert into it (with overwrite=True to replace it), or choose a new folder")
    if foreign:
        raise FileExistsError(
            f"destination {str(dst)!r} holds files that are not part of a fastload database "
            f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); choose a new "
            "or empty folder"
        )
    if meta and meta.get("state") == STATE_COMPLETE:
        if not overwrite:
            raise FileExistsError(
                f"destination {str(dst)!r} already holds a finished fastload database "
                f"({meta.get('count')} records); pass overwrite=True to replace it"
            )
        log.debug("convert %s: replace (overwrite=True writes the replacement of a finished "
                  "database of %s records beside it)", dst, meta.get("count"))
        replacement = dst / REPLACEMENT
        if (replacement / META_FILE).exists():  # finished, not moved in: write it again
            _remove_owned(replacement)
        progress = prepare_destination(replacement, identity, overwrite=True)
        return {**progress, "replacing": str(replacement)}
    _remove_replacement(dst)  # a replacement whose database is gone: nothing to replace
    if partial is not None:
        ours = {k: partial.get(k) for k in identity}
        if ours == identity and partial.get("state") == STATE_PARTIAL:
            log.debug("convert %s: resume (a partial of the same source and options: %s "
                      "source files done, %s stored)", dst, partial.get("seen"),
                      partial.get("stored"))
            return {**fresh, **{k: partial[k] for k in fresh if k in partial}, "resumed": True}
        if not overwrite:
            differs = [k for k in identity if partial.get(k) != identity[k]] or ["state"]
            detail = "; ".join(
                f"{k}: partial has {partial.get(k)!r}, now {identity[k]!r}"
                for k in differs if k in identity
            ) or "the partial's progress file is unreadable"
            raise ValueError(
                f"destination {str(dst)!r} holds a partial conversion made from a different "
                f"source or with different options ({detail}); rerun the original command to "
                "finish it, or pass overwrite=True to start over"
            )
        log.debug("convert %s: restart (overwrite=True replaces a partial made from another "
                  "source or with other options)", dst)
        _remove_owned(dst)
    elif names & set(OWNED_FILES):
        log.debug("convert %s: restart (leftovers of an interrupted overwrite)", dst)
        _remove_owned(dst)  # leftovers of an interrupted overwrite: nothing to keep
    else:
        log.debug("convert %s: fresh start", dst)
    # Not flushed: a process crash keeps it, and the first timed flush makes it durable.
    write_json_atomic(dst / PARTIAL_FILE, {"state": STATE_PARTIAL, **identity, **fresh},
                      durable=False)
    return fresh


def _remove_replacement(dst: Path) -> None:
    replacement = dst / REPLACEMENT
    if replacement.is_dir():
        _remove_owned(replacement)
        try:
            replacement.rmdir()
        except OSError:  # something not ours in it: left as found
            pass


def move_replacement_in(dst: Path, replacement: Path) -> None:
    """Move the finished database in ``replacement`` over ``dst``'s. ``dst``'s completion
    marker goes first and the new one comes last: a crash between leaves leftovers that a
    rerun starts over from, never a mix of the two called finished."""
    (dst / META_FILE).unlink()
    sync_directory(dst)
    for name in OWNED_FILES:
        if name in (META_FILE, PARTIAL_FILE):
            continue
        if (replacement / name).exists():
            os.replace(replacement / name, dst / name)
        else:
            (dst / name).unlink(missing_ok=True)
    (dst / PARTIAL_FILE).unlink(missing_ok=True)
    os.replace(replacement / META_FILE, dst / META_FILE)
    sync_directory(dst)
    _remove_replacement(dst)
