"""vlen-bytes frames: fixture bytes, round trips, bounds checks."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.vlen import decode_vlen, decode_vlen_spans, encode_vlen, encode_vlen_packed


def test_fixture_cells_round_trip(ref_arrays):
    n = 0
    for arr in ref_arrays:
        if arr.meta["codecs"] != [{"name": "vlen-bytes", "configuration": {}}]:
            continue
        for rel, raw in arr.objects.items():
            items = decode_vlen(raw, key=f"{arr.name}/{rel}")
            assert [bytes(i) for i in items] == arr.cells[tuple(int(x) for x in rel.split("/")[1:])]
            assert encode_vlen(items) == raw
            n += 1
    assert n > 100


@pytest.mark.parametrize(
    "items",
    [[], [b""], [b"abc"], [b"", b"x" * 300, b"\x00\x00"], [bytes(range(256))] * 7],
)
def test_round_trip(items):
    frame = encode_vlen(items)
    assert [bytes(x) for x in decode_vlen(frame)] == items
    assert [bytes(x) for x in decode_vlen(memoryview(frame))] == items
    assert [bytes(x) for x in decode_vlen(np.frombuffer(frame, np.uint8))] == items
    assert [bytes(x) for x in decode_vlen(frame, expected=len(items))] == items
    data = b"".join(items)
    off = np.concatenate(([0], np.cumsum([len(i) for i in items]))).astype(np.int64)
    assert encode_vlen_packed(np.frombuffer(data, np.uint8), off) == frame


def test_encode_accepts_buffers():
    arr = np.arange(6, dtype="<i4")
    assert encode_vlen([arr, memoryview(b"ab"), bytearray(b"c")]) == (
        struct.pack("<II", 3, 24) + arr.tobytes() + struct.pack("<I", 2) + b"ab" + struct.pack("<I", 1) + b"c"
    )


def test_spans():
    frame = encode_vlen([b"ab", b"", b"cde"])
    starts, lens = decode_vlen_spans(frame)
    assert starts.tolist() == [8, 14, 18] and lens.tolist() == [2, 0, 3]


@pytest.mark.parametrize(
    "blob, msg",
    [
        (b"", "shorter than its 4-byte count"),
        (b"\x01\x00", "shorter than its 4-byte count"),
        (struct.pack("<I", 1), "declares 1 items"),
        (struct.pack("<I", 0xFFFFFFFF) + b"\x00" * 12, "declares 4294967295 items"),
        (struct.pack("<II", 1, 5) + b"abc", "declares 5 bytes"),
        (struct.pack("<II", 1, 0xFFFFFFF0) + b"abc", "declares 4294967280 bytes"),
        (struct.pack("<II", 1, 1) + b"ab", "1 trailing bytes"),
        (struct.pack("<II", 2, 1) + b"a\0\0\0", "truncated at the length of item 1"),
    ],
)
def test_errors(blob, msg):
    one = blob[:4] == struct.pack("<I", 1)  # then also as a cell's single item, which has a shortcut
    for expected in (None, 1) if one else (None,):
        with pytest.raises(FormatError, match=msg) as ei:
            decode_vlen(blob, key="0/vertices/c/0/0/0", expected=expected)
        assert "0/vertices/c/0/0/0" in str(ei.value)


def test_single_item_is_a_view():
    blob = encode_vlen([b"payload"])
    (item,) = decode_vlen(blob, key="k", expected=1)
    assert isinstance(item, memoryview) and item.obj is blob and bytes(item) == b"payload"
    assert bytes(decode_vlen(encode_vlen([b""]), key="k", expected=1)[0]) == b""


def test_expected_count():
    with pytest.raises(FormatError, match="holds 2 items, expected 1"):
        decode_vlen(encode_vlen([b"a", b"b"]), key="k", expected=1)


def test_packed_bad_offsets():
    with pytest.raises(InvalidArgumentError):
        encode_vlen_packed(np.zeros(4, np.uint8), [0, 5])
    with pytest.raises(InvalidArgumentError):
        encode_vlen_packed(np.zeros(4, np.uint8), [2, 1])
