"""A/B: batches made ahead (maker and stage threads), against making each in __next__.

    python benchmarks/stage_overlap.py DATA --recipe ra --rounds 7 [--step-ms 40]

DATA is an ImageFolder tree (e.g. what ``fastload bench`` caches as
``DATA.fastload-bench/train-limit512``). Each round iterates one epoch of the same loader
with batches made ahead (the default on the CPU: a maker thread and a stage thread) and one
with each made in ``__next__`` (``ahead 0``, what a GPU loader does),
alternating; ``--step-ms`` sleeps that long per batch, as a training step that waits on a
GPU would. Prints the median and range of images/s of each (the first round is a warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--recipe", default="ra")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from torchvision.datasets import ImageFolder

    import fastload
    from fastload.bench.recipes import recipe
    from fastload.loader import epoch

    warnings.filterwarnings("ignore", category=UserWarning)
    dataset = ImageFolder(args.data)
    transform, collate = recipe(args.recipe, 224, len(dataset.classes))
    dataset.transform = transform
    loader = fastload.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                 num_workers=args.threads, collate_fn=collate, seed=0)
    makes_ahead = epoch.makes_ahead

    def run(ahead: int) -> float:
        if not ahead:  # the A/B switch: every batch made (and staged) in __next__
            epoch.makes_ahead = lambda device: False
        try:
            start, images = time.perf_counter(), 0
            for batch in loader:
                images += len(batch[0])
                if args.step_ms:
                    time.sleep(args.step_ms / 1000)
            return images / (time.perf_counter() - start)
        finally:
            epoch.makes_ahead = makes_ahead

    speeds: dict[int, list[float]] = {1: [], 0: []}
    for k in range(args.rounds):
        for ahead in (1, 0):
            speed = run(ahead)
            if k:
                speeds[ahead].append(speed)
    for ahead, values in speeds.items():
        where = "stage thread, one batch ahead" if ahead else "in __next__"
        print(f"{args.recipe}, step {args.step_ms:g} ms, {where}: median "
              f"{statistics.median(values):,.0f} img/s [{min(values):,.0f}-{max(values):,.0f}]")
    ratio = statistics.median(speeds[1]) / statistics.median(speeds[0])
    print(f"ahead / in __next__: {ratio:.2f}x")


if __name__ == "__main__":
    main()
