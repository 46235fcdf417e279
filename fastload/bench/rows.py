"""One runner per row of ``fastload bench``: each builds its loader once and runs epochs.

Every runner has the same three-step life: ``setup()`` (build the loader, start workers),
``run_epoch() -> images`` (iterate one full epoch, consuming each batch the same way) and
``close()``. :func:`make_row` picks the runner for a row letter. The harness in
:mod:`fastload.bench.harness` runs each in its own process; the pytest-benchmark suites call them
in-process.

Rows:
    (a) torchvision ImageFolder + torch DataLoader, tuned as the usual advice says
    (b) torch DataLoader over fastload.LMDBDataset, same tuning
    (c) fastload.DataLoader on the folder      (d) ... on the LMDB
    (e) ... on an LMDB converted with --max-side
    (f) decode ceiling: Pillow full decode on all cores, nothing else
    (g) hand-written DALI graph (pipelines.reference_graph)
    (h) FFCV Loader on a .beton, when ffcv is installed
    (i) entropy-decode floor: each JPEG at 1/8 DCT scale to grey on all cores (see ceiling)
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from fastload.loader.presets import DEFAULT_CROP_PCT, IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "ROW_KEYS",
    "RowSpec",
    "build_transform",
    "folder_samples",
    "make_row",
    "row_label",
    "row_unavailable",
]

ROW_KEYS = "abcdefghi"
_LABELS = {
    "a": "torchvision ImageFolder + torch DataLoader",
    "b": "torch DataLoader + fastload.LMDBDataset",
    "c": "fastload.DataLoader, folder",
    "d": "fastload.DataLoader, LMDB",
    "e": "fastload.DataLoader, LMDB --max-side {max_side}",
    "f": "decode ceiling: Pillow full decode, all cores",
    "g": "hand-written DALI graph",
    "h": "FFCV Loader, .beton",
    "i": "entropy-decode floor: 1/8 DCT scale, all cores",
}


@dataclass(frozen=True)
class RowSpec:
    """Everything a row runner needs; plain values so it crosses a process boundary."""

    folder: str  # ImageFolder root of the measured images
    lmdb: str | None = None  # the folder converted with original bytes (rows b, d)
    lmdb_small: str | None = None  # the folder converted with --max-side (row e)
    beton: str | None = None  # where row (h) writes / finds its FFCV file
    batch_size: int = 64
    image_size: int = 224
    transforms: str = "train"  # "train" or "val"
    threads: int = 2  # worker processes / DALI threads, per row
    device: str = "cpu"  # "cpu" or "gpu"
    hw_decoder_load: float = 0.65  # share of JPEGs for the hardware decoder (GPU rows)
    max_side: int = 256  # row (e)'s stored long side, for its label
    seed: int = 0
    recipe: str | None = None  # a fastload.bench.recipes name: its transform and collate_fn


def row_label(key: str, max_side: int = 256) -> str:
    """The loader column's text for row ``key``."""
    return _LABELS[key].format(max_side=max_side)


def row_unavailable(key: str) -> str | None:
    """Why row ``key`` cannot run in this environment, or None when it can."""
    if key == "h" and importlib.util.find_spec("ffcv") is None:
        return ("ffcv is not installed (optional: `bash benchmarks/ffcv_env.sh` sets up .venv-ffcv; "
                "it needs the OpenCV and libjpeg-turbo headers)")
    return None


def build_transform(kind: str, image_size: int = 224):
    """The torchvision transform every row reproduces: :mod:`fastload.loader.presets`'
    ImageNet ``train`` or ``val`` preset."""
    from fastload.loader.presets import PRESETS, imagenet_transform

    if kind not in PRESETS:
        raise ValueError(f"transforms should be 'train' or 'val', but got transforms={kind!r}")
    return imagenet_transform(kind, image_size)


