"""Mosaic Streaming row: ``MDSWriter(out="s3://…")`` to write, ``StreamingDataset`` +
``StreamingDataLoader`` (a torch DataLoader) to read, as Mosaic's docs show them.

Runs in the peers venv. The S3 endpoint comes from ``S3_ENDPOINT_URL`` (Mosaic's variable),
credentials from the standard AWS variables; run.py sets both.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import peers_common as pc

# 'jpeg' stores a JpegImageFile's original file bytes (no re-encode) and decodes to PIL.
COLUMNS = {"image": "jpeg", "label": "int", "index": "int"}
# set: the reading process drops its S3 client before the DataLoader forks its workers
DROP_PARENT_CLIENT = "PEERS_MOSAIC_DROP_PARENT_CLIENT"


def convert(args) -> dict:
    from PIL import Image
    from streaming import MDSWriter

    samples, _classes = pc.image_folder_samples(args.src)
    cpu0, t0 = pc.tree_cpu_seconds(), time.perf_counter()
    # With a remote `out`, MDSWriter writes each shard to a temporary local folder and
    # uploads it when the shard is full (max_workers upload threads), index.json last.
    with MDSWriter(out=args.remote, columns=COLUMNS, size_limit=int(args.shard_mb * (1 << 20)),
                   max_workers=args.workers, progress_bar=False) as out:
        for index, (path, label) in enumerate(samples):
            with Image.open(path) as image:
                out.write({"image": image, "label": label, "index": index})
    seconds = time.perf_counter() - t0
    return {"images": len(samples), "seconds": round(seconds, 3),
            "cpu_s": round(pc.tree_cpu_seconds() - cpu0, 3)}


def _dataset_class():
    from streaming import StreamingDataset

    class ImageStreamingDataset(StreamingDataset):
        """Mosaic's pattern: subclass and transform in ``__getitem__``."""

        def __init__(self, *, transform, **kwargs) -> None:
            super().__init__(**kwargs)
            self.transform = transform

        def __getitem__(self, idx):
            sample = super().__getitem__(idx)
            return self.transform(sample["image"].convert("RGB")), sample["label"], sample["index"]

    return ImageStreamingDataset


def _make(args, *, remote: str, cache: str):
    from streaming import StreamingDataLoader
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    is_local = not remote.startswith(("s3://", "gs://", "az://"))
    dataset = _dataset_class()(
        remote=None if is_local else remote, local=remote if is_local else cache,
        shuffle=True, shuffle_seed=args.seed, batch_size=args.batch_size,
        transform=pc.train_transform())
    if os.environ.get(DROP_PARENT_CLIENT):  # a diagnostic (mosaic_inherited_client.py)
        for stream in dataset.streams:  # the S3 client that fetched index.json, with its socket
            stream._downloader.clean_up()
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                                 persistent_workers=True)
    return dataset, loader


def read(args) -> dict:
    import streaming  # noqa: F401  (imported before the clock starts: every row pays torch's import)

    return pc.time_epochs(args, lambda: _make(args, remote=args.remote, cache=args.cache)[1])


def resume(args) -> dict:
    rank, world = pc.distributed_rank()
    _dataset, loader = _make(args, remote=args.remote, cache=args.cache)
    seen: list[int] = []
    result: dict = {"rank": rank, "world_size": world}
    if args.batches is None:  # the second run: load the state, read the rest
        loader.load_state_dict(json.loads(Path(args.state).read_text()))
    figures = pc.time_epoch(loader, batch_size=args.batch_size, max_batches=args.batches,
                            on_batch=lambda batch: seen.extend(int(i) for i in batch[2]))
    result.update(figures)
    if args.batches is not None:
        state = loader.state_dict()  # the same on every rank: samples seen by all ranks
        if rank == 0:
            Path(args.state).write_text(json.dumps(state))
        result["state"] = state
    pc.write_seen(args.seen, seen)
    pc.distributed_barrier_and_close()
    return result


def main() -> None:
    args = pc.row_parser(__doc__.splitlines()[0]).parse_args()
    pc.preload()
    pc.emit({"convert": convert, "read": read, "resume": resume}[args.command](args))


if __name__ == "__main__":
    main()
