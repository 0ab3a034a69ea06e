"""``fragment_attributes=`` on ``write_points`` (in memory and from batches): 0.9.2's bytes, read back
by ``ds.fragment_attribute``.  Fragments of a point cloud are the chunk's bins without object ids (empty
bins included), one per object in the chunk with them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf
from tests.support.cells import cell_payload, nonempty
from tests.support.store_tree import store_files
from zvf.errors import InvalidArgumentError
from zvf.format.fragments import decode_fragment_index

CASES = {
    "bins": {"chunk_shape": (25.0,) * 3, "bin_shape": (12.5,) * 3, "compression": "zstd"},
    "one-bin-sharded": {"chunk_shape": (25.0,) * 3, "shard_shape": 2},
    "objects": {"chunk_shape": (50.0,) * 3, "bin_shape": (25.0,) * 3, "ids": True},
}


def _input(case: str):
    rng = np.random.default_rng(4)
    pos = rng.uniform(0, 100, (3000, 3)).astype(np.float32)
    kw = dict(CASES[case])
    oids = rng.integers(0, 40, len(pos)) if kw.pop("ids", False) else None
    return pos, kw, oids


def _table(root) -> dict:
    rng = np.random.default_rng(1)
    counts = {c: len(decode_fragment_index(cell_payload(root, "0/vertex_fragments", c)).counts)
              for c in nonempty(root, "0/vertex_fragments")}
    chunks = sorted(counts)
    return {"w": {c: rng.random(counts[c]).astype(np.float32) for c in chunks},
            "pair": {c: rng.integers(-9, 9, (counts[c], 2)).astype(np.int16) for c in chunks[::3]}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_points_take_fragment_attributes(tmp_path, case):
    from zarr_vectors import building

    pos, kw, oids = _input(case)
    ids = {} if oids is None else {"object_ids": oids}
    zvf.write_points(tmp_path / "probe", pos, **kw, **ids, dtype="float32")
    table = _table(tmp_path / "probe")
    mem, streamed, same, ref = (tmp_path / k / "p.zarrvectors" for k in ("mem", "streamed", "same", "ref"))
    zvf.write_points(mem, pos, **kw, **ids, fragment_attributes=table)
    batches = [{"positions": pos[i:i + 700], **({} if oids is None else {"object_ids": oids[i:i + 700]})}
               for i in range(0, len(pos), 700)]
    zvf.write_points(streamed, iter(batches), **kw, fragment_attributes=table)
    assert store_files(mem) == store_files(streamed)
    zvf.write_points(same, pos, **kw, **ids, fragment_attributes=table, object_index_layout="reference")
    ref_kw = {("compressor" if k == "compression" else k): v for k, v in kw.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_points(str(ref), pos, **ref_kw, **ids, fragment_attributes=table)
    mine, theirs = store_files(same), store_files(ref)
    assert sorted(mine) == sorted(theirs)
    assert [k for k in theirs if mine[k] != theirs[k]] == []
    assert any(k.startswith("0/fragment_attributes/pair/") for k in theirs)
    with zvf.open(str(mem)) as ds:
        for name, per_chunk in table.items():
            got = ds.fragment_attribute(name)
            assert len(got) == sum(len(r) for r in per_chunk.values())
            for c, rows in per_chunk.items():
                sel = np.all(got.chunks == np.asarray(c), axis=1)
                assert np.array_equal(got.fragments[sel], np.arange(len(rows)))
                assert np.array_equal(got.values[sel].reshape(rows.shape), rows), (name, c)
        assert len(ds.read_all()) == len(pos)


@pytest.mark.parametrize("streamed", [False, True])
def test_bad_point_fragment_attributes_are_named(tmp_path, streamed):
    pos = np.array([[1.0, 1.0], [2.0, 2.0], [60.0, 3.0]])
    src = (lambda: iter([pos])) if streamed else (lambda: pos)
    for k, (bad, match) in enumerate([
            ({"w": {(0, 0): np.zeros(3)}}, r"\['w'\]\[\(0, 0\)\] has 3 rows but chunk \(0, 0\) has 4"),
            ({"w": {(5, 5): np.zeros(4)}}, r"chunk \(5, 5\) holds no fragments")]):
        with pytest.raises(InvalidArgumentError, match=match):
            zvf.write_points(tmp_path / str(k), src(), chunk_shape=(50, 50), bin_shape=(25, 25),
                             fragment_attributes=bad)
        assert not (tmp_path / str(k) / "zarr.json").exists()
    with pytest.raises(InvalidArgumentError, match="not supported with chunk_by_attribute"):
        zvf.write_points(tmp_path / "s", pos, chunk_shape=(50, 50), attributes={"c": np.array([0, 1, 1])},
                         chunk_by_attribute="c", fragment_attributes={"w": {(0, 0): np.zeros(1)}})
