"""fastload.StallMeter: per-epoch input wait of any loop, any loader."""

from __future__ import annotations

import time

import pytest
import torch

import fastload
from fastload.loader.stall import EpochStall


def _slow_batches(count: int, batch: int, delay_s: float):
    for _ in range(count):
        time.sleep(delay_s)
        yield torch.zeros(batch, 3, 4, 4), torch.zeros(batch, dtype=torch.long)


class _SlowLoader:
    def __init__(self, count: int, batch: int, delay_s: float) -> None:
        self.count, self.batch, self.delay_s = count, batch, delay_s
        self.epoch = None

    def __iter__(self):
        return _slow_batches(self.count, self.batch, self.delay_s)

    def __len__(self) -> int:
        return self.count

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def test_waiting_for_batches_is_counted_as_stall_and_the_loop_work_as_busy():
    meter = fastload.StallMeter(_SlowLoader(count=4, batch=8, delay_s=0.02))
    for _ in meter:
        time.sleep(0.005)
    (epoch,) = meter.stats
    assert (epoch.epoch, epoch.batches, epoch.images) == (0, 4, 32)
    assert epoch.wait_s >= 4 * 0.02
    assert 4 * 0.005 <= epoch.busy_s < epoch.wait_s
    assert epoch.stall_share == pytest.approx(epoch.wait_s / (epoch.wait_s + epoch.busy_s))
    assert epoch.images_per_s == pytest.approx(32 / epoch.total_s)


def test_each_iteration_is_one_epoch_record():
    meter = fastload.StallMeter(_SlowLoader(count=2, batch=3, delay_s=0.0))
    for _ in range(3):
        list(meter)
    assert [e.epoch for e in meter.stats] == [0, 1, 2]
    assert meter.last_epoch is meter.stats[-1]
    assert all(e.images == 6 for e in meter.stats)


def test_a_loop_left_early_records_the_batches_it_took():
    meter = fastload.StallMeter(_SlowLoader(count=5, batch=2, delay_s=0.0))
    iterator = iter(meter)
    next(iterator)
    next(iterator)
    iterator.close()
    assert meter.stats[0].batches == 2


def test_sync_runs_before_the_loop_work_is_clocked():
    calls = []
    meter = fastload.StallMeter(_SlowLoader(count=3, batch=1, delay_s=0.0),
                                sync=lambda: calls.append(time.perf_counter()))
    list(meter)
    assert len(calls) == 3


def test_other_attributes_and_len_reach_the_wrapped_loader():
    loader = _SlowLoader(count=3, batch=1, delay_s=0.0)
    meter = fastload.StallMeter(loader)
    meter.set_epoch(7)
    assert loader.epoch == 7 and len(meter) == 3


def test_it_counts_every_image_of_a_fastload_dataloader_epoch(synth_root):
    from torchvision import transforms as T

    transform = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
    loader = fastload.DataLoader(str(synth_root / "train"), batch_size=16, transform=transform,
                                 strict=True)
    meter = fastload.StallMeter(loader)
    batches = list(meter)
    assert len(batches) == len(loader) == 3
    assert meter.last_epoch.images == 48 and meter.last_epoch.wait_s > 0


def test_the_record_reads_as_one_line():
    record = EpochStall(epoch=1, batches=2, images=10, wait_s=1.0, busy_s=3.0)
    assert str(record) == "epoch 1: waited 1.00 s of 4.00 s (25.0%), 2 img/s"
    assert record.as_dict()["stall_share"] == 0.25
