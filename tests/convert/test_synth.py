"""Generated images: deterministic, ImageFolder layout, photo-like statistics, learnable classes."""

from __future__ import annotations

import io
import pathlib

import numpy as np
import pytest
from PIL import Image

from fastload.data.pictures.synth import (
    class_names,
    image_size,
    synth_image,
    synthesize,
    tree_stats,
)
from fastload.tools.cli import main


def _tree_bytes(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jpg"))}


def _thumbnails(root: pathlib.Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    images, labels = [], []
    for label, name in enumerate(sorted(d.name for d in (root / split).iterdir())):
        for path in sorted((root / split / name).glob("*.jpg")):
            with Image.open(path) as picture:
                thumb = picture.convert("RGB").resize((32, 32), Image.BILINEAR)
            images.append(np.asarray(thumb, dtype=np.float32).ravel() / 255.0)
            labels.append(label)
    return np.stack(images), np.asarray(labels)


def test_synth_writes_balanced_imagefolder_tree(synth_root):
    for split, count in (("train", 48), ("val", 16)):
        folders = sorted(p.name for p in (synth_root / split).iterdir())
        assert folders == ["class_00", "class_01", "class_02", "class_03"]
        per_class = [len(list((synth_root / split / f).glob("*.jpg"))) for f in folders]
        assert per_class == [count // 4] * 4
    for path in (synth_root / "train" / "class_02").glob("*.jpg"):
        with Image.open(path) as picture:
            assert picture.format == "JPEG" and picture.mode == "RGB"
            assert 64 <= min(picture.size) and max(picture.size) <= 160
    assert not list(synth_root.rglob("*.tmp"))


def test_synth_same_seed_gives_identical_bytes_whatever_the_workers(synth_root, tmp_path):
    again = synthesize(
        tmp_path / "two", train=48, val=16, classes=4, seed=0, workers=2, min_side=64, max_side=160
    )
    assert _tree_bytes(again) == _tree_bytes(synth_root)


def test_synth_different_seed_gives_different_images(tmp_path):
    a = synthesize(tmp_path / "a", train=4, val=0, classes=2, seed=1, min_side=64, max_side=96)
    b = synthesize(tmp_path / "b", train=4, val=0, classes=2, seed=2, min_side=64, max_side=96)
    assert set(_tree_bytes(a)) == set(_tree_bytes(b))
    assert _tree_bytes(a) != _tree_bytes(b)


def test_synth_images_have_photo_sizes_and_file_sizes():
    widths, heights, kilobytes = [], [], []
    for index in range(30):
        rng = np.random.default_rng([7, index])
        height, width = image_size(rng)
        picture = synth_image(rng, index % 10, 10, height, width)
        assert picture.size == (width, height)
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=90)
        widths.append(width)
        heights.append(height)
        kilobytes.append(len(buffer.getvalue()) / 1024)
    assert 300 <= min(widths + heights) and max(widths + heights) <= 800
    assert 400 <= np.mean(widths) <= 500
    assert 340 <= np.mean(heights) <= 430
    assert 60 <= np.mean(kilobytes) <= 120
    # Natural structure, neither flat colour nor white noise: most energy at low frequency.
    grey = np.asarray(picture.convert("L"), dtype=np.float32)
    assert grey.std() > 10
    small = np.asarray(picture.convert("L").resize((width // 8, height // 8), Image.BOX))
    assert small.astype(np.float32).std() > 0.5 * grey.std()


def test_synth_full_size_fixture_is_photo_like(synth_photos):
    stats = tree_stats(synth_photos)
    assert stats["count"] == 12
    assert 300 <= stats["mean_height"] <= 800 and 300 <= stats["mean_width"] <= 800
    assert 40 <= stats["mean_kb"] <= 160


def test_synth_classes_separate_with_nearest_class_mean_on_32px_thumbnails(synth_root):
    train_x, train_y = _thumbnails(synth_root, "train")
    val_x, val_y = _thumbnails(synth_root, "val")
    means = np.stack([train_x[train_y == c].mean(axis=0) for c in range(4)])
    predicted = np.argmin(((val_x[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    accuracy = float((predicted == val_y).mean())
    assert accuracy >= 0.75, f"nearest-class-mean accuracy {accuracy:.2f} (chance 0.25)"


def test_synth_ten_classes_separate_by_mean_colour():
    features, labels = [], []
    for index in range(100):
        rng = np.random.default_rng([3, index])
        picture = synth_image(rng, index % 10, 10, 48, 64)
        features.append(np.asarray(picture, dtype=np.float32).mean(axis=(0, 1)) / 255.0)
        labels.append(index % 10)
    x, y = np.stack(features), np.asarray(labels)
    train, test = np.arange(100) < 60, np.arange(100) >= 60
    means = np.stack([x[train & (y == c)].mean(axis=0) for c in range(10)])
    predicted = np.argmin(((x[test][:, None] - means[None]) ** 2).sum(axis=2), axis=1)
    assert (predicted == y[test]).mean() >= 0.6


def test_synth_rejects_bad_arguments_with_a_clear_message(tmp_path):
    with pytest.raises(ValueError, match="classes should be at least 1"):
        synthesize(tmp_path, classes=0)
    with pytest.raises(ValueError, match="max_side should be at least min_side=300"):
        synthesize(tmp_path, max_side=200)
    with pytest.raises(ValueError, match="label should be in"):
        synth_image(np.random.default_rng(0), 5, 3, 32, 32)
    with pytest.raises(ValueError, match=r"size should have sides of at least 8 px, but got "
                                         r"size=\(4, 100\)"):
        synthesize(tmp_path, train=1, val=0, classes=1, size=(4, 100))
    # past Pillow's bomb bound (a 100,000 px square took all the memory before)
    with pytest.raises(ValueError, match=r"size should be at most 89,478,485 pixels \(Pillow's "
                                         r"MAX_IMAGE_PIXELS.*size=\(20000, 20000\)"):
        synthesize(tmp_path / "big", train=1, val=0, classes=1, size=(20000, 20000))
    assert not (tmp_path / "big").exists()


def test_class_names_sort_in_label_order():
    names = class_names(120)
    assert names == sorted(names) and names[0] == "class_000" and len(set(names)) == 120


def test_synth_cli_writes_tree_and_prints_summary(tmp_path, capsys):
    out = tmp_path / "cli"
    status = main(
        ["synth", str(out), "--train", "6", "--val", "3", "--classes", "3", "--seed", "5",
         "--quality", "85", "--workers", "1", "--min-side", "64", "--max-side", "96",
         "--no-progress"]
    )
    assert status == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("synth: 9 images") and "KB" in summary
    assert len(list((out / "train").rglob("*.jpg"))) == 6
    assert sorted(p.name for p in (out / "val").iterdir()) == class_names(3)
    reference = synthesize(
        tmp_path / "lib", train=6, val=3, classes=3, seed=5, quality=85, min_side=64, max_side=96
    )
    assert _tree_bytes(out) == _tree_bytes(reference)


def test_synth_size_makes_every_picture_that_size_from_the_cli_too(tmp_path):
    assert main(["synth", str(tmp_path / "cli"), "--train", "2", "--val", "0", "--classes", "2",
                 "--workers", "1", "--size", "1200x900", "--no-progress"]) == 0
    paths = sorted((tmp_path / "cli").rglob("*.jpg"))
    assert len(paths) == 2
    for path in paths:
        with Image.open(path) as picture:
            assert picture.size == (1200, 900)
    # Camera-sized pictures stay photo-like in weight (~1-2 bits per pixel at quality 90).
    assert all(0.8 <= p.stat().st_size * 8 / (1200 * 900) <= 2.5 for p in paths)


def test_synth_rejects_a_size_that_is_not_height_width(tmp_path):
    with pytest.raises(ValueError, match=r"size should be \(height, width\)"):
        synthesize(tmp_path, train=1, val=0, size=(100,))
    with pytest.raises(SystemExit):
        main(["synth", str(tmp_path), "--size", "1200"])


def test_synth_refuses_fewer_images_than_classes_before_writing_anything(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"train=8 images cannot fill classes=10 .* pass "
                                         r"classes=8 or fewer, or train=10 or more"):
        synthesize(tmp_path / "lib", train=8, val=0)
    assert main(["synth", str(tmp_path / "cli"), "--train", "8", "--val", "0"]) == 2
    assert "--train 8 images cannot fill --classes 10" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "none"), "--train", "0", "--val", "0"]) == 2
    assert "nothing to write" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("lib", "cli", "none"))


def test_synth_writes_no_folder_for_a_split_of_no_images(tmp_path):
    root = synthesize(tmp_path, train=2, val=0, classes=2, workers=1, min_side=32, max_side=48)
    assert sorted(p.name for p in (root / "train").iterdir()) == class_names(2)
    assert not (root / "val").exists()


def test_synth_again_with_the_same_arguments_writes_the_same_tree(tmp_path):
    options = dict(train=6, val=2, classes=2, workers=1, min_side=32, max_side=48)
    first = _tree_bytes(synthesize(tmp_path, **options))
    (tmp_path / "train" / "class_01" / "class_01_000003.jpg.tmp").write_bytes(b"cut")  # killed
    assert _tree_bytes(synthesize(tmp_path, **options)) == first
    assert not list(tmp_path.rglob("*.tmp"))


def test_synth_refuses_a_tree_that_holds_files_these_arguments_would_not_write(tmp_path,
                                                                            capsys):
    options = dict(val=0, workers=1, min_side=32, max_side=48)
    synthesize(tmp_path / "a", train=8, classes=4, **options)
    before = _tree_bytes(tmp_path / "a")
    # fewer images, or fewer classes: the earlier run's other files would join this set
    for other in (dict(train=4, classes=4), dict(train=8, classes=2)):
        with pytest.raises(FileExistsError, match=r"would not write \(train/class_0.*: they "
                                                  r"would join this data set"):
            synthesize(tmp_path / "a", **other, **options)
    assert _tree_bytes(tmp_path / "a") == before  # refused before anything was written
    (tmp_path / "b" / "val" / "mine").mkdir(parents=True)
    (tmp_path / "b" / "val" / "mine" / "photo.jpg").write_bytes(b"yours")
    assert main(["synth", str(tmp_path / "b"), "--train", "4", "--val", "0", "--classes",
                 "2"]) == 1
    assert "would not write (val/mine)" in capsys.readouterr().err
    assert (tmp_path / "b" / "val" / "mine" / "photo.jpg").read_bytes() == b"yours"
    assert not (tmp_path / "b" / "train").exists()


def test_the_summary_counts_the_tree_written_not_other_pictures_of_its_folder(tmp_path, capsys):
    from fastload.data.pictures.synth import tree_stats

    folder = tmp_path / "class_00"
    folder.mkdir()
    for i in range(3):  # the user's own pictures, beside the tree
        synth_image(np.random.default_rng(i), 0, 2, 32, 32).save(folder / f"mine_{i}.jpg")
    synthesize(folder, train=4, val=2, classes=2, workers=1, min_side=16, max_side=32)
    assert tree_stats(folder)["count"] == 6
    assert len(list(folder.glob("mine_*.jpg"))) == 3
