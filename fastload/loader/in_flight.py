"""The batches of one epoch in flight between the sampler and their outcome (``InFlight``),
and the outcomes a batch can have (``Made``, ``Skipped``, ``Empty``, ``Failed``).

A pulled batch is read from the source (its unreadable samples raised at its turn or
skipped), submitted to the decoder with the draws of its seed, up to ``depth`` batches
ahead, fetched (damaged samples found and dropped by a ``Recovery``, ``loader/recovery.py``)
and staged: ``[images, labels]``, or the loader's sample stage (``loader/stage.py``), run in
a stage thread of its own when ``stage_ahead`` and the stage leaves the global generators
alone, else when ``next()`` hands the batch out. The epoch's ``Maker`` (``loader/epoch.py``)
calls :meth:`InFlight.make_one` where it makes its batches and hands out the outcomes.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from PIL.Image import DecompressionBombError

from fastload.loader.context import SkipLog
from fastload.loader.damage import DamageCheck
from fastload.loader.recovery import Batch, Recovery, sample_name, submit
from fastload.loader.sample_sources import SampleError
from fastload.loader.stage import SampleStage

__all__ = ["Empty", "Failed", "InFlight", "Made", "NothingYet", "Outcome", "Pulled", "Skipped"]

Pulled = tuple[int, list[int]]  # (position in the epoch, the sampler's indices)


class NothingYet(Exception):
    """Raised by a ``pull``: the caller has pulled no further batch yet."""


@dataclass(frozen=True)
class Made:
    """A batch made: ``prepared()`` gives what the sample stage prepared (waiting for the
    stage thread, or running the stage now on the caller's thread)."""

    indices: list[int]
    prepared: Callable[[], Any]
    pulled: ClassVar[bool] = True


@dataclass(frozen=True)
class Skipped:
    """A batch whose samples were all skipped (``on_error="skip"``): ``next()`` goes on."""

    pulled: ClassVar[bool] = True


@dataclass(frozen=True)
class Empty:
    """A batch of no index: torch calls ``collate_fn([])`` (``default_collate`` raises)."""

    pulled: ClassVar[bool] = True


@dataclass(frozen=True)
class Failed:
    """What making a batch raised, raised at its turn; ``pulled`` is False for the
    sampler's own error, which stands for no batch of the epoch."""

    error: BaseException
    pulled: bool = True


Outcome = Made | Skipped | Empty | Failed


class InFlight:
    """The batches of one epoch between the sampler and their outcome, oldest first, at most
    ``depth`` of them submitted to ``decoder`` (closed by :meth:`release` when
    ``owns_decoder``). ``seed_for(position)``: a batch's augmentation seed. Not thread-safe:
    one thread at a time calls :meth:`make_one`."""

    def __init__(self, *, source: Any, decoder: Any, owns_decoder: bool, damage: DamageCheck,
                 stage: SampleStage, stage_ahead: bool, depth: int, on_error: str,
                 skips: SkipLog, pin_memory: bool, seed_for: Callable[[int], int]) -> None:
        from fastload.pipelines import BatchDecodeError

        self.decoder = decoder
        self._source, self._owns_decoder, self._damage = source, owns_decoder, damage
        self._stage, self._stage_ahead, self._depth = stage, stage_ahead, depth
        self._on_error, self._skips = on_error, skips
        self._pin_memory, self._seed_for = pin_memory, seed_for
        self._decode_error = BatchDecodeError
        self._recovery = Recovery(source, damage, on_error, skips)
        self._queue: deque[Batch] = deque()  # pulled and not yet made, oldest first
        self._exhausted = False  # the sampler's end (or its error) was pulled
        self._stage_thread: ThreadPoolExecutor | None = None

    @property
    def done(self) -> bool:
        """Whether the epoch's end was pulled and every batch before it made."""
        return self._exhausted and not self._queue

    def release(self) -> None:
        """Stop the damage checks' and the stage's threads; close the decoder if it is this
        epoch's own (each idempotent)."""
        self._damage.close()
        if self._stage_thread is not None:
            self._stage_thread.shutdown(wait=False)
        if self._owns_decoder and self.decoder is not None:
            self.decoder.close()

    def drop(self) -> None:
        """Let go of the decoder and the batches in flight (the epoch was closed)."""
        self.decoder = None
        self._queue.clear()

    def make_one(self, pull: Callable[[], Pulled | None]) -> Outcome | None:
        """The oldest pulled batch's outcome, pulling batches with ``pull`` (the next
        batch, None at the sampler's end; it raises the sampler's error, or ``NothingYet``)
        and reading and submitting them up to the decoder's depth; None when no pulled
        batch is left to make."""
        self._fill(pull)
        if not self._queue:
            return None
        head = self._queue[0]
        images = None
        if head.indices:  # with a read error: the samples before it (raise mode)
            try:
                try:
                    images = self.decoder.fetch()
                except self._decode_error as err:
                    images = self._recovery.recover(head, err, self.decoder, self._queue)
                if head.strict:
                    self._damage.mark_intact(self._source, head.indices, head.unchecked)
                if head.recyclable and self.decoder.inputs_done:
                    encoded, head.encoded = head.encoded, []
                    self._source.recycle(encoded)
            except BaseException as err:
                self._queue.popleft()  # the batch is consumed, as in torch
                return Failed(err)
        self._queue.popleft()
        if head.error is not None:
            try:
                return Failed(head.error, head.pulled)
            finally:  # no local of this frame names it: its traceback may hold this frame
                head.error = head = None
        if head.empty:
            return Empty()
        if images is None:  # every sample of the batch was skipped
            return Skipped()
        self._fill(pull)
        try:
            prepared = self._stage_batch(head, images)
        except Exception as err:  # e.g. target_transform: raised at the batch's turn
            return Failed(err)
        return Made(list(head.indices), prepared)

    def _stage_batch(self, batch: Batch, images: torch.Tensor) -> Callable[[], Any]:
        """What the loader's sample stage prepares for ``images`` (see ``SampleStage``), as
        a call that gives it: the result of a stage-thread task when the stage runs beside
        the caller's step; the stage itself, run when ``next()`` hands the batch out, when
        it must run on the caller's thread (it would touch the global generators)."""
        stage = self._stage
        if not (self._stage_ahead and stage.active):
            made = self._deliver(batch, images)
            return lambda: made
        if not stage.beside_caller:
            return functools.partial(self._deliver, batch, images)
        if self._stage_thread is None:
            self._stage_thread = ThreadPoolExecutor(1, thread_name_prefix="fastload-stage")
        return self._stage_thread.submit(self._deliver, batch, images).result

    def _deliver(self, batch: Batch, images: torch.Tensor) -> Any:
        if self._stage.active:  # a torch suffix or a custom collate_fn: see loader/stage.py
            labels = self._source.sample_labels(batch.indices)
            return self._stage.prepare(images, labels, batch.seed)
        labels = self._source.labels(batch.indices)
        if images.device.type == "cuda" and isinstance(labels, torch.Tensor):
            labels = labels.to(images.device, non_blocking=True)
        elif self._pin_memory and torch.cuda.is_available():
            images = images.pin_memory()
            labels = labels.pin_memory() if isinstance(labels, torch.Tensor) else labels
        return [images, labels]

    def _fill(self, pull: Callable[[], Pulled | None]) -> None:
        """Submit batches that wait (after an error) and pull new ones up to the depth."""
        for batch in self._queue:
            if not batch.submitted and batch.indices:
                self._submit_ahead(batch)
        while len(self._queue) < self._depth and not self._exhausted:
            try:
                pulled = pull()
            except NothingYet:  # the caller has not pulled the next batch yet
                break
            except Exception as err:  # the sampler raised: its error ends the epoch
                self._exhausted = True
                self._queue.append(Batch(-1, [], [], [], 0, error=err, pulled=False))
                break
            if pulled is None:
                self._exhausted = True
                break
            try:
                batch = self._read(*pulled)
            except Exception as err:  # a fault of this batch's read: raised at its turn
                batch = Batch(pulled[0], [], [], [], 0, error=err)
            self._queue.append(batch)
            if batch.indices:
                self._submit_ahead(batch)

    def _submit_ahead(self, batch: Batch) -> None:
        """Submit a batch made ahead; what its parameters' draw raises (a crop larger than
        an image, say) becomes the batch's error, raised at its turn."""
        try:
            submit(self.decoder, batch)
        except ValueError as err:
            batch.error, batch.indices = err, []

    def _read(self, position: int, indices: list[int]) -> Batch:
        batch = Batch(position, [], [], [], self._seed_for(position), empty=not indices)
        for raw in indices:
            try:  # an index the dataset would refuse (2.5, 999) fails its batch in both modes
                i = self._source.index(raw)
            except (TypeError, IndexError) as err:
                batch.error = err
                return batch
            try:
                data, size = self._source.read(i)
            except Exception as err:
                name = sample_name(self._source, i, err)
                if not isinstance(err, OSError | SampleError | DecompressionBombError):
                    err = SampleError(f"sample {i}: cannot read {name}: {err}", [name])
                if self._on_error == "raise":
                    batch.error = err  # raised after the samples before it are decoded
                    break
                self._skips.note([name], str(err))
                continue
            batch.indices.append(i)
            batch.encoded.append(data)
            batch.sizes.append(size)
        self._recovery.drop_damaged(batch, self.decoder)
        return batch
