"""Object manifests: fixture bytes, 0.9.2's writers and encoder as oracle, speed, validation."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.manifest import (
    EMPTY_MANIFEST,
    ManifestTable,
    decode_manifests,
    decode_manifests_packed,
    encode_manifest,
    encode_manifests,
    encode_manifests_packed,
)
from zvf.format.vlen import decode_vlen, decode_vlen_spans, encode_vlen, encode_vlen_packed

KEY = "0/object_index/manifests/c/0"


def _ndim(arr) -> int:
    return 2 if arr.store.startswith("points2d") else 3


def test_fixture_manifests_round_trip(ref_arrays):
    n = 0
    for arr in ref_arrays:
        if not arr.path.endswith("object_index/manifests"):
            continue
        nd = _ndim(arr)
        for coords, items in arr.cells.items():
            t = decode_manifests(items, nd, key=f"{arr.name}/{coords}")
            assert t.num_objects == len(items)
            # 0.9.2 writes one mode-0 block per fragment: re-encoding is exact
            assert encode_manifests(t.object_row, t.coords, t.fragment, len(items)) == items
            data, off = encode_manifests_packed(t.object_row, t.coords, t.fragment, len(items))
            assert encode_vlen_packed(data, off) == encode_vlen(items)
            # every referenced (chunk, fragment) exists in vertex_fragments
            level = arr.path.split("/")[0]
            vf = next(a for a in ref_arrays if a.store == arr.store and a.path == f"{level}/vertex_fragments")
            for c, f in zip(t.coords.tolist(), t.fragment.tolist()):
                blob = vf.cells[tuple(c)][0]
                assert f < struct.unpack_from("<I", blob, 8)[0]
            n += 1
    assert n >= 8


def _mode_bytes(blob: bytes, nd: int) -> list[int]:
    (b,) = struct.unpack_from("<I", blob, 0)
    pos, modes = 4, []
    for _ in range(b):
        pos += 8 * nd
        m = blob[pos]
        modes.append(m)
        pos += 1 + {0: 8, 1: 16}.get(m, 0)
        if m == 2:
            (k,) = struct.unpack_from("<I", blob, pos)
            pos += 4 + 8 * k
    return modes


def test_reference_writers_use_mode_0_only(tmp_path):
    """Black box: 0.9.2 writes one mode-0 block per fragment, repeating a chunk it re-enters."""
    warnings.filterwarnings("ignore")
    zb = pytest.importorskip("zarr_vectors.building")
    zigzag = np.array([[10, 10, 10], [60, 10, 10], [20, 12, 10], [70, 12, 10], [30, 14, 10]], np.float32)
    straight = np.array([[5, 5, 5], [6, 6, 6], [7, 7, 7]], np.float32)
    path = tmp_path / "pl.zarrvectors"
    zb.write_polylines(
        str(path), [zigzag, straight], chunk_shape=(50.0,) * 3, bin_shape=(25.0,) * 3, bounds=([0.0] * 3, [100.0] * 3)
    )
    import json

    import numcodecs.zstd

    mdir = path / "0" / "object_index" / "manifests"
    meta = json.loads((mdir / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["vlen-bytes", "zstd"]
    items = decode_vlen(numcodecs.zstd.decompress((mdir / "c" / "0").read_bytes()))
    assert all(set(_mode_bytes(bytes(i), 3)) <= {0} for i in items)
    t = decode_manifests(items, 3)
    obj0 = t.object_row == 0
    # chunks visited in traversal order, (0,0,0) and (1,0,0) alternately, fragments 0,0,1,1,2
    assert t.coords[obj0].tolist() == [[0, 0, 0], [1, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert t.fragment[obj0].tolist() == [0, 0, 1, 1, 2]
    assert encode_manifests(t.object_row, t.coords, t.fragment, 2) == [bytes(i) for i in items]


def test_matches_reference_encoder():
    warnings.filterwarnings("ignore")
    ref = pytest.importorskip("zarr_vectors.encoding.fragments")
    rng = np.random.default_rng(5)
    for _ in range(200):
        nd = int(rng.integers(1, 4))
        nb = int(rng.integers(0, 6))
        blocks, lists = [], []
        for _b in range(nb):
            c = tuple(int(x) for x in rng.integers(-3, 3, nd))
            k = rng.integers(0, 3)
            if k == 0:
                v = int(rng.integers(0, 9))
                blocks.append((c, v))
                lists.append([v])
            elif k == 1:
                s, n = int(rng.integers(0, 9)), int(rng.integers(2, 5))
                blocks.append((c, np.arange(s, s + n)))
                lists.append(np.arange(s, s + n))
            else:
                a = rng.integers(0, 9, rng.integers(0, 5))
                if a.size == 1 or (a.size > 1 and np.all(np.diff(a) == 1)):
                    a = np.array([5, 3])
                blocks.append((c, a))
                lists.append(a)
        want = ref.encode_object_manifest_blocks(blocks, nd)
        coords = np.array([b[0] for b in blocks], np.int64).reshape(nb, nd)
        assert encode_manifest(coords, lists) == want
        t = decode_manifests([want, EMPTY_MANIFEST, want], nd)
        exp = [f for lst in lists for f in np.atleast_1d(lst).tolist()]
        assert t.fragment.tolist() == exp + exp
        assert t.object_row.tolist() == [0] * len(exp) + [2] * len(exp)
        assert t.object_offsets.tolist() == [0, len(exp), len(exp), 2 * len(exp)]
        # ... and the reference decodes what we write
        back = ref.decode_object_manifest_blocks(encode_manifest(coords, lists), nd)
        assert [c for c, _ in back] == [tuple(c) for c in coords.tolist()]
    # the bulk encoder matches 0.9.2's bulk encoder (mode 0 everywhere)
    mans = [[((1, 2, 3), 4), ((0, 0, -1), 0)], [], [((5, 5, 5), 7)]]
    want = ref.encode_object_manifests_many(mans, 3)
    rows = [i for i, m in enumerate(mans) for _ in m]
    coords = [c for m in mans for c, _ in m]
    frags = [f for m in mans for _, f in m]
    assert encode_manifests(rows, coords, frags, 3) == want


def test_mode_choice():
    blob = encode_manifest([[0, 0], [1, 1], [2, 2], [3, 3]], [[4], [2, 3, 4], [9, 1], []])
    assert _mode_bytes(blob, 2) == [0, 1, 2, 2]
    t = decode_manifests([blob], 2)
    assert t.fragment.tolist() == [4, 2, 3, 4, 9, 1]
    assert t.block.tolist() == [0, 1, 1, 1, 2, 2]
    assert t.coords.tolist() == [[0, 0], [1, 1], [1, 1], [1, 1], [2, 2], [2, 2]]


def test_take_objects():
    rows = [0, 0, 1, 2, 2, 2]
    t = decode_manifests(encode_manifests(rows, np.zeros((6, 1)), [1, 2, 3, 4, 5, 6], 4), 1)
    sub = t.take_objects([2, 0, 3])
    assert sub.fragment.tolist() == [4, 5, 6, 1, 2]
    assert sub.object_row.tolist() == [0, 0, 0, 1, 1]
    assert sub.num_objects == 3


def test_decode_100k_manifests():
    rng = np.random.default_rng(0)
    n_obj = 100_000
    nb = rng.integers(1, 6, n_obj)  # ~3 blocks each
    obj = np.repeat(np.arange(n_obj), nb)
    coords = rng.integers(-5, 50, (obj.size, 3))
    frag = rng.integers(0, 100, obj.size)
    data, off = encode_manifests_packed(obj, coords, frag, n_obj)
    frame = encode_vlen_packed(data, off)
    starts, lengths = decode_vlen_spans(frame)
    table = decode_manifests_packed(frame, starts, lengths, 3)
    assert np.array_equal(table.fragment, frag) and np.array_equal(table.coords, coords)
    assert np.array_equal(table.object_row, obj)


def test_mixed_modes_many():
    rng = np.random.default_rng(2)
    blobs, exp = [], []
    for _ in range(3000):
        nb = int(rng.integers(0, 4))
        lists = [
            rng.integers(0, 30, rng.integers(1, 4)) if rng.random() < 0.5 else np.arange(3, 3 + rng.integers(1, 5))
            for _b in range(nb)
        ]
        blobs.append(encode_manifest(rng.integers(0, 4, (nb, 3)), lists))
        exp.append([int(f) for lst in lists for f in lst])
    t = decode_manifests(blobs, 3)
    off = t.object_offsets
    for i, e in enumerate(exp):
        assert t.fragment[off[i] : off[i + 1]].tolist() == e


# -- validation -----------------------------------------------------------------


def _m0(nd=3):
    return encode_manifest([[1, 2, 3][:nd]], [[7]])


@pytest.mark.parametrize(
    "blob, msg",
    [
        (b"\x01\x00", "shorter than its u32 count"),
        (struct.pack("<I", 5) + b"\x00" * 40, "declares 5 blocks"),
        (struct.pack("<I", 0xFFFFFFFF), "declares 4294967295 blocks"),
        (_m0()[:-1], "truncated"),
        (_m0() + b"\x00", "trailing bytes"),
        (_m0()[:-9] + b"\x07" + _m0()[-8:], "unknown mode 7"),
        (_m0()[:-8] + struct.pack("<q", -2), "names fragment -2"),
        (struct.pack("<I", 1) + b"\x00" * 24 + b"\x02" + struct.pack("<I", 1000) + b"\x00" * 8, "overruns"),
        (struct.pack("<I", 1) + b"\x00" * 24 + b"\x01" + struct.pack("<qq", -1, 2), "range start -1"),
        (struct.pack("<I", 1) + b"\x00" * 24 + b"\x01" + struct.pack("<qq", 0, 1 << 40), "invalid"),
    ],
)
def test_decode_errors(blob, msg):
    with pytest.raises(FormatError, match=msg) as ei:
        decode_manifests([EMPTY_MANIFEST, blob], 3, key=KEY)
    assert KEY in str(ei.value) and "object row 1" in str(ei.value)


def test_range_expansion_is_bounded():
    blob = struct.pack("<I", 1) + b"\x00" * 24 + b"\x01" + struct.pack("<qq", 0, 1 << 31)
    with pytest.raises(FormatError, match="max_refs"):
        decode_manifests([blob], 3, key=KEY)
    small = struct.pack("<I", 1) + b"\x00" * 24 + b"\x01" + struct.pack("<qq", 0, 1000)
    assert len(decode_manifests([small], 3, max_refs=1000)) == 1000
    with pytest.raises(FormatError):
        decode_manifests([small], 3, max_refs=999)


def test_encode_validation():
    with pytest.raises(InvalidArgumentError):
        encode_manifests([1, 0], [[0], [0]], [0, 0], 2)  # not grouped
    with pytest.raises(InvalidArgumentError):
        encode_manifests([0], [[0]], [-1], 1)
    with pytest.raises(InvalidArgumentError):
        encode_manifests([3], [[0]], [0], 2)
    with pytest.raises(InvalidArgumentError):
        encode_manifest([[0, 0]], [[-1]])
    assert encode_manifest(np.zeros((0, 3)), []) == EMPTY_MANIFEST
    assert encode_manifests([], np.zeros((0, 2)), [], 2) == [EMPTY_MANIFEST] * 2


def test_concat_renumbers_object_rows():
    rng = np.random.default_rng(5)
    nb = rng.integers(0, 4, 50)
    obj = np.repeat(np.arange(50), nb)
    coords, frag = rng.integers(0, 9, (obj.size, 2)), rng.integers(0, 30, obj.size)
    blobs = encode_manifests(obj, coords, frag, 50)
    whole = decode_manifests(blobs, 2)
    joined = ManifestTable.concat([decode_manifests(blobs[a:b], 2) for a, b in ((0, 7), (7, 7), (7, 31), (31, 50))])
    for name in ("object_row", "block", "coords", "fragment"):
        assert np.array_equal(getattr(joined, name), getattr(whole, name))
    assert joined.num_objects == 50
