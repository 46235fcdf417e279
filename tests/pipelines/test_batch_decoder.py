"""BatchDecoder on real CPU-only DALI graphs: shapes, dtypes, queueing, fresh tensors, errors."""

from __future__ import annotations

import io

import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from fastload.pipelines.decode.batch_decoder import BatchDecodeError, BatchDecoder
from fastload.pipelines.translate import translate

VAL = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TRAIN = T.Compose(
    [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
)


@pytest.fixture(scope="module")
def photos(synth_photos):
    """(encoded bytes, (height, width)) of every generated photo, train then val."""
    paths = sorted(synth_photos.glob("*/*/*.jpg"))
    out = []
    for path in paths:
        with Image.open(path) as im:
            out.append((path.read_bytes(), (im.height, im.width)))
    return out


def _batch(photos, start, n):
    chosen = [photos[(start + k) % len(photos)] for k in range(n)]
    return [c[0] for c in chosen], [c[1] for c in chosen]


def test_val_and_train_batches_have_torchvision_shape_and_dtype(photos):
    for transform, low, high in ((VAL, 0.0, 1.0), (TRAIN, -2.2, 2.7)):
        with BatchDecoder(translate(transform), max_batch_size=4) as dec:
            dec.submit(*_batch(photos, 0, 4), torch.Generator().manual_seed(0))
            out = dec.fetch()
        assert out.shape == (4, 3, 224, 224) and out.dtype == torch.float32
        assert low <= float(out.min()) and float(out.max()) <= high


def test_pil_to_tensor_gives_uint8_like_torchvision(photos):
    transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    encoded, sizes = _batch(photos, 0, 2)
    with BatchDecoder(translate(transform), max_batch_size=2) as dec:
        dec.submit(encoded, sizes, torch.Generator())
        out = dec.fetch()
    assert out.dtype == torch.uint8 and out.shape == (2, 3, 224, 224)
    ref = transform(Image.open(io.BytesIO(encoded[0])).convert("RGB"))
    assert (out[0].int() - ref.int()).abs().float().mean() < 1.0


@pytest.mark.parametrize(
    ("transform", "resampler"), [(VAL, "dali"), (TRAIN, "torch")], ids=["dali-resize", "torch-resize"]
)
def test_variable_batch_sizes_and_queue_return_batches_in_order(photos, transform, resampler):
    sizes = [5, 1, 3]
    with BatchDecoder(
        translate(transform), max_batch_size=5, queue_depth=3, resampler=resampler
    ) as dec:
        for k, n in enumerate(sizes):
            dec.submit(*_batch(photos, 2 * k, n), torch.Generator().manual_seed(k))
        assert dec.outstanding == 3
        with pytest.raises(RuntimeError, match="queue_depth"):
            dec.submit(*_batch(photos, 0, 1), torch.Generator())
        outs = [dec.fetch() for _ in sizes]
        assert [o.shape[0] for o in outs] == sizes
        # each batch again, alone, with the same seed: the same pixels, so the order held
        for k, n in enumerate(sizes):
            dec.submit(*_batch(photos, 2 * k, n), torch.Generator().manual_seed(k))
            assert torch.equal(dec.fetch(), outs[k])
        assert not torch.equal(outs[0][:1], outs[1][:1])


def test_fetched_tensor_is_not_overwritten_by_later_batches(photos):
    with BatchDecoder(translate(VAL), max_batch_size=4, queue_depth=2) as dec:
        dec.submit(*_batch(photos, 0, 4), torch.Generator())
        first = dec.fetch()
        kept = first.clone()
        for k in range(1, 5):
            dec.submit(*_batch(photos, 4 * k, 4), torch.Generator())
            dec.fetch()
        assert torch.equal(first, kept)


@pytest.mark.parametrize(
    ("transform", "resampler"), [(VAL, "dali"), (TRAIN, "torch")], ids=["dali-resize", "torch-resize"]
)
def test_corrupt_jpeg_raises_batch_decode_error_then_decoder_continues(
    photos, transform, resampler
):
    encoded, sizes = _batch(photos, 0, 3)
    broken = list(encoded)
    broken[1] = b"this is not a jpeg at all" * 20
    with BatchDecoder(
        translate(transform), max_batch_size=3, queue_depth=3, resampler=resampler
    ) as dec:
        dec.submit(encoded, sizes, torch.Generator())
        dec.submit(broken, sizes, torch.Generator())
        dec.submit(encoded, sizes, torch.Generator())
        good = dec.fetch()
        with pytest.raises(BatchDecodeError) as info:
            dec.fetch()
        assert info.value.message and info.value.sample_indices == [1]
        assert torch.equal(dec.fetch(), good)  # the batch after the failure is intact
        dec.submit(encoded, sizes, torch.Generator())
        assert torch.equal(dec.fetch(), good)


def test_reset_drops_batches_in_flight_and_close_is_idempotent(photos):
    dec = BatchDecoder(translate(VAL), max_batch_size=2, queue_depth=2)
    dec.submit(*_batch(photos, 0, 2), torch.Generator())
    dec.submit(*_batch(photos, 2, 2), torch.Generator())
    dec.reset()
    assert dec.outstanding == 0
    dec.submit(*_batch(photos, 4, 1), torch.Generator())
    assert dec.fetch().shape[0] == 1
    dec.submit(*_batch(photos, 0, 2), torch.Generator())  # closing with a batch in flight
    dec.close()
    dec.close()
    with pytest.raises(RuntimeError, match="closed"):
        dec.submit(*_batch(photos, 0, 1), torch.Generator())


def test_resampler_auto_uses_torch_only_where_only_unpadded_crops_and_flips_follow():
    assert BatchDecoder(translate(TRAIN), max_batch_size=1).resampler == "torch"
    assert BatchDecoder(translate(VAL), max_batch_size=1).resampler == "torch"
    assert BatchDecoder(translate(TRAIN), max_batch_size=1, resampler="dali").resampler == "dali"
    padded = translate(T.Compose([T.Resize(64), T.RandomCrop(70, pad_if_needed=True), T.ToTensor()]))
    assert BatchDecoder(padded, max_batch_size=1).resampler == "dali"
    with pytest.raises(ValueError, match="resampler='torch'"):
        BatchDecoder(padded, max_batch_size=1, resampler="torch")
    with pytest.raises(ValueError, match="resampler should be"):
        BatchDecoder(translate(VAL), max_batch_size=1, resampler="pil")


def test_bad_arguments_raise_clear_errors(photos):
    plan = translate(VAL)
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchDecoder(plan, max_batch_size=0)
    with pytest.raises(ValueError, match="device"):
        BatchDecoder(plan, max_batch_size=1, device="tpu")
    with BatchDecoder(plan, max_batch_size=2) as dec:
        with pytest.raises(ValueError, match="1 to max_batch_size=2"):
            dec.submit(*_batch(photos, 0, 3), torch.Generator())
        with pytest.raises(ValueError, match="sizes"):
            dec.submit([photos[0][0]], [], torch.Generator())
        with pytest.raises(RuntimeError, match="no batch in flight"):
            dec.fetch()


def test_resample_threads_run_without_openmp_teams_and_leave_the_callers_thread_count():
    import ctypes

    from fastload.utils.threads import openmp_library

    lib = openmp_library()
    if lib is None:
        pytest.skip("torch is not built with an OpenMP runtime here")
    omp = ctypes.CDLL(lib)
    torch_threads, omp_threads = torch.get_num_threads(), omp.omp_get_max_threads()
    with BatchDecoder(translate(TRAIN), max_batch_size=1) as dec:
        assert dec.resampler == "torch"
        in_pool = dec._pool.submit(omp.omp_get_max_threads).result()
    assert in_pool == 1
    assert torch.get_num_threads() == torch_threads
    assert omp.omp_get_max_threads() == omp_threads
