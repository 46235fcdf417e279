"""The warning fastload gives when it runs a slower path than it could (one place, so that
the loader, the data layer and the C kernels' checks all give the same class)."""

from __future__ import annotations

__all__ = ["FallbackWarning"]


class FallbackWarning(UserWarning):
    """fastload runs a slower path, and the message names the reason: torch's DataLoader for
    this dataset, or (once per process and kernel) torch's or Pillow's ops where an optional C
    kernel the plan uses is missing, or the strict JPEG check's full decoder where its C
    kernel is missing (``fastload doctor`` lists them).

    Warned by :class:`fastload.DataLoader`'s constructor when it falls back to torch's
    DataLoader (same batches, no speed-up; ``strict=True`` raises instead). Filter it with
    ``warnings.simplefilter("error", fastload.FallbackWarning)`` to make it fail.
    """
