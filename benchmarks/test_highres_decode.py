"""Decode candidates for high-resolution photos, one core, Resize(256)+CenterCrop(224).

Each candidate decodes a JPEG (full size, or at a reduced DCT scale that keeps at least the
pixels the resize produces) and then runs the same antialiased resample to torchvision's
output size, the same centre crop and ``ToTensor``. Rounds alternate the candidates
(A, B, C, ... A, B, C, ...); the table gives median and range of ms per image, and each
candidate's worst mean absolute difference per image from torchvision's full-decode output.

    python benchmarks/test_highres_decode.py --images 8 --rounds 7
    pytest benchmarks/test_highres_decode.py --benchmark-disable   # smoke: 2 small photos
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch

SHORT = 256  # Resize(256)
CROP = 224


def _output_size(height: int, width: int) -> tuple[int, int]:
    """torchvision's Resize(256) output (h, w)."""
    if width <= height:
        return int(SHORT * height / width), SHORT
    return SHORT, int(SHORT * width / height)


def _finish(decoded: np.ndarray, height: int, width: int) -> torch.Tensor:
    """The shared suffix: torch uint8 antialiased bilinear resample, centre crop, [0, 1]."""
    oh, ow = _output_size(height, width)
    with warnings.catch_warnings():  # Pillow's arrays are read-only; nothing writes to them
        warnings.simplefilter("ignore", UserWarning)
        src = torch.from_numpy(np.ascontiguousarray(decoded)).permute(2, 0, 1).unsqueeze(0)
    y = torch.nn.functional.interpolate(src, size=(oh, ow), mode="bilinear", antialias=True)[0]
    top, left = int(round((oh - CROP) / 2)), int(round((ow - CROP) / 2))
    return y[:, top : top + CROP, left : left + CROP].float().div_(255)


def pillow_full(data: bytes) -> torch.Tensor:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    return _finish(np.asarray(rgb), rgb.height, rgb.width)


def pillow_draft(data: bytes) -> torch.Tensor:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        height, width = im.height, im.width
        oh, ow = _output_size(height, width)
        im.draft("RGB", (ow, oh))  # the smallest 1/2^k scale at least this size
        rgb = im.convert("RGB")
    return _finish(np.asarray(rgb), height, width)


def simplejpeg_full(data: bytes) -> torch.Tensor:
    import simplejpeg

    decoded = simplejpeg.decode_jpeg(data, colorspace="RGB")
    return _finish(decoded, *decoded.shape[:2])


def simplejpeg_scaled(data: bytes) -> torch.Tensor:
    import simplejpeg

    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    oh, ow = _output_size(height, width)
    decoded = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=oh, min_width=ow)
    return _finish(decoded, height, width)


CANDIDATES = {
    "Pillow full decode": pillow_full,
    "Pillow draft()": pillow_draft,
    "simplejpeg full decode": simplejpeg_full,
    "simplejpeg min_height/min_width": simplejpeg_scaled,
}


def measure(datas: list[bytes], rounds: int) -> dict[str, dict]:
    """Per candidate: CPU ms per image (median, min, max over rounds) and worst MAD."""
    import torchvision.transforms as T
    from PIL import Image

    torch.set_num_threads(1)
    reference = T.Compose([T.Resize(SHORT), T.CenterCrop(CROP), T.ToTensor()])
    refs = [reference(Image.open(io.BytesIO(d)).convert("RGB")) for d in datas]
    out: dict[str, dict] = {}
    for name, fn in CANDIDATES.items():
        mads = [float((fn(d) - r).abs().mean()) for d, r in zip(datas, refs, strict=True)]
        out[name] = {"worst_mad": max(mads), "mean_mad": float(np.mean(mads)), "ms": []}
    for _ in range(rounds):
        for name, fn in CANDIDATES.items():
            start = time.process_time()
            for d in datas:
                fn(d)
            out[name]["ms"].append((time.process_time() - start) / len(datas) * 1e3)
    return out


def table(results: dict[str, dict]) -> str:
    base = statistics.median(results["Pillow full decode"]["ms"])
    lines = [f"{'candidate':<34} {'ms/img':>7} {'[range]':>15} {'x full':>7} {'worst MAD':>10}"]
    for name, r in results.items():
        ms = statistics.median(r["ms"])
        lines.append(f"{name:<34} {ms:7.2f} [{min(r['ms']):5.2f}-{max(r['ms']):5.2f}] "
                     f"{base / ms:7.2f} {r['worst_mad']:10.4f}")
    return "\n".join(lines)


def _photos(root: Path, images: int, size: tuple[int, int]) -> list[bytes]:
    from fastload.data.pictures.synth import synthesize

    synthesize(root, train=images, val=0, classes=2, seed=0, size=size)
    return [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]


def test_decode_candidates(benchmark, tmp_path, capsys):
    smoke = not benchmark.enabled
    datas = _photos(tmp_path, 2 if smoke else 8, (600, 800) if smoke else (1680, 2100))
    results = benchmark.pedantic(measure, args=(datas, 1 if smoke else 5), rounds=1)
    assert all(r["worst_mad"] <= 0.01 for r in results.values())
    if benchmark.enabled:
        with capsys.disabled():
            print("\n" + table(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=8, help="2100x1680 photos (8)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (7)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastload-highres-decode"))
    args = parser.parse_args()
    print(table(measure(_photos(args.workdir, args.images, (1680, 2100)), args.rounds)))


if __name__ == "__main__":
    main()
