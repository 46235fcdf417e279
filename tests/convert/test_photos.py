"""The photographic set: crops of the sample photos packages ship, as an ImageFolder tree."""

from __future__ import annotations

import io
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from fastload.data.pictures.photos import (
    SOURCES,
    photo_image,
    photo_size,
    photo_tree,
    source_paths,
)
from fastload.tools.cli import main

SMALL = (0.02, 0.04)  # megapixels: cheap pictures for the tests that do not look at sizes


def _tree_bytes(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jpg"))}


def _histogram(picture: Image.Image) -> np.ndarray:
    rgb = np.asarray(picture.convert("RGB").resize((64, 64), Image.BILINEAR)).reshape(-1, 3) // 32
    counts = np.bincount(rgb[:, 0] * 64 + rgb[:, 1] * 8 + rgb[:, 2], minlength=512)
    return counts / counts.sum()


@pytest.fixture(scope="session")
def photo_root(tmp_path_factory):
    """14 train / 7 val small crops of the 7 source photos (classes = photos)."""
    return photo_tree(tmp_path_factory.mktemp("photos"), train=14, val=7, workers=1,
                      megapixels=SMALL)


def test_every_source_photo_is_found_in_the_installed_packages():
    paths = source_paths()
    assert len(paths) == len(SOURCES) == 7
    for path in paths:
        with Image.open(path) as picture:
            assert picture.width * picture.height >= 100_000


def test_photo_tree_writes_a_balanced_imagefolder_tree_of_jpegs(photo_root):
    for split, count in (("train", 14), ("val", 7)):
        folders = sorted(p.name for p in (photo_root / split).iterdir())
        assert folders == [f"class_{i:02d}" for i in range(7)]
        assert [len(list((photo_root / split / f).glob("*.jpg"))) for f in folders] == [count // 7] * 7
    assert not list(photo_root.rglob("*.tmp"))


def test_photo_pictures_are_imagenet_sized_and_weigh_what_q90_photos_weigh():
    areas, bits = [], []
    for index in range(14):
        rng = np.random.default_rng([3, index])
        height, width = photo_size(rng)
        picture = photo_image(rng, index % 7, 7, height, width)
        assert picture.size == (width, height)
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=90)
        areas.append(height * width)
        bits.append(8 * len(buffer.getvalue()) / (height * width))
    assert 200_000 <= min(areas) and max(areas) <= 400_000
    assert 1.5 <= np.mean(bits) <= 3.5  # the source photos at q90: 1.5-2.7 bits per pixel


def test_photo_tree_same_seed_gives_identical_bytes_whatever_the_workers(photo_root, tmp_path):
    again = photo_tree(tmp_path / "two", train=14, val=7, workers=2, megapixels=SMALL)
    assert _tree_bytes(again) == _tree_bytes(photo_root)


def test_photo_pictures_are_distinct_crops_not_repeats(photo_root):
    thumbs = [np.asarray(Image.open(p).convert("L").resize((16, 16)), dtype=np.float32)
              for p in sorted(photo_root.rglob("*.jpg"))]
    closest = min(np.abs(a - b).mean() for i, a in enumerate(thumbs) for b in thumbs[i + 1:])
    assert closest > 3.0  # grey levels: no picture is a near copy of another


def test_photo_class_k_shows_source_photo_k(photo_root):
    sources = [_histogram(Image.open(p)) for p in source_paths()]
    right = total = 0
    for label in range(7):
        for path in (photo_root / "train" / f"class_{label:02d}").glob("*.jpg"):
            seen = _histogram(Image.open(path))
            right += int(np.argmax([np.minimum(seen, s).sum() for s in sources]) == label)
            total += 1
    assert right >= 0.75 * total  # chance: 1/7


def test_photo_tree_rejects_more_classes_than_photos_before_writing(tmp_path):
    with pytest.raises(ValueError, match="has 7 source photos, so classes should be 1 to 7"):
        photo_tree(tmp_path / "x", train=8, classes=8)
    assert not (tmp_path / "x").exists()


_BLOCKED = r'''
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "skimage":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from fastload.tools.cli import main
sys.exit(main(["synth", sys.argv[1], "--photos", "--train", "2", "--val", "0", "--classes", "2"]))
'''


def test_photos_without_scikit_image_is_one_sentence_naming_the_extra(tmp_path):
    done = subprocess.run([sys.executable, "-c", _BLOCKED, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "fastload synth: error: skimage is not installed: the photographic set reads the "
        "sample photos scikit-image and matplotlib ship; install them with "
        "`pip install 'fastload-dali[photos]'`")
    assert not (tmp_path / "out").exists()


def test_synth_photos_cli_writes_camera_sized_pictures_with_size(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "hr"), "--photos", "--train", "2", "--val", "0",
                 "--classes", "2", "--size", "320x256", "--no-progress"]) == 0
    assert "2 classes, crops of photographs" in capsys.readouterr().out
    for path in (tmp_path / "hr").rglob("*.jpg"):
        with Image.open(path) as picture:
            assert picture.size == (320, 256)


def test_synth_photos_cli_refuses_the_generated_size_bounds(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "x"), "--photos", "--max-side", "500"]) == 2
    assert "--max-side only apply to generated pictures" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_synth_cli_without_photos_still_makes_ten_generated_classes(tmp_path):
    assert main(["synth", str(tmp_path / "g"), "--train", "10", "--val", "0",
                 "--min-side", "32", "--max-side", "48", "--no-progress"]) == 0
    assert len(list((tmp_path / "g" / "train").iterdir())) == 10