def folder_samples(folder: str | os.PathLike) -> list[tuple[str, int]]:
    """``(path, label)`` of every image under ``folder``, in ImageFolder's order."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    _, class_to_idx = find_classes(os.fspath(folder))
    return make_dataset(os.fspath(folder), class_to_idx, extensions=IMG_EXTENSIONS)


class _Row:
    """Shared consumption: every row's batches are checked and counted the same way."""

    def __init__(self, spec: RowSpec) -> None:
        self.spec = spec
        self._shape = (3, spec.image_size, spec.image_size)
        self._target = None

    def setup(self) -> None:
        import torch

        torch.manual_seed(self.spec.seed)
        if self.spec.device == "gpu":
            self._target = torch.device("cuda", 0)
        self._build()

    def _build(self) -> None:
        raise NotImplementedError

    def _batches(self):
        raise NotImplementedError

    def run_epoch(self) -> int:
        """Iterate one epoch; return the number of images it delivered."""
        count = 0
        for batch in self._batches():
            images = batch[0]
            if self._target is not None and images.device != self._target:
                images = images.to(self._target, non_blocking=True)
            if tuple(images.shape[1:]) != self._shape:
                raise RuntimeError(
                    f"{type(self).__name__} gave a batch of shape {tuple(images.shape)}, "
                    f"expected (N, *{self._shape})"
                )
            count += int(images.shape[0])
        if self._target is not None:
            import torch

            torch.cuda.synchronize(self._target)
        return count

    def close(self) -> None:
        pass


class _LoaderRow(_Row):
    """A row that iterates a DataLoader over ``source`` (folder, LMDB or small LMDB)."""

    def __init__(self, spec: RowSpec, source: str) -> None:
        super().__init__(spec)
        self._source = source
        self._loader = None

    def _batches(self):
        return iter(self._loader)

    def close(self) -> None:
        closer = getattr(self._loader, "close", None)  # torch's has none: its persistent
        if closer is not None:  # workers stop with their iterator
            closer()
        self._loader = None


class _TorchRow(_LoaderRow):
    """(a) / (b): torch DataLoader, tuned as the usual advice says."""

    def _build(self) -> None:
        from torch.utils.data import DataLoader

        self._loader = DataLoader(_row_dataset(self.spec, self._source), **_loader_kwargs(self.spec))


class _FastloadRow(_LoaderRow):
    """(c) / (d) / (e): fastload.DataLoader with the same arguments as rows (a) / (b)."""

    def _build(self) -> None:
        import fastload

        kwargs = _loader_kwargs(self.spec)
        kwargs["device"] = "cuda" if self.spec.device == "gpu" else "cpu"
        kwargs["strict"] = True  # a torch fallback would measure row (a) or (b) again
        if self.spec.device == "gpu":
            kwargs["hw_decoder_load"] = self.spec.hw_decoder_load
        self._loader = fastload.DataLoader(_row_dataset(self.spec, self._source), **kwargs)


class _CeilingRow(_Row):
    """(f): Pillow full decode of the same files on all cores (no batches, no tensors);
    (i), ``floor=True``: each JPEG entropy-decoded at 1/8 scale instead."""

    def __init__(self, spec: RowSpec, floor: bool = False) -> None:
        super().__init__(spec)
        self._floor = floor

    def _build(self) -> None:
        from fastload.bench.ceiling import DecodeCeiling, decode_file, decode_file_floor

        files = [path for path, _ in folder_samples(self.spec.folder)]
        # all cores, as its label says, whatever --threads gives the loader rows: the
        # machine's ceiling, not one at the rows' parallelism
        self._ceiling = DecodeCeiling(files, processes=len(os.sched_getaffinity(0)),
                                      decode=decode_file_floor if self._floor else decode_file)

    def run_epoch(self) -> int:
        return self._ceiling.run_epoch()

    def close(self) -> None:
        self._ceiling.close()


class _DaliRow(_Row):
    """(g): the hand-written DALI graph, DALI's own file reader choosing the order."""

    def _build(self) -> None:
        from fastload.bench.reference_graph import ReferenceLoader

        samples = folder_samples(self.spec.folder)
        self._loader = ReferenceLoader(
            [p for p, _ in samples],
            [label for _, label in samples],
            batch_size=self.spec.batch_size,
            image_size=self.spec.image_size,
            train=self.spec.transforms == "train",
            num_threads=self.spec.threads,
            device=self.spec.device,
            seed=self.spec.seed,
            hw_decoder_load=self.spec.hw_decoder_load,
        )

    def _batches(self):
        return iter(self._loader)

    def close(self) -> None:
        self._loader.close()


