"""LitData row: ``litdata.optimize(..., output_dir="s3://…")`` to write,
``StreamingDataset`` + ``StreamingDataLoader`` to read, as LitData's docs show them.

Runs in the peers venv. boto3 (LitData's S3 client) takes the endpoint from
``AWS_ENDPOINT_URL`` and the credentials from the standard AWS variables; run.py sets them.
LitData decodes a stored JPEG with ``torchvision.io.decode_jpeg`` into a uint8 tensor, so the
transform's ``ToTensor`` is its tensor form ``ConvertImageDtype(float32)`` here (same output).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import peers_common as pc


def _allow_plain_http(endpoint: str | None) -> None:
    """Let LitData's obstore client talk to an ``http://`` endpoint (the local test server).

    LitData uploads and prefetches chunks through obstore with fixed client options that
    leave out ``allow_http``, and obstore refuses plain HTTP without it ("builder error:
    BadScheme"); boto3, its other client, takes the endpoint as it is. On AWS (https) this
    changes nothing. The one change this benchmark makes to a peer.
    """
    if not endpoint or not endpoint.startswith("http://"):
        return
    from litdata.streaming import downloader

    options = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(options, dict):
        options["allow_http"] = "true"


def to_item(sample: tuple[str, int, int]) -> dict:
    """``optimize``'s ``fn``: a JpegImageFile (LitData stores its file's bytes as they are)."""
    from PIL import Image

    path, label, index = sample
    return {"image": Image.open(path), "label": label, "index": index}


def convert(args) -> dict:
    from litdata import optimize

    samples, _classes = pc.image_folder_samples(args.src)
    inputs = [(path, label, index) for index, (path, label) in enumerate(samples)]
    cpu0, t0 = pc.tree_cpu_seconds(), time.perf_counter()
    optimize(fn=to_item, inputs=inputs, output_dir=args.remote,
             chunk_bytes=int(args.shard_mb * (1 << 20)), num_workers=args.workers,
             verbose=False)
    seconds = time.perf_counter() - t0
    return {"images": len(samples), "seconds": round(seconds, 3),
            "cpu_s": round(pc.tree_cpu_seconds() - cpu0, 3)}


def _dataset_class():
    from litdata import StreamingDataset

    class ImageStreamingDataset(StreamingDataset):
        """LitData's pattern: subclass and transform in ``__getitem__``."""

        def __init__(self, *args, transform, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.image_transform = transform

        def __getitem__(self, index):
            item = super().__getitem__(index)
            return self.image_transform(item["image"]), item["label"], item["index"]

    return ImageStreamingDataset


def _make(args, *, remote: str, cache: str, drop_last: bool | None = None):
    from litdata import StreamingDataLoader

    is_local = not remote.startswith(("s3://", "gs://", "az://"))
    dataset = _dataset_class()(remote, cache_dir=None if is_local else cache, shuffle=True,
                               seed=args.seed, drop_last=drop_last,
                               transform=pc.train_transform(tensor_input=True))
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                                 persistent_workers=True)
    return dataset, loader


def read(args) -> dict:
    import litdata  # noqa: F401  (imported before the clock starts: every row pays torch's import)

    return pc.time_epochs(args, lambda: _make(args, remote=args.remote, cache=args.cache)[1])


def resume(args) -> dict:
    rank, world = pc.distributed_rank()
    # LitData's drop_last defaults to True under torch.distributed and False without it,
    # and a state is refused if it differs: the resumed single process must say True.
    _dataset, loader = _make(args, remote=args.remote, cache=args.cache, drop_last=True)
    seen: list[int] = []
    result: dict = {"rank": rank, "world_size": world}
    if args.batches is None:  # the second run: load the state, read the rest
        loader.load_state_dict(json.loads(Path(args.state).read_text()))
    figures = pc.time_epoch(loader, batch_size=args.batch_size, max_batches=args.batches,
                            on_batch=lambda batch: seen.extend(int(i) for i in batch[2]))
    result.update(figures)
    if args.batches is not None:
        state = loader.state_dict()
        if rank == 0:  # LitData's docs save rank 0's loader state with the checkpoint
            Path(args.state).write_text(json.dumps(state, default=str))
        result["state"] = state
    pc.write_seen(args.seen, seen)
    pc.distributed_barrier_and_close()
    return result


def main() -> None:
    import os

    _allow_plain_http(os.environ.get("AWS_ENDPOINT_URL"))
    args = pc.row_parser(__doc__.splitlines()[0]).parse_args()
    pc.preload()
    pc.emit({"convert": convert, "read": read, "resume": resume}[args.command](args))


if __name__ == "__main__":  # optimize's workers re-import this file
    main()
