"""One epoch of a ``fastload.DataLoader`` on the DALI path: read, submit, fetch, deliver.

The loader decides the batches (order, sampling, resume); this iterator reads their encoded
samples, keeps ``prefetch_factor`` of them in the decoder and turns each into ``[images,
labels]``. On the CPU that work runs in a maker thread of the iterator (``fastload-maker``),
up to ``prefetch_factor + 1`` batches ahead of the caller, as torch's workers run ahead: a
loop whose step is slower than the loader finds each batch ready. ``next()`` pulls the
batches' indices from the sampler on the caller's thread (as torch's loader iterates its
sampler) and hands out what the maker made. A batch's torch suffix runs in a stage thread
beside the maker, when it leaves the global generators alone
(``SampleStage.beside_caller``); else it runs in ``next()``, on the caller's thread, as does
a custom collate. Batches, errors and the position ``state_dict`` records still come
strictly in order. On a GPU the iterator makes each batch in ``next()``.

An error belongs to its batch, as in torch's loader: whatever fails while a batch is made
ahead (its sampler, an index, a read, the decode, ``target_transform``, the suffix or
collate) is kept as that batch's outcome and raised at its turn, after every batch before
it; the next ``next()`` goes on with the batch after it (after the sampler itself raised,
the epoch ends there, as torch's single-process loader's does). Naming a sample in an error
never raises (``_name``), and a fault of fastload's own that ends the maker thread is
raised once, after every batch made before it, and ends the epoch.

The loader hands the iterator what it needs in an ``EpochContext`` (``loader/context.py``)
and ends it with :meth:`_EpochIterator.close`; neither reads the other's private state. The
core's maker-thread handoff is ``loader/maker.py``'s ``MakerHandoff``, its recovery from
damaged samples ``loader/recovery.py``'s ``DamageRecovery``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from PIL.Image import DecompressionBombError
from torch.utils.data import default_collate

from fastload.loader.context import EpochContext
from fastload.loader.maker import Handoff, MakerHandoff, NothingYet
from fastload.loader.recovery import Batch, DamageRecovery
from fastload.loader.sample_sources import SampleError, call_set_hook
from fastload.loader.sampling import mix_seed


class _EpochIterator:
    """One epoch of a DataLoader on the DALI path: the caller's handle on its ``_EpochCore``.

    The maker thread holds the core, never this handle: when the caller drops the handle
    mid-epoch (a ``break``), the epoch is closed at once, its maker ended and its decoder let
    go, as torch's iterator shuts its workers down when it is collected."""

    def __init__(self, context: EpochContext) -> None:
        self._core = _EpochCore(context)
        finalizer = weakref.finalize(self, self._core.close)
        finalizer.atexit = False  # at exit, the process's end releases everything

    def start(self) -> None:
        """Start making the first batches now when the context asks for it (with workers,
        as torch's workers start at ``iter()``). Called last in ``iter()``, once this handle
        and the loader's record of it exist: an interrupt at any instant before leaves no
        thread, and one after leaves a thread this handle's finaliser ends."""
        self._core.start()

    def maker_stopper(self) -> weakref.WeakMethod:
        """A weak reference to this epoch's ``stop_making`` (end its maker thread and wait
        for it), alive while the maker may still run even when this handle is gone."""
        return weakref.WeakMethod(self._core.stop_making)

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self) -> list[Any]:
        return next(self._core)

    def __len__(self) -> int:
        return len(self._core)

    @property
    def running(self) -> bool:
        """Whether this epoch may still yield (not ended or closed)."""
        return self._core.running

    def close(self, by: str = "its close()") -> None:
        """End this epoch now (idempotent): the next ``next()`` raises, saying it was
        closed ``by``; its decoder (closed here when it is its own), its queued batches and
        its threads are let go."""
        self._core.close(by)


