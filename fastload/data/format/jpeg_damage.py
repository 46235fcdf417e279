"""Silently damaged JPEG data, found per call: a strict entropy decode at 1/8 scale.

libjpeg-turbo meets scrambled entropy-coded data, decodes the image anyway and only warns
(``Corrupt JPEG data: ...``); Pillow and DALI's CPU decoder deliver such an image, and the
markers around the scan stay intact, so no header or marker check sees it. TurboJPEG's
strict mode (``simplejpeg.decode_jpeg(strict=True)``) turns that warning into an error of
the call, with the decoder's message: no stderr is involved, and the decoder releases the
GIL, so threads run it in parallel. At 1/8 scale to grey it still entropy-decodes every
coefficient (damage anywhere in the scan is seen) but runs 1/64 of the inverse DCT and no
colour conversion: about 0.75 ms for an 80 KB 450x380 photo against 1.0 ms at full size
(``benchmarks/test_read_checks_cost.py`` measures it in the loader).

The same verdict, cheaper: where the ``_jpegcheck`` extension was built
(``pipelines/csrc/jpegcheck/check.c``), libjpeg-turbo reads the markers and fastload's own
Huffman decoder entropy-decodes the scan, no pixels made (0.30 against 0.63 CPU-ms for an
85 KB photo, ``benchmarks/strict_check_cost.py``; 0.24 where :func:`strict_decode_errors`
gives it several files, two decoded at once in one thread). Its "intact" is final; anything else (damage, a kind it
does not decode: progressive, CMYK, 12-bit, ...) is decided by the strict decode above, whose
message is the one given, so the verdicts are the strict decode's
(``tests/convert/test_strict_check_parity.py``).

One owner of this policy: the loader (``fastload.loader.damage``), ``fastload convert``'s
``check="decode"`` (``fastload.data.convert.image_check``) and ``fastload verify`` use these.
"""

from __future__ import annotations

import threading

__all__ = ["CORRUPT_PREFIXES", "damage_reason", "decoded_error", "jpeg_damage", "jpeg_damages",
           "release_thread_cache", "strict_decode_error", "strict_decode_errors"]

try:  # the C entropy-only check (optional: without a compiler, the strict decode alone)
    from fastload.data.format import _jpegcheck
except ImportError as exc:  # a build without the extension: said once, at the first check
    _jpegcheck = None
    _MISSING: str | None = f"{type(exc).__name__}: {exc}"
else:
    _MISSING = None
_MISSING_LOCK = threading.Lock()

# libjpeg's warnings (JWRN_* of jerror.h) that mean damaged data; the others (an unknown
# JFIF revision, an Adobe transform code) are harmless notes.
CORRUPT_PREFIXES = (
    "Corrupt JPEG data",
    "Premature end of JPEG file",
    "Invalid SOS parameters for sequential JPEG",
    "Inconsistent progression sequence",
)


def _say_missing_kernel() -> None:
    """Warn, once per process, that the strict check runs without its C kernel."""
    global _MISSING
    with _MISSING_LOCK:  # the conversion's check threads
        reason, _MISSING = _MISSING, None
    if reason is None:
        return
    import warnings

    from fastload.utils.fallback import FallbackWarning
    from fastload.utils.machine import KERNELS, kernel_fix

    warnings.warn(
        f"fastload: the C kernel fastload.data.format._jpegcheck is missing ({reason}); "
        f"instead, {KERNELS['_jpegcheck']}. `fastload doctor` lists what this install lacks; "
        f"to get the kernel, {kernel_fix('_jpegcheck')}", FallbackWarning, stacklevel=3)


def _is_jpeg(data) -> bool:
    return len(data) >= 4 and data[0] == 0xFF and data[1] == 0xD8


def strict_decode_error(data) -> str | None:
    """The strict decoder's message when ``data`` (a JPEG) fails libjpeg-turbo's strict
    1/8-scale decode for any reason (damage, a harmless warning made an error, a format it
    cannot decode); None when it decodes, or is not a JPEG. Files the entropy-only check
    finds intact are not decoded (see the module docstring)."""
    if not _is_jpeg(data):
        return None
    if _jpegcheck is None:
        _say_missing_kernel()
    elif _jpegcheck.check(data) is None:
        return None
    return decoded_error(data)


_CHECKED_TOGETHER = 256  # files per call of the C check (it holds a reason's room for each)


def strict_decode_errors(files) -> list[str | None]:
    """:func:`strict_decode_error` of each of ``files`` (a sequence of JPEG buffers), faster
    than one call each: the C check decodes several files at once in the calling thread (from
    10 files: 32 with AVX-512, 16 with AVX2; else two)."""
    if _jpegcheck is None:
        return [strict_decode_error(data) for data in files]
    jpegs = [i for i, data in enumerate(files) if _is_jpeg(data)]
    quick = []
    for start in range(0, len(jpegs), _CHECKED_TOGETHER):  # bounded: a reason slot per file
        quick += _jpegcheck.check_many([files[i] for i in jpegs[start:start + _CHECKED_TOGETHER]])
    errors: list[str | None] = [None] * len(files)
    for i, verdict in zip(jpegs, quick, strict=True):
        if verdict is not None:
            errors[i] = decoded_error(files[i])
    return errors


def decoded_error(data) -> str | None:
    """:func:`strict_decode_error` by the strict decode itself, for every file (the check
    before the entropy-only one; its reference in the tests and benchmarks)."""
    if not _is_jpeg(data):
        return None
    import simplejpeg

    try:
        # min_height/min_width make simplejpeg pick its scale: the smallest, 1/8
        simplejpeg.decode_jpeg(data, colorspace="GRAY", min_height=1, min_width=1,
                               min_factor=8, strict=True)
    except ValueError as err:
        return str(err)
    return None


def jpeg_damage(data) -> str | None:
    """The decoder's report (``"Corrupt JPEG data: ..."``) when ``data`` is a JPEG whose
    entropy-coded data is damaged; None for an intact JPEG, for anything that is not a
    JPEG, and for a JPEG this check cannot decode for another reason (left to the
    loader's decoder, which names its own error)."""
    message = strict_decode_error(data)
    return message if message is not None and message.startswith(CORRUPT_PREFIXES) else None


def jpeg_damages(files) -> list[str | None]:
    """:func:`jpeg_damage` of each of ``files`` (a sequence of buffers), several at once as
    :func:`strict_decode_errors` decodes them."""
    return [message if message is not None and message.startswith(CORRUPT_PREFIXES) else None
            for message in strict_decode_errors(files)]


def damage_reason(report: str) -> str:
    """How an error message states a strict decoder's ``report``."""
    if report.startswith(CORRUPT_PREFIXES):
        return f"damaged JPEG data, the decoder reports {report!r}"
    return report


def release_thread_cache() -> None:
    """Free the C check's look-ups and buffers of the calling thread (a thread of the
    caller's that checked files now and then; a thread's are freed when it ends)."""
    if _jpegcheck is not None:
        _jpegcheck.release_thread_cache()
