"""The hand-written Caffe Datum codec."""

from __future__ import annotations

import struct

import pytest

from fastload.data.format.datum import Datum, datum_fields, decode_datum, encode_datum


@pytest.mark.parametrize("label", [0, 1, 999, 2**31 - 1, -1, -7, -(2**31)])
def test_datum_round_trips_labels_including_negative(label):
    record = encode_datum(b"\xff\xd8jpeg\xff\xd9", label, height=480, width=640)
    assert decode_datum(record) == Datum(b"\xff\xd8jpeg\xff\xd9", label, 480, 640, 3, True)


def test_datum_round_trips_large_and_empty_data():
    big = bytes(range(256)) * 4000  # 1 MB, length needs a 3-byte varint
    assert decode_datum(encode_datum(big, 5)).data == big
    assert decode_datum(encode_datum(b"", 5)).data == b""


def test_datum_encoding_matches_protobuf_wire_format():
    # channels=3, height=2, width=1, data="abc", label=5, encoded=true, in field order
    expected = b"\x08\x03\x10\x02\x18\x01\x22\x03abc\x28\x05\x38\x01"
    assert encode_datum(b"abc", 5, height=2, width=1) == expected


def test_negative_label_is_sign_extended_to_ten_bytes_like_protobuf():
    record = encode_datum(b"", -1)
    label_field = record[record.index(b"\x28") + 1: record.index(b"\x38")]
    assert label_field == b"\xff" * 9 + b"\x01"


def test_decoder_skips_unknown_fields_of_every_wire_type():
    record = (
        b"\x30\x96\x01"  # field 6 varint (unknown)
        + b"\x22\x02hi"  # data
        + b"\x49" + struct.pack("<d", 1.5)  # field 9 fixed64
        + b"\x55" + struct.pack("<f", 2.5)  # field 10 fixed32
        + b"\x32\x08" + struct.pack("<2f", 1.0, 2.0)  # field 6 packed floats (float_data)
        + b"\x28\x07\x38\x01"
    )
    data, label, height, width, channels, encoded = datum_fields(record)
    assert (bytes(data), label, height, width, channels, encoded) == (b"hi", 7, 0, 0, 3, True)


def test_datum_fields_returns_a_zero_copy_view():
    record = bytearray(encode_datum(b"pixels", 1))
    data = datum_fields(record)[0]
    record[record.index(b"pixels")] = ord("P")
    assert bytes(data) == b"Pixels"


@pytest.mark.parametrize(
    "record, message",
    [
        (b"\x22\x10abc", "claims 16 bytes"),
        (b"\x28", "truncated varint"),
        (b"\x2b", "wire type 3"),
        (b"\x28" + b"\xff" * 11, "longer than 10 bytes"),
    ],
)
def test_malformed_records_raise_value_error(record, message):
    with pytest.raises(ValueError, match=message):
        datum_fields(record)
