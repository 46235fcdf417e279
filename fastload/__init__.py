"""fastload: fast image training input for PyTorch."""

import logging

from fastload.data.format.datum import Datum, decode_datum, encode_datum

# The one place the version is written: pyproject.toml reads it (setuptools `attr`, statically).
__version__ = "0.1.0"

# The `fastload` logger (plan, cache, download and retry decisions) is silent unless the
# application configures logging (`fastload -v` does); this handler only stops Python's
# last-resort handler from printing its warnings.
logging.getLogger("fastload").addHandler(logging.NullHandler())

__all__ = [
    "DataLoader", "Datum", "FallbackWarning", "LMDBDataset", "SampleError", "StallMeter",
    "decode_datum", "encode_datum", "__version__",
]


def __getattr__(name: str):
    # Lazy exports (PEP 562): `import fastload` stays free of torch until they are used.
    if name == "DataLoader":
        from fastload.loader.dataloader import DataLoader

        return DataLoader
    if name == "LMDBDataset":
        from fastload.data.format.dataset import LMDBDataset

        return LMDBDataset
    if name == "FallbackWarning":
        from fastload.loader.dataloader import FallbackWarning

        return FallbackWarning
    if name == "SampleError":
        from fastload.loader.sample_sources import SampleError

        return SampleError
    if name == "StallMeter":
        from fastload.loader.stall import StallMeter

        return StallMeter
    raise AttributeError(f"module 'fastload' has no attribute {name!r}")
