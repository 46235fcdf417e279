"""Only the optional C kernels live here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and fastload uses the
torch fallback (the same values, slower: see pipelines/decode/resample.py). ``_jpegroi`` also
needs libjpeg-turbo's headers (Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev);
without them large JPEGs are decoded whole at their DCT scale (pipelines/decode/scaled.py).
``_augment`` and ``_affine`` are each one module built from several sources; ``depends``
names their private header, so a change to it rebuilds them and the sdist ships it.

``FASTLOAD_SANITIZE=1`` builds them with AddressSanitizer and UndefinedBehaviorSanitizer
instead (-O1, any report aborts): what ``make fuzz`` does, into build/fuzz, never in place
(tests/fuzz/run.py says how such a build is loaded).
"""

import os

from setuptools import Extension, setup

if os.environ.get("FASTLOAD_SANITIZE") == "1":
    # float-cast-overflow is not part of gcc's -fsanitize=undefined: named on its own;
    # -fno-wrapv undoes the -fwrapv of Python's own CFLAGS, which would hide signed overflow
    _SANITIZE = ["-fsanitize=address,undefined,float-cast-overflow",
                 "-fno-sanitize-recover=all", "-fno-wrapv", "-fno-omit-frame-pointer", "-g",
                 "-O1"]
    _LINK = ["-fsanitize=address,undefined,float-cast-overflow"]
else:
    _SANITIZE, _LINK = [], []


def _flags(*flags: str) -> list[str]:
    """The release flags, or the sanitizer's (the same -ffp-contract setting either way)."""
    if not _SANITIZE:
        return list(flags)
    return [f for f in flags if not f.startswith("-O")] + _SANITIZE

setup(
    ext_modules=[
        Extension(
            "fastload.pipelines._normalize",
            sources=["pipelines/csrc/normalize/normalize.c"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._augment",
            sources=[
                "pipelines/csrc/augment/augment.c",
                "pipelines/csrc/augment/colour.c",
                "pipelines/csrc/augment/mix.c",
                "pipelines/csrc/augment/grid.c",
            ],
            depends=["pipelines/csrc/augment/augment.h"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            libraries=["m"],
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._affine",
            sources=[
                "pipelines/csrc/affine/affine.c",
                "pipelines/csrc/affine/filter.c",
                "pipelines/csrc/affine/nearest.c",
            ],
            depends=["pipelines/csrc/affine/affine.h"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            libraries=["m"],
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._jpegroi",
            sources=["pipelines/csrc/jpegroi/jpegroi.c", "pipelines/csrc/jpegroi/huffman.c"],
            depends=["pipelines/csrc/jpegroi/jpegroi.h"],
            libraries=["jpeg"],
            extra_compile_args=_flags("-O3"),
            extra_link_args=_LINK,
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        # The data layer's strict JPEG check (fastload/data/format/jpeg_damage.py): the same
        # Huffman decoder as _jpegroi, compiled in again (fastload.data never imports
        # fastload.pipelines), markers and entropy decoding only.
        Extension(
            "fastload.data.format._jpegcheck",
            sources=["pipelines/csrc/jpegcheck/check.c", "pipelines/csrc/jpegcheck/lanes.c",
                     "pipelines/csrc/jpegcheck/group.c", "pipelines/csrc/jpegcheck/wide.c",
                     "pipelines/csrc/jpegcheck/wide_avx2.c", "pipelines/csrc/jpegroi/huffman.c"],
            depends=["pipelines/csrc/jpegroi/jpegroi.h", "pipelines/csrc/jpegcheck/lanes.h",
                     "pipelines/csrc/jpegcheck/group.h"],
            libraries=["jpeg"],
            extra_compile_args=_flags("-O3"),
            extra_link_args=_LINK,
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
    ]
)
