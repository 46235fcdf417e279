"""``LMDBDataset``: a fastload LMDB directory as a map-style torch Dataset, like ImageFolder."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from fastload.data.format.targets import Labels
from fastload.data.remote import open_any


class LMDBDataset(Dataset):
    """A fastload LMDB directory, used where ``torchvision.datasets.ImageFolder`` would be.

    ``dataset[i]`` is ``(PIL RGB image, label)`` with ``transform`` / ``target_transform``
    applied, exactly as ImageFolder gives sample ``i`` of the folder that was converted
    (when the conversion skipped no file and kept every JPEG's bytes). ``classes``,
    ``class_to_idx`` and ``targets`` mean what they mean on ImageFolder; ``targets`` is the
    set's ``labels.i32`` memory-mapped, read as a list of ints but not changeable in place
    (:class:`~fastload.data.format.targets.Labels`: ``targets[i]``, slices, ``==`` with a list,
    ``np.asarray(targets)`` without a copy); ``reader`` is the
    underlying :class:`~fastload.data.format.reader.LMDBReader`. The LMDB environment is opened
    lazily in each process, so the dataset pickles to DataLoader workers (fork or spawn).
    There is no ``samples`` list of file paths: records are keys (``reader.key(i)``).
    ``path`` may also be a sharded set (its folder or manifest): one data set with global
    indices, read through a :class:`~fastload.data.sets.shards.ShardedReader`.

    ``path`` may be a URL (``s3://bucket/train.set``, any scheme fsspec has a backend for):
    the set's shards are fetched into a local cache on first read and checked against its
    manifest (:mod:`fastload.data.remote`). ``storage_options`` go to fsspec (credentials,
    ``endpoint_url``; S3 also reads the ``AWS_*`` variables and ``~/.aws``); ``cache_dir``
    (default ``$FASTLOAD_CACHE`` or ``~/.cache/fastload``) and ``cache_bytes`` (default
    ``$FASTLOAD_CACHE_BYTES`` or half the free disk) place and bound the cache.

    Args:
        path: a fastload LMDB directory, a sharded set (its folder or manifest), or a URL
            of either (``s3://bucket/train.set``).
        transform: applied to each PIL RGB image, as ImageFolder's ``transform``; None:
            the image as is.
        target_transform: applied to each integer label; None: the label as is.
        storage_options: fsspec's options when ``path`` is a URL (credentials,
            ``endpoint_url``); S3 also reads the ``AWS_*`` variables and ``~/.aws``.
        cache_dir: when ``path`` is a URL: the shard cache's folder (default
            ``$FASTLOAD_CACHE`` or ``~/.cache/fastload``).
        cache_bytes: when ``path`` is a URL: the shard cache's bound in bytes (default
            ``$FASTLOAD_CACHE_BYTES`` or half the free disk).

    Attributes:
        reader (LMDBReader | ShardedReader): the reader of the records (its remote kind
            for a URL).
        path (Path): the directory read (a URL's local cache folder).
        root (str): the URL or the directory, as ``repr`` and error messages name it.
        classes (list[str]): the class names, index = label, as on ImageFolder.
        class_to_idx (dict[str, int]): class name -> label, as on ImageFolder.
        targets (Labels): every record's label, memory-mapped (read-only).
        transform (Callable | None): as given.
        target_transform (Callable | None): as given.

    Raises:
        FileNotFoundError: ``path`` or one of the database's files does not exist.
        ValueError: the database's metadata or sidecar files are damaged or do not match,
            or ``cache_dir``/``cache_bytes`` with a local ``path``.
        OSError: the LMDB environment cannot be opened.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        storage_options: dict | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
    ) -> None:
        if not isinstance(path, str | bytes | os.PathLike):
            raise TypeError("path should be the folder of a fastload database or set, or its "
                            f"URL, but got path={path!r} ({type(path).__name__})")
        # LMDBReader, ShardedReader for a sharded set, their remote kinds for a URL
        self.reader = open_any(path, storage_options=storage_options, cache_dir=cache_dir,
                               cache_bytes=cache_bytes)
        self.path: Path = self.reader.path  # a URL's local cache folder
        self.root = getattr(self.reader, "url", None) or str(self.path)
        self.transform = transform
        self.target_transform = target_transform
        self.classes: list[str] = self.reader.classes
        self.class_to_idx: dict[str, int] = self.reader.class_to_idx
        self.targets: Labels = self.reader.targets

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image

        data, label, _ = self.reader.image_bytes(index)
        try:
            with Image.open(io.BytesIO(data)) as image:
                image = image.convert("RGB")
        except OSError as exc:
            key = self.reader.key(index).decode()
            raise OSError(
                f"cannot decode record {key} of {self.root!r}: {exc}; run `fastload verify "
                f"{self.root}` to check the database"
            ) from exc
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}"]
        if self.transform is not None:
            lines.append(f"    Transform: {self.transform!r}")
        if self.target_transform is not None:
            lines.append(f"    Target transform: {self.target_transform!r}")
        return "\n".join(lines)
