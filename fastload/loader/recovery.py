"""How an epoch recovers from damaged samples: found before decoding, or after a batch's
decode failed (``DamageRecovery``, a part of the epoch's core), and the batch it works on.

The core that mixes it in has ``_source``, ``_decoder``, ``_decode_error``, ``_damage``,
``_queue``, ``_on_error``, ``_note_skip`` and ``_submit``; these methods run where the
core makes its batches (the maker thread on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fastload.loader.damage import dali_failure, damage_reason
from fastload.loader.sample_sources import SampleError

__all__ = ["Batch", "DamageRecovery"]


@dataclass
class Batch:
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


class DamageRecovery:
    """Dropping damaged samples from a batch, and finding the culprits of a failed decode."""

    def _drop_damaged(self, batch: Batch) -> None:
        """Samples not yet found intact are decoded strictly where the decoder can (see
        loader/damage), else checked now: a damaged one is an error of its read (in raise
        mode the batch ends before the first one, else each is skipped)."""
        pending = self._damage.pending(self._source, batch.indices)
        if not pending:
            return
        if self._decoder.strict_capable(batch.encoded):
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
            self._note_skip([name], reason)
        keep = [j for j in range(len(batch.indices)) if j not in damaged]
        batch.indices = [batch.indices[j] for j in keep]
        batch.encoded = [batch.encoded[j] for j in keep]
        batch.sizes = [batch.sizes[j] for j in keep]

    def _draws_at(self, head: Batch, j: int) -> torch.Generator:
        """The generator in the state sample ``j`` of ``head`` drew its parameters from:
        ``BatchDecoder.submit`` draws each sample's, in order, from one generator seeded
        with the batch's seed."""
        from fastload.pipelines import draw_sample

        gen = torch.Generator()
        gen.manual_seed(head.seed)
        for h, w in head.sizes[:j]:
            draw_sample(self._decoder.plan.steps, int(h), int(w), gen)
        return gen

    def _recover(self, head: Batch, err: BaseException) -> torch.Tensor | None:
        """The decoder failed on ``head`` (``err``): find the culprit samples by decoding
        each alone, then raise naming them (the first in order first) or (on_error="skip")
        decode the batch without them. When each decodes alone the batch is decoded alone
        again (the failure may have been a later batch's), else raised or skipped whole;
        under "skip" no decode error leaves this method."""
        self._decoder.reset()
        for batch in self._queue:  # the head is the queue's first
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
                self._submit(single, self._draws_at(head, j))
                self._decoder.fetch()
            except self._decode_error as single_err:
                bad.append(j)
                reasons.append(damage_reason(single_err.message) if single_err.exact
                               else dali_failure(single_err))
        names = [self._source.name(head.indices[j]) for j in bad]
        message = getattr(err, "message", str(err))
        if not bad:
            self._submit(head)  # alone: the failure may have been a batch's behind it
            try:
                return self._decoder.fetch()
            except self._decode_error:
                self._decoder.reset()
            names = [self._source.name(i) for i in head.indices]
            why = f"decoding failed for a batch of {', '.join(names)}, though each decodes alone"
            if self._on_error == "raise":
                raise SampleError(f"{why}: {message}", names) from err
            self._note_skip(names, f"{why}: {message}")
            return None
        if self._on_error == "raise":
            raise SampleError(f"cannot decode {names[0]}: {reasons[0]}"
                              + (f" (and {len(names) - 1} more: {', '.join(names[1:])})"
                                 if len(names) > 1 else ""), names) from err
        self._note_skip(names, reasons[0])
        keep = [j for j in range(len(head.indices)) if j not in set(bad)]
        head.indices = [head.indices[j] for j in keep]
        head.encoded = [head.encoded[j] for j in keep]
        head.sizes = [head.sizes[j] for j in keep]
        if not head.indices:
            return None
        self._submit(head)
        for batch in list(self._queue)[1:]:
            if batch.error is None and batch.indices:
                self._submit(batch)
        try:
            return self._decoder.fetch()
        except self._decode_error as again:  # it fails without them too: recover again (each
            return self._recover(head, again)  # round drops a sample, or the batch)
