"""The memory file reads go into: lent, given back after the decode, lent again; never
lent twice at once, and nothing kept alive that was not given back."""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import torch

from fastload.loader.read_buffers import ReadBuffers


def _given_back(buffers: ReadBuffers, nbytes: int) -> np.ndarray:
    """The block behind a read of ``nbytes``, lent and given back."""
    view = buffers.take(nbytes)
    block = view.base
    buffers.give_back([view])
    return block


def test_a_block_given_back_is_lent_again_for_a_read_of_about_its_size():
    buffers = ReadBuffers()
    block = _given_back(buffers, 1_000_000)
    again = buffers.take(900_000)
    assert again.base is block and again.shape == (900_000,)


def test_a_block_is_not_lent_for_a_read_of_less_than_half_its_size():
    buffers = ReadBuffers()
    block = _given_back(buffers, 4_000_000)
    assert buffers.take(1_000_000).base is not block


def test_small_files_get_arrays_of_their_own():
    buffers = ReadBuffers(min_file_bytes=256 << 10)
    small = buffers.take(100_000)
    buffers.give_back([small])
    assert small.base is None and buffers._free_bytes == 0


def test_a_block_not_given_back_is_never_lent_to_another_read():
    buffers = ReadBuffers()
    held = buffers.take(500_000)
    held[:] = 7
    others = [buffers.take(500_000) for _ in range(4)]
    for other in others:
        assert not np.shares_memory(other, held)
    assert (held == 7).all()


def test_a_block_never_given_back_dies_with_its_views():
    buffers = ReadBuffers()
    view = buffers.take(300_000)
    alive = weakref.ref(view.base)
    del view
    gc.collect()
    assert alive() is None


def test_free_blocks_stay_within_max_bytes():
    buffers = ReadBuffers(max_bytes=3 << 20)
    lent = [buffers.take(1_000_000) for _ in range(6)]
    buffers.give_back(lent)
    assert buffers._free_bytes <= 3 << 20


def test_blocks_outgrown_by_larger_files_are_replaced_not_kept_beside_the_new_ones():
    buffers = ReadBuffers()
    small = [buffers.take(500_000) for _ in range(4)]
    buffers.give_back(small)
    del small
    large = [buffers.take(800_000) for _ in range(4)]
    buffers.give_back(large)
    assert len(buffers._free) == 4 and all(b.nbytes >= 800_000 for b in buffers._free)


def test_arrays_from_elsewhere_are_ignored():
    buffers = ReadBuffers()
    buffers.give_back([np.zeros(10, np.uint8), b"bytes", memoryview(b"x")])
    assert buffers._free_bytes == 0


def test_highres_folder_epochs_give_the_same_batches_while_read_memory_is_reused(tmp_path):
    """The loader gives a batch's read memory back after its decode: later epochs read into
    it, and every epoch's batches are equal to the first's."""
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    import fastload
    from fastload.data.pictures.synth import synthesize

    root = synthesize(tmp_path, train=6, val=0, classes=2, workers=1, size=(1100, 1400))
    val = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                              transforms.ToTensor()])
    loader = fastload.DataLoader(ImageFolder(root / "train", val), batch_size=2,
                                 num_workers=2, device="cpu", persistent_workers=True)
    epochs = [[images for images, _ in loader] for _ in range(3)]
    assert loader._decoder.scaled_batches > 0
    reads = loader._source._buffers
    assert reads._free, "no read memory came back after the batches were decoded"
    for later in epochs[1:]:
        for a, b in zip(epochs[0], later, strict=True):
            assert torch.equal(a, b)


def test_a_forked_child_starts_with_no_blocks_of_its_parent():
    buffers = ReadBuffers()
    buffers.give_back([buffers.take(400_000)])
    pid = os.fork()
    if pid == 0:  # the child: its first take allocates afresh, the parent's list is gone
        code = 0 if buffers.take(400_000) is not None and buffers._free_bytes == 0 else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert buffers._free_bytes > 0  # the parent's blocks are its own still
