"""Attribute-chunked point clouds: ``write_points(..., chunk_by_attribute=)`` and ``rechunk(by_attribute=)``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf
import zvf.aio as za
from tests.support.store_tree import store_files
from zvf.errors import InvalidArgumentError


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(-12, 18, (n, 3)).astype(np.float32)
    cls = rng.choice(np.array([7, 2, 11], np.int32), n)
    return pos, cls, rng.random(n).astype(np.float32), rng.integers(0, 5, n)


def _rows(pos, *cols) -> np.ndarray:
    """Rows as sortable float64 records: compare reads as sets of rows."""
    m = np.concatenate([np.asarray(pos, np.float64)] + [np.asarray(c, np.float64).reshape(len(c), -1) for c in cols],
                       axis=1)
    return m[np.lexsort(m.T[::-1])]


@pytest.mark.parametrize("case", ["ids", "no_ids", "sharded"])
def test_same_bytes_as_reference(tmp_path, case):
    """The layout 0.9.2 writes: leading category axis, attribute not stored, per-object fragments."""
    ref = pytest.importorskip("zarr_vectors.types.points")
    pos, cls, w, oids = _data()
    kw: dict = {"object_ids": oids} if case == "ids" else {}
    if case == "sharded":
        kw["shard_shape"] = (1, 2, 2, 2)
    (tmp_path / "ref").mkdir()
    (tmp_path / "zvf").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.write_points(str(tmp_path / "ref" / "p.zv"), pos, chunk_shape=(10, 10, 10),
                         vertex_attributes={"cls": cls, "w": w}, chunk_by_attribute="cls", **kw)
    zvf.write_points(str(tmp_path / "zvf" / "p.zv"), pos, chunk_shape=(10, 10, 10), attributes={"cls": cls, "w": w},
                     chunk_by_attribute="cls", dtype="float32", object_index_layout="reference", **kw)
    a, b = store_files(tmp_path / "ref" / "p.zv"), store_files(tmp_path / "zvf" / "p.zv")
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k]] == []


async def test_reads_back_and_reference_reads_it(tmp_path):
    pos, cls, w, oids = _data(seed=1)
    path = str(tmp_path / "c.zv")
    s = await za.write_points(path, pos, chunk_shape=(10, 10, 10), attributes={"cls": cls, "w": w}, object_ids=oids,
                              chunk_by_attribute="cls", compression="zstd")
    assert s.vertex_count == len(pos) and s.object_count == len(np.unique(oids))
    async with await za.open(path) as ds:
        lv = await ds.level(0)
        assert lv.categories == (2, 7, 11) and lv.category_name == "cls"
        sel = await ds.read_all()
        assert np.array_equal(_rows(sel.positions, sel.attributes["cls"], sel.attributes["w"], sel.object_ids),
                              _rows(pos, cls, w, oids))
        got = await ds.select(where={"cls": 7}).read()
        assert np.array_equal(_rows(got.positions, got.attributes["w"]), _rows(pos[cls == 7], w[cls == 7]))
        lo, hi = np.array([-5.0, -5, -5]), np.array([9.0, 9, 9])
        got = await ds.query((lo, hi), categories=[2, 11])
        keep = np.all((pos >= lo) & (pos <= hi), axis=1) & np.isin(cls, [2, 11])
        assert np.array_equal(_rows(got.positions, got.object_ids), _rows(pos[keep], oids[keep]))
    assert (await za.validate(path, level=5)).ok
    zv = pytest.importorskip("zarr_vectors")
    from zarr_vectors.validate import validate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert validate(path, level=3).ok
        res = zv.open(path).select().read()
        assert np.array_equal(_rows(res.positions), _rows(pos))


async def test_rechunk_into_and_out_of_attribute_chunks(tmp_path):
    pos, cls, w, oids = _data(n=200, seed=2)
    src, cat, back = (str(tmp_path / n) for n in ("src", "cat", "back"))
    await za.write_points(src, pos, chunk_shape=[6.0] * 3, attributes={"cls": cls, "w": w}, object_ids=oids,
                          shard_shape=[2, 2, 2], groups={0: [1, 3]})
    await za.rechunk(src, cat, chunk_shape=[10.0] * 3, by_attribute="cls")
    async with await za.open(cat) as ds:
        assert (await ds.level(0)).categories == (2, 7, 11)
        sel = await ds.read_all()
        assert np.array_equal(_rows(sel.positions, sel.attributes["cls"], sel.attributes["w"], sel.object_ids),
                              _rows(pos, cls, w, oids))
        assert [g.tolist() for g in await ds.groups()] == [[1, 3]]
        assert (await ds.level(0)).array("vertices").codec.shard == (1, 2, 2, 2)
    await za.rechunk(cat, back, chunk_shape=[5.0] * 3)  # by_attribute None: spatial again, the attribute kept
    async with await za.open(back) as ds:
        assert (await ds.level(0)).categories is None
        sel = await ds.read_all()
        assert np.array_equal(_rows(sel.positions, sel.attributes["cls"], sel.attributes["w"], sel.object_ids),
                              _rows(pos, cls, w, oids))
        assert (await ds.level(0)).array("vertices").codec.shard == (2, 2, 2)


async def test_refusals(tmp_path):
    pos, _, w, _ = _data()
    with pytest.raises(InvalidArgumentError, match="chunk_by_attribute"):
        await za.write_points(str(tmp_path / "a"), [pos], chunk_shape=[10.0] * 3, chunk_by_attribute="cls")
    with pytest.raises(InvalidArgumentError, match="chunk_by_attribute='w'"):
        await za.write_points(str(tmp_path / "b"), pos, chunk_shape=[10.0] * 3, attributes={"w": w},
                              chunk_by_attribute="w")
    with pytest.raises(InvalidArgumentError, match="chunk_by_attribute='nope'"):
        await za.write_points(str(tmp_path / "c"), pos, chunk_shape=[10.0] * 3, attributes={"w": w},
                              chunk_by_attribute="nope")
    src = str(tmp_path / "s")
    await za.write_points(src, pos, chunk_shape=[10.0] * 3, attributes={"w": w})
    with pytest.raises(InvalidArgumentError, match="chunk_by_attribute='cls'"):
        await za.rechunk(src, str(tmp_path / "d"), by_attribute="cls")
    lines = str(tmp_path / "l")
    await za.write_polylines(lines, [pos[:5], pos[5:9]], chunk_shape=[10.0] * 3)
    with pytest.raises(InvalidArgumentError, match="by_attribute"):
        await za.rechunk(lines, str(tmp_path / "e"), by_attribute="cls")
