"""Resume a fastload.DataLoader from a saved state_dict in a fresh process.

Usage: python loader_resume.py FOLDER STATE OUT. Builds the loader the test builds, loads
STATE, runs the rest of that epoch and one more, and saves each batch's indices and images
to OUT (a torch file of tensors only).
"""

from __future__ import annotations

import sys


def main(folder: str, state_path: str, out_path: str) -> None:
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    import fastload

    transform = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
    loader = fastload.DataLoader(ImageFolder(folder, transform), batch_size=5, shuffle=True,
                                 seed=7)
    loader.load_state_dict(torch.load(state_path, weights_only=True))
    indices, images = [], []
    for _ in range(2):
        for batch, _labels in loader:
            indices.append(torch.tensor(loader.last_batch_indices))
            images.append(batch)
    torch.save({"indices": indices, "images": images}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
