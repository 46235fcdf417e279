"""Realistic generated images: an ImageFolder tree of JPEGs that look like ImageNet to a decoder.

No image data set can be downloaded, so fastload makes its own. Each picture is a smooth
low-frequency scene (colour gradient, soft light), a few hard-edged shapes, class-specific
stripes, fine texture and mild sensor noise, saved as a JPEG. Sizes follow a photo-like
distribution (about 300–800 px a side, mean near 450×380 with the default bounds) and files
weigh about 60–120 KB at quality 90, so decoding and resizing cost what real photos cost.

The class signal is strong and global so a small model learns it in a couple of epochs and a
fine-tune proves that labels line up: every class owns a dominant hue (classes spread evenly
round the colour wheel) and a stripe orientation and frequency. Both survive random crops,
flips and resizing down to 32 px.

Output is deterministic: image ``i`` of a split is drawn from its own generator seeded by
``(seed, split, i)``, so the bytes do not depend on the number of worker processes.
"""

from __future__ import annotations

import colorsys
import io
import os
import pathlib

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from fastload.utils.checks import file_on_path
from fastload.utils.process import default_context, interrupts_held, owned_child

__all__ = ["synthesize", "synth_image", "class_names", "image_size", "tree_stats",
           "check_tree_arguments", "write_tree"]

SPLITS = ("train", "val")
_SPLIT_IDS = {"train": 0, "val": 1}
_CHUNK = 16  # images per task sent to a worker process
STRIPE_AMPLITUDE = 0.16  # class stripes, share of full brightness
TEXTURE_AMPLITUDE = 0.7  # peak grain, share of full brightness
FINE_SHARE = 0.7  # share of pixel-level grain in the texture, the rest is coarser
SHAPES = (4, 12)  # fewest and most shapes per picture
GRAIN_SIDE = 800  # longest side (px) up to which the texture grain is one pixel
LENS_BLUR = 0.4  # Gaussian blur radius of larger pictures, in grain cells
NOISE_LEVELS = 6.0  # peak colour noise, in 8-bit levels


def class_names(classes: int) -> list[str]:
    """Folder names ``class_00``, ``class_01``, ... (zero-padded so they sort in label order)."""
    digits = max(2, len(str(classes - 1)))
    return [f"class_{i:0{digits}d}" for i in range(classes)]


def image_size(rng: np.random.Generator, min_side: int = 300, max_side: int = 800) -> tuple[int, int]:
    """Draw a photo-like ``(height, width)`` within ``[min_side, max_side]``.

    Four in five pictures are landscape. With the default bounds the mean is about 450×380
    (width × height), as in ImageNet's training set.
    """
    span = max_side - min_side
    long_side = min_side + span * rng.beta(2.0, 3.9)
    short_side = min_side + (long_side - min_side) * rng.beta(2.0, 3.6)
    long_px, short_px = int(round(long_side)), int(round(short_side))
    if rng.random() < 0.8:
        return short_px, long_px
    return long_px, short_px


def _bumps(n: int, cells: int) -> np.ndarray:
    """``n`` × ``cells`` matrix of Gaussian bumps spread over [0, 1]; rows sum to 1."""
    pos = np.linspace(0.0, 1.0, n, dtype=np.float32)[:, None]
    centres = np.linspace(-0.5 / cells, 1.0 + 0.5 / cells, cells, dtype=np.float32)[None, :]
    weights = np.exp(-(((pos - centres) * (cells - 1)) ** 2))
    return weights / weights.sum(axis=1, keepdims=True)


