"""BatchBuffers: output memory is reused only once nothing made from it is alive."""

from __future__ import annotations

import pytest
import torch

from fastload.pipelines.decode.batch_decoder import BatchDecoder
from fastload.pipelines.decode.buffers import BatchBuffers
from fastload.pipelines.translate import translate

SHAPE = (4, 3, 8, 8)


@pytest.mark.parametrize(
    "hold",
    [lambda t: t[1], lambda t: t.untyped_storage(), lambda t: t.numpy(), lambda t: t.view(-1)],
    ids=["view", "storage", "numpy", "reshape"],
)
def test_a_block_is_not_reused_while_anything_made_from_it_is_alive(hold):
    buffers = BatchBuffers(keep=3)
    first = buffers.empty(SHAPE, torch.float32)
    ptr = first.data_ptr()
    kept = hold(first)
    del first
    other = buffers.empty(SHAPE, torch.float32)
    assert other.data_ptr() != ptr
    del other, kept
    assert buffers.empty(SHAPE, torch.float32).data_ptr() == ptr


def test_freed_block_is_reused_and_the_pool_stays_bounded():
    buffers = BatchBuffers(keep=2)
    held = [buffers.empty(SHAPE, torch.uint8) for _ in range(4)]  # more than keep: fresh ones
    assert len({t.data_ptr() for t in held}) == 4
    pooled = held[0].data_ptr()
    del held
    again = buffers.empty(SHAPE, torch.uint8)
    assert again.data_ptr() == pooled
    assert len(buffers._blocks) == 2


def test_bad_keep_is_refused():
    with pytest.raises(ValueError, match="keep"):
        BatchBuffers(keep=-1)


def test_decoder_batches_stay_intact_while_held_and_memory_is_reused_after(synth_photos):
    import torchvision.transforms as T
    from PIL import Image

    photos = []
    for path in sorted(synth_photos.glob("*/*/*.jpg"))[:4]:
        with Image.open(path) as im:
            photos.append((path.read_bytes(), (im.height, im.width)))
    plan = translate(T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    with BatchDecoder(plan, max_batch_size=4, resampler="torch") as dec:
        batch = ([p[0] for p in photos], [p[1] for p in photos])
        dec.submit(*batch, torch.Generator().manual_seed(0))
        first = dec.fetch()
        kept, ptr = first.clone(), first.data_ptr()
        for k in range(4):  # later batches while `first` is held: never its memory
            dec.submit(*batch, torch.Generator().manual_seed(k + 1))
            assert dec.fetch().data_ptr() != ptr
        assert torch.equal(first, kept)
        del first
        dec.submit(*batch, torch.Generator().manual_seed(0))
        reused = dec.fetch()
        assert reused.data_ptr() == ptr and torch.equal(reused, kept)
