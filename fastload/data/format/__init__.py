"""The fastload LMDB format: Caffe ``Datum`` records, the reader and writer, LMDB's own
metadata, the labels file, atomic writes, JPEG header and damage checks, and verify of one LMDB.
"""
