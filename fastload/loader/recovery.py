"""A batch being made (``Batch``) and how an epoch recovers from its damaged samples.

``Recovery`` holds its own references (the source, the epoch's damage checks, ``on_error``
and the loader's ``SkipLog``) and is handed the decoder and the queue of batches in it per
call: the epoch's ``Maker`` (``loader/epoch.py``) owns both and calls it where it makes its
batches (the maker thread on the CPU). Nothing here reads the maker's state.

* Before decoding (:meth:`Recovery.drop_damaged`): samples not yet found intact are decoded
  strictly where the decoder can, else checked now (``loader/damage.py``); a damaged one is
  an error of its read.
* After a batch's decode failed (:meth:`Recovery.recover`): the culprits are found by
  decoding each sample alone, then raised naming them or (``on_error="skip"``) dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from fastload.loader.context import SkipLog
from fastload.loader.damage import DamageCheck, dali_failure, damage_reason
from fastload.loader.sample_sources import SampleError

__all__ = ["Batch", "Recovery", "sample_name", "submit"]


@dataclass
class Batch:
    """A batch pulled from the sampler while it is read, decoded and staged: its place in
    the epoch, the samples still in it (``indices``, their ``encoded`` bytes and ``sizes``)
    and its augmentation ``seed``; ``error`` is what it raises at its turn, if anything."""

    position: int
    indices: list[int]
    encoded: list[Any]
    sizes: list[tuple[int, int]]
    seed: int
    error: BaseException | None = None
    submitted: bool = False
    strict: bool = False  # decoded strictly: damaged JPEG data fails it (see loader/damage)
    unchecked: list[tuple[int, Any]] = field(default_factory=list)  # (index, stamp) to mark
    # its encoded arrays go back to the source once decoded: not after a decoder reset,
    # whose cancelled tasks may still be reading them
    recyclable: bool = True
    empty: bool = False  # the sampler gave no index: collated as torch collates []
    pulled: bool = True  # False for the error of a sampler that raised instead of a batch


def submit(decoder: Any, batch: Batch, gen: torch.Generator | None = None) -> None:
    """Submit ``batch`` to ``decoder``, its parameters drawn from ``gen`` (default: a
    generator seeded with the batch's seed); what the draw raises (a crop larger than an
    image, say) propagates."""
    if gen is None:
        gen = torch.Generator()
        gen.manual_seed(batch.seed)
    # strict refused only for samples of different output sizes, which DALI refuses too
    batch.strict = decoder.submit(batch.encoded, batch.sizes, gen, strict=batch.strict)
    batch.submitted = True


def sample_name(source: Any, i: int, err: BaseException | None = None) -> str:
    """How messages name sample ``i`` (whose read raised ``err``): the name the error
    carries, else the source's (which opens nothing), else its index; never raises."""
    names = getattr(err, "names", None)
    if names:
        return str(names[0])
    try:
        return source.name(i)
    except Exception:  # noqa: BLE001 - a name is no reason to lose the epoch
        return f"sample {i}"


