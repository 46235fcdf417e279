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
    """A reader for ``path``: a set or LMDB at a URL (through the shard cache at
    ``cache_dir``, bounded to ``cache_bytes``), else a local set or LMDB directory."""
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
