"""sharding_indexed shards against points3d_sharded_zstd and zarr-python itself."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.shard import (
    EMPTY,
    crc32c,
    decode_shard_index,
    encode_shard,
    encode_shard_index,
    index_nbytes,
    inner_index,
    morton_order,
    shard_coords,
)

KEY = "0/vertices/c/1/1/1"


def _sharded(ref_arrays):
    arrs = [a for a in ref_arrays if a.meta["codecs"][0]["name"] == "sharding_indexed"]
    if not arrs:
        pytest.skip("no sharded fixture arrays")
    return arrs


def test_fixture_shards(ref_arrays):
    n = 0
    for arr in _sharded(ref_arrays):
        shape = tuple(arr.meta["chunk_grid"]["configuration"]["chunk_shape"])
        n_inner = int(np.prod(shape))
        for rel, raw in arr.objects.items():
            sc = np.array([int(x) for x in rel.split("/")[1:]])
            off, nb = decode_shard_index(raw, n_inner, key=f"{arr.name}/{rel}")
            # the index alone decodes the same, with the shard size given separately
            off2, nb2 = decode_shard_index(raw[-index_nbytes(n_inner) :], n_inner, shard_size=len(raw))
            assert np.array_equal(off, off2) and np.array_equal(nb, nb2)
            inner = {}
            for i in range(n_inner):
                if off[i] == EMPTY:
                    continue
                cc = tuple((sc * shape + np.unravel_index(i, shape)).tolist())
                assert inner_index(cc, shape) == i and tuple(shard_coords(cc, shape)) == tuple(sc)
                chunk = raw[int(off[i]) : int(off[i] + nb[i])]
                assert chunk == arr.shard_inner[cc]
                inner[i] = chunk
            # zarr lays inner chunks out in Morton order; we reproduce the object exactly
            assert encode_shard(inner, n_inner, inner_shape=shape) == raw
            n += 1
    assert n > 0


def test_morton_matches_zarr():
    idx = pytest.importorskip("zarr.core.indexing")
    for shape in [(2, 2, 2), (4, 4, 4), (3, 5), (1, 8), (2, 3, 4), (7,), (1, 1, 1)]:
        want = [int(np.ravel_multi_index(c, shape)) for c in idx.morton_order_iter(shape)]
        assert morton_order(shape).tolist() == want


def test_same_bytes_as_zarr(tmp_path):
    """zarr-python writes a sharded vlen-bytes+zstd array; our shard is byte-identical and reads back."""
    zarr = pytest.importorskip("zarr")
    import json
    import warnings

    from zarr.codecs import VLenBytesCodec, ZstdCodec

    from zvf.format.codecs import CellCodec

    warnings.filterwarnings("ignore")
    path = tmp_path / "a.zarr"
    a = zarr.create_array(
        str(path), shape=(4, 4), chunks=(1, 1), shards=(2, 2), dtype="bytes", serializer=VLenBytesCodec(),
        compressors=[ZstdCodec(level=0, checksum=False)], fill_value=b"",
    )
    cc = CellCodec.for_writing("zstd", (2, 2))
    assert json.loads((path / "zarr.json").read_text())["codecs"] == cc.codecs_json()
    vals = np.empty((2, 2), dtype=object)
    vals[:] = [[b"alpha", b""], [b"gamma", b"delta\x01"]]
    a[2:4, 0:2] = vals
    theirs = (path / "c" / "1" / "0").read_bytes()
    payloads = {0: b"alpha", 2: b"gamma", 3: b"delta\x01"}
    ours = encode_shard({i: cc.encode(p) for i, p in payloads.items()}, 4, inner_shape=(2, 2))
    assert ours == theirs
    (path / "c" / "1" / "0").write_bytes(ours)
    got = zarr.open_array(str(path), mode="r")[2:4, 0:2]
    assert bytes(got[0, 0]) == b"alpha" and bytes(got[1, 0]) == b"gamma"


def test_round_trip_and_empty():
    assert encode_shard({}, 8) is None
    assert encode_shard({0: None, 1: b""}, 8) is None
    shard = encode_shard({5: b"xyz", 1: b"ab"}, 8)
    assert shard[:5] == b"abxyz"  # index order without inner_shape
    off, nb = decode_shard_index(shard, 8, key=KEY)
    assert off[1] == 0 and nb[1] == 2 and off[5] == 2 and nb[5] == 3
    assert np.all(off[[0, 2, 3, 4, 6, 7]] == EMPTY) and np.all(nb[[0, 2, 3, 4, 6, 7]] == EMPTY)
    start = encode_shard({5: b"xyz", 1: b"ab"}, 8, location="start")
    off, nb = decode_shard_index(start, 8, location="start")
    assert start[int(off[5]) : int(off[5] + nb[5])] == b"xyz"
    with pytest.raises(InvalidArgumentError):
        encode_shard({8: b"x"}, 8)


def test_index_layout():
    idx = encode_shard_index([0, EMPTY], [3, EMPTY])
    assert len(idx) == index_nbytes(2) == 36
    assert idx[:16] == struct.pack("<QQ", 0, 3) and idx[16:32] == b"\xff" * 16
    assert idx[32:] == struct.pack("<I", crc32c(idx[:32]))


def test_errors():
    shard = encode_shard({0: b"abc", 1: b"de"}, 2)
    with pytest.raises(FormatError, match="checksum mismatch") as ei:
        decode_shard_index(shard[:-1] + bytes([shard[-1] ^ 1]), 2, key=KEY)
    assert KEY in str(ei.value)
    with pytest.raises(FormatError, match="needs 36 bytes"):
        decode_shard_index(shard[:20], 2, key=KEY)
    # entry past the data region (shard size known)
    idx = encode_shard_index([0, 3], [3, 5])
    with pytest.raises(FormatError, match=r"entry 1 \[3, 8\) lies outside"):
        decode_shard_index(idx, 2, key=KEY, shard_size=5 + len(idx))
    assert decode_shard_index(idx, 2, key=KEY, shard_size=8 + len(idx))[1].tolist() == [3, 5]
    # half-empty entries and absurd values
    with pytest.raises(FormatError, match="half empty"):
        decode_shard_index(encode_shard_index([EMPTY, 0], [0, 1]), 2, key=KEY)
    with pytest.raises(FormatError, match="out of range"):
        decode_shard_index(encode_shard_index([2**63, 0], [1, 1]), 2, key=KEY)
