"""Image data on disk: the fastload LMDB format, sharded sets, conversion into them, sets at
URLs, and generated pictures. What ``fastload convert`` writes, ``fastload verify`` checks and
``fastload.DataLoader`` reads.

This module is the package's face: the names below are its public API (the rest of the
library and users import them from here); they load lazily (PEP 562), so ``import
fastload.data`` imports neither LMDB nor Pillow. Layout, by job:

- ``format/``: one LMDB directory: Caffe ``Datum`` records (datum), constants and sidecar
  names, the reader and writer, atomic writes, LMDB's own meta pages, the labels file, JPEG
  header and damage checks, ``LMDBDataset``, and verify of one LMDB (:func:`verify_lmdb`);
- ``sets/``: sharded sets: the manifest and its schema, N shards read as one set
  (:func:`open_reader`), verify of a set (:func:`verify_set`), whether a set's strict-check
  claim is trusted on this machine (attest);
- ``convert/``: image sources in (folders, file lists, tars, parquet, datasets folders,
  JSONL: ``convert/sources/``), a database or set out (:func:`convert_folder`), resumable,
  one conversion per destination; :func:`ensure_lmdb` converts when missing or stale;
- ``remote/``: sets at ``s3://``, ``gs://``... URLs through a bounded local shard cache
  (:func:`open_any` opens a path or a URL);
- ``pictures/``: generated ImageFolder trees for tests, benches and the demo (synthetic
  JPEGs, crops of public-domain photographs).

Imports only ``fastload.utils`` (and fsspec, lazily, for URLs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload.utils.lazy import lazy_exports

# exported name -> (module relative to this package, name in it); no exported name is also
# a sub-module's name, which the import system would set on the package first
_EXPORTS = {
    # format/
    "CorruptRecord": (".format.reader", "CorruptRecord"),
    "Datum": (".format.datum", "Datum"),
    "LMDBDataset": (".format.dataset", "LMDBDataset"),
    "LMDBReader": (".format.reader", "LMDBReader"),
    "decode_datum": (".format.datum", "decode_datum"),
    "encode_datum": (".format.datum", "encode_datum"),
    "verify_lmdb": (".format.verify", "verify_lmdb"),
    # sets/
    "ShardedReader": (".sets.shards", "ShardedReader"),
    "is_sharded_set": (".sets.manifest", "is_sharded_set"),
    "load_manifest": (".sets.manifest", "load_manifest"),
    "open_reader": (".sets.shards", "open_reader"),
    "verify_set": (".sets.verify", "verify_set"),
    # convert/
    "ConvertError": (".convert.database", "ConvertError"),
    "convert_folder": (".convert.folder", "convert_folder"),
    "ensure_lmdb": (".convert.ensure", "ensure_lmdb"),
    "is_complete": (".convert.database", "is_complete"),
    "list_source": (".convert.source_list", "list_source"),
    # remote/
    "is_url": (".remote", "is_url"),
    "open_any": (".remote", "open_any"),
    # pictures/
    "photo_tree": (".pictures.photos", "photo_tree"),
    "synthesize": (".pictures.synth", "synthesize"),
}

# the same names as _EXPORTS, listed for readers and linters (tests/project/test_imports.py)
__all__ = ["ConvertError", "CorruptRecord", "Datum", "LMDBDataset", "LMDBReader",
           "ShardedReader", "convert_folder", "decode_datum", "encode_datum", "ensure_lmdb",
           "is_complete", "is_sharded_set", "is_url", "list_source", "load_manifest",
           "open_any", "open_reader", "photo_tree", "synthesize", "verify_lmdb", "verify_set"]

if TYPE_CHECKING:
    from .convert.database import ConvertError, is_complete
    from .convert.ensure import ensure_lmdb
    from .convert.folder import convert_folder
    from .convert.source_list import list_source
    from .format.dataset import LMDBDataset
    from .format.datum import Datum, decode_datum, encode_datum
    from .format.reader import CorruptRecord, LMDBReader
    from .format.verify import verify_lmdb
    from .pictures.photos import photo_tree
    from .pictures.synth import synthesize
    from .remote import is_url, open_any
    from .sets.manifest import is_sharded_set, load_manifest
    from .sets.shards import ShardedReader, open_reader
    from .sets.verify import verify_set


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

