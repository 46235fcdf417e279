"""The next database's first records, read while this one's last strict checks finish.

A sharded conversion writes its shards in turn. At a shard's end the main process waits for
the strict checks of its last records (:mod:`fastload.data.convert.check_batches`); it
reads the next shard's records meanwhile, keeping each JPEG by its markers and starting its
check in the same threads. The next shard's writer loop takes those records first, in
order, so the output is the same as without (benchmarks/NOTES.md C15).
"""

from __future__ import annotations

from collections import deque

from fastload.data.convert.check_batches import CheckBatches, CheckedRecord
from fastload.data.convert.image_check import check_file
from fastload.data.convert.sources.base import iter_records

__all__ = ["ReadAhead", "record_bytes"]


class ReadAhead:
    """Records of ``samples`` from ``start`` on, read ahead of their database's writer."""

    def __init__(self, samples, start: int) -> None:
        self.samples, self.start = samples, start
        self.entries: deque = deque()  # (index, name, label, result, bytes) from start on
        self.held = 0  # bytes of their records
        self._records = None  # the source's records, from the first read on
        self._reading = True  # off at the source's end, or at a record left to the writer
        self._taken = False

    def read_one(self, options: tuple, checks: CheckBatches, most: int, most_bytes: int) -> bool:
        """Read one more record (its check started in ``checks``); False where none was
        read: ``most`` records or ``most_bytes`` held, the end, or a record that needs a
        worker process or fails to read (left to the writer's loop, which meets it again)."""
        if not self._reading or len(self.entries) >= most or self.held >= most_bytes:
            return False
        try:
            if self._records is None:
                self._records = iter_records(self.samples, self.start)
            record = next(self._records, None)
            if record is not None:
                name, label, path, span, data, problem = record
                result = ("skip", problem) if problem is not None else check_file(
                    path, label, *options, keep_only=True, span=span, data=data)
        except Exception:  # noqa: BLE001 - reported where the writer's loop reads it
            record = None
        if record is None or result is None:  # None: a file that needs Pillow's decode
            self._reading = False
            return False
        if result[0] == "ok":
            result = checks.add(result)
        size = record_bytes(result)
        self.entries.append((self.start + len(self.entries), name, label, result, size))
        self.held += size
        return True

    def take(self, start: int) -> tuple[deque, int] | None:
        """The records read for a writer that starts at ``start``, and their bytes: once,
        and only from this start (else None: a retried or resumed run reads them again)."""
        if self._taken or start != self.start:
            return None
        self._taken, self._reading = True, False
        return self.entries, self.held


def record_bytes(result) -> int:
    """The bytes a read record holds in this process while it waits to be written"""
    if isinstance(result, CheckedRecord):
        return len(result.kept[1])
    return len(result[1]) if isinstance(result, tuple) and result[0] == "ok" else 0
