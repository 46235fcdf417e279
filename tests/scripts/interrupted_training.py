"""A user's training script on fastload.DataLoader, for the Ctrl-C tests
(tests/cli/test_interrupts.py): ``python interrupted_training.py IMAGEFOLDER`` loops over
epochs until it is interrupted. It imports DALI first, as a script that also uses DALI
directly does (DALI's exit hook then runs after any that fastload registers later)."""

import sys

import nvidia.dali  # noqa: F401
import torch
from torchvision import datasets
from torchvision import transforms as T

import fastload

dataset = datasets.ImageFolder(sys.argv[1], T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))
loader = fastload.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
print("ready", flush=True)
for _epoch in range(10_000):
    for images, _labels in loader:
        torch.mm(images.flatten(1)[:, :64], torch.randn(64, 64))
