"""A DALI graph written by hand for the standard ImageNet input job: the benchmark's row (g).

This is what a DALI user would write without fastload: DALI's own file reader picks the
order, ``image_random_crop`` decodes only the region of interest, ``resize`` brings it to the
output size and ``crop_mirror_normalize`` flips, normalises and lays out CHW float32.
It does not promise torchvision parity (DALI's crop window and resize rounding differ
slightly); it is the speed reference fastload's own graphs are measured against.

    files → fn.readers.file → fn.decoders.image_random_crop → fn.resize → fn.crop_mirror_normalize
    (train)                  fn.decoders.image → fn.resize(shorter) → fn.crop_mirror_normalize(crop)   (val)

``device="cpu"`` runs CPU-only (``device_id=None``); ``device="gpu"`` decodes with
``device="mixed"`` (nvJPEG, hardware decoder share set by ``hw_decoder_load``) and returns
batches on ``cuda:device_id``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from fastload.loader.presets import IMAGENET_MEAN, IMAGENET_STD, eval_resize_size
from fastload.utils.checks import check_positive_int

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "build_reference_pipeline", "ReferenceLoader"]

_READER_NAME = "Reader"


def _check_device(device: str, device_id: int | None) -> int | None:
    if device == "cpu":
        return None
    if device == "gpu":
        return 0 if device_id is None else int(device_id)
    raise ValueError(f"device should be 'cpu' or 'gpu', but got device={device!r}")


def build_reference_pipeline(
    files: Sequence[str],
    labels: Sequence[int],
    *,
    batch_size: int,
    image_size: int = 224,
    train: bool = True,
    num_threads: int = 2,
    device: str = "cpu",
    device_id: int | None = None,
    seed: int = 0,
    hw_decoder_load: float = 0.65,
    prefetch_queue_depth: int = 2,
):
    """Build (not yet built) the reference DALI pipeline over ``files`` with int ``labels``.

    Outputs ``images`` (float32, CHW, ImageNet-normalised, ``image_size`` square) and
    ``labels`` (int32, shape ``(1,)`` per sample). The reader is named ``"Reader"``.
    """
    from nvidia.dali import fn, pipeline_def, types

    if len(files) == 0:
        raise ValueError("files should name at least one image, but got an empty list")
    if len(files) != len(labels):
        raise ValueError(
            f"files and labels should have the same length, but got {len(files)} and {len(labels)}"
        )
    check_positive_int("batch_size", batch_size)
    gpu_id = _check_device(device, device_id)
    decoder_device = "mixed" if gpu_id is not None else "cpu"
    decoder_kwargs = {"hw_decoder_load": hw_decoder_load} if gpu_id is not None else {}
    mean = [255.0 * m for m in IMAGENET_MEAN]
    std = [255.0 * s for s in IMAGENET_STD]

    @pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=gpu_id,
        seed=seed,
        prefetch_queue_depth=prefetch_queue_depth,
    )
    def reference():
        encoded, label = fn.readers.file(
            files=list(files),
            labels=[int(x) for x in labels],
            random_shuffle=train,
            pad_last_batch=True,
            name=_READER_NAME,
        )
        if train:
            images = fn.decoders.image_random_crop(
                encoded,
                device=decoder_device,
                output_type=types.RGB,
                random_area=[0.08, 1.0],
                random_aspect_ratio=[3.0 / 4.0, 4.0 / 3.0],
                num_attempts=10,
                **decoder_kwargs,
            )
            images = fn.resize(images, resize_x=image_size, resize_y=image_size)
            mirror = fn.random.coin_flip(probability=0.5)
            crop = None
        else:
            images = fn.decoders.image(
                encoded, device=decoder_device, output_type=types.RGB, **decoder_kwargs
            )
            images = fn.resize(images, resize_shorter=eval_resize_size(image_size))
            mirror = 0
            crop = (image_size, image_size)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            crop=crop,
            mean=mean,
            std=std,
            mirror=mirror,
        )
        return images, label

    return reference()


class ReferenceLoader:
    """Iterate epochs of ``(images, labels)`` torch batches from the reference graph.

    ``len(loader)`` is the number of batches per epoch (last one partial, nothing dropped).
    Labels come back as an int64 vector on the CPU; images on the CPU, or on
    ``cuda:device_id`` with ``device="gpu"``.
    """

    def __init__(self, files: Sequence[str], labels: Sequence[int], **kwargs) -> None:
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        self.batch_size = int(kwargs["batch_size"])
        self._size = len(files)
        self._pipe = build_reference_pipeline(files, labels, **kwargs)
        self._pipe.build()
        self._iterator = DALIGenericIterator(
            self._pipe,
            ["images", "labels"],
            reader_name=_READER_NAME,
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )

    def __len__(self) -> int:
        return -(-self._size // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for outputs in self._iterator:
            batch = outputs[0]
            yield batch["images"], batch["labels"].view(-1).long()

    def close(self) -> None:
        """Release the pipeline (idempotent)."""
        self._iterator = None
        self._pipe = None