def _smooth_field(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """A smooth random float32 field in about [-1, 1] with ``cells`` blobs along the long side:
    random values on a coarse grid, interpolated with separable Gaussian bumps (two small
    matrix products, far cheaper than resampling an image)."""
    gh = max(2, int(round(cells * height / max(height, width))) + 1)
    gw = max(2, int(round(cells * width / max(height, width))) + 1)
    grid = rng.uniform(-1.0, 1.0, size=(gh, gw)).astype(np.float32)
    # Sum of outer products rather than ``@``: BLAS would start threads for a few kFLOP.
    rows = (_bumps(height, gh)[:, :, None] * grid[None, :, :]).sum(axis=1)
    cols = _bumps(width, gw)
    field = rows[:, :1] * cols[:, 0]
    for k in range(1, gw):
        field += rows[:, k : k + 1] * cols[:, k]
    return field / max(float(np.abs(field).max()), 1e-6)


def _class_palette(rng: np.random.Generator, label: int, classes: int) -> np.ndarray:
    """Three RGB colours (rows, float32 in [0, 1]) around the class hue."""
    hue = label / classes
    colours = []
    for _ in range(3):
        h = (hue + rng.normal(0.0, 0.15 / max(classes, 1))) % 1.0
        s = rng.uniform(0.45, 0.95)
        v = rng.uniform(0.45, 0.95)
        colours.append(colorsys.hsv_to_rgb(h, s, v))
    return np.asarray(colours, dtype=np.float32)


def synth_image(
    rng: np.random.Generator, label: int, classes: int, height: int, width: int
) -> Image.Image:
    """Draw one RGB picture of class ``label`` out of ``classes``, ``height`` × ``width`` px.

    Uses only ``rng`` for randomness, so the same generator state gives the same picture.
    """
    if not 0 <= label < classes:
        raise ValueError(f"label should be in [0, {classes}), but got label={label}")
    if height < 8 or width < 8:
        raise ValueError(f"image sides should be at least 8 px, but got {height}x{width}")
    palette = _class_palette(rng, label, classes)
    long_side = max(height, width)
    yy = np.linspace(-1.0, 1.0, height, dtype=np.float32)[:, None] * (height / long_side)
    xx = np.linspace(-1.0, 1.0, width, dtype=np.float32)[None, :] * (width / long_side)

    # Shapes with hard edges (ellipses, polygons) in class colours, some in any colour,
    # drawn as indices into a one-channel mask; index 0 is the background.
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    shape_colours = [np.zeros(3, dtype=np.float32)]
    for index in range(1, int(rng.integers(SHAPES[0], SHAPES[1] + 1)) + 1):
        if rng.random() < 0.75:
            colour = palette[int(rng.integers(0, 3))] * rng.uniform(0.6, 1.2)
        else:
            colour = rng.uniform(0.1, 0.9, size=3)
        shape_colours.append(np.clip(colour, 0.0, 1.0).astype(np.float32))
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        size = np.exp(rng.uniform(np.log(0.02), np.log(0.25)))
        rx = size * rng.uniform(0.6, 1.6) * long_side
        ry = size * rng.uniform(0.6, 1.6) * long_side
        if rng.random() < 0.5:
            draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=index)
        else:
            n = int(rng.integers(3, 7))
            angles = np.sort(rng.uniform(0, 2 * np.pi, size=n))
            radii = rng.uniform(0.5, 1.0, size=n)
            points = [
                (float(cx + rx * r * np.cos(a)), float(cy + ry * r * np.sin(a)))
                for a, r in zip(angles, radii, strict=True)
            ]
            draw.polygon(points, fill=index)
    shape_index = np.asarray(mask)
    inside = shape_index > 0
    lut = np.stack(shape_colours) * 255.0  # (shapes + 1, 3)
    # Background: two class colours blended along a smooth field.
    mix = 0.5 + 0.5 * _smooth_field(rng, height, width, 3)

    # Light, one channel: soft directional gradient and blotches.
    angle = rng.uniform(0.0, 2.0 * np.pi)
    light = 0.85 + 0.25 * (np.cos(angle) * xx + np.sin(angle) * yy)
    light = light + 0.12 * _smooth_field(rng, height, width, 6)
    # Class stripes: orientation and frequency belong to the class, phase to the picture.
    # sin(a*x + b*y + p) split into outer products, so no full-size sine is evaluated.
    theta = np.pi * (label % 8) / 8.0 + rng.normal(0.0, 0.04)
    cycles = 3.0 + 2.0 * ((label * 3) % 5) + rng.uniform(-0.3, 0.3)
    phase = rng.uniform(0.0, 2.0 * np.pi)
    ax = np.float32(np.pi * cycles * np.cos(theta)) * xx
    ay = np.float32(np.pi * cycles * np.sin(theta)) * yy + np.float32(phase)
    light += STRIPE_AMPLITUDE * (np.sin(ax) * np.cos(ay) + np.cos(ax) * np.sin(ay))
    # Texture: fine grain plus a coarser, smoothed grain (foliage, fabric), with a strength
    # that varies over the picture (a textured field next to a smooth sky).
    strength = np.clip(0.5 + _smooth_field(rng, height, width, 4), 0.1, 1.0)
    # A larger picture shows the same scene at a finer sampling: its grain spans more pixels
    # (one pixel up to GRAIN_SIDE px a side, as in ImageNet-sized photos).
    grain = max(1, int(round(long_side / GRAIN_SIDE)))
    gh, gw = -(-height // grain), -(-width // grain)
    fine = rng.integers(0, 256, size=(gh, gw), dtype=np.uint8).astype(np.float32)
    coarse = rng.integers(0, 256, size=((gh + 3) // 2, (gw + 3) // 2), dtype=np.uint8)
    coarse = coarse.astype(np.float32)
    coarse = (coarse[:-1] + coarse[1:]) * 0.5
    coarse = (coarse[:, :-1] + coarse[:, 1:]) * 0.5
    coarse = np.repeat(np.repeat(coarse, 2, axis=0), 2, axis=1)[:gh, :gw]
    if grain > 1:
        fine = np.repeat(np.repeat(fine, grain, axis=0), grain, axis=1)[:height, :width]
        coarse = np.repeat(np.repeat(coarse, grain, axis=0), grain, axis=1)[:height, :width]
    texture = FINE_SHARE * (fine - 127.5) + (1.0 - FINE_SHARE) * (coarse - 127.5)
    light += (TEXTURE_AMPLITUDE / 128.0) * strength * texture
    # Compose channel by channel (numpy broadcasts a trailing axis of 3 slowly), then add
    # mild colour noise (uniform, a few levels).
    channels = []
    for c in range(3):
        plane = np.float32(palette[0, c] * 255.0) + np.float32(
            (palette[1, c] - palette[0, c]) * 255.0
        ) * mix
        plane = np.where(inside, lut[shape_index, c], plane)
        plane *= light
        noise = rng.integers(0, 256, size=(height, width), dtype=np.uint8)
        plane += (NOISE_LEVELS / 128.0) * (noise.astype(np.float32) - 127.5)
        np.clip(plane + 0.5, 0, 255, out=plane)
        channels.append(Image.fromarray(plane.astype(np.uint8), mode="L"))
    picture = Image.merge("RGB", channels)
    if grain > 1:  # a camera's lens and demosaicing soften detail at the pixel scale
        picture = picture.filter(ImageFilter.GaussianBlur(LENS_BLUR * grain))
    return picture


def _image_seed(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, _SPLIT_IDS[split], index]))


def _generated_picture(rng: np.random.Generator, label: int, classes: int,
                       size: tuple[int, int] | None, shape: tuple) -> Image.Image:
    """A generated picture; ``shape`` = ``(min_side, max_side)`` bounds its drawn size."""
    height, width = image_size(rng, *shape)
    if size is not None:  # the draw above still runs: the picture's stream stays aligned
        height, width = size
    return synth_image(rng, label, classes, height, width)


def _write_chunk(
    job: tuple,
) -> list[tuple[int, int, int]]:
    """Generate and write images ``start .. stop-1`` of one split; return (w, h, bytes) each."""
    root, split, start, stop, classes, seed, quality, picture_of, shape, size, names = job
    out = []
    for index in range(start, stop):
        label = index % classes
        picture = picture_of(_image_seed(seed, split, index), label, classes, size, shape)
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=quality)
        data = buffer.getvalue()
        path = pathlib.Path(root, split, names[label], f"{names[label]}_{index:06d}.jpg")
        tmp = path.with_suffix(".jpg.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        out.append((picture.width, picture.height, len(data)))
    return out


def _check_int(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} should be an integer, but got {name}={value!r}")
    if value < low:
        raise ValueError(f"{name} should be at least {low}, but got {name}={value}")


def check_tree_arguments(train: int, val: int, classes: int, seed: int, quality: int,
                         workers: int | None, size: tuple[int, int] | None
                         ) -> tuple[int, tuple[int, int] | None]:
    """Check the arguments both kinds of tree (:func:`synthesize`,
    :func:`fastload.data.pictures.photos.photo_tree`) share; return ``(workers, size)``
    resolved (``workers=None``: all cores)."""
    _check_int("train", train, 0)
    _check_int("val", val, 0)
    _check_int("classes", classes, 1)
    _check_int("seed", seed, 0)
    _check_int("quality", quality, 1)
    if quality > 100:
        raise ValueError(f"quality should be in [1, 100], but got quality={quality}")
    if size is not None:
        if len(size) != 2:
            raise ValueError(f"size should be (height, width), but got size={size!r}")
        for side in size:
            if isinstance(side, bool) or not isinstance(side, (int, np.integer)):
                raise TypeError(f"size should be two integers, but got size={size!r}")
            if side < 8:
                raise ValueError(f"size should have sides of at least 8 px, but got "
                                 f"size={size!r}")
        size = (int(size[0]), int(size[1]))
        if size[0] * size[1] > Image.MAX_IMAGE_PIXELS:  # what Pillow, so torchvision, opens
            raise ValueError(f"size should be at most {Image.MAX_IMAGE_PIXELS:,} pixels (Pillow's "
                             f"MAX_IMAGE_PIXELS, past which it refuses to open a picture), but "
                             f"got size={size!r}")
    if workers is None:
        workers = os.cpu_count() or 1
    _check_int("workers", workers, 1)
    if train == 0 and val == 0:
        raise ValueError("train and val are both 0: nothing to write; pass train=N (and val=M) "
                         "images")
    for name, count in (("train", train), ("val", val)):
        if 0 < count < classes:  # a class folder without images: ImageFolder and convert refuse it
            raise ValueError(f"{name}={count} images cannot fill classes={classes} class folders "
                             f"(each needs at least one); pass classes={count} or fewer, or "
                             f"{name}={classes} or more")
    return workers, size


def synthesize(
    out: str | os.PathLike,
    train: int = 1000,
    val: int = 200,
    classes: int = 10,
    seed: int = 0,
    quality: int = 90,
    workers: int | None = None,
    min_side: int = 300,
    max_side: int = 800,
    progress: bool = False,
    size: tuple[int, int] | None = None,
) -> pathlib.Path:
    """Write ``out/train/<class>/<name>.jpg`` and ``out/val/<class>/<name>.jpg``.

    ``train`` and ``val`` images are spread evenly over ``classes`` folders (image ``i`` has
    label ``i % classes``). The bytes depend only on the arguments other than ``workers``
    and ``progress``. Files of a run with the same arguments are written again; any
    other file or folder in ``out/train`` or ``out/val`` is refused (``FileExistsError``),
    before anything is written. For crops of real
    photographs instead, see :func:`fastload.data.pictures.photos.photo_tree`.

    Args:
        out: the folder to write the tree into (created if missing).
        train: training images: 0 (no ``train/``), or at least ``classes``.
        val: validation images: 0 (no ``val/``), or at least ``classes``.
        classes: class folders, at least 1.
        seed: random seed, at least 0; the same arguments give the same bytes.
        quality: JPEG quality, 1 to 100.
        workers: processes that generate in parallel, at least 1 (default: all cores).
        min_side: shortest drawn picture side in px, at least 8.
        max_side: longest drawn picture side in px, at least ``min_side``.
        progress: show a progress bar on stderr.
        size: ``(height, width)`` of every picture, each at least 8 (e.g. ``(1680, 2100)``
            for camera-sized photos) instead of drawn sizes.

    Returns:
        ``Path(out)``.

    Raises:
        TypeError: a count, side, seed or quality that is not an integer.
        ValueError: a value below its minimum, ``quality`` above 100, or ``size`` not a
            pair.
        FileExistsError: ``out/train`` or ``out/val`` holds files these arguments would not
            write.
    """
    workers, size = check_tree_arguments(train, val, classes, seed, quality, workers, size)
    _check_int("min_side", min_side, 8)
    _check_int("max_side", max_side, 8)
    if max_side < min_side:
        raise ValueError(f"max_side should be at least min_side={min_side}, but got "
                         f"max_side={max_side}")
    return write_tree(out, train, val, classes, seed, quality, workers, progress,
                       _generated_picture, (min_side, max_side), size)


def write_tree(out: str | os.PathLike, train: int, val: int, classes: int, seed: int,
              quality: int, workers: int, progress: bool, picture_of, shape: tuple,
              size: tuple[int, int] | None) -> pathlib.Path:
    """Write the tree of checked arguments (the one writer of :func:`synthesize` and
    :func:`fastload.data.pictures.photos.photo_tree`): picture ``i`` is
    ``picture_of(rng, label, classes, size, shape)``, a module-level function (it crosses
    to the worker processes)."""
    root = pathlib.Path(out)
    blocking = file_on_path(root)
    if blocking is not None:
        raise FileExistsError(f"out={os.fspath(out)!r} cannot be made: {blocking!r} on its "
                              "path is a file, not a folder; pass another path")
    names = class_names(classes)
    refuse_other_files(root, {"train": train, "val": val}, names)
    jobs = []
    for split, count in (("train", train), ("val", val)):
        for name in names[:count]:  # no split folder for 0 images (no class folder left empty)
            (root / split / name).mkdir(parents=True, exist_ok=True)
        for start in range(0, count, _CHUNK):
            stop = min(start + _CHUNK, count)
            jobs.append((str(root), split, start, stop, classes, seed, quality, picture_of,
                         shape, size, names))

    bar = None
    if progress:  # a tqdm bar on a terminal, a plain line every 30 s in a log
        from fastload.utils.progress import progress as progress_bar

        bar = progress_bar(total=train + val, unit="img", desc="synth")
    try:
        if workers == 1 or len(jobs) <= 1:
            for job in jobs:
                done = _write_chunk(job)
                if bar is not None:
                    bar.update(len(done))
        else:
            # owned_child: a Ctrl-C reaches this process, whose pool then terminates its
            # workers (leaving the with block), and no worker prints a traceback of its own;
            # the workers start with SIGINT held back until owned_child ignores it
            context = default_context()
            with interrupts_held(context.get_start_method()):
                pool = context.Pool(min(workers, len(jobs)), initializer=owned_child)
            with pool:
                for done in pool.imap(_write_chunk, jobs):
                    if bar is not None:
                        bar.update(len(done))
    finally:
        if bar is not None:
            bar.close()
    return root


def refuse_other_files(root: pathlib.Path, counts: dict[str, int], names: list[str]) -> None:
    """Refuse to write a tree into ``root`` whose ``train/`` or ``val/`` holds a file or
    folder this tree would not write (``counts`` images a split over ``names``): an earlier
    run's with other arguments, or the user's, would make one data set of both. The files
    of a run with the same arguments (and its unfinished ``.tmp`` files) are written again."""
    others = []
    for split, count in counts.items():
        top = root / split
        if not top.is_dir():
            continue
        folders = names[:count]
        for entry in sorted(os.scandir(top), key=lambda e: e.name):
            if entry.name not in folders or not entry.is_dir():
                others.append(f"{split}/{entry.name}")
                continue
            label = folders.index(entry.name)
            others += [f"{split}/{entry.name}/{file}" for file in sorted(os.listdir(entry.path))
                       if not _written_here(file, entry.name, label, count, len(names))]
    if others:
        raise FileExistsError(
            f"{str(root)!r} already holds {len(others)} file(s) or folder(s) in train/ or val/ "
            f"that these arguments would not write ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}): they would join this data set; write to "
            "a new or empty folder, or remove them first")


def _written_here(file: str, folder: str, label: int, count: int, classes: int) -> bool:
    """Whether ``file`` in the class folder ``folder`` (of ``label``) is a picture a tree of
    ``count`` images over ``classes`` writes there (as :func:`_write_chunk` names it), or its
    unfinished ``.tmp``."""
    name = file.removesuffix(".tmp")
    index = name.removeprefix(f"{folder}_").removesuffix(".jpg")
    return (index.isdigit() and int(index) < count and int(index) % classes == label
            and name == f"{folder}_{int(index):06d}.jpg")


def tree_stats(root: str | os.PathLike) -> dict[str, float]:
    """Count, mean width, mean height and mean file size (KB) of the JPEGs under ``root``'s
    ``train/`` and ``val/`` (under ``root`` where it has neither).

    Reads only the JPEG headers, so it is cheap even for large trees.
    """
    root = pathlib.Path(root)
    splits = [root / split for split in ("train", "val") if (root / split).is_dir()]
    # the tree synth writes (not the other files of a folder it was written into)
    paths = sorted(p for folder in splits or [root] for p in folder.rglob("*.jpg"))
    if not paths:
        raise FileNotFoundError(f"no .jpg files under {root}; run `fastload synth {root}` first")
    widths, heights, sizes = [], [], []
    for path in paths:
        with Image.open(path) as picture:
            widths.append(picture.width)
            heights.append(picture.height)
        sizes.append(path.stat().st_size)
    return {
        "count": len(paths),
        "mean_width": float(np.mean(widths)),
        "mean_height": float(np.mean(heights)),
        "mean_kb": float(np.mean(sizes)) / 1024.0,
    }
