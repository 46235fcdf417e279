"""``fastload verify``: check a fastload LMDB directory against its sidecar files.

Checks, in order: the metadata is complete and supported; ``labels.i32`` holds ``count``
labels, each in ``[0, len(classes))``; the database holds exactly ``count`` records under
keys ``00000000`` ... in order; every record parses as a Datum whose CRC-32 matches
``checksums.crc32`` and whose label matches ``labels.i32``; and a seeded sample of records
(all with ``full=True``) decodes with Pillow to a 3-channel image of the height and width
the Datum states, without damaged JPEG data (libjpeg-turbo's strict decode,
:func:`fastload.data.format.jpeg_damage.jpeg_damage`). A sharded set: :mod:`fastload.data.sets.verify`.
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastload.data.format.constants import (
    CHECKSUM_DTYPE,
    CHECKSUM_FILE,
    DATA_FILE,
    crc32,
    record_key,
)
from fastload.data.format.datum import datum_fields
from fastload.data.format.envs import acquire_env, release_env
from fastload.data.format.jpeg_damage import damage_reason, jpeg_damage
from fastload.data.format.reader import load_labels, load_meta
from fastload.data.format.untrusted import refuse_url
from fastload.utils.checks import check_int


@dataclass
class VerifyReport:
    """What :func:`verify_lmdb` found; ``ok`` is True when ``bad`` is empty."""

    path: Path  # a URL (str) for a database or set read from object storage
    expected: int  # record count the metadata states
    found: int  # records in the database
    checksums_checked: int = 0
    decoded: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)  # (key or file, reason)
    seconds: float = 0.0  # how long the verification took

    @property
    def ok(self) -> bool:
        return not self.bad

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values: ``ok``, ``errors`` (how many problems), then its
        fields, ``path`` as text and each of ``bad`` as ``{"key", "reason"}``."""
        values = dataclasses.asdict(self)
        values["path"] = str(self.path)
        values["bad"] = [{"key": key, "reason": reason} for key, reason in self.bad]
        return {"ok": self.ok, "errors": len(self.bad), **values}

    def summary(self) -> str:
        verdict = "OK" if self.ok else f"FAILED: {len(self.bad)} problem(s)"
        return (f"{verdict}: {self.found}/{self.expected} records, {self.checksums_checked} "
                f"checksums checked, {self.decoded} images decoded")


def _decode_problem(data: memoryview, height: int, width: int, channels: int) -> str | None:
    from PIL import Image

    damage = jpeg_damage(data)  # Pillow decodes damaged JPEG data without an error
    if damage is not None:
        return damage_reason(damage)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            size, bands = image.size, len(image.getbands())
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a finding
        return f"does not decode: {exc}"
    if size != (width, height):
        return f"decodes to {size[1]}x{size[0]} but the Datum says {height}x{width}"
    if bands != 3 or channels != 3:
        return f"decodes to {bands} channel(s) (Datum channels={channels}); expected 3"
    return None


def progress_for(progress: Any, total: int) -> tuple[Any, bool]:
    """``(bar, owned)`` for a verification's ``progress`` argument: True -> a new bar over
    ``total`` records on stderr (tqdm on a terminal, plain lines in a log: owned, closed by
    its maker); False/None -> ``(None, False)``; else the caller's bar (``update(n)``)."""
    if progress is True:
        from fastload.utils.progress import progress as progress_bar

        return progress_bar(total=total, desc="verify", unit="records"), True
    return (progress or None), False


_PROGRESS_EVERY = 1024  # records between progress updates (cheap when it only counts)


def check_sample(sample: int) -> None:
    """Raise ``ValueError`` naming ``sample`` unless it is an int >= 0 (verify's decode sample)."""
    check_int("sample", sample, what="a non-negative integer")


