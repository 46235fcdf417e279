"""Caffe ``Datum`` protobuf codec, written by hand (no protobuf dependency, no pickle).

The subset fastload writes, in field order::

    message Datum {
      optional int32 channels = 1;
      optional int32 height   = 2;
      optional int32 width    = 3;
      optional bytes data     = 4;   // the encoded image file, untouched
      optional int32 label    = 5;
      optional bool  encoded  = 7;   // always true: ``data`` is a JPEG, not raw pixels
    }

DALI's ``fn.readers.caffe`` reads these records natively. :func:`decode_datum` also
accepts Datums written by other tools: unknown fields are skipped by wire type.
"""

from __future__ import annotations

from dataclasses import dataclass

_VARINT = 0
_FIXED64 = 1
_LENGTH_DELIMITED = 2
_FIXED32 = 5

_FIELD_CHANNELS = 1
_FIELD_HEIGHT = 2
_FIELD_WIDTH = 3
_FIELD_DATA = 4
_FIELD_LABEL = 5
_FIELD_ENCODED = 7


@dataclass(frozen=True)
class Datum:
    """One record: encoded image bytes, integer label and the decoded image size.

    What :func:`decode_datum` returns for a record, and what :func:`encode_datum` writes
    (given as its arguments). Frozen: a record read is not changed in place.

    Args:
        data: the encoded image file (a JPEG in fastload's records), byte for byte.
        label: the class index (an int32; fastload writes 0 to ``len(classes) - 1``).
        height: the decoded image's height in pixels (0: not stated).
        width: the decoded image's width in pixels (0: not stated).
        channels: colour channels of the decoded image (3 for RGB).
        encoded: True when ``data`` is an image file (always so in fastload's records),
            False for raw pixels as other Caffe tools may write.
    """

    data: bytes
    label: int
    height: int = 0
    width: int = 0
    channels: int = 3
    encoded: bool = True


def _encode_varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:  # int32 negatives are sign-extended to 64 bits, as protobuf does
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _tag(field: int, wire_type: int) -> bytes:
    return _encode_varint((field << 3) | wire_type)


# Tags of the fields fastload writes, encoded once (datum_parts runs once per record).
_TAG_CHANNELS = _tag(_FIELD_CHANNELS, _VARINT)
_TAG_HEIGHT = _tag(_FIELD_HEIGHT, _VARINT)
_TAG_WIDTH = _tag(_FIELD_WIDTH, _VARINT)
_TAG_DATA = _tag(_FIELD_DATA, _LENGTH_DELIMITED)
_SUFFIX_LABEL = _tag(_FIELD_LABEL, _VARINT)
_SUFFIX_ENCODED = _tag(_FIELD_ENCODED, _VARINT) + b"\x01"


def encode_datum(data: bytes, label: int, height: int = 0, width: int = 0, channels: int = 3) -> bytes:
    """Serialize one encoded-image Datum as a record value.

    ``data`` is stored byte for byte; the record says ``encoded: true``, in the field order
    of the module docstring, which DALI's Caffe reader and :func:`decode_datum` read.

    Args:
        data: the encoded image file (a JPEG), stored untouched.
        label: the class index, an int32 (a negative one is sign-extended, as protobuf does).
        height: the decoded image's height in pixels (0: not stated).
        width: the decoded image's width in pixels (0: not stated).
        channels: colour channels of the decoded image (3 for RGB).

    Returns:
        The serialized Datum protobuf message.
    """
    prefix, suffix = datum_parts(len(data), label, height, width, channels)
    return b"".join((prefix, data, suffix))


def datum_parts(
    data_length: int, label: int, height: int = 0, width: int = 0, channels: int = 3
) -> tuple[bytes, bytes]:
    """``(prefix, suffix)`` with ``prefix + data + suffix == encode_datum(data, ...)``.

    Lets a writer assemble a record around image bytes already in a buffer, without a copy.
    """
    prefix = b"".join((
        _TAG_CHANNELS, _encode_varint(channels),
        _TAG_HEIGHT, _encode_varint(height),
        _TAG_WIDTH, _encode_varint(width),
        _TAG_DATA, _encode_varint(data_length),
    ))
    return prefix, _SUFFIX_LABEL + _encode_varint(label) + _SUFFIX_ENCODED


def _decode_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint in Datum record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes in Datum record")


def _as_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def datum_fields(record: bytes | memoryview) -> tuple[memoryview, int, int, int, int, bool]:
    """Parse a record into ``(data view, label, height, width, channels, encoded)``.

    ``data`` is a zero-copy view into ``record``. Raises ``ValueError`` on a malformed record.
    """
    buf = memoryview(record)
    pos = 0
    data = memoryview(b"")
    label = height = width = 0
    channels = 3
    encoded = False
    while pos < len(buf):
        key, pos = _decode_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = _decode_varint(buf, pos)
            if field == _FIELD_LABEL:
                label = _as_int32(value)
            elif field == _FIELD_HEIGHT:
                height = _as_int32(value)
            elif field == _FIELD_WIDTH:
                width = _as_int32(value)
            elif field == _FIELD_CHANNELS:
                channels = _as_int32(value)
            elif field == _FIELD_ENCODED:
                encoded = bool(value)
        elif wire_type == _LENGTH_DELIMITED:
            length, pos = _decode_varint(buf, pos)
            end = pos + length
            if end > len(buf):
                raise ValueError(f"field {field} claims {length} bytes but the Datum record ends first")
            if field == _FIELD_DATA:
                data = buf[pos:end]
            pos = end
        elif wire_type == _FIXED64:
            pos += 8
        elif wire_type == _FIXED32:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} in Datum record")
        if pos > len(buf):
            raise ValueError("truncated Datum record")
    return data, label, height, width, channels, encoded


def decode_datum(record: bytes | memoryview) -> Datum:
    """Parse a serialized Datum into a :class:`Datum` (copies ``data``).

    Accepts Datums written by other tools too: unknown fields are skipped by wire type.

    Args:
        record: a record value as :func:`encode_datum` (or Caffe) writes it.

    Returns:
        The record's fields, with ``data`` copied out of ``record``.

    Raises:
        ValueError: ``record`` is malformed (a truncated field or varint, a field longer
            than the record, an unsupported wire type).
    """
    data, label, height, width, channels, encoded = datum_fields(record)
    return Datum(bytes(data), label, height, width, channels, encoded)
