"""What every row of the streaming-peers benchmark shares: the images, the transform, the
batch size, and how an epoch, its CPU time and a cache folder are measured.

Imported by the row scripts in both venvs (the peers' and fastload's), so it needs only the
standard library, psutil, torch and torchvision; it must not import fastload or a peer.
A row prints its figures as one line ``RESULT {json}`` on stdout; ``run.py`` collects them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import psutil

# torchvision's ImageNet statistics (the values fastload.loader.presets uses too).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP = 224

_SETTLE_WINDOW_S = 0.05  # an idle window: the tree used at most one clock tick in it
_SETTLE_IDLE_CPU_S = 0.01
_SETTLE_MAX_S = 30.0


def train_transform(*, tensor_input: bool = False):
    """RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize (torchvision's).

    ``tensor_input``: the sample arrives as a uint8 CHW tensor (LitData decodes JPEGs with
    ``torchvision.io.decode_jpeg``); ToTensor's tensor equivalent, ``ConvertImageDtype(float32)``
    (divide by 255), takes its place, so the output is the same kind of tensor.
    """
    import torch
    from torchvision import transforms as T

    to_tensor = T.ConvertImageDtype(torch.float32) if tensor_input else T.ToTensor()
    return T.Compose([T.RandomResizedCrop(CROP), T.RandomHorizontalFlip(), to_tensor,
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def preload() -> None:
    """Import torch and torchvision's transforms, and the S3 clients the systems use, now,
    before any clock starts: Mosaic imports torch with itself, LitData and fastload only
    when the transform is built, each its S3 client at its first request, and a module
    import (seconds on a busy machine) is not the dataset's setup."""
    import importlib

    import torch  # noqa: F401
    import torchvision.datasets  # noqa: F401
    import torchvision.transforms  # noqa: F401

    # Each system's S3 client, imported lazily by its first request (fastload's fsspec ->
    # s3fs/aiobotocore, Mosaic's boto3, LitData's obstore): imports too, not the setup.
    for name in ("s3fs", "boto3", "obstore"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def image_folder_samples(root: str | os.PathLike) -> tuple[list[tuple[str, int]], list[str]]:
    """ImageFolder's own ``(path, label)`` list and class names: every row writes these."""
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(root))
    return list(folder.samples), list(folder.classes)


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process and all its descendants, reaped ones included."""
    root = psutil.Process(pid or os.getpid())
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def settle(t0: float) -> float:
    """Wait until this process tree stops working; seconds from ``t0`` to then.

    Background downloads or decodes that outlive the last batch are charged to the epoch
    that caused them (the same rule as ``fastload bench``).
    """
    end = time.perf_counter()
    cpu = tree_cpu_seconds()
    deadline = end + _SETTLE_MAX_S
    while time.perf_counter() < deadline:
        time.sleep(_SETTLE_WINDOW_S)
        now_cpu = tree_cpu_seconds()
        if now_cpu - cpu <= _SETTLE_IDLE_CPU_S:
            return end - t0
        cpu = now_cpu
        end = time.perf_counter()
    return end - t0


def disk_usage(path: str | os.PathLike) -> dict:
    """Files and bytes under ``path``: ``bytes_on_disk`` (allocated blocks) and ``bytes``."""
    files = apparent = allocated = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            files += 1
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return {"files": files, "bytes": apparent, "bytes_on_disk": allocated}


def file_sizes(path: str | os.PathLike) -> dict[str, int]:
    """Relative path -> size of every file under ``path`` (to see what a phase downloaded)."""
    out = {}
    base = Path(path)
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            full = Path(dirpath) / name
            try:
                out[str(full.relative_to(base))] = full.stat().st_size
            except FileNotFoundError:
                pass
    return out


def check_batch(images, expect_batch: int) -> int:
    """The batch's image count; raises if it is not a float (N, 3, 224, 224) tensor."""
    shape = tuple(images.shape)
    if len(shape) != 4 or shape[1:] != (3, CROP, CROP) or not 0 < shape[0] <= expect_batch:
        raise RuntimeError(f"a batch of shape {shape}, expected (<= {expect_batch}, 3, {CROP}, {CROP})")
    if not images.is_floating_point():
        raise RuntimeError(f"a batch of dtype {images.dtype}, expected float32")
    return shape[0]


def time_epoch(loader, *, batch_size: int, start: float | None = None, t_ctor: float = 0.0,
               max_batches: int | None = None, on_batch=None) -> dict:
    """One pass over ``loader``: images, seconds, first-batch time, CPU seconds per image.

    ``start`` (a ``perf_counter`` value) lets the clock include the dataset's construction
    (cold: it downloads the index); ``seconds`` ends when the process tree is idle again.
    ``img_s_after_first`` is the steady rate once the first batch is in hand.
    """
    cpu0 = tree_cpu_seconds()
    t0 = time.perf_counter() if start is None else start
    images = batches = 0
    first_s = None
    t_first = n_first = 0
    for batch in loader:
        images += check_batch(batch[0], batch_size)
        batches += 1
        if on_batch is not None:
            on_batch(batch)
        if first_s is None:
            t_first = time.perf_counter()
            first_s = t_first - t0
            n_first = images
        if max_batches is not None and batches >= max_batches:
            break
    seconds = settle(t0)
    cpu = tree_cpu_seconds() - cpu0
    after = seconds - (t_first - t0)
    return {
        "images": images, "seconds": round(seconds, 4), "img_s": round(images / seconds, 1),
        "first_batch_s": round(first_s or 0.0, 4), "dataset_setup_s": round(t_ctor, 4),
        "img_s_after_first": round((images - n_first) / after, 1) if after > 0 else None,
        "cpu_s": round(cpu, 3), "cpu_s_per_image": round(cpu / max(images, 1), 6),
    }


def time_epochs(args, make, *, cache_figures: bool = True) -> dict:
    """``args.epochs`` passes over the loader ``make()`` returns, the first timed from
    before ``make()`` (cold: the dataset's construction included); with ``cache_figures``
    the first also reports the disk ``args.cache`` holds after it."""
    t0 = time.perf_counter()
    loader = make()
    t_ctor = time.perf_counter() - t0
    epochs = []
    for epoch in range(args.epochs):
        figures = time_epoch(loader, batch_size=args.batch_size,
                             start=t0 if epoch == 0 else None,
                             t_ctor=t_ctor if epoch == 0 else 0.0)
        if epoch == 0 and cache_figures:
            figures["cache"] = disk_usage(args.cache)
        epochs.append(figures)
    return {"epochs": epochs}


def emit(result: dict) -> None:
    """The row's answer to run.py: one line on stdout."""
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def row_parser(description: str) -> argparse.ArgumentParser:
    """The command line every row script takes (run.py calls them all the same way)."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    convert = sub.add_parser("convert", help="write SRC (an ImageFolder) to REMOTE the way the docs say")
    convert.add_argument("--src", required=True)
    convert.add_argument("--remote", required=True, help="s3://bucket/prefix, or a local folder")
    convert.add_argument("--shard-mb", type=float, required=True)
    convert.add_argument("--workers", type=int, default=2)
    read = sub.add_parser("read", help="epochs over REMOTE through a fresh cache folder")
    read.add_argument("--remote", required=True)
    read.add_argument("--cache", required=True)
    read.add_argument("--epochs", type=int, default=3, help="the first is cold, the rest warm")
    read.add_argument("--batch-size", type=int, default=64)
    read.add_argument("--workers", type=int, default=2)
    read.add_argument("--seed", type=int, default=0)
    resume = sub.add_parser("resume", help="half an epoch at this world size, or the rest from a state")
    resume.add_argument("--remote", required=True)
    resume.add_argument("--cache", required=True)
    resume.add_argument("--state", required=True, help="state file: written (--batches) or read")
    resume.add_argument("--seen", required=True, help="file for the sample ids this rank saw")
    resume.add_argument("--batches", type=int, default=None,
                        help="stop after this many batches per rank and save the state; "
                             "without it, load the state and read the rest of the epoch")
    resume.add_argument("--batch-size", type=int, default=64)
    resume.add_argument("--workers", type=int, default=2)
    resume.add_argument("--seed", type=int, default=0)
    return parser


def distributed_rank() -> tuple[int, int]:
    """(rank, world size); under torchrun, initialise a gloo process group first."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def distributed_barrier_and_close() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


def write_seen(path: str, ids: list[int], extra: dict | None = None) -> None:
    rank = int(os.environ.get("RANK", "0"))
    target = Path(f"{path}.rank{rank}")
    target.write_text(json.dumps({"ids": ids, **(extra or {})}))
