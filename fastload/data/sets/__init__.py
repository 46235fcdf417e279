"""Sharded sets: the manifest and its schema, reading N shards as one set, verify of a set,
and whether a set's check claims may be trusted.
"""
