"""The DALI graph for a :class:`~fastload.pipelines.translate.TransformPlan`.

Every per-sample number (decode region, output size, resample region, crop, flips, colour
factors) comes from Python through ``external_source`` inputs, so the graph draws nothing
itself and reproduces torchvision's integer arithmetic (a random interpolation too: each
sample's mode comes in as ``interp``, an argument input of ``fn.resize``). Stages, each
present only when the plan needs it::

    encoded -> decode (full, or region of interest) -> resize (only the kept region)
            -> padded crop -> colour jitter -> vertical flip
            -> crop_mirror_normalize (horizontal flip, mean/std, dtype, CHW)

``device="cpu"`` builds a CPU-only pipeline (``device_id=None``); ``device="gpu"`` decodes
with ``device="mixed"`` (nvJPEG, hardware decoder share ``hw_decoder_load``) and runs the
rest on the GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..prefix.plan import TransformPlan

__all__ = ["INPUT_NAMES", "build_pipeline", "input_names", "interp_codes"]

NO_COPY_ENCODED = True

INPUT_NAMES = (
    "encoded",
    "decode_anchor",
    "decode_shape",
    "resize_size",
    "roi_start",
    "roi_end",
    "interp",
    "crop_anchor",
    "crop_shape",
    "hflip",
    "vflip",
    "brightness",
    "contrast",
    "saturation",
    "hue",
)


def _interp_type(name: str):
    from nvidia.dali import types

    return {
        "nearest": types.INTERP_NN,
        "linear": types.INTERP_LINEAR,
        "cubic": types.INTERP_CUBIC,
        "lanczos": types.INTERP_LANCZOS3,
    }[name]


def interp_codes(modes: Iterable[str]) -> np.ndarray:
    """The ``interp`` feed: each sample's mode (``SampleParams.interpolation``) as DALI's
    ``DALIInterpType`` value, int32 (the graph casts it to ``INTERP_TYPE``)."""
    return np.array([int(_interp_type(m)) for m in modes], np.int32)


def _dali_dtype(dtype):
    import torch
    from nvidia.dali import types

    return {torch.float32: types.FLOAT, torch.float16: types.FLOAT16, torch.uint8: types.UINT8}[
        dtype
    ]


def input_names(plan: TransformPlan, resample: bool = True) -> tuple[str, ...]:
    """The external_source names the graph of ``plan`` reads, in feeding order."""
    names = ["encoded"]
    if plan.decode_roi:
        names += ["decode_anchor", "decode_shape"]
    if not resample:
        return tuple(names)
    if plan.has_resize:
        names += ["resize_size", "roi_start", "roi_end"]
        if len(plan.interpolations) > 1:
            names.append("interp")
    if plan.pad_crop:
        names += ["crop_anchor", "crop_shape"]
    if plan.jitter is not None:
        j = plan.jitter
        names += [
            name
            for name, rng in zip(
                ("brightness", "contrast", "saturation", "hue"),
                (j.brightness, j.contrast, j.saturation, j.hue),
                strict=True,
            )
            if rng is not None
        ]
    if plan.has_vflip:
        names.append("vflip")
    names.append("hflip")
    return tuple(names)


def _jitter(img, inputs, jitter, gpu: bool):
    """ColorJitter on uint8 HWC in the fixed order brightness, contrast, saturation, hue;
    each stage only when its range is given. Each matches the PIL operation torchvision uses:
    brightness blends with black, contrast with the mean grey level, saturation with the
    grey image (ITU-R 601 luma, as PIL's "L"), hue shifts the HSV hue."""
    from nvidia.dali import fn, types

    if jitter.brightness is not None:
        img = fn.brightness(img, brightness=inputs["brightness"])
    if jitter.contrast is not None:
        grey = fn.color_space_conversion(img, image_type=types.RGB, output_type=types.GRAY)
        mean = fn.reductions.mean(fn.cast(grey, dtype=types.FLOAT), keep_dims=True)
        contrast = fn.reshape(inputs["contrast"], shape=[1, 1, 1])
        if gpu:  # arithmetic takes its per-sample factors on the image's device
            contrast = contrast.gpu()
        blended = mean + (fn.cast(img, dtype=types.FLOAT) - mean) * contrast
        img = fn.cast(blended, dtype=types.UINT8)  # rounds to nearest and saturates
    if jitter.saturation is not None:
        img = fn.saturation(img, saturation=inputs["saturation"])
    if jitter.hue is not None:
        img = _hsv_hue_shift(img, inputs["hue"].gpu() if gpu else inputs["hue"])
    return img


def _hsv_hue_shift(img, shift):
    """PIL's hue shift (``shift`` a fraction of the turn) with DALI arithmetic: HSV keeps the
    largest and smallest channel of each pixel; the hue moves round the hexagon."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types

    x = fn.cast(img, dtype=types.FLOAT)
    r, g, b = x[:, :, 0], x[:, :, 1], x[:, :, 2]
    top = dmath.max(dmath.max(r, g), b)
    span = top - dmath.min(dmath.min(r, g), b)
    inv = 1.0 / dmath.max(span, 1e-6)
    is_r = fn.cast(top == r, dtype=types.FLOAT)
    is_g = fn.cast(top == g, dtype=types.FLOAT) * (1.0 - is_r)
    is_b = 1.0 - is_r - is_g
    hue = is_r * ((g - b) * inv) + is_g * ((b - r) * inv + 2.0) + is_b * ((r - g) * inv + 4.0)
    hue = hue + shift * 6.0
    channels = []
    for offset in (5.0, 3.0, 1.0):  # R, G, B
        k = hue + offset
        k = k - 6.0 * dmath.floor(k / 6.0)
        channels.append(top - span * dmath.clamp(dmath.min(k, 4.0 - k), 0.0, 1.0))
    return fn.cast(fn.stack(*channels, axis=2), dtype=types.UINT8)


def build_pipeline(
    plan: TransformPlan,
    *,
    max_batch_size: int,
    num_threads: int,
    device: str = "cpu",
    device_id: int | None = None,
    queue_depth: int = 2,
    hw_decoder_load: float = 0.65,
    seed: int | None = None,
    resample: bool = True,
):
    """A built DALI ``Pipeline`` for ``plan`` whose inputs are :func:`input_names` (plan).

    ``resample=False``: the graph stops after decoding and outputs each sample's decoded
    region as uint8 HWC (the caller resamples, see ``torch_resample``).
    """
    import nvidia.dali as dali
    from nvidia.dali import fn, types

    if device not in ("cpu", "gpu"):
        raise ValueError(f"device should be 'cpu' or 'gpu', but got device={device!r}")
    gpu = device == "gpu"
    pipe = dali.Pipeline(
        batch_size=max_batch_size,
        num_threads=num_threads,
        device_id=device_id if gpu else None,
        prefetch_queue_depth=queue_depth,
        exec_async=True,
        exec_pipelined=True,
        seed=seed,
    )
    names = input_names(plan, resample)
    with pipe:
        inputs = {}
        for name in names:
            if name == "encoded":
                # no_copy: DALI reads the caller's buffers in place (BatchDecoder keeps them
                # alive until the batch is fetched) instead of copying every encoded byte.
                # CPU graphs only: not yet run on a GPU machine.
                inputs[name] = fn.external_source(
                    name=name, dtype=types.UINT8, ndim=1, no_copy=NO_COPY_ENCODED and not gpu
                )
            elif name in ("decode_anchor", "decode_shape", "crop_anchor", "crop_shape"):
                inputs[name] = fn.external_source(name=name, dtype=types.INT32, ndim=1)
            elif name == "interp":
                # fn.resize takes a per-sample interp_type only as INTERP_TYPE (DALI 2.4
                # refuses an int32 one), which numpy cannot feed: cast in the graph
                inputs[name] = fn.cast(
                    fn.external_source(name=name, dtype=types.INT32, ndim=0),
                    dtype=types.INTERP_TYPE,
                )
            elif name in ("hflip", "vflip"):
                inputs[name] = fn.external_source(name=name, dtype=types.INT32, ndim=0)
            elif name in ("resize_size", "roi_start", "roi_end"):
                inputs[name] = fn.external_source(name=name, dtype=types.FLOAT, ndim=1)
            else:
                inputs[name] = fn.external_source(name=name, dtype=types.FLOAT, ndim=0)
        decode_kw = dict(
            device="mixed" if gpu else "cpu", output_type=types.RGB, adjust_orientation=False
        )
        if gpu:
            decode_kw.update(hw_decoder_load=hw_decoder_load, jpeg_fancy_upsampling=True)
        if plan.decode_roi:
            img = fn.decoders.image_slice(
                inputs["encoded"],
                inputs["decode_anchor"],
                inputs["decode_shape"],
                axis_names="HW",
                normalized_anchor=False,
                normalized_shape=False,
                **decode_kw,
            )
        else:
            img = fn.decoders.image(inputs["encoded"], **decode_kw)
        if not resample:
            pipe.set_outputs(img)
            pipe.build()
            return pipe
        if plan.has_resize:
            img = fn.resize(
                img,
                size=inputs["resize_size"],
                roi_start=inputs["roi_start"],
                roi_end=inputs["roi_end"],
                roi_relative=False,
                interp_type=inputs["interp"]
                if "interp" in inputs
                else _interp_type(plan.interpolations[0]),
                antialias=plan.antialias,
            )
        if plan.jitter is not None and plan.jitter_before_crop:
            img = _jitter(img, inputs, plan.jitter, gpu)  # on the image before the crop
        if plan.pad_crop:
            img = fn.slice(
                img,
                inputs["crop_anchor"],
                inputs["crop_shape"],
                axis_names="HW",
                normalized_anchor=False,
                normalized_shape=False,
                out_of_bounds_policy="pad",
                fill_values=list(plan.fill),
            )
        if plan.jitter is not None and not plan.jitter_before_crop:
            img = _jitter(img, inputs, plan.jitter, gpu)
        if plan.has_vflip:
            img = fn.flip(img, horizontal=0, vertical=inputs["vflip"])
        out = fn.crop_mirror_normalize(
            img,
            mirror=inputs["hflip"],
            mean=list(plan.mean),
            std=list(plan.std),
            dtype=_dali_dtype(plan.output_dtype),
            output_layout="CHW",
        )
        pipe.set_outputs(out)
    pipe.build()
    return pipe