class _FfcvRow(_Row):
    """(h): FFCV's Loader on a .beton written from the same files (original resolution,
    JPEG quality 90). Its test runs where ffcv is installed (benchmarks/ffcv_env.sh)."""

    def _build(self) -> None:
        import numpy as np
        from ffcv.fields import IntField, RGBImageField
        from ffcv.fields.decoders import (
            CenterCropRGBImageDecoder,
            IntDecoder,
            RandomResizedCropRGBImageDecoder,
        )
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import (
            NormalizeImage,
            RandomHorizontalFlip,
            Squeeze,
            ToDevice,
            ToTensor,
            ToTorchImage,
        )
        from ffcv.writer import DatasetWriter
        from torchvision.datasets import ImageFolder

        beton = _need(self.spec.beton, "beton")
        if not os.path.exists(beton):
            partial = beton + ".partial"
            fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
            DatasetWriter(partial, fields, num_workers=self.spec.threads).from_indexed_dataset(
                ImageFolder(self.spec.folder)
            )
            os.replace(partial, beton)
        size = self.spec.image_size
        mean = np.array(IMAGENET_MEAN) * 255
        std = np.array(IMAGENET_STD) * 255
        if self.spec.transforms == "train":
            image = [RandomResizedCropRGBImageDecoder((size, size)), RandomHorizontalFlip()]
        else:
            image = [CenterCropRGBImageDecoder((size, size), ratio=DEFAULT_CROP_PCT)]
        if self.spec.device == "gpu":
            image += [ToTensor(), ToDevice("cuda:0", non_blocking=True), ToTorchImage(),
                      NormalizeImage(mean, std, np.float32)]
        else:  # normalising before ToTensor is the order that runs on CPU
            image += [NormalizeImage(mean, std, np.float32), ToTensor(), ToTorchImage()]
        self._loader = Loader(
            beton,
            batch_size=self.spec.batch_size,
            num_workers=self.spec.threads,
            order=OrderOption.RANDOM if self.spec.transforms == "train" else OrderOption.SEQUENTIAL,
            drop_last=False,
            pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]},
            seed=self.spec.seed,
        )

    def _batches(self):
        return iter(self._loader)


def _loader_kwargs(spec: RowSpec) -> dict:
    """DataLoader arguments as the usual advice tunes them; the same for rows (a)-(e)."""
    import torch

    workers = spec.threads
    return {
        "batch_size": spec.batch_size,
        "shuffle": spec.transforms == "train",
        "num_workers": workers,
        "persistent_workers": workers > 0,
        "prefetch_factor": 2 if workers > 0 else None,
        "pin_memory": spec.device == "gpu" and torch.cuda.is_available(),
        "generator": torch.Generator().manual_seed(spec.seed),
        **({"collate_fn": _recipe_collate(spec)} if spec.recipe is not None else {}),
    }


def _recipe_collate(spec: RowSpec):
    from fastload.bench.recipes import recipe_parts

    return recipe_parts(spec)[1]


def _row_dataset(spec: RowSpec, source: str):
    """The dataset a loader row reads: the folder, the LMDB, or the pre-resized LMDB."""
    if spec.recipe is not None:
        from fastload.bench.recipes import recipe_parts

        transform = recipe_parts(spec)[0]
    else:
        transform = build_transform(spec.transforms, spec.image_size)
    if source == "folder":
        from torchvision.datasets import ImageFolder

        return ImageFolder(spec.folder, transform)
    from fastload.data.format.dataset import LMDBDataset

    path = spec.lmdb if source == "lmdb" else spec.lmdb_small
    return LMDBDataset(_need(path, source), transform)


def _need(path: str | None, what: str) -> str:
    if path is None:
        raise ValueError(f"RowSpec.{what} is not set; the harness prepares it before this row")
    return path


def make_row(key: str, spec: RowSpec) -> _Row:
    """The runner for row ``key`` (one of ``ROW_KEYS``); call ``setup()`` before epochs."""
    factories = {
        "a": lambda: _TorchRow(spec, "folder"),
        "b": lambda: _TorchRow(spec, "lmdb"),
        "c": lambda: _FastloadRow(spec, "folder"),
        "d": lambda: _FastloadRow(spec, "lmdb"),
        "e": lambda: _FastloadRow(spec, "lmdb_small"),
        "f": lambda: _CeilingRow(spec),
        "g": lambda: _DaliRow(spec),
        "h": lambda: _FfcvRow(spec),
        "i": lambda: _CeilingRow(spec, floor=True),
    }
    if key not in factories:
        raise ValueError(f"row should be one of {', '.join(ROW_KEYS)}, but got row={key!r}")
    return factories[key]()
