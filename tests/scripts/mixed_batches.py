"""One epoch of the mixed-batch folder in a fresh process (tests/loader/test_batch_identity.py).

Usage: python mixed_batches.py FOLDER EPOCH OUT. Builds the loader the test builds, runs
epoch EPOCH (set_epoch) and saves its images to OUT (a torch file of tensors only).
"""

from __future__ import annotations

import sys


def main(folder: str, epoch: str, out_path: str) -> None:
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    import fastload

    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
    loader = fastload.DataLoader(ImageFolder(folder, transform), batch_size=4, seed=3,
                                 device="cpu")
    loader.set_epoch(int(epoch))
    torch.save([images for images, _ in loader], out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
