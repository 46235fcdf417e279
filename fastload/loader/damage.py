"""Damaged JPEG data never reaches a batch: each sample is decoded strictly once.

Why here and not by listening to the decoder: DALI's CPU decoder (libjpeg-turbo) decodes a
JPEG with scrambled entropy-coded data without an error and only prints ``Corrupt JPEG
data`` to the process's stderr; nvJPEG says nothing. Neither gives a per-call signal, and
reading the process's fd 2 would take it from the user. libjpeg-turbo's strict mode
(through simplejpeg) does: the damage is an error of the call, with the decoder's report.

What is checked, and when:

* **Files** (ImageFolder): each file until it is once found intact, remembered per source
  with its length and ``st_mtime_ns`` (a file replaced since is checked again); later
  epochs pay a ``fstat`` per file. A batch holding unchecked files is *decoded* strictly
  where the decoder can (sequential JPEGs, a CPU plan the torch resampler finishes: the
  default recipes): simplejpeg decodes each file at the scale of the path the batch takes
  anyway (its DCT scale, or full size for DALI's path), giving that path's pixels, so the
  check is the decode and a batch's pixels never depend on what was checked before
  (``BatchDecoder.submit``). Otherwise
  (progressive JPEGs, a GPU, a plan that resizes in DALI) each unchecked file gets the
  strict check (:func:`fastload.data.format.jpeg_damage.jpeg_damages`: an entropy pass
  without pixels, several files at once per thread, the strict 1/8-scale decode only where it
  does not find a file intact) in this module's threads (``fastload-check``, started by the
  first such check of an epoch iterator and stopped with it) before its bytes go to DALI
  (about 0.25 CPU-ms per 85 KB photo). Either way a damaged file is an error of its sample, raised or skipped like an
  unreadable file, and DALI never prints about it.
* **LMDB records**: each record's CRC-32 is checked against ``checksums.crc32`` before
  its bytes reach a decoder (``LMDBReader``), so a record is exactly what ``fastload
  convert`` stored. Whether what it stored was intact, the sidecar says: a set converted
  with ``check="decode"`` (the default) says ``"jpeg_check": "strict"`` (every JPEG passed
  the strict decode), and its records pay nothing more when that claim is attested under
  this user's key (:mod:`fastload.data.sets.attest`: the set was converted here and not edited
  since). The records of any other set (``check="markers"``, an older fastload, a set made
  elsewhere or at a URL someone else wrote) are checked as files are, at their first read
  through the loader's source, and remembered per record (a record cannot change under
  its CRC-32).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastload.data.format.jpeg_damage import damage_reason, jpeg_damages

__all__ = ["DamageCheck", "damage_reason"]


class DamageCheck:
    """The damage checks of one epoch iterator, in up to ``threads`` threads of its own."""

    def __init__(self, threads: int) -> None:
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    def pending(self, source: Any, indices: list[int]) -> list[tuple[int, int, Any]]:
        """``(position, index, stamp)`` of the samples not yet found intact."""
        todo = []
        for j, i in enumerate(indices):
            stamp = source.unchecked(i)
            if stamp is not None:
                todo.append((j, i, stamp))
        return todo

    def find(self, source: Any, encoded: list[Any],
             pending: list[tuple[int, int, Any]]) -> dict[int, str]:
        """Check the ``pending`` samples (in parallel): ``{position: the decoder's report}``
        for the damaged ones; the intact ones are remembered."""
        files = [encoded[j] for j, _, _ in pending]
        if len(pending) <= 2 or self._threads == 1:
            reports = jpeg_damages(files)  # several decoded at once in this thread
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="fastload-check")
            size = -(-len(files) // self._threads)
            parts = [files[k:k + size] for k in range(0, len(files), size)]
            reports = [report for part in self._pool.map(jpeg_damages, parts) for report in part]
        damaged = {}
        for (j, i, stamp), report in zip(pending, reports, strict=True):
            if report is None:
                source.mark_checked(i, stamp)
            else:
                damaged[j] = report
        return damaged

    @staticmethod
    def mark_intact(source: Any, indices: list[int], unchecked: list[tuple[int, Any]]) -> None:
        """The strictly decoded batch of ``indices`` succeeded: remember its samples."""
        kept = set(indices)
        for i, stamp in unchecked:
            if i in kept:
                source.mark_checked(i, stamp)
        unchecked.clear()

    def close(self) -> None:
        """Stop the threads (idempotent; a later :meth:`find` starts them again)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def dali_failure(err: BaseException) -> str:
    """What DALI's multi-line error text says failed (operator and cause, without its
    "C++ context" and "Current pipeline object is no longer valid." lines)."""
    lines = [line.strip() for line in getattr(err, "message", str(err)).splitlines()]
    failed = [line for line in lines if line.startswith("Failed to decode")]
    if failed:
        return failed[0]
    # "Error in CPU operator `...decoders.image`, ... encountered: <cause>", then a
    # "C++ context" line and DALI's "Current pipeline object is no longer valid." lines.
    operator = next((line.split("`")[1] for line in lines
                     if line.startswith("Error in") and line.count("`") >= 2), None)
    after = lines[lines.index("encountered:") + 1:] if "encountered:" in lines else lines
    cause = " ".join(line for line in after if line and not line.startswith("C++ context")
                     and line != "Current pipeline object is no longer valid.")
    return f"{operator}: {cause}" if operator and operator not in cause else cause
