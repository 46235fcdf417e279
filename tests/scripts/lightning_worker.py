"""A Lightning Trainer (DDP, 2 CPU processes, gloo) training on a fastload.DataLoader.

Usage: python lightning_worker.py FOLDER OUT_DIR. The dataset's targets are replaced by the
sample indices, so the labels each rank trains on tell which samples it saw. Each rank
writes OUT_DIR/rank<R>.json: the loader's fallback_reason and the indices per epoch.
"""

from __future__ import annotations

import json
import pathlib
import sys
import warnings


def main(folder: str, out_dir: str) -> None:
    import pytorch_lightning as pl
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    import fastload

    warnings.simplefilter("error", fastload.FallbackWarning)
    dataset = ImageFolder(folder, T.Compose([T.RandomResizedCrop(8), T.TrivialAugmentWide(),
                                             T.ToTensor()]))
    dataset.samples = [(path, i) for i, (path, _) in enumerate(dataset.samples)]
    dataset.targets = list(range(len(dataset.samples)))

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3 * 8 * 8, 1)
            self.seen: dict[int, list[int]] = {}
            self.loader = None

        def train_dataloader(self):
            self.loader = fastload.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=1)
            return self.loader

        def training_step(self, batch, batch_idx):
            images, indices = batch
            self.seen.setdefault(self.current_epoch, []).extend(indices.tolist())
            return self.layer(images.flatten(1)).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Model()
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model)
    record = {"fallback_reason": model.loader.fallback_reason,
              "epochs": [model.seen[e] for e in sorted(model.seen)]}
    (pathlib.Path(out_dir) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
