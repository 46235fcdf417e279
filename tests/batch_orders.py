"""Reading a :class:`~fastload.loader.batch_order.BatchOrder` as the loader's epoch does,
for the order tests of ranks simulated in-process (not a test module)."""

from __future__ import annotations

from fastload.loader.batch_order import BatchOrder


def take(order: BatchOrder, batches: int | None) -> list[int]:
    """The sample indices of up to ``batches`` batches of the current or next epoch (all
    when None), each marked yielded; the epoch is finished where it runs out."""
    epoch = order.current or order.start_epoch()
    seen = []
    while batches is None or batches > 0:
        item = epoch.next()
        if item is None:
            order.finish_epoch()
            break
        epoch.mark_yielded()
        seen += item[1]
        batches = None if batches is None else batches - 1
    return seen
