"""Photographic bench images: crops of public-domain and CC0 photographs that packages ship.

Generated pictures (:mod:`fastload.data.pictures.synth`) decode unlike camera photos: more bytes per
pixel, less smooth structure. This module makes an ImageFolder tree out of real photographs
instead: the colour photos scikit-image ships inside its wheel (``skimage/data``) and the one
matplotlib ships (``mpl-data/sample_data``), each public domain or CC0 (:data:`SOURCES`
names each with its credit). They are read as files; neither package is imported.

Each output picture is a collage of one to a few panels (many more at camera sizes); each
panel is a randomly placed crop of a source photo, resampled by a random factor between
:data:`SCALE_RANGE` (Lanczos, so detail stays photographic), sometimes mirrored, with a mild
exposure and white-balance change per picture and camera-like sensor noise on top, saved as
a JPEG. Sizes default to ImageNet-like 0.2–0.4 MP; files weigh 2–3 bits per pixel at quality
90, as the source photos do. Class ``k`` is source photo ``k``: its photo fills the largest
panel, so a classifier can learn the labels.

Output is deterministic: picture ``i`` of a split draws from its own generator, seeded as
:func:`fastload.data.pictures.synth.synthesize` seeds its pictures.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from fastload.data.pictures.synth import check_tree_arguments, write_tree

__all__ = ["SOURCES", "TEXTURES", "SourcePhoto", "native_mosaic", "photo_image", "photo_size",
           "photo_tree", "source_paths"]

MEGAPIXELS = (0.2, 0.4)  # default picture area range, in millions of pixels
SCALE_RANGE = (0.6, 1.6)  # output px per source px of a panel (log-uniform)
PANEL_MEGAPIXELS = (0.06, 0.35)  # a panel larger than its drawn bound is split in two
NOISE_LEVELS = (1.0, 3.0)  # standard deviation of the sensor noise, in 8-bit levels
_ASPECTS = ((4 / 3, 0.5), (3 / 2, 0.3), (1.0, 0.1), (16 / 9, 0.1))  # (long/short, probability)


@dataclass(frozen=True)
class SourcePhoto:
    """A photograph a package ships: where it is and under what terms."""

    name: str
    package: str  # import name of the package whose folder holds it
    path: str  # path inside that package's folder
    terms: str
    credit: str


SOURCES: tuple[SourcePhoto, ...] = (
    SourcePhoto("astronaut", "skimage", "data/astronaut.png", "public domain",
                "Eileen Collins, NASA (scikit-image's astronaut)"),
    SourcePhoto("coffee", "skimage", "data/coffee.png", "CC0",
                "Rachel Michetti (scikit-image's coffee)"),
    SourcePhoto("chelsea", "skimage", "data/chelsea.png", "CC0",
                "Stefan van der Walt (scikit-image's chelsea)"),
    SourcePhoto("rocket", "skimage", "data/rocket.jpg", "public domain",
                "SpaceX, DSCOVR launch (scikit-image's rocket)"),
    SourcePhoto("hubble", "skimage", "data/hubble_deep_field.jpg", "public domain",
                "NASA, Hubble eXtreme Deep Field (scikit-image's hubble_deep_field)"),
    SourcePhoto("ihc", "skimage", "data/ihc.png", "no known copyright restrictions",
                "Center for Microscopy And Molecular Imaging (scikit-image's "
                "immunohistochemistry)"),
    SourcePhoto("grace_hopper", "matplotlib", "mpl-data/sample_data/grace_hopper.jpg",
                "public domain", "U.S. Navy portrait of Grace Hopper (matplotlib's sample data)"),
)

# Photographs of fine texture (grey, CC0) that scikit-image ships: the most detailed real
# content at hand, for value checks of a scaled decode (:func:`native_mosaic`); not classes.
TEXTURES: tuple[SourcePhoto, ...] = (
    SourcePhoto("grass", "skimage", "data/grass.png", "CC0",
                "linolafett, DeviantArt (scikit-image's grass)"),
    SourcePhoto("gravel", "skimage", "data/gravel.png", "CC0",
                "CC0Textures Gravel04 (scikit-image's gravel)"),
    SourcePhoto("brick", "skimage", "data/brick.png", "CC0",
                "CC0Textures Bricks25 (scikit-image's brick)"),
)

_INSTALL_HINT = ("the photographic set reads the sample photos scikit-image and matplotlib "
                 "ship; install them with `pip install 'fastload-dali[photos]'`")


@functools.cache
def _located(count: int, sources: tuple[SourcePhoto, ...] = SOURCES) -> tuple[str, ...]:
    paths = []
    for source in sources[:count]:
        try:
            spec = importlib.util.find_spec(source.package)  # locates without importing it
        except ModuleNotFoundError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"{source.package} is not installed: {_INSTALL_HINT}")
        path = os.path.join(list(spec.submodule_search_locations)[0], source.path)
        if not os.path.isfile(path):
            raise ValueError(f"{path} is missing from the installed {source.package} (source "
                             f"photo {source.name!r}): {_INSTALL_HINT}")
        paths.append(path)
    return tuple(paths)


def source_paths(count: int | None = None) -> list[str]:
    """Paths of the first ``count`` source photos (all by default), in :data:`SOURCES` order.

    Raises ``ValueError`` naming the missing package or file, with the install command."""
    if count is None:
        count = len(SOURCES)
    if not 1 <= count <= len(SOURCES):
        raise ValueError(f"the photographic set has {len(SOURCES)} source photos, so classes "
                         f"should be 1 to {len(SOURCES)}, but got classes={count}")
    return list(_located(count))


_LOADED: dict[str, Image.Image] = {}  # per process: each source is decoded once


def _source(path: str) -> Image.Image:
    image = _LOADED.get(path)
    if image is None:
        with Image.open(path) as opened:
            image = _LOADED[path] = opened.convert("RGB")
    return image


def native_mosaic(rng: np.random.Generator, height: int, width: int,
                  sources: tuple[SourcePhoto, ...] = SOURCES) -> Image.Image:
    """A ``height`` x ``width`` RGB picture tiled with crops of ``sources`` at their native
    resolution: never resampled (so every pixel's detail is the camera's), some mirrored,
    nothing added. Panels are cut from the frame until each fits one source photo and holds
    at most 0.5 MP; each shows a randomly placed crop of a photo large enough for it. For
    checking values at any size (e.g. 12 MP from photos of 0.2-0.8 MP); uses only ``rng``."""
    if height < 8 or width < 8:
        raise ValueError(f"image sides should be at least 8 px, but got {height}x{width}")
    photos = [_source(p) for p in _located(len(sources), tuple(sources))]
    canvas = Image.new("RGB", (width, height))

    def small_enough(h: int, w: int) -> bool:
        fits = any(h <= p.height and w <= p.width for p in photos)
        return fits and (h * w <= 500_000 or min(h, w) < 128)

    for top, left, h, w in _split_frame(rng, height, width, small_enough):
        fitting = [p for p in photos if p.height >= h and p.width >= w]
        photo = fitting[int(rng.integers(len(fitting)))]
        y, x = int(rng.integers(0, photo.height - h + 1)), int(rng.integers(0, photo.width - w + 1))
        panel = photo.crop((x, y, x + w, y + h))
        if rng.random() < 0.5:
            panel = panel.transpose(Image.FLIP_LEFT_RIGHT)
        canvas.paste(panel, (left, top))
    return canvas


def photo_size(rng: np.random.Generator, megapixels: tuple[float, float] = MEGAPIXELS
               ) -> tuple[int, int]:
    """Draw a camera-like ``(height, width)``: area uniform in ``megapixels``, a 4:3, 3:2,
    1:1 or 16:9 frame, four in five landscape."""
    area = rng.uniform(*megapixels) * 1e6
    aspects, weights = zip(*_ASPECTS, strict=True)
    aspect = aspects[int(rng.choice(len(aspects), p=weights))]
    long_side = int(round(math.sqrt(area * aspect)))
    short_side = int(round(long_side / aspect))
    if rng.random() < 0.8:
        return short_side, long_side
    return long_side, short_side


def _panels(rng: np.random.Generator, height: int, width: int,
            sources: list[Image.Image]) -> list[tuple[int, int, int, int]]:
    """Split the frame into ``(top, left, height, width)`` panels: a panel is cut in two
    across its longer side while it exceeds a drawn area or no source photo can fill it at
    the largest scale."""
    limit = math.exp(rng.uniform(*np.log(PANEL_MEGAPIXELS))) * 1e6
    largest = max(s.width * s.height for s in sources) * SCALE_RANGE[1] ** 2
    done = _split_frame(
        rng, height, width,
        lambda h, w: (h * w <= max(limit, 1) and h * w <= largest) or min(h, w) < 64)
    return sorted(done, key=lambda p: -p[2] * p[3])


def _split_frame(rng: np.random.Generator, height: int, width: int,
                 small_enough: Callable[[int, int], bool]) -> list[tuple[int, int, int, int]]:
    """``(top, left, height, width)`` panels of the frame: a panel is cut in two across its
    longer side, at a drawn 35-65% of it, until ``small_enough(height, width)``."""
    todo, done = [(0, 0, height, width)], []
    while todo:
        top, left, h, w = todo.pop()
        if small_enough(h, w):
            done.append((top, left, h, w))
            continue
        if w >= h:
            cut = int(round(w * rng.uniform(0.35, 0.65)))
            todo += [(top, left, h, cut), (top, left + cut, h, w - cut)]
        else:
            cut = int(round(h * rng.uniform(0.35, 0.65)))
            todo += [(top, left, cut, w), (top + cut, left, h - cut, w)]
    return done


def _panel(rng: np.random.Generator, source: Image.Image, h: int, w: int) -> Image.Image:
    """A ``w`` x ``h`` crop of ``source`` at a drawn scale, randomly placed, maybe mirrored."""
    scale = math.exp(rng.uniform(*np.log(SCALE_RANGE)))
    scale = max(scale, h / source.height, w / source.width)  # the crop must fit the source
    ch, cw = min(source.height, h / scale), min(source.width, w / scale)
    top = rng.uniform(0, source.height - ch)
    left = rng.uniform(0, source.width - cw)
    panel = source.resize((w, h), Image.LANCZOS, box=(left, top, left + cw, top + ch))
    return panel.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else panel


def photo_image(rng: np.random.Generator, label: int, classes: int, height: int,
                width: int) -> Image.Image:
    """One RGB picture of class ``label`` (source photo ``label``), ``height`` x ``width``
    px, from the first ``classes`` source photos; uses only ``rng`` for randomness."""
    if not 0 <= label < classes:
        raise ValueError(f"label should be in [0, {classes}), but got label={label}")
    if height < 8 or width < 8:
        raise ValueError(f"image sides should be at least 8 px, but got {height}x{width}")
    sources = [_source(p) for p in source_paths(classes)]
    canvas = Image.new("RGB", (width, height))
    for k, (top, left, h, w) in enumerate(_panels(rng, height, width, sources)):
        # The largest panel shows the class's photo; the others it or any photo, half each.
        pick = label if k == 0 or rng.random() < 0.5 else int(rng.integers(0, classes))
        canvas.paste(_panel(rng, sources[pick], h, w), (left, top))
    # Exposure and white balance, then sensor noise in the luminance (a camera's JPEG keeps
    # little chroma noise), channel by channel on float32 planes.
    gains = rng.uniform(0.9, 1.1) * rng.uniform(0.95, 1.05, size=3)
    noise = rng.standard_normal((height, width), dtype=np.float32)
    noise *= np.float32(rng.uniform(*NOISE_LEVELS))
    noise += np.float32(0.5)  # rounds to nearest below
    planes = []
    for c, plane in enumerate(canvas.split()):
        values = np.asarray(plane, dtype=np.float32) * np.float32(gains[c])
        values += noise
        np.clip(values, 0, 255, out=values)
        planes.append(Image.fromarray(values.astype(np.uint8), mode="L"))
    return Image.merge("RGB", planes)


def photo_tree(
    out: str | os.PathLike,
    train: int = 1000,
    val: int = 200,
    classes: int | None = None,
    seed: int = 0,
    quality: int = 90,
    workers: int | None = None,
    progress: bool = False,
    size: tuple[int, int] | None = None,
    megapixels: tuple[float, float] = MEGAPIXELS,
) -> pathlib.Path:
    """Write ``out/{train,val}/<class>/<name>.jpg`` from the source photos.

    As :func:`fastload.data.pictures.synth.synthesize` (same layout, labels ``i % classes``, bytes
    that depend only on the arguments other than ``workers`` and ``progress``), with
    pictures of :func:`photo_image`: collages of crops of the public-domain and CC0
    photographs scikit-image and matplotlib ship (class k = photo k).

    Args:
        out: the folder to write the tree into (created if missing).
        train: training images, at least 0.
        val: validation images, at least 0.
        classes: classes, 1 to the number of source photos (default: all of
            :data:`SOURCES`).
        seed: random seed, at least 0; the same arguments give the same bytes.
        quality: JPEG quality, 1 to 100.
        workers: processes that generate in parallel, at least 1 (default: all cores).
        progress: show a progress bar on stderr.
        size: ``(height, width)`` of every picture, each at least 8 (e.g. ``(1680, 2100)``)
            instead of sizes drawn by :func:`photo_size`.
        megapixels: ``(low, high)`` picture area range in millions of pixels the sizes
            are drawn within, ``0 < low <= high``.

    Returns:
        ``Path(out)``.

    Raises:
        TypeError: a count, side, seed or quality that is not an integer.
        ValueError: a value out of its range, or a source photo's package or file
            missing (naming it, with the install command).
        FileExistsError: ``out/train`` or ``out/val`` holds files these arguments would not
            write (:func:`fastload.data.pictures.synth.refuse_other_files`).
    """
    if classes is None:
        classes = len(SOURCES)
    workers, size = check_tree_arguments(train, val, classes, seed, quality, workers, size)
    source_paths(classes)  # names a missing package before anything is written
    try:
        low, high = (float(v) for v in megapixels)
    except (TypeError, ValueError):
        raise ValueError(f"megapixels should be (low, high), but got megapixels={megapixels!r}"
                         ) from None
    if not 0 < low <= high:
        raise ValueError(f"megapixels should be (low, high) with 0 < low <= high, but got "
                         f"megapixels={megapixels!r}")
    return write_tree(out, train, val, classes, seed, quality, workers, progress,
                       _photo_picture, (low, high), size)


def _photo_picture(rng: np.random.Generator, label: int, classes: int,
                   size: tuple[int, int] | None, shape: tuple) -> Image.Image:
    """A picture for the tree writer; ``shape`` = the megapixel range of its drawn size."""
    height, width = photo_size(rng, shape)
    if size is not None:  # the draw above still runs: the picture's stream stays aligned
        height, width = size
    return photo_image(rng, label, classes, height, width)
