"""Silently damaged JPEG data, found per call: a strict entropy decode at 1/8 scale.

libjpeg-turbo meets scrambled entropy-coded data, decodes the image anyway and only warns
(``Corrupt JPEG data: ...``); Pillow and DALI's CPU decoder deliver such an image, and the
markers around the scan stay intact, so no header or marker check sees it. TurboJPEG's
strict mode (``simplejpeg.decode_jpeg(strict=True)``) turns that warning into an error of
the call, with the decoder's message: no stderr is involved. At 1/8 scale to grey it still
entropy-decodes every coefficient (damage anywhere in the scan is seen) but runs 1/64 of
the inverse DCT and no colour conversion: 0.9 ms for a 450x380 photo against 1.2 ms for a
full strict decode (``benchmarks/test_read_checks_cost.py`` measures both).
"""

from __future__ import annotations

__all__ = ["CORRUPT_PREFIXES", "jpeg_damage"]

# libjpeg's warnings (JWRN_* of jerror.h) that mean damaged data; the others (an unknown
# JFIF revision, an Adobe transform code) are harmless notes.
CORRUPT_PREFIXES = (
    "Corrupt JPEG data",
    "Premature end of JPEG file",
    "Invalid SOS parameters for sequential JPEG",
    "Inconsistent progression sequence",
)


def jpeg_damage(data) -> str | None:
    """The decoder's report (``"Corrupt JPEG data: ..."``) when ``data`` is a JPEG whose
    entropy-coded data is damaged; None for an intact JPEG, for anything that is not a
    JPEG, and for a JPEG this check cannot decode for another reason (left to the
    loader's decoder, which names its own error)."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    import simplejpeg

    try:
        simplejpeg.decode_jpeg(data, colorspace="GRAY", min_factor=8, strict=True)
    except ValueError as err:
        message = str(err)
        return message if message.startswith(CORRUPT_PREFIXES) else None
    return None
