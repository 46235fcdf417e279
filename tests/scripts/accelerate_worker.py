"""An HF Accelerate script (``accelerator.prepare``) over a fastload.DataLoader, run by
torchrun (gloo, CPU).

Usage: torchrun --standalone --nproc_per_node R accelerate_worker.py FOLDER OUT_DIR. The
dataset's targets are the sample indices; each rank writes OUT_DIR/rank<R>.json with the
loader's fallback_reason, the prepared loader's type and the indices per epoch.
"""

from __future__ import annotations

import json
import pathlib
import sys
import warnings


def main(folder: str, out_dir: str) -> None:
    import torch
    import torchvision.transforms as T
    from accelerate import Accelerator
    from torchvision.datasets import ImageFolder

    import fastload

    warnings.simplefilter("error", fastload.FallbackWarning)
    accelerator = Accelerator(cpu=True)
    dataset = ImageFolder(folder, T.Compose([T.RandomResizedCrop(8), T.RandAugment(),
                                             T.ToTensor()]))
    dataset.samples = [(path, i) for i, (path, _) in enumerate(dataset.samples)]
    dataset.targets = list(range(len(dataset.samples)))
    loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=1)
    model = torch.nn.Linear(3 * 8 * 8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    epochs = []
    for epoch in range(2):
        prepared.set_epoch(epoch)
        seen = []
        for images, indices in prepared:
            loss = model(images.flatten(1)).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen += indices.tolist()
        epochs.append(seen)
    record = {"fallback_reason": loader.fallback_reason, "type": type(prepared).__name__,
              "epochs": epochs}
    rank = accelerator.process_index
    (pathlib.Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(record))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