def verify_lmdb(path: str | os.PathLike, full: bool = False, sample: int = 64,
                seed: int = 0, *, storage_options: dict | None = None,
                progress: Any = False, decode: Collection[int] | None = None) -> VerifyReport:
    """Verify the database at ``path``; see the module docstring for what is checked.

    Problems with the records and sidecars are findings in the report, not exceptions.
    ``path`` may be a URL: the database is fetched into the shard cache first, and the
    report names the URL. A sharded set: :func:`~fastload.data.verify_set`.

    Args:
        path: a fastload LMDB directory, or its URL.
        full: decode every record instead of a sample.
        sample: records to decode without ``full``, at least 0 (all of them when the
            database holds fewer).
        seed: seed of the decode sample (the same seed, the same records).
        storage_options: fsspec's options when ``path`` is a URL (credentials,
            ``endpoint_url``).
        progress: True shows the records checked on stderr (a tqdm bar on a terminal, a
            plain line every 30 s otherwise); a tqdm-like object is advanced instead.
        decode: the record numbers to decode, instead of ``sample`` records drawn with
            ``seed`` (:func:`~fastload.data.verify_set` draws one sample over a whole set
            and gives each shard its own); ignored with ``full``; numbers outside
            ``[0, count)`` are ignored.

    Returns:
        The report: record counts, checksums checked, images decoded, and the bad keys or
            files with their reasons (``ok`` when none; ``summary()`` in one line).

    Raises:
        ValueError: ``sample`` is negative or not an int, ``storage_options`` with a local
            path, or the metadata (``fastload.json``) is unusable.
        FileNotFoundError: there is no database at ``path``.
        ImportError: a URL whose fsspec backend is not installed (the ``remote`` extra).
    """
    check_sample(sample)
    from fastload.data.remote.url import locate

    where = locate(path, storage_options, "LMDB directory")
    if not isinstance(where, str):
        from fastload.data.remote.sets import RemoteLMDBReader

        reader = RemoteLMDBReader(where)
        try:
            report = verify_lmdb(reader.path, full=full, sample=sample, seed=seed,
                                 progress=progress, decode=decode)
        finally:
            reader.close()
        report.path = where.url  # type: ignore[assignment]
        return report
    path = where
    refuse_url(path, "LMDB directory")
    start = time.monotonic()
    root = Path(os.path.abspath(path))
    meta = load_meta(root)
    expected = int(meta["count"])
    report = VerifyReport(path=root, expected=expected, found=0)
    bar, owned = progress_for(progress, expected)
    try:
        _verify_records(root, meta, expected, full, sample, seed, report, bar, decode)
    finally:
        if owned:
            bar.close()
    report.seconds = time.monotonic() - start
    return report


def _verify_records(root: Path, meta: dict, expected: int, full: bool, sample: int, seed: int,
                    report: VerifyReport, bar: Any,
                    decode: Collection[int] | None = None) -> None:
    import numpy as np

    checksum_path = root / meta.get("checksum_file", CHECKSUM_FILE)
    try:
        checksums = np.fromfile(checksum_path, dtype=meta.get("checksum_dtype", CHECKSUM_DTYPE))
    except FileNotFoundError:
        checksums = np.zeros(0, dtype=np.uint32)
        report.bad.append((checksum_path.name, f"checksum file {str(checksum_path)!r} is "
                           "missing; restore it, or convert the source again over the database"))
    if len(checksums) != expected and checksum_path.exists():
        report.bad.append((checksum_path.name,
                           f"holds {len(checksums)} checksums for {expected} records"))
    try:
        labels = load_labels(root, meta)  # also checks every label against the class count
    except (FileNotFoundError, ValueError) as exc:
        labels = []
        report.bad.append((meta.get("labels_file", "labels"), str(exc)))
    if full:
        to_decode = set(range(expected))
    elif decode is not None:
        to_decode = {int(i) for i in decode if 0 <= int(i) < expected}
    else:
        to_decode = set(random.Random(seed).sample(range(expected), min(sample, expected)))

    try:
        env, env_key = acquire_env(root)
    except OSError as exc:  # truncated or not LMDB: never map it (see lmdb_meta)
        report.bad.append((DATA_FILE, str(exc)))
        return
    import lmdb

    counted = 0  # records handed to the progress bar
    index = 0
    try:
        with env.begin(buffers=True) as txn:
            for key, value in txn.cursor().iternext(keys=True, values=True):
                if bar is not None and index - counted >= _PROGRESS_EVERY:
                    bar.update(index - counted)
                    counted = index
                key = bytes(key)
                name = key.decode(errors="replace")
                if index >= expected or key != record_key(index):
                    report.bad.append((name, f"unexpected key (expected {record_key(index).decode() if index < expected else 'no more records'})"))
                    index += 1
                    continue
                problem = _check_record(value, index, checksums, labels, to_decode, report)
                if problem:
                    report.bad.append((name, problem))
                index += 1
            report.found = index
    except lmdb.Error as exc:  # LMDB's own structure damaged (a B-tree page): name the file
        report.found = index
        report.bad.append((DATA_FILE, f"LMDB cannot read its pages past record {index} "
                                      f"({exc}); the file is damaged: convert the source again"))
        return
    finally:
        release_env(env_key)
        if bar is not None and report.found > counted:
            bar.update(report.found - counted)
    if report.found < expected:
        report.bad.append(("count", f"database holds {report.found} records; metadata says {expected}"))


def _check_record(value, index, checksums, labels, to_decode, report) -> str | None:
    if index < len(checksums):
        report.checksums_checked += 1
        actual = crc32(value)
        if actual != int(checksums[index]):
            return f"checksum mismatch (stored {int(checksums[index]):08x}, computed {actual:08x})"
    try:
        data, label, height, width, channels, encoded = datum_fields(value)
    except ValueError as exc:
        return f"not a valid Datum: {exc}"
    if index < len(labels) and label != labels[index]:
        return f"label {label} differs from the labels file ({labels[index]})"
    if not encoded:
        return "Datum is not marked encoded"
    if index in to_decode:
        report.decoded += 1
        return _decode_problem(data, height, width, channels)
    return None
