"""BatchDecoder: batches of encoded images in, torch tensors out, through one DALI graph.

The caller decides which samples form a batch; the decoder draws each sample's random
parameters (torchvision's distributions, from the caller's ``torch.Generator``), feeds the
batch to DALI and returns without waiting. Up to ``queue_depth`` batches are in flight; they
come back from :meth:`BatchDecoder.fetch` in submission order as fresh tensors (one copy out
of DALI's reused buffers).

Queue handling: the pipeline is driven one iteration per fed batch (``feed_input`` then the
backend's ``Run``; ``Outputs`` to collect). DALI's Python ``schedule_run``/``run`` would, on
the first call, run ``prefetch_queue_depth`` iterations at once and fail with "Attempted to
peek the data batch that doesn't exist" when fewer batches have been fed. The backend
calls go through :mod:`.dali_backend`, the one seam with DALI's private handle; the arrays
fed to the graph and the tensors made of its output are :mod:`.graph_io`'s.
"""

from __future__ import annotations

import collections
import io
import os
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from fastload.utils.threads import after_fork_in_child, at_interpreter_exit, one_omp_thread

from ..prefix import geometry
from ..prefix.plan import TransformPlan
from ..seams import dali_backend
from . import graph, graph_io
from . import resample as torch_resample
from . import scaled as scaled_decode
from .buffers import BatchBuffers
from .scaled import available as scaled_decode_available
from .scaled import fixed_region

__all__ = ["BatchDecodeError", "BatchDecoder"]


# DALI pipelines do not survive fork: a forked child (a torch DataLoader worker, say)
# inherits them without DALI's threads, and destroying one there (its own finalizer runs
# when the child's garbage collector meets a decoder in a reference cycle) waits forever.
# So a child keeps every decoder it inherited alive, untouched, and their pipelines'
# backends for its whole life, past its exit (DALI's exit hook or the teardown of this
# module shutting them down crashed or hung the child's normal exit).
_LIVE: weakref.WeakSet = weakref.WeakSet()
_INHERITED: list = []


def _keep_inherited() -> None:
    for decoder in _LIVE:
        if decoder._pipe is not None:
            dali_backend.abandon_in_child(decoder._pipe)
    _INHERITED.extend(_LIVE)
    _LIVE.clear()


def _close_live() -> None:
    """At interpreter exit (after the epochs' makers stopped): close this process's decoders
    while DALI's module is whole. A pipeline still alive at the interpreter's teardown was
    finalized after DALI's globals were cleared, and its ``__del__`` printed a traceback."""
    for decoder in list(_LIVE):
        try:
            decoder.close()
        except Exception:  # noqa: BLE001 - exiting: one decoder's fault must not stop the rest
            pass


def _track(decoder: BatchDecoder) -> None:
    after_fork_in_child(_keep_inherited)
    at_interpreter_exit(_close_live)
    _LIVE.add(decoder)


class BatchDecodeError(RuntimeError):
    """DALI failed on a batch; ``.message`` holds DALI's text. The decoder stays usable.

    ``sample_indices``: positions in the batch that Pillow cannot decode either (a best-effort
    hint for naming the bad file; empty when none could be singled out), or, ``exact``, the
    samples the scaled path's decoder failed on (``message`` is the first one's reason).
    """

    def __init__(self, message: str, sample_indices: Sequence[int] = (), exact: bool = False):
        self.message = message
        self.sample_indices = list(sample_indices)
        self.exact = exact
        hint = (
            f" (samples {self.sample_indices} of the batch are unreadable)"
            if self.sample_indices
            else ""
        )
        super().__init__(f"DALI could not decode a batch{hint}: {message}")


def _unreadable(encoded: Sequence[np.ndarray]) -> list[int]:
    from PIL import Image

    bad = []
    for i, data in enumerate(encoded):
        try:
            with Image.open(io.BytesIO(data.tobytes())) as im:
                im.load()
        except Exception:  # any failure marks the sample as the suspect
            bad.append(i)
    return bad


