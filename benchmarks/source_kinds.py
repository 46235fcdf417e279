"""The same images written as each kind of source ``fastload convert`` reads, for benchmarks.

``write_source(kind, items, root)`` with ``items`` a list of ``(label, image bytes)``:
``"folder"`` (an ImageFolder tree of hard links when ``items`` came from files),
``"jsonl"`` (a list of the folder's files), ``"webdataset"`` (tar shards as WebDataset
lays them out: ``key.cls`` + ``key.jpg``, written with ``tarfile`` as
``webdataset.TarWriter`` writes them, without its per-sample encoding), ``"parquet"``
(``pyarrow.parquet.write_table``, the Hub's image column of ``{bytes, path}``, row groups
of 100 rows as ``datasets`` writes image data) and ``"datasets"``
(``datasets.Dataset.from_dict(...).save_to_disk``).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

KINDS = ("folder", "jsonl", "webdataset", "parquet", "datasets")
PER_SHARD = 10_000  # default samples per tar shard / rows per parquet file
ROW_GROUP = 100  # datasets' PARQUET_ROW_GROUP_SIZE_FOR_IMAGE_DATASETS


def write_source(kind: str, items: list[tuple[int, bytes]], root: Path,
                 files: list[Path] | None = None, per_shard: int = PER_SHARD) -> Path:
    """Write ``items`` as a ``kind`` source under ``root``; returns the SRC to convert.
    ``files`` (one per item, the images' own files) lets the folder be hard links;
    ``per_shard`` samples go in each tar shard and parquet file."""
    root.mkdir(parents=True, exist_ok=True)
    names = [f"{i:08d}" for i in range(len(items))]
    if kind in ("folder", "jsonl"):
        tree = root / "tree"
        for i, (label, data) in enumerate(items):
            folder = tree / f"c{label:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            if files is not None:
                os.link(files[i], folder / f"{names[i]}.jpg")
            else:
                (folder / f"{names[i]}.jpg").write_bytes(data)
        if kind == "folder":
            return tree
        with open(root / "list.jsonl", "w") as out:
            for i, (label, _) in enumerate(items):
                out.write(json.dumps({"path": f"tree/c{label:04d}/{names[i]}.jpg",
                                      "label": label}) + "\n")
        return root / "list.jsonl"
    if kind == "webdataset":
        for k, begin in enumerate(range(0, len(items), per_shard)):
            with tarfile.open(root / f"{k:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for i in range(begin, min(begin + per_shard, len(items))):
                    label, data = items[i]
                    for suffix, payload in (("cls", str(label).encode()), ("jpg", data)):
                        info = tarfile.TarInfo(f"{names[i]}.{suffix}")
                        info.size = len(payload)
                        tar.addfile(info, io.BytesIO(payload))
        return root
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        for k, begin in enumerate(range(0, len(items), per_shard)):
            part = items[begin:begin + per_shard]
            table = pa.table({
                "image": pa.array([{"bytes": d, "path": f"{names[begin + i]}.jpg"}
                                   for i, (_, d) in enumerate(part)]),
                "label": pa.array([label for label, _ in part], pa.int64())})
            pq.write_table(table, root / f"train-{k:05d}.parquet", row_group_size=ROW_GROUP)
        return root
    if kind == "datasets":
        import datasets

        datasets.disable_progress_bars()  # this benchmark process only
        count = max(label for label, _ in items) + 1
        features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(
            names=[f"c{i:04d}" for i in range(count)])})
        ds = datasets.Dataset.from_dict(
            {"image": [{"bytes": d, "path": f"{n}.jpg"} for n, (_, d) in zip(names, items, strict=True)],
             "label": [label for label, _ in items]}, features=features)
        ds.save_to_disk(str(root / "hf"), max_shard_size="500MB")
        return root / "hf"
    raise ValueError(f"kind should be one of {KINDS}, but got kind={kind!r}")
