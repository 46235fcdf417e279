"""Only the optional C kernels live here; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and fastload uses the
torch fallback (the same values, slower: see pipelines/torch_resample.py). ``_jpegroi`` also
needs libjpeg-turbo's headers (Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev);
without them large JPEGs are decoded whole at their DCT scale (pipelines/scaled_decode.py).
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
            sources=["pipelines/_augment.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "fastload.pipelines._affine",
            sources=["pipelines/_affine.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "fastload.pipelines._jpegroi",
            sources=["pipelines/_jpegroi.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
