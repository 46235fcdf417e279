"""Data wait per batch in a model-bound training loop: fastload.DataLoader against torch's.

    python benchmarks/model_bound_wait.py DATA [--rounds 3] [--batches 40] [--workers 2]

The loop has the shape of torchvision's ``references/classification/train.py``: an
ImageFolder with ``ClassificationPresetTrain``'s transforms (RandomResizedCrop 224, flip,
PILToTensor, ConvertImageDtype, Normalize), ``RandomSampler``, MobileNetV3-small trained with
SGD on the CPU (``torch.set_num_threads(--threads)``), so the step is slower than either
loader. ``fastload.StallMeter`` measures the time spent in ``next()`` (the data wait) and in
the step. Rounds alternate the two loaders; prints, for each, the median and range of the
wait per batch after the first (steady state), of the first batch's wait (``iter()`` and
the first batch: worker start-up for torch's loader), and of the wait's share of the round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _transform():
    import torch
    import torchvision.transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor(),
                      T.ConvertImageDtype(torch.float),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def _epoch(loader, model, optimizer, batches: int) -> dict:
    import torch

    import fastload

    meter = fastload.StallMeter(loader)
    criterion = torch.nn.CrossEntropyLoss()
    model.train()
    clock = time.perf_counter
    waits = []  # each next()'s wait, the first (iter() and the first batch) included
    batch_iter = iter(meter)
    for _ in range(batches):
        start = clock()
        images, labels = next(batch_iter)
        waits.append(clock() - start)
        loss = criterion(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    batch_iter.close()  # ends the meter's epoch: its stats row
    stats = meter.stats[-1]
    return {"wait_ms_per_batch": 1e3 * sum(waits[1:]) / max(1, len(waits) - 1),
            "first_batch_ms": 1e3 * waits[0],
            "wait_share": stats.wait_s / max(1e-9, stats.wait_s + stats.busy_s),
            "step_ms": 1e3 * stats.busy_s / max(1, stats.batches)}


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="an ImageFolder tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40, help="measured batches per round")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the step")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    import torchvision
    from torch.utils.data import RandomSampler
    from torchvision.datasets import ImageFolder

    import fastload

    torch.set_num_threads(args.threads)
    dataset = ImageFolder(args.data, _transform())
    model = torchvision.models.mobilenet_v3_small(num_classes=len(dataset.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loaders = {
        "torch": torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                             sampler=RandomSampler(dataset),
                                             num_workers=args.workers, pin_memory=False,
                                             drop_last=True),
        "fastload": fastload.DataLoader(dataset, batch_size=args.batch_size,
                                        sampler=RandomSampler(dataset),
                                        num_workers=args.workers, pin_memory=False,
                                        drop_last=True),
    }
    results: dict[str, list[dict]] = {name: [] for name in loaders}
    for loader in loaders.values():  # warm-up: workers, graphs, the first batches
        _epoch(loader, model, optimizer, 3)
    for _ in range(args.rounds):
        for name, loader in loaders.items():
            results[name].append(_epoch(loader, model, optimizer, args.batches))
    print(f"{'loader':10s} {'wait/batch ms':>20s} {'first batch ms':>22s} {'wait share %':>18s}"
          f" {'step ms':>8s}")
    for name, rows in results.items():
        cells = [_cell([r[key] * scale for r in rows])
                 for key, scale in (("wait_ms_per_batch", 1), ("first_batch_ms", 1),
                                    ("wait_share", 100))]
        step = statistics.median(r["step_ms"] for r in rows)
        print(f"{name:10s} {cells[0]:>20s} {cells[1]:>22s} {cells[2]:>18s} {step:8.0f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "results": results, "time": time.time()}, handle)


if __name__ == "__main__":
    main()
