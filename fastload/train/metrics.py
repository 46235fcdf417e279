"""Training measurements: data-wait vs compute time, images/s, peak memory.

Peak memory on a GPU is ``torch.cuda.max_memory_allocated`` (reset at the start of each
window). On CPU it is the process's resident set size: a thread samples RSS every few
milliseconds, and ``ru_maxrss`` (the kernel's exact high-water mark) is used too when it
rose during the window. ``ru_maxrss`` alone cannot show a *lowered* peak — it never goes
down in a process — so comparisons (e.g. gradient checkpointing on/off) must run each
configuration in a fresh process, which :func:`fastload.train.compare.run_compare` does. The figure
reported is the peak above the baseline RSS taken before training starts (model, optimizer
and loader already built), i.e. what training itself adds.
"""

from __future__ import annotations

import json
import pathlib
import resource
import sys
import threading
import time
from dataclasses import dataclass

import torch

__all__ = ["MemoryMonitor", "EpochStats", "JsonLog", "all_reduce", "rss_bytes"]

_SAMPLE_SECONDS = 0.002  # RSS sampling period of the monitor thread
_MIB = 1 << 20


def rss_bytes() -> int:
    """Current resident set size of this process in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _maxrss_bytes() -> int:
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(value if sys.platform == "darwin" else value * 1024)  # Linux reports KiB


class MemoryMonitor:
    """Peak memory over a window: CUDA max allocated on ``cuda``; sampled RSS on CPU.

    ``set_baseline()`` once before training; ``start()``/``stop()`` around each window;
    ``stop()`` returns ``(peak_bytes, peak_above_baseline_bytes)``.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.baseline = 0
        self._peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._maxrss_before = 0

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def set_baseline(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        else:
            self.baseline = rss_bytes()

    def start(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        self._maxrss_before = _maxrss_bytes()
        self._peak = rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="fastload-rss", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        process = psutil.Process()
        while not self._stop.wait(_SAMPLE_SECONDS):
            rss = process.memory_info().rss
            if rss > self._peak:
                self._peak = rss

    def stop(self) -> tuple[int, int]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
            return peak, max(0, peak - self.baseline)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        peak = max(self._peak, rss_bytes())
        maxrss = _maxrss_bytes()
        if maxrss > self._maxrss_before:  # the kernel saw a new high-water mark in the window
            peak = max(peak, maxrss)
        return peak, max(0, peak - self.baseline)


@dataclass
class EpochStats:
    """One epoch's figures, reduced over ranks (sums for counts, max for times and memory)."""

    epoch: int
    images: int
    epoch_time_s: float
    data_wait_s: float
    compute_s: float
    train_loss: float
    peak_mem_mb: float
    peak_rss_mb: float
    val_top1: float | None
    val_loss: float | None
    lr: float
    steps: int
    skipped_steps: int
    resumed_at: int = 0  # micro-batches done before a resume; the figures cover the rest
    epoch_batches: int = 0  # micro-batches of a whole epoch on one rank

    @property
    def images_per_s(self) -> float:
        return self.images / self.epoch_time_s if self.epoch_time_s > 0 else 0.0

    @property
    def data_stall_share(self) -> float:
        busy = self.data_wait_s + self.compute_s
        return self.data_wait_s / busy if busy > 0 else 0.0

    def as_dict(self) -> dict:
        out = {"event": "epoch", **self.__dict__}
        out["images_per_s"] = self.images_per_s
        out["data_stall_share"] = self.data_stall_share
        return out


def to_mib(value: int) -> float:
    return value / _MIB


class JsonLog:
    """JSON lines appended to ``path`` (one object per call, flushed); a no-op when disabled."""

    def __init__(self, path: str | None, enabled: bool) -> None:
        self.handle = None
        if path and enabled:
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, record: dict) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps({"time": round(time.time(), 3), **record}) + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def all_reduce(values: list[float], op: str, world: int) -> list[float]:
    """``values`` summed (``op="sum"``) or maxed (``"max"``) over the ranks of the process group."""
    if world == 1:
        return values
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64)
    reduce_op = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=reduce_op)
    return tensor.cpu().tolist()