class Recovery:
    """Dropping damaged samples from an epoch's batches, and finding the culprits of a
    failed decode: raised (``on_error="raise"``) or noted in ``skips`` and left out."""

    def __init__(self, source: Any, damage: DamageCheck, on_error: str, skips: SkipLog) -> None:
        from fastload.pipelines import BatchDecodeError

        self._source = source
        self._damage = damage
        self._on_error = on_error
        self._skips = skips
        self._decode_error = BatchDecodeError

    def drop_damaged(self, batch: Batch, decoder: Any) -> None:
        """Samples not yet found intact are decoded strictly where ``decoder`` can (see
        loader/damage), else checked now: a damaged one is an error of its read (in raise
        mode the batch ends before the first one, else each is skipped)."""
        pending = self._damage.pending(self._source, batch.indices)
        if not pending:
            return
        if decoder.strict_capable(batch.encoded):
            batch.strict = True
            batch.unchecked = [(i, stamp) for _, i, stamp in pending]
            return
        damaged = self._damage.find(self._source, batch.encoded, pending)
        if not damaged:
            return
        for j in sorted(damaged):
            i = batch.indices[j]
            name = self._source.name(i)
            reason = damage_reason(damaged[j])
            if self._on_error == "raise":
                batch.error = SampleError(f"sample {i}: cannot decode {name}: {reason}", [name])
                del batch.indices[j:], batch.encoded[j:], batch.sizes[j:]
                return
            self._skips.note([name], reason)
        _keep(batch, [j for j in range(len(batch.indices)) if j not in damaged])

    def recover(self, head: Batch, err: BaseException, decoder: Any,
                queue: deque[Batch]) -> torch.Tensor | None:
        """``decoder`` failed on ``head`` (``err``), the first of ``queue`` (the batches
        submitted to it): find the culprit samples by decoding each alone, then raise naming
        them (the first in order first) or (on_error="skip") decode the batch without them.
        When each decodes alone the batch is decoded alone again (the failure may have been
        a later batch's), else raised or skipped whole; under "skip" no decode error leaves
        this method. The batches behind ``head`` are left to submit again (``submitted``
        False), or submitted again here."""
        decoder.reset()
        for batch in queue:  # the head is the queue's first
            batch.submitted = False
            batch.recyclable = False
        bad, reasons = [], []
        if getattr(err, "exact", False):  # the scaled path's decoder names its samples
            bad = list(err.sample_indices)
            reasons = [damage_reason(err.message)] * len(bad)
        for j in range(len(head.indices)) if not bad else ():
            single = Batch(-1, [head.indices[j]], [head.encoded[j]], [head.sizes[j]], head.seed,
                           strict=head.strict)
            try:  # with the draws it had in the batch: a random crop fails alone as it did
                submit(decoder, single, self._draws_at(head, j, decoder))
                decoder.fetch()
            except self._decode_error as single_err:
                bad.append(j)
                reasons.append(damage_reason(single_err.message) if single_err.exact
                               else dali_failure(single_err))
        names = [self._source.name(head.indices[j]) for j in bad]
        message = getattr(err, "message", str(err))
        if not bad:
            submit(decoder, head)  # alone: the failure may have been a batch's behind it
            try:
                return decoder.fetch()
            except self._decode_error:
                decoder.reset()
            names = [self._source.name(i) for i in head.indices]
            why = f"decoding failed for a batch of {', '.join(names)}, though each decodes alone"
            if self._on_error == "raise":
                raise SampleError(f"{why}: {message}", names) from err
            self._skips.note(names, f"{why}: {message}")
            return None
        if self._on_error == "raise":
            raise SampleError(f"cannot decode {names[0]}: {reasons[0]}"
                              + (f" (and {len(names) - 1} more: {', '.join(names[1:])})"
                                 if len(names) > 1 else ""), names) from err
        self._skips.note(names, reasons[0])
        _keep(head, [j for j in range(len(head.indices)) if j not in set(bad)])
        if not head.indices:
            return None
        submit(decoder, head)
        for batch in list(queue)[1:]:
            if batch.error is None and batch.indices:
                submit(decoder, batch)
        try:
            return decoder.fetch()
        except self._decode_error as again:  # it fails without them too: recover again (each
            return self.recover(head, again, decoder, queue)  # round drops a sample, or all

    @staticmethod
    def _draws_at(head: Batch, j: int, decoder: Any) -> torch.Generator:
        """The generator in the state sample ``j`` of ``head`` drew its parameters from:
        ``BatchDecoder.submit`` draws each sample's, in order, from one generator seeded
        with the batch's seed."""
        from fastload.pipelines import draw_sample

        gen = torch.Generator()
        gen.manual_seed(head.seed)
        for h, w in head.sizes[:j]:
            draw_sample(decoder.plan.steps, int(h), int(w), gen)
        return gen


def _keep(batch: Batch, keep: list[int]) -> None:
    """Leave only the samples at positions ``keep`` in ``batch``."""
    batch.indices = [batch.indices[j] for j in keep]
    batch.encoded = [batch.encoded[j] for j in keep]
    batch.sizes = [batch.sizes[j] for j in keep]
