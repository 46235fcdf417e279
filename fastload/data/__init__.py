"""The LMDB format and the tools around it: what ``fastload convert`` writes and
``fastload verify`` checks.

datum (the Caffe ``Datum`` codec), format (constants, sidecar schema), writer/reader (+ atomic
writes, the folder lock, destination: resume, replace or refuse, LMDB meta-page checks),
dataset (``LMDBDataset``), manifest/shards (sharded sets), remote (sets at URLs: the shard
cache, transfers, upload), convert (+ its sources and per-image checks), attest (whether a
set's strict-check claim is trusted on this machine), verify, ensure (convert if missing or
stale), synth (generated photos), jpeg (header reads). Imports only
``fastload.utils`` (and fsspec, lazily, for URLs).
"""
