"""Sets of many small real JPEGs for the scale and first-batch benchmarks, written with
fastload's own writer (never kept in the repo: callers write them under a temp folder).

* :func:`small_jpegs`: a few hundred 32-64 px crops of the public-domain photographs
  ``fastload.data.pictures.photos`` reads (real JPEG bytes, quality 90).
* :func:`write_lmdb`: one fastload LMDB of ``count`` records cycling through them, through
  ``prepare_destination`` + ``LMDBWriter`` as ``fastload convert`` writes one (same
  sidecars, the strict-check claim and its attestation under ``$FASTLOAD_KEY_DIR``).
* :func:`write_sharded_set`: a sharded set of ``num_shards`` shards of ``per_shard`` records.
  One shard is written by the writer; the others are copies of its ``data.mdb``,
  ``checksums.crc32``, ``labels.i32`` and ``errors.json`` (every shard holds the same
  records, so the same bytes) with their own ``fastload.json`` naming their index and
  source range, so every check a shard's first read makes (identity, count, checksum-file
  CRC-32, labels) passes as it would on a converted set. The manifest is then written by
  the library (``complete_manifest``, which opens every shard), timed by the caller.
* :func:`write_folder`: an ImageFolder tree of the same JPEGs (for the torch comparison).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

CLASSES = 10
COMMIT_EVERY = 4096  # records per writer batch (a progress record per batch)


def small_jpegs(count: int = 256, seed: int = 0, quality: int = 90) -> list[tuple[bytes, int, int]]:
    """``count`` JPEGs ``(bytes, height, width)``: random 32-64 px crops of real photos."""
    import numpy as np
    from PIL import Image

    from fastload.data.pictures.photos import source_paths

    rng = np.random.default_rng(seed)
    photos = []
    for path in source_paths():
        with Image.open(path) as image:
            photos.append(image.convert("RGB"))
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = (int(v) for v in rng.integers(32, 65, size=2))
        top = int(rng.integers(0, photo.height - h + 1))
        left = int(rng.integers(0, photo.width - w + 1))
        buf = io.BytesIO()
        photo.crop((left, top, left + w, top + h)).save(buf, "JPEG", quality=quality)
        out.append((buf.getvalue(), h, w))
    return out


def _identity(source: str, extra: dict | None = None) -> dict:
    from fastload.data.format.constants import FORMAT_VERSION, JPEG_CHECK_STRICT, META_JPEG_CHECK

    return {"format_version": FORMAT_VERSION, "source": source, "source_kind": "folder",
            "source_fingerprint": "bench-" + source, "classes": [f"c{i}" for i in range(CLASSES)],
            "options": {"max_side": None, "quality": None, "check": "decode"},
            META_JPEG_CHECK: JPEG_CHECK_STRICT, **(extra or {})}


def write_lmdb(dst: Path, count: int, jpegs: list[tuple[bytes, int, int]],
               identity: dict | None = None) -> dict:
    """Write ``count`` records (record ``i``: ``jpegs[i % len]``, label ``i % CLASSES``) as
    one fastload LMDB at ``dst``; returns its ``fastload.json``."""
    from datetime import datetime, timezone

    from fastload.data.convert.destination import prepare_destination
    from fastload.data.format.constants import META_JPEG_ATTESTATION, crc32
    from fastload.data.format.datum import encode_datum
    from fastload.data.format.writer import LMDBWriter
    from fastload.data.sets.attest import attest_database

    identity = identity or _identity(str(dst))
    records = [encode_datum(data, 0, h, w, 3) for data, h, w in jpegs]
    by_label = [[encode_datum(data, label, h, w, 3) for data, h, w in jpegs]
                for label in range(CLASSES)]
    crcs = [[crc32(v) for v in values] for values in by_label]
    total = sum(len(v) for v in records) * count // max(1, len(records))
    progress = prepare_destination(dst, identity, overwrite=True)
    writer = LMDBWriter(dst, identity, progress,
                        map_size=total + total // 4 + (count << 12))
    n = len(jpegs)
    for i in range(count):
        label = i % CLASSES
        writer.add(by_label[label][i % n], crcs[label][i % n], label, "kept")
        if (i + 1) % COMMIT_EVERY == 0:
            writer.commit(i + 1)
    writer.commit(count)
    meta = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    attestation = attest_database(writer.stored, writer.checksums)
    if attestation is not None:
        meta[META_JPEG_ATTESTATION] = attestation
    return writer.finish(meta)


def write_sharded_set(root: Path, num_shards: int, per_shard: int,
                      jpegs: list[tuple[bytes, int, int]]) -> Path:
    """Shard folders of a ``num_shards``-shard set of ``per_shard`` records each in ``root``
    (module docstring); the caller completes the manifest (``complete_manifest``)."""
    from fastload.data.format.constants import (
        CHECKSUM_FILE,
        DATA_FILE,
        ERRORS_FILE,
        LABELS_FILE,
        META_FILE,
    )
    from fastload.data.sets.manifest import shard_name

    root.mkdir(parents=True, exist_ok=True)
    base = _identity(str(root))
    first = root / shard_name(0, num_shards)
    meta = write_lmdb(first, per_shard, jpegs, {
        **base, "shard": {"index": 0, "count": num_shards, "source_start": 0,
                          "source_stop": per_shard}})
    (first / "lock.mdb").unlink(missing_ok=True)
    for k in range(1, num_shards):
        folder = root / shard_name(k, num_shards)
        folder.mkdir()
        # copies: py-lmdb refuses a second environment on one inode in a process, and a
        # file system bounds the hard links to one file (ext4: 65,000)
        for name in (DATA_FILE, CHECKSUM_FILE, LABELS_FILE, ERRORS_FILE):
            shutil.copyfile(first / name, folder / name)
        shard_meta = {**meta, "shard": {"index": k, "count": num_shards,
                                        "source_start": k * per_shard,
                                        "source_stop": (k + 1) * per_shard}}
        with open(folder / META_FILE, "w") as out:  # plain write: 100k fsyncs would dominate
            json.dump(shard_meta, out)
    return root


def write_folder(root: Path, count: int, jpegs: list[tuple[bytes, int, int]]) -> Path:
    """An ImageFolder tree of ``count`` files (file ``i``: ``jpegs[i % len]``, class
    ``i % CLASSES``): the same images as :func:`write_lmdb`'s records."""
    for c in range(CLASSES):
        (root / f"c{c}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        data = jpegs[i % len(jpegs)][0]
        (root / f"c{i % CLASSES}" / f"{i:08d}.jpg").write_bytes(data)
    return root
