"""``LMDBDataset``: a fastload LMDB directory as a map-style torch Dataset, like ImageFolder."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from fastload.data.shards import open_reader
from fastload.data.targets import Labels


class LMDBDataset(Dataset):
    """A fastload LMDB directory, used where ``torchvision.datasets.ImageFolder`` would be.

    ``dataset[i]`` is ``(PIL RGB image, label)`` with ``transform`` / ``target_transform``
    applied, exactly as ImageFolder gives sample ``i`` of the folder that was converted
    (when the conversion skipped no file and kept every JPEG's bytes). ``classes``,
    ``class_to_idx`` and ``targets`` mean what they mean on ImageFolder; ``targets`` is the
    set's ``labels.i32`` memory-mapped, read as a list of ints but not changeable in place
    (:class:`~fastload.data.targets.Labels`: ``targets[i]``, slices, ``==`` with a list,
    ``np.asarray(targets)`` without a copy); ``reader`` is the
    underlying :class:`~fastload.data.reader.LMDBReader`. The LMDB environment is opened
    lazily in each process, so the dataset pickles to DataLoader workers (fork or spawn).
    There is no ``samples`` list of file paths: records are keys (``reader.key(i)``).
    ``path`` may also be a sharded set (its folder or manifest): one data set with global
    indices, read through a :class:`~fastload.data.shards.ShardedReader`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
    ) -> None:
        self.reader = open_reader(path)  # LMDBReader, or ShardedReader for a sharded set
        self.path: Path = self.reader.path
        self.root = str(self.path)
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