class BatchDecoder:
    """Decode and transform batches with the DALI graph of ``plan``.

    ``device="cpu"``: CPU-only DALI, CPU tensors. ``device="gpu"``: nvJPEG decode
    (``device="mixed"``, ``hw_decoder_load`` of the work on the hardware decoder), tensors on
    ``cuda:device_id``. ``queue_depth``: batches that may be in flight at once.
    ``resampler``: ``"dali"`` resizes inside the graph; ``"torch"`` decodes the region in DALI
    and resizes, flips and normalises with torch (CPU only, for plans whose resample is the
    last geometric step; about twice as cheap as DALI's CPU resize and Pillow-exact);
    ``"auto"`` picks torch where it applies. ``scaled_decode``: ``"auto"`` decodes a batch of
    large sequential JPEGs at a reduced DCT scale in the resample threads, where the torch
    resampler runs and most samples need half the pixels or fewer, at the scale of the
    parity rule where the plan's region is fixed (see scaled_decode); ``"off"`` always runs
    the DALI graph (full-size decodes: torchvision's values for random crops too). Buffers
    passed to :meth:`submit` must stay valid until the batch has been fetched. Not
    thread-safe: one thread submits and fetches.
    """

    def __init__(
        self,
        plan: TransformPlan,
        *,
        max_batch_size: int,
        num_threads: int = 2,
        device: str = "cpu",
        device_id: int | None = None,
        queue_depth: int = 2,
        hw_decoder_load: float = 0.65,
        resampler: str = "auto",
        scaled_decode: str = "auto",
    ):
        if not isinstance(plan, TransformPlan):
            raise TypeError(
                f"plan should be a TransformPlan from translate(), but got {type(plan).__name__}"
            )
        for name, value in (
            ("max_batch_size", max_batch_size),
            ("num_threads", num_threads),
            ("queue_depth", queue_depth),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} should be a positive integer, but got {name}={value!r}")
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device should be 'cpu' or 'gpu', but got device={device!r}")
        if resampler not in ("auto", "dali", "torch"):
            raise ValueError(
                f"resampler should be 'auto', 'dali' or 'torch', but got resampler={resampler!r}"
            )
        torch_ok = device == "cpu" and torch_resample.eligible(plan)
        if resampler == "torch" and not torch_ok:
            raise ValueError(
                "resampler='torch' needs device='cpu' and a plan whose resample is the last "
                f"geometric step without padding or ColorJitter; got {plan.describe()}"
            )
        if scaled_decode not in ("auto", "off"):
            raise ValueError(
                f"scaled_decode should be 'auto' or 'off', but got scaled_decode={scaled_decode!r}"
            )
        if device == "gpu" and device_id is None:
            device_id = torch.cuda.current_device()
        self.resampler = (
            "torch" if resampler == "torch" or (resampler == "auto" and torch_ok) else "dali"
        )
        self.plan = plan
        self.max_batch_size = max_batch_size
        self.num_threads = num_threads
        self.device = device
        self.device_id = device_id
        self.queue_depth = queue_depth
        self.hw_decoder_load = hw_decoder_load
        use_scaled = self.resampler == "torch" and scaled_decode_available()
        self.scaled_decode = scaled_decode if use_scaled else "off"
        self.scaled_batches = 0  # batches decoded at a DCT scale (the rest: full size)
        # the parity rule applies to the plan's scale choice (its region is fixed)
        self._parity = fixed_region(plan.steps)
        # whether the batch fetch() returned last is done with its encoded arrays: on the
        # scaled path its threads are; DALI (no_copy) may still read a batch's inputs
        self.inputs_done = False
        self._names = graph.input_names(plan, resample=self.resampler == "dali")
        self._pending: collections.deque = collections.deque()  # (feeds, encoded, params)
        self._pool = None
        # Batches reuse the memory of earlier ones the caller no longer holds (see buffers).
        self._buffers = BatchBuffers(keep=3)
        if self.resampler == "torch":  # worker threads, also for one: see torch_resample
            from concurrent.futures import ThreadPoolExecutor

            # each worker runs torch ops on its own thread only (no OpenMP team per worker)
            self._pool = ThreadPoolExecutor(
                num_threads,
                thread_name_prefix="fastload-resample",
                initializer=one_omp_thread,
            )
        self._pipe = None
        self._closed = False
        self._owner_pid = os.getpid()
        self._pipe = self._build()
        _track(self)

    # ------------------------------------------------------------------ public
    def strict_capable(self, encoded: Sequence[bytes | memoryview | np.ndarray]) -> bool:
        """Whether :meth:`submit` can decode these images with ``strict=True``: each a
        sequential JPEG and the plan one the scaled path finishes (CPU, torch resample)."""
        return self.scaled_decode == "auto" and all(
            scaled_decode.jpeg_is_sequential(graph_io.as_array(e)) for e in encoded)

    def submit(
        self,
        encoded: Sequence[bytes | memoryview | np.ndarray],
        sizes: Sequence[tuple[int, int]],
        generator: torch.Generator,
        strict: bool = False,
    ) -> bool:
        """Draw the batch's parameters from ``generator`` (in sample order) and enqueue it.

        Which path makes the pixels (the DCT-scaled one, or DALI's full-size decode)
        depends only on the batch's files and draws (``scaled_decode.worth_it``), never on
        ``strict``. ``strict`` (where :meth:`strict_capable`) only adds the check: the whole
        of each file is decoded with simplejpeg in strict mode at the scale that path uses
        (the DCT scale, or full size for a DALI batch: the pixels DALI's decode gives), so
        that damaged JPEG data fails the batch (:meth:`fetch` raises a
        :class:`BatchDecodeError` naming the samples, ``exact``) instead of decoding with a
        warning on stderr. Returns whether the batch is decoded strictly or on the scaled
        path (in the resample threads)."""
        self._check_open()
        n = len(encoded)
        if n == 0 or n > self.max_batch_size:
            raise ValueError(
                f"a batch should hold 1 to max_batch_size={self.max_batch_size} images, but got {n}"
            )
        if len(sizes) != n:
            raise ValueError(
                f"sizes should have one (height, width) per image: {len(sizes)} sizes for {n} images"
            )
        if len(self._pending) >= self.queue_depth:
            raise RuntimeError(
                f"{self.queue_depth} batches are already in flight (queue_depth); call fetch() first"
            )
        arrays = [graph_io.as_array(e) for e in encoded]
        params = [
            geometry.draw_sample(self.plan.steps, int(h), int(w), generator) for h, w in sizes
        ]
        strict = (strict and self.scaled_decode == "auto"
                  and all(p.resize == params[0].resize for p in params)  # else DALI names it
                  and all(scaled_decode.jpeg_is_sequential(a) for a in arrays))
        scaled = self.scaled_decode == "auto" and scaled_decode.worth_it(
            True, arrays, sizes, params, self._parity)
        if strict or scaled:
            batch = scaled_decode.ScaledBatch(self.plan, arrays, params, self._pool,
                                              self._buffers, full_size=not scaled,
                                              strict=strict)
            self._pending.append((batch, arrays, params))
            self.scaled_batches += scaled
            return True
        feeds = graph_io.feed_arrays(self._names, arrays, params)
        self._pending.append((feeds, arrays, params))
        self._run(feeds)
        return False

    def fetch(self) -> torch.Tensor:
        """The oldest submitted batch as an N x C x H x W tensor (fresh memory)."""
        self._check_open()
        if not self._pending:
            raise RuntimeError("fetch() called with no batch in flight; call submit() first")
        self.inputs_done = False
        if isinstance(self._pending[0][0], scaled_decode.ScaledBatch):
            batch = self._pending.popleft()[0]
            try:
                images = batch.result()
            except scaled_decode.ScaledDecodeError as err:
                raise BatchDecodeError(err.message, err.sample_indices, exact=True) from None
            self.inputs_done = True
            return images
        try:
            (out,) = dali_backend.outputs(self._pipe)
        except RuntimeError as exc:
            _, arrays, _ = self._pending.popleft()
            self._recover()
            raise BatchDecodeError(str(exc), _unreadable(arrays)) from None
        _, _, params = self._pending.popleft()
        if self.resampler == "torch":
            return torch_resample.resample_batch(
                self.plan, out, params, self._pool, self._buffers
            )
        return graph_io.to_torch(out, self.device, self.plan.output_dtype, self.device_id,
                                 self._buffers)

    @property
    def outstanding(self) -> int:
        """Batches submitted and not yet fetched."""
        return len(self._pending)

    def reset(self) -> None:
        """Drop the batches in flight (early break, new epoch)."""
        if self._closed:
            return
        while self._pending:
            if isinstance(self._pending[0][0], scaled_decode.ScaledBatch):
                self._pending.popleft()[0].cancel()
                continue
            try:  # the batch's buffers stay referenced until DALI is done with them (no_copy)
                dali_backend.outputs(self._pipe)
            except RuntimeError:
                self._pipe = self._build()
                self._pending.clear()
            else:
                self._pending.popleft()

    def close(self) -> None:
        """Release the DALI pipeline; idempotent."""
        if self._closed:
            return
        self._closed = True
        pipe, self._pipe = self._pipe, None
        if os.getpid() != self._owner_pid:  # inherited through fork: see _keep_inherited
            _INHERITED.append((pipe, list(self._pending)))
            self._pending.clear()
            return
        del pipe  # stops DALI before the encoded buffers it may still read are released
        self._pending.clear()
        self._buffers.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this BatchDecoder is closed")

    def _build(self):
        # A Ctrl-C while DALI builds is raised here, not from inside DALI's modules, whose
        # frames say nothing to the user who pressed it; the half-made pipeline is dropped.
        try:
            return graph.build_pipeline(
                self.plan,
                max_batch_size=self.max_batch_size,
                num_threads=self.num_threads,
                device=self.device,
                device_id=self.device_id,
                queue_depth=self.queue_depth,
                hw_decoder_load=self.hw_decoder_load,
                resample=self.resampler == "dali",
            )
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None

    def _run(self, feeds: dict) -> None:
        dali_backend.feed_and_run(self._pipe, self._names, feeds)

    def _recover(self) -> None:
        """After a failed batch: a fresh pipeline, re-fed with the batches still in flight."""
        self._pipe = self._build()
        for feeds, _, _ in self._pending:
            if not isinstance(feeds, scaled_decode.ScaledBatch):
                self._run(feeds)
