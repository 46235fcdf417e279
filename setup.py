"""Only the optional C kernels live here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and fastload uses the
torch fallback (the same values, slower: see pipelines/torch_resample.py). ``_jpegroi`` also
needs libjpeg-turbo's headers (Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev);
without them large JPEGs are decoded whole at their DCT scale (pipelines/scaled_decode.py).
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
            sources=["pipelines/_normalize.c"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._augment",
            sources=[
                "pipelines/_augment.c",
                "pipelines/_augment_colour.c",
                "pipelines/_augment_mix.c",
                "pipelines/_augment_grid.c",
            ],
            depends=["pipelines/_augment.h"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            libraries=["m"],
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._affine",
            sources=[
                "pipelines/_affine.c",
                "pipelines/_affine_filter.c",
                "pipelines/_affine_nearest.c",
            ],
            depends=["pipelines/_affine.h"],
            extra_compile_args=_flags("-O3", "-ffp-contract=off"),
            extra_link_args=_LINK,
            libraries=["m"],
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
        Extension(
            "fastload.pipelines._jpegroi",
            sources=["pipelines/_jpegroi.c", "pipelines/_jpegroi_huffman.c"],
            depends=["pipelines/_jpegroi.h"],
            libraries=["jpeg"],
            extra_compile_args=_flags("-O3"),
            extra_link_args=_LINK,
            optional=not _SANITIZE,  # a sanitizer build that fails says so
        ),
    ]
)
