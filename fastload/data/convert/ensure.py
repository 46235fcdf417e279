"""Convert if missing or stale: the one helper that keeps an LMDB cache of an image folder fresh.

A finished database at ``dst`` is reused only when its metadata says it was made from the same
source (path and fingerprint: every relative path, label, size and mtime), that it has seen as
many images as the source holds now, and with the same ``max_side``. Otherwise it is converted
again (``overwrite=True``); a partial conversion of the same source is resumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from fastload.data.format.constants import META_FILE

__all__ = ["ensure_lmdb", "lmdb_staleness"]


def lmdb_staleness(src: str | os.PathLike, dst: str | os.PathLike,
                   max_side: int | None = None) -> str | None:
    """Why ``dst`` is not a fresh conversion of ``src`` with ``max_side`` (one phrase), or
    ``None`` when it is."""
    from fastload.data.convert.folder import is_complete
    from fastload.data.convert.source_list import list_source

    dst = Path(dst)
    if not is_complete(dst):
        return "missing"
    with open(dst / META_FILE, encoding="utf-8") as handle:
        meta = json.load(handle)
    source = list_source(src)
    root = str(source.root if source.kind == "folder" else Path(os.path.abspath(src)))
    if meta.get("source") != root:
        return f"made from {meta.get('source')!r}, not {root!r}"
    if meta.get("seen") != len(source.samples):
        return f"holds {meta.get('seen')} source images, the source now {len(source.samples)}"
    if (meta.get("options") or {}).get("max_side") != max_side:
        return f"made with max_side={(meta.get('options') or {}).get('max_side')!r}, not {max_side!r}"
    if meta.get("source_fingerprint") != source.fingerprint()[0]:
        return "the source's files changed since it was converted"
    return None


def ensure_lmdb(src: str | os.PathLike, dst: str | os.PathLike, *, max_side: int | None = None,
                workers: int | None = None, progress: bool = False,
                log: Callable[[str], None] | None = None) -> bool:
    """Make ``dst`` a fresh conversion of ``src`` (see module docstring).

    A finished ``dst`` made from the same source (path and fingerprint), holding as many
    images as the source now and with the same ``max_side``, is kept; otherwise ``src`` is
    converted again with :func:`~fastload.data.convert_folder` (``overwrite=True``), and a
    partial conversion of the same source is resumed.

    Args:
        src: the source, as :func:`~fastload.data.convert_folder` takes it (a local path).
        dst: the LMDB directory to keep fresh (a local path).
        max_side: re-encode images whose long side exceeds this (None: keep every JPEG's
            bytes); a ``dst`` made with another value is stale.
        workers: conversion processes (default: all CPU cores).
        progress: show a progress bar on stderr while converting.
        log: gets one line per conversion (what is converted and why); None: silent.

    Returns:
        True when it converted, False when ``dst`` was already fresh.

    Raises:
        ValueError: ``src`` or ``dst`` is a URL, or ``src`` is not a kind of source
            :func:`~fastload.data.list_source` reads.
        FileNotFoundError: ``src`` does not exist or holds no images.
        ConvertError: the conversion stopped early.
    """
    from fastload.data.convert.folder import convert_folder
    from fastload.data.format.untrusted import refuse_url

    refuse_url(src, "source")
    refuse_url(dst, "destination")
    reason = lmdb_staleness(src, dst, max_side)
    if reason is None:
        return False
    options = f" (max_side={max_side})" if max_side else ""
    if reason == "missing":
        if log is not None:
            log(f"converting {src} -> {dst}{options}")
        convert_folder(src, dst, workers=workers, max_side=max_side, progress=progress)
    else:
        if log is not None:
            log(f"{dst} is stale ({reason}); converting {src} again{options}")
        convert_folder(src, dst, workers=workers, max_side=max_side, progress=progress,
                       overwrite=True)
    return True
