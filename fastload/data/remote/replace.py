"""An overwrite of a finished set at a URL by one caller (``fastload convert URL --overwrite``
in one call, or an engine's driver): the new set is converted and uploaded beside the old
one, under ``URL/.fastload-replacement/``, then moved in once whole
(:func:`move_url_set_in`: the old manifest removed first, each shard copied over the old one
on the server, the new manifest last). A conversion that stops leaves the finished set
readable; one stopped while moving in is finished by the same command
(:func:`finish_stopped_move`). Where the file system cannot copy an object itself, or shards
are converted one index a call, the caller replaces in place
(:mod:`fastload.data.remote.upload`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import fastload.data.remote.fetch as fetch
from fastload.data.convert.database import ConvertReport, stored_nothing
from fastload.data.convert.destination import REPLACEMENT
from fastload.data.convert.shards import identity_of_shard
from fastload.data.remote.upload import (
    UPLOAD_ORDER,
    convert_to_url,
    remove_other_counts,
    shard_uploaded,
)
from fastload.data.remote.url import RemoteLocation
from fastload.data.sets.manifest import MANIFEST_FILE, SET_LABELS_FILE, shard_bounds, shard_name

__all__ = ["convert_replacing", "finish_stopped_move", "finished_url_set", "manifest_object",
           "move_url_set_in", "replace_url_set", "whole_replacement"]


def convert_replacing(samples, location: RemoteLocation, identity: dict, total_bytes: int,
                      overwrite: bool, run: tuple, shards: int, shard_index: int | None,
                      staging: Path | None = None) -> ConvertReport:
    """:func:`~fastload.data.remote.upload.convert_to_url` (the same arguments), where an
    overwrite of every shard in one call keeps a finished set whole until its replacement
    is (:func:`replace_url_set`)."""
    if overwrite and shard_index is None:
        replaced = replace_url_set(
            location, identity, shard_bounds(len(samples), shards),
            lambda replacement: convert_to_url(samples, replacement, identity, total_bytes,
                                               True, run, shards, None, staging))
        if replaced is not None:
            return replaced
    return convert_to_url(samples, location, identity, total_bytes, overwrite, run, shards,
                          shard_index, staging)


def manifest_object(location: RemoteLocation) -> tuple[RemoteLocation, int]:
    """The manifest of the set at ``location`` and its size, as listed."""
    return location.child(MANIFEST_FILE), fetch.listing(location)[MANIFEST_FILE]


def finished_url_set(location: RemoteLocation) -> bool:
    """Whether ``location`` holds a set's manifest (its last file: the set is finished)."""
    return MANIFEST_FILE in fetch.listing(location)


def replace_url_set(location: RemoteLocation, identity: dict, bounds: list[tuple[int, int]],
                    convert: Callable[[RemoteLocation], ConvertReport]) -> ConvertReport | None:
    """An overwrite of the set at ``location`` by one caller (a call of every shard, or an
    engine's driver): ``convert(replacement)`` converts the whole new set at
    ``location``'s ``REPLACEMENT`` (overwriting what is there), which then moves in
    (:func:`move_url_set_in`); a whole replacement an overwrite left is moved in without
    converting (:func:`finish_stopped_move`). None where the set is to be replaced in
    place: none finished there, or a file system that cannot copy an object itself."""
    shards = len(bounds)
    replacement = location.child(REPLACEMENT)
    if whole_replacement(replacement, identity, bounds):
        return finish_stopped_move(location, replacement, shards)
    listed = fetch.listing(location)
    if MANIFEST_FILE not in listed or not fetch.copies_objects(
            location, location.child(MANIFEST_FILE), listed[MANIFEST_FILE]):
        return None
    fetch.remove(replacement.child(MANIFEST_FILE))  # another conversion's, never moved in
    total = convert(replacement)
    total.path = location.url  # type: ignore[assignment]
    if stored_nothing(total.seen, total.stored):
        # every file skipped: the finished set stays as it was, and the new one (its shards'
        # errors.json) is no whole replacement for a rerun to move in
        fetch.remove(replacement.child(MANIFEST_FILE))
        total.kept_old = True
        return total
    move_url_set_in(location, replacement, shards)
    return total


def whole_replacement(replacement: RemoteLocation, identity: dict,
                       bounds: list[tuple[int, int]]) -> bool:
    """Whether ``replacement`` holds this conversion's set whole (its manifest, every shard
    uploaded intact with this identity): an overwrite that stopped while moving it in."""
    if not finished_url_set(replacement):
        return False
    shards = len(bounds)
    try:
        return all(shard_uploaded(replacement.child(shard_name(k, shards)),
                                  identity_of_shard(identity, k, shards, bounds), stop - begin,
                                  None) for k, (begin, stop) in enumerate(bounds))
    except FileExistsError:  # another conversion's
        return False


def finish_stopped_move(location: RemoteLocation, replacement: RemoteLocation,
                        shards: int) -> ConvertReport:
    """Move in the whole replacement an overwrite left (:func:`whole_replacement`; only
    removed where it stopped after the manifest was copied); the report of a rerun that finds
    every shard done: none converted, all finished before."""
    manifest = fetch.read_bytes(*manifest_object(replacement))
    listed = fetch.listing(location)
    if MANIFEST_FILE in listed and fetch.read_bytes(
            location.child(MANIFEST_FILE), listed[MANIFEST_FILE]) == manifest:
        fetch.remove(replacement)  # stopped after the manifest's copy
    else:
        move_url_set_in(location, replacement, shards)
    total = ConvertReport(path=location.url, stored=0, skipped=0, seen=0,  # type: ignore[arg-type]
                          finished_shards=list(range(shards)))
    total.manifest = json.loads(manifest)
    return total


def move_url_set_in(location: RemoteLocation, replacement: RemoteLocation, shards: int) -> None:
    """Replace the set at ``location`` by the finished set at ``replacement``: its manifest
    first (a set half replaced is never finished) and shards of another count removed, each
    shard copied over the old one with its sidecar last (on the server where the backend
    can), then the labels and the manifest last; ``replacement`` removed after. A crash
    between leaves no manifest, and the same command finishes the move
    (:func:`finish_stopped_move`)."""
    fetch.remove(location.child(MANIFEST_FILE))
    remove_other_counts(location, fetch.listing(location, folders=True), shards)
    for k in range(shards):
        name = shard_name(k, shards)
        source, target = replacement.child(name), location.child(name)
        listed = fetch.listing(source)
        fetch.remove(target)  # the old shard's sidecar goes with it: never a mix called finished
        for file in UPLOAD_ORDER:  # the sidecar last
            if file in listed:
                fetch.copy(source.child(file), target.child(file), listed[file])
    listed = fetch.listing(replacement)
    for file in (SET_LABELS_FILE, MANIFEST_FILE):  # the manifest last
        fetch.copy(replacement.child(file), location.child(file), listed[file])
    fetch.remove(replacement)
