"""One rank of the sharded-set tests, launched by torchrun (gloo, CPU).

Usage: torchrun ... set_worker.py SET OUT MODE [ARG]. Every rank builds
``fastload.DataLoader(SET, batch_size=4, shuffle=True, seed=5)`` over the sharded set and
writes OUT/rank<R>.json with the dataset indices it received, epoch by epoch, and the
shards its process opened. MODE:

* ``epochs E``: run E epochs (``set_epoch`` each).
* ``stop K``: run K batches of epoch 0, save ``state_dict()`` to OUT/state<R>.pt; then the
  same with the shard-aware order (``order="shards", shard_window=1``): its batches under
  ``shard_epochs``, its state in OUT/shard_state<R>.pt; rank 0 also saves the state of a
  loader driven by a DistributedSampler after one batch to OUT/user_sampler_state.pt.
* ``resume STATE``: load STATE, finish its epoch, then run the next one.
"""

from __future__ import annotations

import json
import pathlib
import sys


def batches(loader, limit: int | None = None) -> list[int]:
    seen = []
    for count, (images, labels) in enumerate(loader):
        if images.shape[1:] != (3, 8, 8) or len(labels) != len(loader.last_batch_indices):
            raise RuntimeError(f"unexpected batch {tuple(images.shape)}")
        seen += loader.last_batch_indices
        if limit is not None and count + 1 == limit:
            break
    return seen


def main(data: str, out_dir: str, mode: str, arg: str) -> None:
    import torch
    import torch.distributed as dist
    import torchvision.transforms as T

    import fastload

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = pathlib.Path(out_dir)
    transform = T.Compose([T.Resize((8, 8)), T.ToTensor()])

    def make(**order):
        return fastload.DataLoader(data, batch_size=4, shuffle=True, seed=5, transform=transform,
                                   device="cpu", strict=True, **order)

    loader = make()
    epochs, extra = [], {}
    if mode == "epochs":
        for epoch in range(int(arg)):
            loader.set_epoch(epoch)
            epochs.append(batches(loader))
    elif mode == "stop":
        epochs.append(batches(loader, limit=int(arg)))
        torch.save(loader.state_dict(), out / f"state{rank}.pt")
        shards = make(order="shards", shard_window=1)
        extra["shard_epochs"] = [batches(shards, limit=int(arg))]
        torch.save(shards.state_dict(), out / f"shard_state{rank}.pt")
        if rank == 0:
            from torch.utils.data import DistributedSampler

            dataset = loader.dataset
            user = fastload.DataLoader(dataset, batch_size=4, device="cpu", strict=True,
                                       seed=5,  # no seed: every rank would join a broadcast
                                       sampler=DistributedSampler(dataset, seed=5))
            batches(user, limit=1)
            torch.save(user.state_dict(), out / "user_sampler_state.pt")
    elif mode == "resume":
        loader.load_state_dict(torch.load(arg, weights_only=True))
        epochs.append(batches(loader))  # the rest of the saved epoch
        epochs.append(batches(loader))  # the next one
    else:
        raise ValueError(f"MODE should be 'epochs', 'stop' or 'resume', but got {mode!r}")
    record = {"rank": rank, "world_size": world, "epochs": epochs,
              "opened": loader.dataset.reader.opened_shards, **extra}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
