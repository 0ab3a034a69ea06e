"""The v1 fragment index: fixture bytes, the 0.9.2 encoder as oracle, gather/spans, validation."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from tests.support.ref_arrays import ref_by_kind, vertex_rows
from zvf.errors import FormatError, InvalidArgumentError, MissingDataError
from zvf.format.fragments import FragmentIndex, decode_fragment_index, encode_fragment_index, tiling_counts

KEY = "0/vertex_fragments/c/0/0/1"


def _oracle():
    warnings.filterwarnings("ignore")
    return pytest.importorskip("zarr_vectors.encoding.fragments")


def _header(f, r, magic=0x5A564647, version=1, flags=0):
    return struct.pack("<IHHII", magic, version, flags, f, r)


# -- fixtures ------------------------------------------------------------------


def test_fixture_blobs_round_trip(ref_arrays):
    n = 0
    for arr in ref_by_kind(ref_arrays, "vertex_fragments") + ref_by_kind(ref_arrays, "link_fragments"):
        level = arr.path.split("/")[0]
        for coords, items in arr.cells.items():
            blob = items[0]
            assert blob[:4] == b"GFVZ"
            nr = vertex_rows(ref_arrays, arr.store, level, coords) if arr.path.endswith("vertex_fragments") else None
            fi = decode_fragment_index(blob, key=f"{arr.name}/{coords}", n_rows=nr)
            assert encode_fragment_index(fi) == blob
            if nr is not None and arr.store.startswith("points"):
                # point clouds: one range per bin, tiling the chunk's rows
                assert fi.tiles(nr)
            n += 1
    assert n > 50


def test_fixture_all_range_layout(ref_arrays):
    """E = 0 still writes explicit_offsets = [0]: 16 + pad8(ceil(F/8)) + 16R + 4 bytes."""
    for arr in ref_by_kind(ref_arrays, "vertex_fragments"):
        for items in arr.cells.values():
            blob = items[0]
            f, r = struct.unpack_from("<II", blob, 8)
            assert f == r
            assert len(blob) == 16 + (((f + 7) // 8 + 7) & ~7) + 16 * r + 4
            assert blob[-4:] == b"\x00\x00\x00\x00"


# -- oracle ------------------------------------------------------------------------


def _random_fragments(rng, f):
    frs = []
    for _ in range(f):
        k = rng.integers(0, 4)
        if k == 0:
            frs.append((int(rng.integers(0, 50)), int(rng.integers(0, 5))))
        elif k == 1:
            s = int(rng.integers(0, 50))
            frs.append(np.arange(s, s + rng.integers(0, 5)))
        else:
            frs.append(rng.integers(0, 60, rng.integers(0, 6)))
    return frs


def test_matches_reference_encoder():
    ref = _oracle()
    rng = np.random.default_rng(7)
    for _ in range(200):
        frs = _random_fragments(rng, int(rng.integers(0, 21)))
        want = ref.encode_fragments(frs)
        fi = FragmentIndex.from_lists(frs)
        assert encode_fragment_index(fi) == want
        back = decode_fragment_index(want)
        assert back.equals(fi)
        dec = ref.decode_fragments(want)
        for f in range(len(frs)):
            rows, lens = back.gather([f])
            if dec.is_range(f):
                s, c = dec.range(f)
                exp = np.arange(s, s + c)
            else:
                exp = dec.indices(f)
            assert np.array_equal(rows, exp) and lens[0] == exp.size
        # force_explicit: arrays stay explicit, tuples stay ranges
        want_x = ref.encode_fragments(frs, force_explicit=True)
        assert encode_fragment_index(FragmentIndex.from_lists(frs, detect_ranges=False)) == want_x


def test_reference_reads_explicit_index():
    ref = _oracle()
    fi = FragmentIndex.from_lists([np.array([3, 1, 1]), None, np.array([], np.int64), (7, 2)],
                                  starts=[0, 4], counts=[0, 3])
    dec = ref.decode_fragments(encode_fragment_index(fi))
    assert dec.num_fragments == 4
    assert list(dec.indices(0)) == [3, 1, 1] and dec.range(1) == (4, 3)
    assert list(dec.indices(2)) == [] and dec.range(3) == (7, 2)


# -- construction / queries ---------------------------------------------------------------


def test_empty_index():
    fi = FragmentIndex.from_ranges([], [])
    blob = encode_fragment_index(fi)
    assert blob == _header(0, 0)  # 0.9.2 writes the header alone
    assert decode_fragment_index(blob).num_fragments == 0
    assert decode_fragment_index(blob + b"\x00" * 4).num_fragments == 0  # seed form with offsets [0]
    assert fi.max_row() == -1
    rows, lens = fi.gather(np.zeros(0, np.int64))
    assert rows.size == 0 and lens.size == 0


def test_gather_mixed():
    fi = FragmentIndex.from_lists([(0, 3), np.array([9, 2, 9]), (3, 0), np.array([5, 6, 7])], detect_ranges=True)
    assert fi.is_range.tolist() == [True, False, True, True]
    rows, lens = fi.gather([1, 0, 1, 2, 3])
    assert rows.tolist() == [9, 2, 9, 0, 1, 2, 9, 2, 9, 5, 6, 7]
    assert lens.tolist() == [3, 3, 3, 0, 3]
    assert fi.max_row() == 9
    s, e = fi.spans([0, 1, 3])
    assert list(zip(s.tolist(), e.tolist())) == [(0, 3), (5, 8), (9, 10)]
    s, e = fi.spans([3, 1])
    assert list(zip(s.tolist(), e.tolist())) == [(2, 3), (5, 8), (9, 10)]


def test_gather_matches_naive():
    rng = np.random.default_rng(3)
    for _ in range(50):
        frs = _random_fragments(rng, int(rng.integers(1, 30)))
        fi = FragmentIndex.from_lists(frs)
        ids = rng.integers(0, len(frs), rng.integers(0, 40))
        rows, lens = fi.gather(ids)
        naive = [np.arange(f[0], f[0] + f[1]) if isinstance(f, tuple) else np.asarray(f) for f in frs]
        exp = np.concatenate([naive[i] for i in ids] + [np.zeros(0, np.int64)])
        assert np.array_equal(rows, exp)
        assert lens.tolist() == [naive[i].size for i in ids]
        s, e = fi.spans(ids)
        covered = np.zeros(200, bool)
        for a, b in zip(s, e):
            covered[a:b] = True
        want = np.zeros(200, bool)
        want[exp] = True
        assert np.array_equal(covered, want)
        assert np.all(s[1:] > e[:-1])  # merged: disjoint and not touching


def test_gather_bad_id():
    fi = FragmentIndex.from_ranges([0], [2])
    with pytest.raises(MissingDataError, match="fragment 1 requested but the chunk has 1"):
        fi.gather([1], key=KEY)
    with pytest.raises(MissingDataError):
        fi.gather([-1])


def test_from_csr_detects_ranges_like_reference():
    fi = FragmentIndex.from_csr([0, 3, 3, 4, 6], [4, 5, 6, 2, 8, 7])
    # arange -> range; empty stays explicit; single row -> range; descending -> explicit
    assert fi.is_range.tolist() == [True, False, True, False]
    assert fi.starts.tolist() == [4, 0, 2, 0] and fi.counts.tolist() == [3, 0, 1, 2]
    assert fi.explicit_indices.tolist() == [8, 7]


def test_constructor_validation():
    with pytest.raises(InvalidArgumentError):
        FragmentIndex.from_ranges([0, 1], [1])
    with pytest.raises(InvalidArgumentError):
        FragmentIndex.from_ranges([-1], [1])
    with pytest.raises(InvalidArgumentError):
        FragmentIndex(np.array([False]), [0], [2], [0, 1], [5])
    with pytest.raises(InvalidArgumentError):
        FragmentIndex.from_lists([None])


# -- decode validation ------------------------------------------------------------------------


def _valid_mixed():
    return encode_fragment_index(FragmentIndex.from_lists([(0, 4), np.array([7, 1]), (4, 3)]))


@pytest.mark.parametrize(
    "mutate, msg",
    [
        (lambda b: b"XXXX" + b[4:], "not a fragment index"),
        (lambda b: b[:4] + struct.pack("<H", 2) + b[6:], "version 2"),
        (lambda b: b[:6] + struct.pack("<H", 1) + b[8:], "flags"),
        (lambda b: b[:8] + struct.pack("<II", 3, 4) + b[16:], "declares 4 range fragments but only 3"),
        (lambda b: b[:8] + struct.pack("<II", 3, 3) + b[16:], "bitmap marks 2 ranges"),
        (lambda b: b[:10], "shorter than its 16-byte header"),
        (lambda b: b[:30], "needing at least"),
        (lambda b: b[:-1], "explicit rows"),
        (lambda b: b + b"\x00", "explicit rows"),
        (lambda b: b[:8] + struct.pack("<I", 0xFFFFFFFF) + b[12:], "needing at least"),
    ],
)
def test_decode_errors(mutate, msg):
    blob = mutate(_valid_mixed())
    with pytest.raises(FormatError, match=msg) as ei:
        decode_fragment_index(blob, key=KEY)
    assert KEY in str(ei.value)


def test_huge_counts_do_not_allocate():
    # F = R = 2^32 - 1 in a 40-byte blob: rejected from the header arithmetic alone
    blob = _header(0xFFFFFFFF, 0xFFFFFFFF) + b"\xff" * 24
    with pytest.raises(FormatError, match="needing at least"):
        decode_fragment_index(blob, key=KEY)
    # explicit T huge: offsets claim 2^32-1 rows
    fi = FragmentIndex.from_lists([np.array([5, 3])])
    blob = bytearray(encode_fragment_index(fi))
    off_pos = 16 + 8 + 4
    blob[off_pos : off_pos + 4] = struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(FormatError, match="declares 4294967295 explicit rows"):
        decode_fragment_index(bytes(blob), key=KEY)


def test_range_past_end_message():
    fi = FragmentIndex.from_ranges([0, 10, 20, 40], [10, 10, 20, 12])
    blob = encode_fragment_index(fi)
    with pytest.raises(FormatError) as ei:
        decode_fragment_index(blob, key="0/vertex_fragments/c/0/0/1", n_rows=45)
    assert str(ei.value) == "0/vertex_fragments/c/0/0/1: range fragment 3 [40, 52) past the chunk's 45 rows"
    assert decode_fragment_index(blob, n_rows=52).num_fragments == 4


def test_explicit_past_end_and_negative():
    fi = FragmentIndex.from_lists([(0, 2), np.array([1, 9, 3])])
    with pytest.raises(FormatError, match="explicit fragment 1 row 9 past the chunk's 5 rows"):
        decode_fragment_index(encode_fragment_index(fi), key=KEY, n_rows=5)
    blob = bytearray(encode_fragment_index(fi))
    blob[-8:] = struct.pack("<q", -3)
    with pytest.raises(FormatError, match="negative"):
        decode_fragment_index(bytes(blob), key=KEY)


def test_negative_range_and_bad_offsets():
    blob = bytearray(encode_fragment_index(FragmentIndex.from_ranges([1], [2])))
    blob[24:32] = struct.pack("<q", -1)
    with pytest.raises(FormatError, match="range fragment 0 has start -1"):
        decode_fragment_index(bytes(blob), key=KEY)
    fi = FragmentIndex.from_lists([np.array([4, 2]), np.array([9, 1])])
    blob = bytearray(encode_fragment_index(fi))
    # explicit_offsets [0, 2, 4] -> [1, 2, 4] and [0, 3, 2]
    pos = 16 + 8
    bad0 = blob[:pos] + struct.pack("<III", 1, 2, 4) + blob[pos + 12 :]
    with pytest.raises(FormatError, match=r"explicit_offsets\[0\] is 1"):
        decode_fragment_index(bytes(bad0), key=KEY)
    bad1 = blob[:pos] + struct.pack("<III", 0, 3, 2) + blob[pos + 12 :]
    with pytest.raises(FormatError, match="decrease"):
        decode_fragment_index(bytes(bad1), key=KEY)


def test_round_trip_large():
    rng = np.random.default_rng(11)
    counts = rng.integers(0, 20, 5000)
    starts = np.cumsum(counts) - counts
    fi = FragmentIndex.from_ranges(starts, counts)
    back = decode_fragment_index(encode_fragment_index(fi), n_rows=int(counts.sum()))
    assert back.equals(fi) and back.tiles(int(counts.sum()))
    rows, _lens = back.gather(np.arange(5000))
    assert np.array_equal(rows, np.arange(counts.sum()))


def test_gather_refuses_huge_expansion_without_n_rows():
    # a 44-byte blob claiming one range of 2^31 rows: decodes (fits a cell's row bound) ...
    blob = encode_fragment_index(FragmentIndex.from_ranges([0], [1 << 31]))
    fi = decode_fragment_index(blob, key=KEY)
    # ... but materializing it needs n_rows, which would have rejected it
    with pytest.raises(FormatError, match="decode the index with n_rows"):
        fi.gather([0], key=KEY)
    with pytest.raises(FormatError, match="past the chunk's 10 rows"):
        decode_fragment_index(blob, key=KEY, n_rows=10)
    s, e = fi.spans([0])  # spans never expand ranges
    assert s.tolist() == [0] and e.tolist() == [1 << 31]
    # beyond what any cell can hold: rejected outright
    with pytest.raises(FormatError, match="rows a cell can hold"):
        decode_fragment_index(encode_fragment_index(FragmentIndex.from_ranges([1 << 40], [1])), key=KEY)


def _fields(fi: FragmentIndex) -> list:
    return [fi.is_range, fi.starts, fi.counts, fi.explicit_offsets, fi.explicit_indices, fi._base, fi.n_rows]


@pytest.mark.parametrize("f", [1, 7, 8, 9, 64, 1001])
def test_all_range_fast_path_gives_the_full_parse(f):
    """All-range indexes (what writers produce) skip the general parser; what they decode to, and
    every defect's message, are the general parser's."""
    rng = np.random.default_rng(f)
    counts = rng.integers(0, 50, f)
    blob = encode_fragment_index(FragmentIndex.from_ranges(np.cumsum(counts) - counts, counts))
    n = int(counts.sum())
    for n_rows in (None, n):
        got = decode_fragment_index(blob, key=KEY, n_rows=n_rows)
        want = FragmentIndex(np.ones(f, bool), np.cumsum(counts) - counts, counts, n_rows=n_rows)
        for a, b in zip(_fields(got), _fields(want)):
            assert np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
        assert got.tiles(n)
    last = len(blob) - 4 - 16  # the last range's start
    bad = bytearray(blob)
    bad[last:last + 8] = struct.pack("<q", -1)
    with pytest.raises(FormatError, match="start -1"):
        decode_fragment_index(bytes(bad), key=KEY)
    bad = bytearray(blob)
    bad[last + 8:last + 16] = struct.pack("<q", n + 1)
    with pytest.raises(FormatError, match="past the chunk"):
        decode_fragment_index(bytes(bad), key=KEY, n_rows=n)
    bad = bytearray(blob)
    bad[16 + (f - 1) // 8] &= ~(1 << ((f - 1) % 8))  # the last fragment no longer marked a range
    with pytest.raises(FormatError, match="bitmap"):
        decode_fragment_index(bytes(bad), key=KEY)
    bad = bytearray(blob)
    bad[-4:] = struct.pack("<I", 1)
    with pytest.raises(FormatError, match="explicit_offsets"):
        decode_fragment_index(bytes(bad), key=KEY)


def test_tiling_counts_only_for_back_to_back_ranges():
    """Whole-chunk labelling needs only each fragment's row count, and only when the ranges tile the
    chunk in order; anything else is left to the full parser (None), never guessed."""
    counts = np.array([3, 0, 5, 2])
    starts = np.cumsum(counts) - counts
    blob = encode_fragment_index(FragmentIndex.from_ranges(starts, counts))
    got = tiling_counts(blob, 10)
    assert got is not None and got.tolist() == [3, 0, 5, 2] and got.dtype == np.int64
    assert tiling_counts(blob, 11) is None  # rows past the last fragment
    assert tiling_counts(blob, 9) is None
    gap = encode_fragment_index(FragmentIndex.from_ranges([0, 4], [3, 2]))
    assert tiling_counts(gap, 6) is None and tiling_counts(gap, 5) is None
    swapped = encode_fragment_index(FragmentIndex.from_ranges([2, 0], [3, 2]))
    assert tiling_counts(swapped, 5) is None
    explicit = encode_fragment_index(FragmentIndex.from_lists([[0, 1, 2], [4, 3]]))
    assert tiling_counts(explicit, 5) is None
    assert tiling_counts(encode_fragment_index(FragmentIndex.from_lists([])), 0) is None
    for bad in (blob[:-1], blob + b"\0", b"", blob[:15], b"XXXX" + blob[4:]):
        assert tiling_counts(bad, 10) is None
