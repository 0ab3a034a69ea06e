"""Link cells: intra (flat) and ragged cross-chunk / cross-level layouts against the fixtures."""

from __future__ import annotations

import itertools
import json
import math
import struct
import warnings

import numpy as np
import pytest

from tests.support.ref_arrays import ref_by_kind, vertex_rows
from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.fragments import decode_fragment_index
from zvf.format.keys import parse_delta, parse_offsets_name
from zvf.format.links import (
    decode_intra_links,
    decode_ragged_links,
    decode_ragged_links_groups,
    encode_intra_links,
    encode_ragged_links,
    is_intra_offsets,
    lehmer_decode,
    lehmer_encode,
    unpermute,
)

KEY = "0/links/0/0.+1.0/c/1/0/1"


def _links(ref_arrays):
    out = []
    for arr in ref_by_kind(ref_arrays, "links"):
        parts = arr.path.split("/")  # level, "links", delta, offsets
        delta = parse_delta(parts[2])
        offsets = parse_offsets_name(parts[3])
        assert offsets.tolist() == arr.attrs["offsets"]
        out.append((arr, int(parts[0]), delta, offsets))
    return out


def test_fixture_link_cells(ref_arrays):
    seen = {"intra": 0, "ragged": 0, "perm": 0, "cross_level": 0}
    for arr, level, delta, offsets in _links(ref_arrays):
        width = arr.attrs["link_width"]
        has_perm = arr.attrs["has_perm"]
        dtype = arr.attrs["dtype"]
        fam = json.loads((arr.store_dir / str(level) / "links" / arr.path.split("/")[2] / "zarr.json").read_text())
        # has_perm rule observed in 0.9.2: only undirected cross-chunk arrays at delta 0
        intra = delta == 0 and is_intra_offsets(offsets)
        assert has_perm == (not intra and delta == 0 and not fam["attributes"]["directed"])
        for coords, items in arr.cells.items():
            blob = items[0]
            key = f"{arr.name}/{coords}"
            if intra:
                nr = vertex_rows(ref_arrays, arr.store, str(level), coords)
                rows = decode_intra_links(blob, width, key=key, dtype=dtype, n_rows=nr)
                assert encode_intra_links(rows, dtype=dtype) == blob
                lf = next(a for a in ref_arrays if a.store == arr.store and a.path == f"{level}/link_fragments")
                fi = decode_fragment_index(lf.cells[coords][0], n_rows=rows.shape[0])
                assert fi.tiles(rows.shape[0])
                seen["intra"] += 1
            else:
                assert struct.unpack_from("<q", blob, 0)[0] == 1  # K = 1 group
                rows, perm = decode_ragged_links(blob, width, has_perm, key=key, dtype=dtype)
                assert encode_ragged_links(rows, perm, dtype=dtype) == blob
                assert (perm is not None) == has_perm
                nr = vertex_rows(ref_arrays, arr.store, str(level), coords)
                assert rows[:, 0].max() < nr  # endpoint 0 lives in this chunk
                seen["ragged"] += 1
                seen["perm"] += has_perm
                seen["cross_level"] += delta != 0
    assert all(v > 0 for v in seen.values()), seen


def test_fixture_graph_edges_resolve(ref_arrays, ref_dir):
    """Undo perm on the graph store and check every stored edge is one of the input edges."""
    exp = json.loads((ref_dir / "graph.expected.json").read_text())
    want = {tuple(sorted(map(tuple, e))) for e in exp["edges_xyz_sorted"]}
    verts = {}
    for a in ref_arrays:
        if a.store == "graph.zarrvectors" and a.path == "0/vertices":
            for c, items in a.cells.items():
                verts[c] = np.frombuffer(items[0], "<f4").reshape(-1, 3).astype(np.float64)
    got = set()
    for arr, _level, _delta, offsets in _links(ref_arrays):
        if arr.store != "graph.zarrvectors":
            continue
        for coords, items in arr.cells.items():
            if is_intra_offsets(offsets):
                rows, perm = decode_intra_links(items[0], 2), None
            else:
                rows, perm = decode_ragged_links(items[0], 2, arr.attrs["has_perm"])
            rows = unpermute(rows, perm)
            chunks = np.array([coords, *[np.add(coords, o) for o in offsets]])
            if perm is not None:
                # offsets describe stored endpoint order; move them along with the values
                sig = lehmer_decode(perm, 2)
                for r, s in zip(rows, sig):
                    ch = np.empty_like(chunks)
                    ch[s] = chunks
                    got.add(tuple(sorted(tuple(verts[tuple(c)][v].tolist()) for c, v in zip(ch, r))))
            else:
                for r in rows:
                    got.add(tuple(sorted(tuple(verts[tuple(c)][v].tolist()) for c, v in zip(chunks, r))))
    assert got == want


