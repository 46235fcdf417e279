"""Images/s of the default training recipe from an LMDB, for A/B runs of two checkouts.

    python benchmarks/default_recipe_epoch.py DB [--epochs 3]

One process: a warm-up epoch, then ``--epochs`` timed epochs of RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize (batch 64, shuffle, ``num_workers=2``, seed 0)
from the fastload LMDB ``DB``; prints one JSON line: images/s and CPU-milliseconds per
image (every thread of the process) per epoch. Run it alternately from the two checkouts'
environments (each on an LMDB its own code converted) and compare the medians.
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    import torchvision.transforms as T

    import fastload

    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = fastload.DataLoader(fastload.LMDBDataset(args.db, transform=train), batch_size=64,
                                 shuffle=True, seed=0, num_workers=2)
    sum(len(labels) for _, labels in loader)  # warm-up: the graph, the page cache
    epochs = []
    for _ in range(args.epochs):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        images = sum(len(labels) for _, labels in loader)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        epochs.append({"images_per_s": images / wall, "cpu_ms_per_image": 1e3 * cpu / images})
    print(json.dumps(epochs))


if __name__ == "__main__":
    main()