class _EpochCore(MakerHandoff, DamageRecovery):
    """One epoch of a DataLoader on the DALI path, keeping ``prefetch_factor`` batches in
    the decoder while the caller works."""

    def __init__(self, context: EpochContext) -> None:
        # The context's fields, not the context: close() must drop the decoder's reference.
        self._pid = os.getpid()
        self._source = context.source
        self._order = context.order
        self._epoch, self._at_first_next = context.epoch, context.at_first_next
        self._stage = context.stage
        self._rank = context.rank
        self._pin_memory = context.pin_memory
        self._on_error = context.on_error
        self._collate_fn = context.collate_fn
        self._note_skip = context.note_skip
        self._show_indices = context.show_indices
        self._length = context.length
        from fastload.pipelines import BatchDecodeError

        self._decode_error = BatchDecodeError
        self._damage = context.damage  # damaged JPEG data: a read error
        self._private = context.owns_decoder
        self._decoder = context.decoder
        self._depth = max(1, context.prefetch)
        self._queue: deque[Batch] = deque()
        # Outcomes not yet handed out, in order, each (kind, value, pulled): ("batch",
        # (batch, result, Future or _Later)), ("skip", None) for a batch whose samples were all
        # skipped, ("empty", None) for an empty batch, ("error", exception). ``pulled``:
        # whether it stands for a batch of the epoch (False for a sampler's own error).
        self._out: deque[tuple[str, Any, bool]] = deque()
        # On the CPU the sample stage of a batch runs in a thread of its own while the caller
        # works on the previous batch (one batch ahead); on a GPU it runs in __next__.
        self._ahead = 1 if context.device.type == "cpu" else 0
        self._stage_thread: ThreadPoolExecutor | None = None
        self._exhausted = False
        self._active = True
        self._done = False
        # The maker thread (CPU): the caller pulls up to `_lead` batches ahead of what it has
        # been handed, the maker makes their outcomes into `_out`; `_handoff` holds both ends.
        self._handoff = Handoff() if self._ahead else None
        self._lead = self._depth + 1
        self._pulled_ahead = 0  # batches pulled and not yet handed out (caller side)
        self._pulls_done = False
        self._maker: threading.Thread | None = None
        self._eager = context.eager_batches
        self._closed_by: str | None = None

    def start(self) -> None:
        """With workers, pull the first batches and start the maker at ``iter()``: they
        are made while the caller gets ready."""
        if self._handoff is not None and self._eager and self._at_first_next is None:
            self._start_making(limit=self._eager)

    def __iter__(self) -> _EpochCore:
        return self

    def __len__(self) -> int:
        return self._length()

    @property
    def running(self) -> bool:
        """Whether this epoch may still yield (not ended or closed)."""
        return self._active and not self._done

    def close(self, by: str = "its close()") -> None:
        """End this epoch now (idempotent): the next ``next()`` raises, saying it was
        closed ``by``; its decoder (closed here when it is its own), its queued batches and
        its threads are let go."""
        abandoned = self._active and not self._done
        if abandoned:
            self._closed_by = by
        self._active = False
        if self._pid != os.getpid():  # a forked child's copy: its threads and locks are the
            return  # parent's, as the fork found them (one may be held): leave them be
        self._stop_maker()
        if abandoned:  # the shards it announced will not be read by it: stop fetching them
            call_set_hook(self._source, "cancel_prefetch")
        self._release()
        self._decoder = None
        self._queue.clear()

    def __next__(self) -> list[Any]:
        if self._done:
            raise StopIteration
        if self._pid != os.getpid():
            raise RuntimeError("this DataLoader iterator was made before os.fork(): its "
                               "decoder runs in the parent process; call iter(loader) in "
                               "this process for an epoch of its own")
        if not self._active:
            raise RuntimeError(f"this DataLoader iterator was closed by {self._closed_by}; "
                               "call iter(loader) for a new epoch (after loader.close(), it "
                               "builds the DALI graph again)")
        if self._at_first_next is not None:  # torch's RandomSampler draws at its first index
            draw, self._at_first_next = self._at_first_next, None
            draw()
        if self._handoff is not None:
            return self._next_made_ahead()
        while True:
            out = self._out
            # Hand out the oldest outcome once `ahead` batches are being made behind it (or
            # nothing more comes).
            if out and (out[0][0] != "batch" or len(out) > self._ahead
                        or (not self._queue and self._exhausted)):
                return self._pop_outcome()
            if not self._make_one():
                if out:
                    continue
                self._finish()
                raise StopIteration

    def stop_making(self) -> None:
        """End the maker thread, if any, and wait for it (idempotent): the loader calls
        this on an epoch it let go before it resets the decoder that epoch used."""
        self._stop_maker()

    def _make_one(self) -> bool:
        """Make the oldest pulled batch's outcome into ``_out`` (reading and submitting the
        batches behind it, up to the decoder's depth); False when none is left to make."""
        self._fill()
        if not self._queue:
            return False
        head = self._queue[0]
        images = None
        if head.indices:  # with a read error: the samples before it (raise mode)
            try:
                try:
                    images = self._decoder.fetch()
                except self._decode_error as err:
                    images = self._recover(head, err)
                if head.strict:
                    self._damage.mark_intact(self._source, head.indices, head.unchecked)
                if head.recyclable and self._decoder.inputs_done:
                    encoded, head.encoded = head.encoded, []
                    self._source.recycle(encoded)
            except BaseException as err:
                self._queue.popleft()  # the batch is consumed, as in torch
                self._emit(("error", err, True))
                return True
        self._queue.popleft()
        if head.error is not None:
            self._emit(("error", head.error, head.pulled))
        elif head.empty:
            self._emit(("empty", None, True))
        elif images is None:  # every sample of the batch was skipped
            self._emit(("skip", None, True))
        else:
            self._fill()
            try:
                made = self._stage_batch(head, images)
            except Exception as err:  # e.g. target_transform: raised at the batch's turn
                self._emit(("error", err, True))
            else:
                self._emit(("batch", (head, made), True))
        return True

    def _pop_outcome(self) -> Any:
        """The oldest outcome, in order: a batch, or the error its making raised."""
        kind, value, pulled = self._out.popleft()
        if pulled:
            self._epoch.mark_yielded()
        if kind == "error":
            raise value
        if kind == "skip":
            return self.__next__()
        if kind == "empty":  # torch calls collate_fn([]): default_collate raises IndexError
            self._show_indices([])
            return (self._collate_fn or default_collate)([])
        head, made = value
        self._show_indices(list(head.indices))
        prepared = made.result() if isinstance(made, Future | _Later) else made
        return self._stage.finish(prepared)  # a custom collate: here, as torch's

    def _stage_batch(self, batch: Batch, images: torch.Tensor) -> Any:
        """What the loader's sample stage prepares for ``images`` (see ``SampleStage``): a
        Future of it when it runs in this iterator's stage thread, beside the caller's step;
        a ``_Later`` when it must wait for ``next()`` to hand the batch out, on the caller's
        thread (it would touch the global generators)."""
        stage = self._stage
        if not (self._ahead and stage.active):
            return self._deliver(batch, images)
        if not stage.beside_caller:
            return _Later(self._deliver, batch, images)
        if self._stage_thread is None:
            self._stage_thread = ThreadPoolExecutor(1, thread_name_prefix="fastload-stage")
        return self._stage_thread.submit(self._deliver, batch, images)

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

    def _fill(self) -> None:
        """Submit batches that wait (after an error) and pull new ones up to the depth."""
        for batch in self._queue:
            if not batch.submitted and batch.indices:
                self._submit_ahead(batch)
        while len(self._queue) < self._depth and not self._exhausted:
            try:
                pulled = self._pull()
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
            self._submit(batch)
        except ValueError as err:
            batch.error, batch.indices = err, []

    def _submit(self, batch: Batch, gen: torch.Generator | None = None) -> None:
        if gen is None:
            gen = torch.Generator()
            gen.manual_seed(batch.seed)
        # strict refused only for samples of different output sizes, which DALI refuses too
        batch.strict = self._decoder.submit(batch.encoded, batch.sizes, gen, strict=batch.strict)
        batch.submitted = True

    def _read(self, position: int, indices: list[int]) -> Batch:
        seed = mix_seed(self._order.seed, self._epoch.epoch, self._rank, position)
        batch = Batch(position, [], [], [], seed, empty=not indices)
        for raw in indices:
            try:  # an index the dataset would refuse (2.5, 999) fails its batch in both modes
                i = self._source.index(raw)
            except (TypeError, IndexError) as err:
                batch.error = err
                return batch
            try:
                data, size = self._source.read(i)
            except Exception as err:
                name = self._name(i, err)
                if not isinstance(err, OSError | SampleError | DecompressionBombError):
                    err = SampleError(f"sample {i}: cannot read {name}: {err}", [name])
                if self._on_error == "raise":
                    batch.error = err  # raised after the samples before it are decoded
                    break
                self._note_skip([name], str(err))
                continue
            batch.indices.append(i)
            batch.encoded.append(data)
            batch.sizes.append(size)
        self._drop_damaged(batch)
        return batch

    def _name(self, i: int, err: BaseException) -> str:
        """How messages name sample ``i``, whose read raised ``err``: the name the error
        carries, else the source's (which opens nothing), else its index; never raises."""
        names = getattr(err, "names", None)
        if names:
            return str(names[0])
        try:
            return self._source.name(i)
        except Exception:  # noqa: BLE001 - a name is no reason to lose the epoch
            return f"sample {i}"

    def _finish(self) -> None:
        self._active = False
        self._done = True
        self._stop_maker()
        self._release()
        if self._order.current is self._epoch:
            self._order.finish_epoch()

    def _release(self) -> None:
        self._damage.close()
        if self._stage_thread is not None:
            self._stage_thread.shutdown(wait=False)
        if self._private and self._decoder is not None:
            self._decoder.close()


class _Later:
    """A call made when its batch is handed out (``result()``, in ``next()``)."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._fn, self._args = fn, args

    def result(self) -> Any:
        return self._fn(*self._args)
