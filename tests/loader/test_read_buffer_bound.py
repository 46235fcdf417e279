"""``DataLoader(read_buffer_bytes=...)`` bounds the memory a folder's file reads keep for
reuse (``fastload.loader.read_buffers``): validated as torch validates its arguments, 256
MiB by default, 0 keeps nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets import ImageFolder

import fastload
from fastload.loader.read_buffers import DEFAULT_READ_BUFFER_BYTES

SMALL = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.fixture(scope="module")
def large_files(tmp_path_factory):
    """6 noisy 900x700 JPEGs of about 1 MB each (read into pooled blocks: 256 KiB or more)."""
    root = tmp_path_factory.mktemp("large_reads") / "src"
    rng = np.random.default_rng(5)
    for i in range(6):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (700, 900, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"c{i % 2}" / f"{i}.jpg", quality=95)
    return root


@pytest.mark.parametrize("value", [-1, 1.5, True, "256M", None])
def test_read_buffer_bytes_must_be_a_non_negative_integer(large_files, value):
    with pytest.raises(ValueError, match=rf"read_buffer_bytes should be a non-negative "
                                         rf"integer, but got read_buffer_bytes={value!r}"):
        fastload.DataLoader(ImageFolder(large_files, SMALL), read_buffer_bytes=value)


def _kept_after_an_epoch(large_files, **kwargs) -> int:
    loader = fastload.DataLoader(ImageFolder(large_files, SMALL), batch_size=2, **kwargs)
    assert sum(len(images) for images, _ in loader) == 6
    return loader._source._buffers._free_bytes


def test_the_read_buffer_pool_keeps_blocks_by_default_and_none_at_zero(large_files):
    loader = fastload.DataLoader(ImageFolder(large_files, SMALL))
    assert loader.read_buffer_bytes == DEFAULT_READ_BUFFER_BYTES == 256 << 20
    assert _kept_after_an_epoch(large_files) > 0
    assert _kept_after_an_epoch(large_files, read_buffer_bytes=0) == 0


def test_the_read_buffer_pool_keeps_no_more_than_its_bound(large_files):
    bound = 1 << 21  # 2 MiB: one or two of the 1 MB files' blocks
    kept = _kept_after_an_epoch(large_files, read_buffer_bytes=bound)
    assert 0 < kept <= bound
