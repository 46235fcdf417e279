"""Per-op time of torchvision's auto-augment ops (v1 and v2) against fastload's fast paths.

    python benchmarks/fast_ops_timing.py [--size 224] [--calls 200]

One thread, a 3 x SIZE x SIZE uint8 image of smooth random content, each op at a
RandAugment-like magnitude with a zero fill; the two implementations alternate in rounds of
``--calls`` calls and the median per-call time of each is printed with their ratio, for v1's
``_apply_op`` against ``fast_ops`` and v2's ``_apply_image_or_video_transform`` against
``fast_ops_v2``. The values are the same (tests/pipelines/test_fast_ops.py, tests/pipelines/test_fast_ops_v2.py
check them bit for bit).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

OPS = [("ShearX", 0.3), ("TranslateX", 30.0), ("Rotate", 30.0), ("Brightness", 0.5),
       ("Color", 0.5), ("Contrast", 0.5), ("Sharpness", 0.5), ("Posterize", 4.0),
       ("Solarize", 128.0), ("AutoContrast", 0.0), ("Equalize", 0.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op

    from fastload.pipelines.fast.ops_v1 import apply_op

    torch.set_num_threads(1)
    small = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0)).float()
    image = torch.nn.functional.interpolate(small, size=(args.size, args.size), mode="bilinear")
    image = image.round().to(torch.uint8)[0].contiguous()
    fill, mode = [0.0, 0.0, 0.0], InterpolationMode.BILINEAR
    print(f"{'op':<13} {'torchvision us':>14} {'fast_ops us':>11} {'speed-up':>8}")
    for name, magnitude in OPS:
        tv, fast = _median_us({
            "tv": functools.partial(_apply_op, image, name, magnitude, interpolation=mode,
                                    fill=fill),
            "fast": functools.partial(apply_op, image, name, magnitude, mode, fill)}, args)
        print(f"{name:<13} {tv:>14,.0f} {fast:>11,.0f} {tv / fast:>7.1f}x")
    _v2(image, args)
    _tail(image, args)


def _v2(image, args) -> None:
    """The same ops through v2's op application against fast_ops_v2 (v2 itself where it
    has no fast path)."""
    from torchvision.transforms import InterpolationMode

    from fastload.pipelines.replays.v2 import apply_op_v2
    from fastload.pipelines.seams.torch_private import v2_apply_autoaugment_op

    fill, mode = {"others": None}, InterpolationMode.BILINEAR
    print(f"{'v2 op':<13} {'torchvision us':>14} {'fast_ops_v2 us':>14} {'speed-up':>8}")
    for name, magnitude in OPS:
        magnitude = magnitude / 255 if name == "Solarize" else magnitude  # v2: a share of 255
        tv, fast = _median_us({
            "tv": functools.partial(v2_apply_autoaugment_op, image, name, magnitude, mode, fill),
            "fast": functools.partial(apply_op_v2, image, name, magnitude, mode, fill)}, args)
        print(f"{name:<13} {tv:>14,.0f} {fast:>14,.0f} {tv / fast:>7.1f}x")


def _median_us(calls: dict, args) -> list[float]:
    """Median time per call in us of each of ``calls``, alternating rounds."""
    times: dict[str, list[float]] = {key: [] for key in calls}
    for _ in range(args.rounds):
        for key, call in calls.items():
            call()
            start = time.perf_counter()
            for _ in range(args.calls):
                call()
            times[key].append((time.perf_counter() - start) / args.calls * 1e6)
    return [statistics.median(times[key]) for key in calls]


def _tail(image, args) -> None:
    """ConvertImageDtype + Normalize per sample against the suffix's table lookup."""
    import torch
    import torchvision.transforms as T

    from fastload.pipelines.suffix.run import Suffix

    steps = [T.ConvertImageDtype(torch.float), T.Normalize((0.485, 0.456, 0.406),
                                                           (0.229, 0.224, 0.225))]
    tail = Suffix(steps, "uint8").tail
    out = torch.empty(image.shape, dtype=torch.float32)
    tv, fast = _median_us({"tv": lambda: steps[1](steps[0](image)),
                           "fast": lambda: tail.write(image, False, out)}, args)
    print(f"{'tail':<13} {tv:>14,.0f} {fast:>11,.0f} {tv / fast:>7.1f}x   "
          "(ConvertImageDtype + Normalize against the table lookup into a batch slot)")


if __name__ == "__main__":
    main()
