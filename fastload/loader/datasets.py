"""The datasets fastload reads: what a ``dataset=`` path or URL names (:func:`resolve_dataset`)
and the sample source of a dataset object (:func:`make_source`).

``make_source`` accepts torchvision ``ImageFolder``/``DatasetFolder`` (its ``.samples``,
``.targets``, ``.transform``, ``.target_transform``), ``fastload.LMDBDataset`` (its
``.reader``) and ``torch.utils.data.Subset`` of either. Anything else raises ``NotASource``
with the reason, which the loader turns into its torch fallback.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from fastload.loader.read_buffers import DEFAULT_READ_BUFFER_BYTES
from fastload.loader.sample_sources import FileSource, LMDBSource, SubsetSource

__all__ = ["NotASource", "dataset_signature", "make_source", "resolve_dataset"]


class NotASource(ValueError):
    """The dataset cannot be read without running its own ``__getitem__``; ``str()`` says why."""


def _check_items(dataset: Any, base: type, what: str) -> None:
    """NotASource where ``dataset``'s class reads its samples otherwise than ``base`` does:
    its own ``__getitem__``, or a ``__getitems__`` (which torch's loader calls instead, with a
    batch's indices) that ``base`` has not. Its own ``__len__`` is honoured."""
    cls = type(dataset)
    for method in ("__getitem__", "__getitems__"):
        if getattr(cls, method, None) is not getattr(base, method, None):
            raise NotASource(f"{cls.__name__} overrides {method}, so its samples are not the "
                             f"{what} fastload can read")


def _folder_source(dataset: Any, read_buffer_bytes: int) -> FileSource:
    from torchvision.datasets.folder import DatasetFolder, default_loader, pil_loader

    cls = type(dataset)
    _check_items(dataset, DatasetFolder, "plain (loader(path), target) pairs")
    if dataset.loader not in (default_loader, pil_loader):
        name = getattr(dataset.loader, "__name__", type(dataset.loader).__name__)
        raise NotASource(f"{cls.__name__} uses a custom loader={name}, not torchvision's "
                         "default PIL loader")
    from torchvision import get_image_backend

    if get_image_backend() != "PIL":
        raise NotASource(f"torchvision's image backend is {get_image_backend()!r}, not 'PIL'")
    transforms = getattr(dataset, "transforms", None)
    if transforms is not None and type(transforms).__name__ != "StandardTransform":
        raise NotASource(f"{cls.__name__} has a joint transforms={type(transforms).__name__}")
    paths = [path for path, _ in dataset.samples]
    targets = [target for _, target in dataset.samples]
    return FileSource(paths, targets, dataset.transform, dataset.target_transform,
                      read_buffer_bytes=read_buffer_bytes)


def make_source(dataset: Any, read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES
                ) -> FileSource | LMDBSource | SubsetSource:
    """The source for ``dataset``, or NotASource naming why the torch path must read it.
    Its length is ``len(dataset)``, as torch's samplers take it; an image folder's file
    reads keep up to ``read_buffer_bytes`` of memory for reuse (``loader/read_buffers``)."""
    source = _make_source(dataset, read_buffer_bytes)
    source.length = len(dataset)
    return source


def _make_source(dataset: Any, read_buffer_bytes: int) -> FileSource | LMDBSource | SubsetSource:
    from torch.utils.data import Subset
    from torchvision.datasets import DatasetFolder

    if isinstance(dataset, Subset):
        _check_items(dataset, Subset, "samples of the dataset it selects from")
        return SubsetSource(make_source(dataset.dataset, read_buffer_bytes), dataset.indices)
    if isinstance(dataset, DatasetFolder):
        return _folder_source(dataset, read_buffer_bytes)
    from fastload.data.format.dataset import LMDBDataset

    if isinstance(dataset, LMDBDataset):
        _check_items(dataset, LMDBDataset, "records' (image, label) pairs")
        return LMDBSource(dataset.reader, dataset.transform, dataset.target_transform)
    raise NotASource(f"dataset type {type(dataset).__name__} is not an ImageFolder, "
                     "DatasetFolder, fastload.LMDBDataset or a Subset of one")


def dataset_signature(dataset: Any) -> tuple:
    """What :func:`make_source` reads of ``dataset`` that a script may change between epochs
    (torch's loader reads it at each sample): the transforms, by identity and ``repr`` (so a
    torchvision transform's parameter changed in place shows), the samples and a Subset's
    indices, by identity and length."""
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        return (id(dataset.indices), len(dataset.indices), dataset_signature(dataset.dataset))
    samples = getattr(dataset, "samples", None)
    return (_seen(getattr(dataset, "transform", None)),
            _seen(getattr(dataset, "target_transform", None)),
            id(samples), None if samples is None else len(samples))


def _seen(obj: Any) -> tuple[int, str] | None:
    if obj is None:
        return None
    try:
        return id(obj), repr(obj)
    except Exception:  # noqa: BLE001 - a user's __repr__ that fails: its identity alone
        return id(obj), type(obj).__qualname__


def resolve_dataset(dataset: Any, transform: Any, target_transform: Any,
                    remote: dict | None = None) -> Any:
    """A dataset object for ``dataset``: a str/Path to an LMDB directory becomes
    ``fastload.LMDBDataset``, to any other folder an ``ImageFolder``, a URL a remote
    ``LMDBDataset`` (``remote``: its storage_options, cache_dir, cache_bytes); dataset
    objects pass through (then ``transform``/``target_transform`` must be None)."""
    remote = {key: value for key, value in (remote or {}).items() if value is not None}
    if not isinstance(dataset, str | os.PathLike):
        if transform is not None or target_transform is not None or remote:
            what = ("transform= and target_transform=" if not remote
                    else ", ".join(f"{key}=" for key in remote))
            raise ValueError(
                f"{what} apply only when dataset is a path; "
                f"set them on the {type(dataset).__name__} itself"
            )
        return dataset
    from fastload.data.remote import is_url, locate

    if is_url(dataset) or remote:
        from fastload.data.format import dataset as lmdb_dataset

        locate(dataset, remote.get("storage_options"), "dataset path")  # refuses the unknown
        return lmdb_dataset.LMDBDataset(dataset, transform=transform,
                                        target_transform=target_transform, **remote)
    root = pathlib.Path(locate(dataset, None, "dataset path"))  # file:// is a local path
    from fastload.data.sets.manifest import is_sharded_set

    if is_sharded_set(root):  # a sharded set's folder or manifest: one LMDBDataset
        from fastload.data.format import dataset as lmdb_dataset

        return lmdb_dataset.LMDBDataset(root, transform=transform,
                                        target_transform=target_transform)
    if not root.is_dir():
        raise FileNotFoundError(
            f"dataset path '{root}' is not a directory; pass an image folder (one "
            "subfolder per class) or a fastload LMDB directory"
        )
    from fastload.data.format.constants import META_FILE

    if (root / META_FILE).exists() or (root / "data.mdb").exists():
        from fastload.data.format import dataset as lmdb_dataset

        return lmdb_dataset.LMDBDataset(root, transform=transform,
                                        target_transform=target_transform)
    from torchvision.datasets import ImageFolder

    return ImageFolder(root, transform=transform, target_transform=target_transform)
