"""Only the optional C kernels live here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and fastload uses the
torch fallback (the same values, slower: see pipelines/torch_resample.py). ``_jpegroi`` also
needs libjpeg-turbo's headers (Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev);
without them large JPEGs are decoded whole at their DCT scale (pipelines/scaled_decode.py).
``_augment`` and ``_affine`` are each one module built from several sources; ``depends``
names their private header, so a change to it rebuilds them and the sdist ships it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "fastload.pipelines._normalize",
            sources=["pipelines/_normalize.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
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
            extra_compile_args=["-O3", "-ffp-contract=off"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "fastload.pipelines._affine",
            sources=[
                "pipelines/_affine.c",
                "pipelines/_affine_filter.c",
                "pipelines/_affine_nearest.c",
            ],
            depends=["pipelines/_affine.h"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "fastload.pipelines._jpegroi",
            sources=["pipelines/_jpegroi.c", "pipelines/_jpegroi_huffman.c"],
            depends=["pipelines/_jpegroi.h"],
            libraries=["jpeg"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
