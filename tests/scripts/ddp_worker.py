"""One rank of the DDP sharding test, launched by torchrun (gloo, CPU).

Usage: torchrun --standalone --nproc_per_node R ddp_worker.py FOLDER OUT_DIR. Each rank seeds
torch's global generator with its rank (so only the broadcast base seed can make the ranks
agree), runs two epochs of a shuffled fastload.DataLoader with no sampler, and writes the
dataset indices it received, epoch by epoch, to OUT_DIR/rank<R>.json; then two epochs of one
that falls back to torch's loader (the sampler's indices and the samples yielded).
"""

from __future__ import annotations

import json
import pathlib
import sys
import warnings


def main(folder: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    import fastload

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    dataset = ImageFolder(folder, T.Compose([T.Resize(8), T.ToTensor()]))
    loader = fastload.DataLoader(dataset, batch_size=32, shuffle=True, device="cpu")
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen = []
        for images, labels in loader:
            if images.shape[1:] != (3, 8, 8) or len(labels) != len(loader.last_batch_indices):
                raise RuntimeError(f"rank {rank}: unexpected batch {tuple(images.shape)}")
            seen += loader.last_batch_indices
        epochs.append(seen)
    # torch's loader in fastload's place (a Lambda it cannot translate): still this rank's
    # share, the next epoch at each iter() without set_epoch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastload.FallbackWarning)
        fallback = fastload.DataLoader(
            ImageFolder(folder, T.Compose([T.Lambda(lambda x: x), T.Resize(8), T.ToTensor()])),
            batch_size=32, shuffle=True, device="cpu")
    fallback_epochs = []
    for _ in range(2):
        count = sum(len(labels) for _, labels in fallback)
        fallback_epochs.append({"count": count, "indices": list(fallback.sampler)})
    record = {"rank": rank, "world_size": dist.get_world_size(), "batches": len(loader),
              "epochs": epochs, "fallback_batches": len(fallback), "fallback": fallback_epochs}
    (pathlib.Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
