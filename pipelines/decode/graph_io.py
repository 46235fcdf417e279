"""What one batch puts into the DALI graph and takes out of it.

In: each encoded image as a flat uint8 array (:func:`as_array`) and one feed array per
graph input (:func:`feed_arrays`) from the samples' drawn parameters. Out: the graph's
output copied into a torch tensor (:func:`to_torch`).
:class:`~fastload.pipelines.decode.batch_decoder.BatchDecoder` drives the graph with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..prefix import geometry
from .buffers import BatchBuffers
from .graph import interp_codes

__all__ = ["as_array", "feed_arrays", "to_torch"]


def as_array(data) -> np.ndarray:
    """An encoded image (bytes, memoryview or NumPy array) as a flat uint8 array; TypeError
    naming the type of anything else."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            data = data.reshape(-1).view(np.uint8)
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, dtype=np.uint8)
    raise TypeError(
        f"encoded images should be bytes, memoryview or numpy arrays, but got {type(data).__name__}"
    )


def _split(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, 4) -> two contiguous (N, 2) arrays (DALI takes densely packed data only)."""
    return np.ascontiguousarray(rows[:, :2]), np.ascontiguousarray(rows[:, 2:])


def feed_arrays(names: Sequence[str], arrays: list[np.ndarray],
                params: list[geometry.SampleParams]) -> dict:
    """One array per graph input of ``names`` (``graph.input_names``), batch first (one DALI
    conversion each, not one per sample), from the samples' drawn ``params``."""
    names = set(names)
    feeds: dict = {"encoded": arrays}
    if "decode_anchor" in names:
        decode = np.array([p.decode for p in params], np.int32)
        feeds["decode_anchor"], feeds["decode_shape"] = _split(decode)
    if "resize_size" in names:
        if any(p.resize is None for p in params):  # cannot happen when the plan resamples
            raise ValueError("a resampling plan produced a sample without a resize")
        feeds["resize_size"] = np.array([p.resize for p in params], np.float32)
        roi = np.array([p.resize_roi for p in params], np.float32).reshape(len(params), 4)
        feeds["roi_start"], feeds["roi_end"] = _split(roi)
    if "interp" in names:  # a random interpolation: each sample's drawn mode
        feeds["interp"] = interp_codes(p.interpolation for p in params)
    if "crop_anchor" in names:
        crops = np.array(
            [p.crop if p.crop is not None else (0, 0, *p.output_size) for p in params], np.int32
        )
        feeds["crop_anchor"], feeds["crop_shape"] = _split(crops)
    for k, key in enumerate(("brightness", "contrast", "saturation", "hue")):
        if key in names:
            feeds[key] = np.array([p.jitter[k] for p in params], np.float32)
    if "vflip" in names:
        feeds["vflip"] = np.array([p.vflip for p in params], np.int32)
    feeds["hflip"] = np.array([p.hflip for p in params], np.int32)
    return feeds


def to_torch(out, device: str, dtype: torch.dtype, device_id: int | None,
             buffers: BatchBuffers) -> torch.Tensor:
    """The graph's output batch as a tensor of ``dtype``: on the GPU by DALI's torch plugin,
    on the CPU one copy out of DALI's reused buffer into memory from ``buffers``."""
    shapes = {tuple(out[i].shape()) for i in range(len(out))}
    if len(shapes) != 1:
        raise ValueError(
            f"the images of a batch have different sizes {sorted(shapes)}; "
            "add a crop (e.g. CenterCrop) so they can be stacked"
        )
    if device == "gpu":
        return _gpu_copy(out, dtype, device_id)
    dense = np.asarray(out.as_tensor())  # a view of DALI's buffer, reused next batch
    result = buffers.empty(dense.shape, dtype)
    result.copy_(torch.from_numpy(dense))
    return result


def _gpu_copy(out, dtype: torch.dtype, device_id: int) -> torch.Tensor:
    from nvidia.dali.plugin.pytorch import feed_ndarray

    dense = out.as_tensor()
    result = torch.empty(dense.shape(), dtype=dtype, device=torch.device("cuda", device_id))
    feed_ndarray(dense, result, cuda_stream=torch.cuda.current_stream(device_id))
    return result
