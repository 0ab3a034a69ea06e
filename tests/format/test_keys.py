"""Chunk key encodings, chunk ids and link-array names."""

from __future__ import annotations

import numpy as np
import pytest

from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.keys import (
    DEFAULT_ENCODING,
    SEED_ENCODING,
    ChunkKeyEncoding,
    format_chunk_id,
    format_delta,
    format_offsets_name,
    parse_chunk_id,
    parse_chunk_ids,
    parse_delta,
    parse_offsets_name,
)


@pytest.mark.parametrize(
    "enc, coords, suffix",
    [
        (ChunkKeyEncoding("default", "/"), (1, 0, 1), "c/1/0/1"),
        (ChunkKeyEncoding("default", "."), (1, 0, 1), "c.1.0.1"),
        (ChunkKeyEncoding("v2", "."), (1, 0, 1), "1.0.1"),
        (ChunkKeyEncoding("v2", "/"), (1, 0, 1), "1/0/1"),
        (ChunkKeyEncoding("default", "/"), (), "c"),
        (ChunkKeyEncoding("v2", "."), (), "0"),
        (ChunkKeyEncoding("default", "/"), (12, 0), "c/12/0"),
    ],
)
def test_suffix_and_parse(enc, coords, suffix):
    assert enc.suffix(coords) == suffix
    assert enc.parse(suffix, ndim=len(coords)) == coords
    assert enc.key("0/vertices", coords) == f"0/vertices/{suffix}"
    assert enc.key("", coords) == suffix
    assert enc.key("0/vertices/", coords) == f"0/vertices/{suffix}"


def test_defaults_and_seed():
    assert DEFAULT_ENCODING.key("0/vertices", np.array([1, 0, 1])) == "0/vertices/c/1/0/1"
    assert SEED_ENCODING.key("0/vertices", [1, 0, 1]) == "0/vertices/1.0.1"
    assert DEFAULT_ENCODING.keys("0/links/0/0.+1.0", [[0, 0, 0], [1, 2, 3]]) == [
        "0/links/0/0.+1.0/c/0/0/0",
        "0/links/0/0.+1.0/c/1/2/3",
    ]


def test_from_metadata(ref_arrays):
    for arr in ref_arrays:
        enc = ChunkKeyEncoding.from_metadata(arr.meta, key=arr.name)
        assert enc == DEFAULT_ENCODING
        assert enc.to_json() == arr.meta["chunk_key_encoding"]
        for rel in arr.objects:
            coords = enc.parse(rel, ndim=arr.ndim)
            assert enc.suffix(coords) == rel


def test_from_metadata_variants():
    v2 = {"name": "v2", "configuration": {"separator": "."}}
    assert ChunkKeyEncoding.from_metadata({"chunk_key_encoding": v2, "node_type": "array"}) == SEED_ENCODING
    assert ChunkKeyEncoding.from_metadata(v2) == SEED_ENCODING
    assert ChunkKeyEncoding.from_metadata({"name": "v2"}) == SEED_ENCODING  # v2 default separator "."
    assert ChunkKeyEncoding.from_metadata({"name": "default"}) == DEFAULT_ENCODING
    assert ChunkKeyEncoding.from_metadata(None) == DEFAULT_ENCODING
    with pytest.raises(FormatError, match="unsupported chunk_key_encoding"):
        ChunkKeyEncoding.from_metadata({"chunk_key_encoding": {"name": "weird"}}, key="0/vertices")
    with pytest.raises(FormatError):
        ChunkKeyEncoding.from_metadata({"name": "default", "configuration": {"separator": "-"}})
    with pytest.raises(InvalidArgumentError):
        ChunkKeyEncoding("default", ":")


@pytest.mark.parametrize(
    "enc, text",
    [
        (DEFAULT_ENCODING, "1/0/1"),
        (DEFAULT_ENCODING, "c/1/x/1"),
        (DEFAULT_ENCODING, "c/1/0"),
        (SEED_ENCODING, "1.0"),
        (SEED_ENCODING, "1.0.+1"),
        (SEED_ENCODING, "1..0"),
    ],
)
def test_parse_errors(enc, text):
    with pytest.raises(FormatError) as ei:
        enc.parse(text, ndim=3)
    assert text in str(ei.value)


def test_negative_coords():
    assert DEFAULT_ENCODING.parse("c/-1/0/2") == (-1, 0, 2)
    assert SEED_ENCODING.suffix((-1, 0)) == "-1.0"


def test_chunk_ids():
    assert format_chunk_id((1, 0, -1)) == "1.0.-1"
    assert parse_chunk_id("-1.0") == (-1, 0)
    assert parse_chunk_id("7", ndim=1) == (7,)
    ids = ["0.0.0", "1.-2.3", "10.0.5"]
    assert parse_chunk_ids(ids, 3).tolist() == [[0, 0, 0], [1, -2, 3], [10, 0, 5]]
    assert parse_chunk_ids([], 2).shape == (0, 2)
    for bad in ("", "1..0", "a.b", "1.0.+1"):
        with pytest.raises(FormatError):
            parse_chunk_id(bad)
    with pytest.raises(FormatError, match="expected 3"):
        parse_chunk_id("1.0", ndim=3)
    with pytest.raises(FormatError, match=r"'1\.0'"):
        parse_chunk_ids(["0.0.0", "1.0", "2.0.0.0"], 3)


def test_fixture_chunk_ids(ref_arrays):
    for arr in ref_arrays:
        ne = arr.attrs.get("nonempty_chunks")
        if ne:
            parsed = parse_chunk_ids(ne, arr.ndim)
            assert [format_chunk_id(r) for r in parsed.tolist()] == ne


def test_offsets_names():
    assert format_offsets_name([0, 1, -1]) == "0.+1.-1"
    assert format_offsets_name([[0, 0, 0], [1, 0, 0]]) == "0.0.0_+1.0.0"
    assert parse_offsets_name("+1.-1.0_+1.0.0").tolist() == [[1, -1, 0], [1, 0, 0]]
    assert format_delta(1) == "+1" and format_delta(0) == "0" and format_delta(-1) == "-1"
    assert parse_delta("+1") == 1 and parse_delta("-1") == -1 and parse_delta("0") == 0
    for bad in ("0.x.0", "0.0_0.0.0", "", "0..1"):
        with pytest.raises(FormatError):
            parse_offsets_name(bad)
    with pytest.raises(FormatError):
        parse_offsets_name("0.0", ndim=3)
    with pytest.raises(FormatError):
        parse_delta("up")


def test_fixture_offsets_names(ref_arrays):
    n = 0
    for arr in ref_arrays:
        if arr.attrs.get("zv_array") == "links":
            name = arr.path.split("/")[3]
            assert parse_offsets_name(name, ndim=arr.ndim).tolist() == arr.attrs["offsets"]
            assert format_offsets_name(arr.attrs["offsets"]) == name
            n += 1
    assert n > 10
