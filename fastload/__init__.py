"""fastload: fast image training input for PyTorch."""

from fastload.datum import Datum, decode_datum, encode_datum

__version__ = "0.1.0"

__all__ = ["Datum", "decode_datum", "encode_datum", "__version__"]
