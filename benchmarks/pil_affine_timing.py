"""Per-op time of timm's geometric auto-augment ops: Pillow against fastload's affine kernel.

    python benchmarks/pil_affine_timing.py [--photo PATH] [--size 224] [--calls 200]
    python benchmarks/pil_affine_timing.py --recipe-photos DIR [--samples 128]

One thread, an RGB SIZE x SIZE image (a centre crop of ``--photo`` resized, or smooth random
content without one), each op at RandAugment's m9 magnitude with timm's DeiT fill, for each
resample; Pillow's ``Image.transform`` / ``Image.rotate`` and
``fastload.pipelines.fast.pil_affine`` (the round trip through bytes included) alternate in rounds
of ``--calls`` calls, and the median per-call thread CPU time of each is printed with their
ratio (CPU time: the figures survive a shared machine better than wall time). The values are
the same (tests/pipelines/test_pil_affine.py checks them bit for bit).

``--recipe-photos``: the timm_deit recipe's suffix (RandAugment m9 mstd0.5, ToTensor,
Normalize, RandomErasing; fastload's twin, as the loader runs it) on 224-px
RandomResizedCrops of the first ``--samples`` photos under DIR, thread CPU ms per sample
with the kernel on and off (Pillow's own ops), alternating in ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

FILL = (124, 116, 104)
# (name, kind, argument) at timm's m9: 27 degrees, shear 0.27, translate 0.045 of the width
OPS = [("Rotate", "rotate", 27.0), ("ShearX", "matrix", (1, 0.27, 0, 0, 1, 0)),
       ("ShearY", "matrix", (1, 0, 0, 0.27, 1, 0)),
       ("TranslateXRel", "matrix", (1, 0, 0.045 * 224, 0, 1, 0)),
       ("TranslateYRel", "matrix", (1, 0, 0, 0, 1, -0.045 * 224))]


def _image(photo: str | None, size: int):
    import numpy as np
    from PIL import Image

    if photo:
        img = Image.open(photo).convert("RGB")
        side = min(img.size)
        left, top = (img.width - side) // 2, (img.height - side) // 2
        return img.crop((left, top, left + side, top + side)).resize((size, size))
    small = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    return Image.fromarray(small).resize((size, size), Image.Resampling.BILINEAR)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photo", default=None, help="an image file to crop (else synthetic)")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recipe-photos", default=None,
                        help="a folder of photos: time the timm_deit suffix instead")
    parser.add_argument("--samples", type=int, default=128)
    args = parser.parse_args()
    if args.recipe_photos:
        _recipe(args)
        return

    from PIL import Image

    from fastload.pipelines.fast import pil_affine

    if not pil_affine.available():
        raise SystemExit("fastload's _affine extension is not built or this Pillow is unchecked: "
                         "rebuild with `pip install -e .`")
    image = _image(args.photo, args.size)
    scale = args.size / 224
    print(f"{'op':<14} {'resample':<8} {'Pillow us':>9} {'kernel us':>9} {'speed-up':>8}")
    for name, kind, arg in OPS:
        for resample in (Image.Resampling.BICUBIC, Image.Resampling.BILINEAR,
                         Image.Resampling.NEAREST):
            if kind == "rotate":
                pil = functools.partial(image.rotate, arg, resample, fillcolor=FILL)
                fast = functools.partial(pil_affine.rotate, image, arg, resample, FILL)
            else:
                matrix = tuple(v * scale if k in (2, 5) else v for k, v in enumerate(arg))
                pil = functools.partial(image.transform, image.size, Image.Transform.AFFINE,
                                        matrix, resample, fillcolor=FILL)
                fast = functools.partial(pil_affine.transform, image, image.size, matrix,
                                         resample, FILL)
            t_pil, t_fast = _median_us({"pil": pil, "fast": fast}, args)
            print(f"{name:<14} {resample.name.lower():<8} {t_pil:>9,.0f} {t_fast:>9,.0f} "
                  f"{t_pil / t_fast:>7.1f}x")


def _median_us(calls: dict, args: argparse.Namespace) -> tuple[float, ...]:
    times: dict[str, list[float]] = {k: [] for k in calls}
    for fn in calls.values():
        fn()  # warm-up
    for _ in range(args.rounds):
        for key, fn in calls.items():
            start = time.thread_time()
            for _ in range(args.calls):
                fn()
            times[key].append((time.thread_time() - start) / args.calls * 1e6)
    return tuple(statistics.median(times[k]) for k in calls)


def _recipe(args: argparse.Namespace) -> None:
    """The timm_deit suffix per sample, kernel on and off."""
    from pathlib import Path

    import torch
    import torchvision.transforms as T
    from PIL import Image

    from fastload.bench.recipes import recipe
    from fastload.pipelines.fast import pil_affine
    from fastload.pipelines.split import split

    torch.set_num_threads(1)
    files = sorted(p for p in Path(args.recipe_photos).rglob("*") if p.suffix.lower()
                   in (".jpg", ".jpeg", ".png"))[:args.samples]
    crop, to_tensor = T.RandomResizedCrop(224), T.PILToTensor()
    torch.manual_seed(0)
    images = [to_tensor(crop(Image.open(f).convert("RGB"))) for f in files]
    transform, _ = recipe("timm_deit", 224, 10)
    suffix = split(transform).suffix
    kernel = pil_affine._c

    def epoch(on: bool) -> float:
        pil_affine._c = kernel if on else None
        pil_affine.available.cache_clear()
        start = time.thread_time()
        for seed, image in enumerate(images):
            suffix._sample(image, seed, None, replayed=True)
        return (time.thread_time() - start) / len(images) * 1e3

    epoch(True), epoch(False)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for on in (False, True):
            times[on].append(epoch(on))
    pil_affine._c = kernel
    pil_affine.available.cache_clear()
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"timm_deit suffix, {len(images)} photos, thread CPU ms per sample (median of "
          f"{args.rounds}): Pillow {off:.2f}, kernel {on:.2f}, saved {100 * (1 - on / off):.0f}%")


if __name__ == "__main__":
    main()
