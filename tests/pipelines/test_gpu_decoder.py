"""The GPU graph (nvJPEG ``mixed`` decode, ops on the device) against the CPU graph.

Skipped without CUDA (see conftest.py). Run on a GPU machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from fastload.pipelines.decode.batch_decoder import BatchDecodeError, BatchDecoder
from fastload.pipelines.translate import translate

pytestmark = pytest.mark.gpu

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
VAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
TRAIN = T.Compose(
    [
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.ToTensor(),
        T.Normalize(MEAN, STD),
    ]
)


@pytest.fixture(scope="module")
def photos(synth_photos):
    """(encoded bytes, (height, width)) of every generated photo."""
    out = []
    for path in sorted(synth_photos.glob("*/*/*.jpg")):
        with Image.open(path) as im:
            out.append((path.read_bytes(), (im.height, im.width)))
    return out


def _decode(transform, photos, device, seed=0, **kwargs):
    encoded, sizes = [p[0] for p in photos], [p[1] for p in photos]
    with BatchDecoder(
        translate(transform), max_batch_size=len(photos), device=device, **kwargs
    ) as dec:
        dec.submit(encoded, sizes, torch.Generator().manual_seed(seed))
        return dec.fetch()


@pytest.mark.parametrize("hw_decoder_load", [0.0, 0.65])
def test_gpu_val_batch_matches_cpu_batch_per_image(photos, hw_decoder_load):
    cpu = _decode(VAL, photos, "cpu")
    gpu = _decode(VAL, photos, "gpu", device_id=0, hw_decoder_load=hw_decoder_load)
    assert gpu.device == torch.device("cuda", 0) and gpu.dtype == torch.float32
    assert gpu.shape == cpu.shape
    mad = (gpu.cpu() - cpu).abs().mean(dim=(1, 2, 3))
    assert float(mad.max()) <= 0.01, mad.tolist()


def test_gpu_train_batch_uses_the_same_parameters_as_cpu(photos):
    cpu = _decode(TRAIN, photos, "cpu", seed=5)
    gpu = _decode(TRAIN, photos, "gpu", seed=5, device_id=0)
    mad = (gpu.cpu() - cpu).abs().mean(dim=(1, 2, 3))
    assert float(mad.max()) <= 0.05, mad.tolist()  # normalized units (1/std ~ 4.4 x)


def test_gpu_pil_to_tensor_gives_uint8_on_device(photos):
    transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    out = _decode(transform, photos[:2], "gpu", device_id=0)
    assert out.dtype == torch.uint8 and out.is_cuda and out.shape == (2, 3, 224, 224)


def test_gpu_decoder_reports_a_corrupt_jpeg_and_continues(photos):
    encoded, sizes = [p[0] for p in photos[:3]], [p[1] for p in photos[:3]]
    broken = [encoded[0], b"not a jpeg" * 50, encoded[2]]
    with BatchDecoder(translate(VAL), max_batch_size=3, device="gpu", device_id=0) as dec:
        dec.submit(broken, sizes, torch.Generator())
        with pytest.raises(BatchDecodeError):
            dec.fetch()
        dec.submit(encoded, sizes, torch.Generator())
        assert dec.fetch().shape == (3, 3, 224, 224)
