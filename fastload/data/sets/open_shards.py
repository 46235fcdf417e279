"""The shards a process keeps open, at most a bound, the least recently read closed first.

A global-order epoch over a sharded set touches every shard in turn; kept open, 100,000
shards would hold 100,000 file handles and memory maps (``Too many open files`` past the
soft ``RLIMIT_NOFILE``). :class:`OpenShards` is the table of a reader's open shards in one
process: a shard's reader is *busy* while a read of it is under way (:meth:`OpenShards.pin`
to :meth:`OpenShards.unpin`), and a reader taken out of the table while busy is closed when
its last read ends, never under it. What a read returned stays valid after its shard is
closed: records are copied out of the LMDB map (``buffers=False``), and the checksums and
labels are ``numpy.memmap`` views, whose mapping lives as long as a view of it does.

Every method holds the table's lock (:attr:`OpenShards.lock`, re-entrant; the owner holds
it too across a lookup and an open, so a shard is opened once). After ``os.fork()`` the
child gets a fresh lock and forgets the parent's reads under way
(:func:`fastload.utils.threads.after_fork_in_child`): a lock held by one of the parent's
threads at the fork would never be released there.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any

from fastload.utils.threads import after_fork_in_child

__all__ = ["OpenShards"]

_LIVE: weakref.WeakSet = weakref.WeakSet()  # every table of this process, for the fork hook


def _after_fork() -> None:
    for table in list(_LIVE):
        table.forget_reads()


after_fork_in_child(_after_fork)


class OpenShards:
    """A process's open shard readers, least recently read first (module docstring).

    Readers are anything with ``close()``. The table does not open shards and does not
    enforce the bound itself: its owner asks :meth:`idle_victim` for one to close before
    it opens another, so that the owner's own way of letting go (a lease to give back)
    runs too.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._open: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._busy: dict[int, int] = {}  # id(reader) -> reads under way
        self._retired: dict[int, Any] = {}  # id(reader) -> reader taken out while busy
        _LIVE.add(self)

    def __len__(self) -> int:
        return len(self._open)

    def __reduce__(self):
        return OpenShards, ()  # a copy (in another process) starts with nothing open

    def forget_reads(self) -> None:
        """In a forked child: a fresh lock, and no reads under way (they were the parent's)."""
        self.lock = threading.RLock()
        self._busy.clear()
        self._retired.clear()

    def items(self) -> list[tuple[int, Any]]:
        """``(shard, reader)`` of the open shards, least recently read first."""
        with self.lock:
            return list(self._open.items())

    def get(self, shard: int) -> Any:
        """Shard ``shard``'s open reader, now the most recently read; None if not open."""
        with self.lock:
            reader = self._open.get(shard)
            if reader is not None:
                self._open.move_to_end(shard)
            return reader

    def add(self, shard: int, reader: Any) -> None:
        """Keep ``reader`` as shard ``shard``'s, the most recently read."""
        with self.lock:
            self._open[shard] = reader

    def idle_victim(self, keep: int) -> int | None:
        """The least recently read open shard other than ``keep`` with no read under way;
        None when there is none."""
        with self.lock:
            for shard, reader in self._open.items():
                if shard != keep and id(reader) not in self._busy:
                    return shard
            return None

    def remove(self, shard: int) -> None:
        """Take shard ``shard`` out and close its reader, or, while a read of it is under way,
        close it when the last such read ends."""
        with self.lock:
            reader = self._open.pop(shard, None)
            if reader is None:
                return
            if id(reader) in self._busy:
                self._retired[id(reader)] = reader
                return
        reader.close()

    def clear(self) -> None:
        """:meth:`remove` every shard."""
        with self.lock:
            for shard in list(self._open):
                self.remove(shard)

    def pin(self, reader: Any) -> None:
        """A read of ``reader`` begins: it is not closed until :meth:`unpin`."""
        with self.lock:
            self._busy[id(reader)] = self._busy.get(id(reader), 0) + 1

    def unpin(self, reader: Any) -> None:
        """A read of ``reader`` ended; the reader is closed now if it was taken out meanwhile."""
        with self.lock:
            left = self._busy.get(id(reader), 0) - 1
            if left > 0:
                self._busy[id(reader)] = left
                return
            self._busy.pop(id(reader), None)
            retired = self._retired.pop(id(reader), None)
        if retired is not None:
            retired.close()