def test_lehmer_matches_reference():
    warnings.filterwarnings("ignore")
    b = pytest.importorskip("zarr_vectors.spatial.boundary")
    for width in range(1, 5):
        perms = np.array(list(itertools.permutations(range(width))))
        codes = lehmer_encode(perms)
        assert codes.tolist() == [b._lehmer_encode(list(p)) for p in perms]
        assert np.array_equal(lehmer_decode(codes, width), perms)
        vals = np.tile(np.arange(width) * 10 + 7, (len(perms), 1))
        assert unpermute(vals, codes).tolist() == [b.apply_perm_inverse(list(v), c, width) for v, c in zip(vals, codes)]


def test_intra_round_trip_and_dtypes():
    rows = np.array([[0, 1], [1, 2], [5, 0]])
    for dt in ("int64", "uint8", "uint16", "int32"):
        blob = encode_intra_links(rows, dtype=dt)
        assert len(blob) == 6 * np.dtype(dt).itemsize
        assert decode_intra_links(blob, 2, dtype=dt, n_rows=6).tolist() == rows.tolist()
    assert decode_intra_links(b"", 3).shape == (0, 3)


def test_intra_errors():
    blob = encode_intra_links(np.array([[0, 1], [1, 7]]))
    with pytest.raises(FormatError, match="not a multiple of the 16-byte row"):
        decode_intra_links(blob[:-1], 2, key=KEY)
    with pytest.raises(FormatError, match=r"link row 1 \[1, 7\] points past the chunk's 5 vertices"):
        decode_intra_links(blob, 2, key=KEY, n_rows=5)
    with pytest.raises(FormatError, match="negative"):
        decode_intra_links(struct.pack("<qq", 0, -1), 2, key=KEY)
    with pytest.raises(FormatError, match="not an integer"):
        decode_intra_links(blob, 2, key=KEY, dtype="float64")
    with pytest.raises(InvalidArgumentError):
        encode_intra_links(np.array([[300]]), dtype="uint8")


def test_ragged_round_trip_groups():
    rows = np.arange(12).reshape(6, 2)
    perm = np.array([0, 1, 1, 0, 0, 1])
    blob = encode_ragged_links(rows, perm, group_sizes=[2, 0, 4])
    r, p, g = decode_ragged_links_groups(blob, 2, True)
    assert r.tolist() == rows.tolist() and p.tolist() == perm.tolist() and g.tolist() == [0, 2, 2, 6]
    blob = encode_ragged_links(rows, dtype="uint16")
    assert struct.unpack_from("<qq", blob) == (1, 0) and len(blob) == 16 + 24
    r, p = decode_ragged_links(blob, 2, False, dtype="uint16")
    assert r.tolist() == rows.tolist() and p is None
    # empty payload (vlen fill) and K = 0 (0.9.2 for an empty group list)
    for empty in (b"", struct.pack("<q", 0)):
        r, p = decode_ragged_links(empty, 3, True)
        assert r.shape == (0, 3) and p.shape == (0,)


@pytest.mark.parametrize(
    "blob, msg",
    [
        (b"\x01\x00\x00", "shorter than its i64 group count"),
        (struct.pack("<q", -1), "declares -1 groups"),
        (struct.pack("<q", 1 << 60) + b"\x00" * 16, "declares 1152921504606846976 groups"),
        (struct.pack("<qq", 1, 0) + b"\x00" * 20, "not a multiple of the 24-byte row"),
        (struct.pack("<qq", 1, 8) + b"\x00" * 24, "group 0 starts at byte 8"),
        (struct.pack("<qqq", 2, 0, 48) + b"\x00" * 24, "past the 24-byte data"),
        (struct.pack("<qqq", 2, 0, 8) + b"\x00" * 48, "not on a 24-byte row"),
        (struct.pack("<qq", 1, 0) + struct.pack("<qqq", 2, 0, 1), r"perm 2 outside \[0, 2!\)"),
        (struct.pack("<qq", 1, 0) + struct.pack("<qqq", 0, -4, 1), "negative vertex index"),
        (struct.pack("<q", 0) + b"\x00" * 24, "0 groups but 24 data bytes"),
    ],
)
def test_ragged_errors(blob, msg):
    with pytest.raises(FormatError, match=msg) as ei:
        decode_ragged_links(blob, 2, True, key=KEY)
    assert KEY in str(ei.value)


def test_perm_factorial_bound_for_faces():
    rows = np.array([[1, 2, 3]])
    assert decode_ragged_links(encode_ragged_links(rows, [5]), 3, True)[1].tolist() == [5]
    with pytest.raises(FormatError):
        decode_ragged_links(encode_ragged_links(rows, [math.factorial(3)]), 3, True)
