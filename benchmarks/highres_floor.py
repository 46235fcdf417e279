"""High-res photos against the entropy-decode floor, per image on one core (NOTES.md H5-H7, H9, H11).

Each figure is the sum over the photos of each photo's fastest time over ``--rounds``
interleaved rounds (one thread; the minimum drops what a busy neighbour adds, so a shared
machine gives usable ratios):

* floor candidates: the cheapest decode of the whole file (simplejpeg at 1/8 to grey, the
  floor ``fastload bench`` row (i) uses; to RGB; Pillow's ``draft()``; the region decoder
  skipping every row: the entropy decoding alone);
* whole-image decodes at each M/8 (the cost of each DCT scale);
* fastload's per-sample work for ``Resize(256)+CenterCrop(224)`` and ``RandomResizedCrop(224)``
  + flip, normalised: decode (region decoder where built, else the whole image) + resample
  into the batch, as a share of the floor; with the region decoder also with libjpeg-turbo's
  Huffman decoder (before H11), with every MCU's coefficients stored (libjpeg-turbo's own
  crop, before H9) and the pieces: the Huffman
  decoding up to the region's last row, the region decode alone, the resample alone.

    python benchmarks/highres_floor.py --images 24 --rounds 10
"""

from __future__ import annotations

import argparse
import functools
import io
import time
from pathlib import Path

import numpy as np


def _best(cases: dict, datas: list, rounds: int) -> dict[str, float]:
    best = {name: [float("inf")] * len(datas) for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            for i, data in enumerate(datas):
                start = time.perf_counter()
                fn(i, data)
                best[name][i] = min(best[name][i], time.perf_counter() - start)
    return {name: 1000 * sum(times) / len(datas) for name, times in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=24, help="2100x1680 photos (24)")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (8)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastload-highres"),
                        help="where the photos are made once (shared with "
                        "test_highres_throughput.py)")
    args = parser.parse_args()

    import simplejpeg
    import torch
    import torchvision.transforms as T
    from PIL import Image
    from test_highres_throughput import highres_tree

    from fastload.pipelines.decode import resample as torch_resample
    from fastload.pipelines.decode import scaled as sd
    from fastload.pipelines.prefix import geometry as g
    from fastload.pipelines.translate import translate

    torch.set_num_threads(1)
    root = highres_tree(args.workdir, args.images)
    paths = sorted((root / "train").rglob("*.jpg"))[: args.images]
    datas = [np.frombuffer(p.read_bytes(), np.uint8) for p in paths]
    height, width = simplejpeg.decode_jpeg_header(datas[0])[:2]

    def pil_draft(_, data):
        with Image.open(io.BytesIO(data.tobytes())) as image:
            image.draft("RGB", (image.width // 8, image.height // 8))
            image.load()

    floor = {
        "simplejpeg 1/8 to grey (row i)": lambda _, d: simplejpeg.decode_jpeg(
            d, colorspace="GRAY", min_height=1, min_width=1),
        "simplejpeg 1/8 to RGB": lambda _, d: simplejpeg.decode_jpeg(
            d, colorspace="RGB", min_height=1, min_width=1),
        "Pillow draft() 1/8": pil_draft,
    }
    decode_region = sd._decode_region
    if decode_region is not None:

        def _storing(*args):
            return decode_region(*args, 0)

        def _libjpeg_huffman(*args):
            return decode_region(*args, 1)

        def _to_last_row(data, m, top, left, height, width, out):
            return decode_region(data, m, top + height - 1, left, 1, 1, out)

        h2, w2 = -(-height * 2 // 8), -(-width * 2 // 8)
        canvas = np.empty(h2 * w2 * 3, np.uint8)
        floor["entropy decoding alone (every row skipped)"] = lambda _, d: decode_region(
            d, 2, h2 - 1, 0, 1, 1, canvas)
        floor["entropy decoding alone, libjpeg-turbo's Huffman decoder"] = (
            lambda _, d: decode_region(d, 2, h2 - 1, 0, 1, 1, canvas, 1))

    def whole(m: int):
        h, w = -(-height * m // 8), -(-width * m // 8)
        return lambda _, d: simplejpeg.decode_jpeg(d, colorspace="RGB", min_height=h,
                                                   min_width=w)

    scales = {f"whole image at {m}/8": whole(m) for m in range(1, 9)}
    norm = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    transforms = {
        "Resize(256)+CenterCrop(224)": T.Compose([T.Resize(256), T.CenterCrop(224),
                                                  T.ToTensor(), T.Normalize(*norm)]),
        "RandomResizedCrop(224)+flip": T.Compose([T.RandomResizedCrop(224),
                                                  T.RandomHorizontalFlip(), T.ToTensor(),
                                                  T.Normalize(*norm)]),
    }
    work, pieces = {}, {}
    for name, transform in transforms.items():
        plan = translate(transform)
        gen = torch.Generator().manual_seed(0)
        sizes = [simplejpeg.decode_jpeg_header(d)[:2] for d in datas]
        params = [g.draw_sample(plan.steps, h, w, gen) for h, w in sizes]
        out = torch.empty((len(datas), 3, 224, 224), dtype=plan.output_dtype)
        writer = torch_resample.SampleWriter(plan, out)
        parity = sd.fixed_region(plan.steps)  # the loader's scale rule for this plan
        ways = {"region decoder": (False, sd._decode_region),
                # before fastload's own Huffman decoder: libjpeg-turbo's (mode 1)
                "region decoder, libjpeg-turbo's Huffman": (False, _libjpeg_huffman),
                # H9's baseline: libjpeg-turbo stores every MCU's coefficients, the cropped
                # columns' too (decode_region's optional last argument, 0)
                "region decoder, every MCU stored": (False, _storing),
                "whole image": (True, sd._decode_region)} if sd.region_decoder() else {
                "whole image": (True, None)}
        for way, (strict, region_fn) in ways.items():

            def sample(i, data, params=params, writer=writer, strict=strict, fn=region_fn,
                       parity=parity):
                sd._decode_region = fn
                try:
                    region, scaled = sd.decode_sample(data, params[i], strict=strict,
                                                      parity=parity)
                finally:
                    sd._decode_region = decode_region
                writer.write(i, region, scaled)

            work[f"{name}, {way}"] = sample
        if decode_region is None:
            continue
        # its pieces (H9): the Huffman decoding up to the region's last row, the region
        # decode without the resample, the resample and normalisation of decoded regions
        decoded = [(r.copy(), p) for r, p in (sd.decode_sample(d, q, parity=parity)
                                              for d, q in zip(datas, params, strict=True))]

        def decode_only(i, data, params=params, fn=decode_region, parity=parity):
            sd._decode_region = fn
            try:
                sd.decode_sample(data, params[i], parity=parity)
            finally:
                sd._decode_region = decode_region

        pieces[f"{name}: entropy decoding to the region's last row"] = functools.partial(
            decode_only, fn=_to_last_row)
        pieces[f"{name}: the region decode alone"] = decode_only
        pieces[f"{name}: resample + normalise alone"] = (
            lambda i, _, writer=writer, decoded=decoded: writer.write(i, *decoded[i]))
    results = _best({**floor, **scales, **work, **pieces}, datas, args.rounds)
    ref = results["simplejpeg 1/8 to grey (row i)"]
    print(f"{len(datas)} photos of {width}x{height}, best of {args.rounds} rounds, one thread")
    for name, ms in results.items():
        share = f"{ref / ms:5.0%} of the floor" if name in work else f"{ms / ref:5.2f}x the floor"
        print(f"{name:<66} {ms:6.2f} ms  {share}")


if __name__ == "__main__":
    main()
