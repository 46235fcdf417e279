"""Sets at a URL (``s3://``, ``gs://``, ``az://``... through fsspec): read through a local
shard cache, written by uploading finished shards.

url (which strings are URLs, the file system each names), fetch (transfers, retried while
a retry can help, bounded in time), cache (the bounded, shared, locked shard cache; its
names and markers in cache_layout, its file locks and this process's leases in leases),
sets (reading a remote set or LMDB; a bad cached copy fetched again), prefetch (its
background fetches, in daemon threads), upload (``convert`` to a URL). :func:`open_any` is
the entry point of the dataset, the loader and ``verify``: a URL opens remotely, a local
path as before.
"""

from __future__ import annotations

import os

from fastload.data.remote.url import is_url, locate

__all__ = ["is_url", "locate", "open_any"]


def open_any(path: str | os.PathLike, *, storage_options: dict | None = None,
             cache_dir: str | os.PathLike | None = None, cache_bytes: int | None = None):
    """A reader for ``path``: a set or LMDB at a URL, else a local set or LMDB directory.

    The entry point of :class:`~fastload.LMDBDataset`, the loader and verify. A URL's shards
    are fetched into the local shard cache on first read and checked against its manifest.

    Args:
        path: a sharded set (its folder or manifest) or an LMDB directory, local or at a
            URL (``s3://bucket/train.set``, any scheme fsspec has a backend for; ``file://``
            is local).
        storage_options: fsspec's options for a URL (credentials, ``endpoint_url``).
        cache_dir: for a URL, the shard cache's folder (default ``$FASTLOAD_CACHE`` or
            ``~/.cache/fastload``).
        cache_bytes: for a URL, the shard cache's bound in bytes (default
            ``$FASTLOAD_CACHE_BYTES`` or half the free disk).

    Returns:
        (LMDBReader | ShardedReader): The reader of one LMDB directory or of a sharded
            set (their remote kinds for a URL).

    Raises:
        ValueError: ``storage_options``, ``cache_dir`` or ``cache_bytes`` with a local path,
            an unknown or chained URL scheme, or a damaged or unfinished set.
        ImportError: a URL whose fsspec backend is not installed (the ``remote`` extra).
        FileNotFoundError: nothing readable is at ``path``.
    """
    where = locate(path, storage_options, "dataset path")
    if isinstance(where, str):
        if cache_dir is not None or cache_bytes is not None:
            raise ValueError(f"cache_dir and cache_bytes apply to URLs only, but {where!r} is "
                             "a local path; drop them or pass a URL")
        from fastload.data.sets.shards import open_reader

        return open_reader(where)
    from fastload.data.remote.cache import ShardCache
    from fastload.data.remote.sets import open_url

    return open_url(where, ShardCache(cache_dir, cache_bytes))
