"""Rechunk / recompress / reshard: the copy reads exactly as the source."""

from __future__ import annotations

import numpy as np
import pytest

import zvf.aio as za
from zvf.config import DEFAULTS, tuned
from zvf.errors import InvalidArgumentError


def _sorted(sel):
    cols = [sel.positions] + [sel.attributes[k].reshape(len(sel), -1) for k in sorted(sel.attributes)]
    if sel.object_ids is not None:
        cols.append(sel.object_ids[:, None])
    rows = np.concatenate([c.astype(np.float64) for c in cols], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


async def test_points_round_trip_with_tables(tmp_path):
    rng = np.random.default_rng(0)
    pos = rng.uniform(-5, 10, (1500, 3)).astype(np.float32)
    ids = rng.integers(0, 50, 1500)
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    await za.write_points(src, pos, chunk_shape=[5.0] * 3,
                          attributes={"a": rng.random(1500), "c": rng.random((1500, 2))},
                          object_ids=ids, object_attributes={"w": np.arange(50.0)}, groups={0: [1, 2], 3: [7]},
                          group_attributes={"g": np.arange(4.0)})
    await za.rechunk(src, dst, chunk_shape=[3.0] * 3, compression="zstd", shard_shape=[2, 2, 2], batch_chunks=3)
    a, b = await za.open(src), await za.open(dst)
    assert b.chunk_shape == (3.0,) * 3
    assert np.array_equal(_sorted(await a.read_all()), _sorted(await b.read_all()))
    assert np.array_equal(await a.object_ids(), await b.object_ids())
    assert np.array_equal(await a.object_attribute("w"), await b.object_attribute("w"))
    assert [g.tolist() for g in await a.groups()] == [g.tolist() for g in await b.groups()]
    assert np.array_equal(await a.group_attribute("g"), await b.group_attribute("g"))
    for oid in (0, 17, 49):
        ra, rb = await a.read_object(oid), await b.read_object(oid)
        assert np.array_equal(_sorted(ra), _sorted(rb))
    lv = await b.level(0)
    assert lv.array("vertices").codec.shard == (2, 2, 2) and lv.array("vertices").codec.compressors


async def test_auto_and_recompress_keep_points(tmp_path):
    pos = np.random.default_rng(1).uniform(0, 20, (3000, 2)).astype(np.float32)
    src = str(tmp_path / "s")
    await za.write_points(src, pos, chunk_shape=[1.0, 1.0], compression="zstd")
    await za.rechunk(src, str(tmp_path / "auto"), chunk_shape="auto")
    await za.rechunk(src, str(tmp_path / "raw"), compression=None)
    for name in ("auto", "raw"):
        b = await za.open(str(tmp_path / name))
        assert np.array_equal(_sorted(await b.read_all()), _sorted(await (await za.open(src)).read_all()))
    assert (await za.open(str(tmp_path / "auto"))).chunk_shape[0] >= 10
    assert not (await (await za.open(str(tmp_path / "raw"))).level(0)).array("vertices").codec.compressors


async def test_polylines_and_mesh_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    lines = [rng.uniform(0, 10, (int(k), 3)).astype(np.float32) for k in rng.integers(2, 40, 12)]
    src, dst = str(tmp_path / "l"), str(tmp_path / "l2")
    await za.write_polylines(src, lines, chunk_shape=[3.0] * 3, attributes={"t": [np.arange(len(p)) for p in lines]},
                             object_attributes={"len": np.array([len(p) for p in lines], float)}, groups={0: [1, 5]})
    await za.rechunk(src, dst, chunk_shape=[7.0] * 3)
    a, b = await za.open(src), await za.open(dst)
    for ra, rb in zip(await a.read_objects(range(12)), await b.read_objects(range(12))):
        assert np.array_equal(ra.positions, rb.positions) and np.array_equal(ra.attributes["t"], rb.attributes["t"])
    assert np.array_equal(await a.object_attribute("len"), await b.object_attribute("len"))
    assert [g.tolist() for g in await b.groups()] == [[1, 5]]

    verts = rng.uniform(0, 10, (60, 3)).astype(np.float32)
    faces = rng.integers(0, 60, (80, 3))
    await za.write_mesh(str(tmp_path / "m"), verts, faces, chunk_shape=[4.0] * 3, object_ids=np.arange(60) // 30)
    await za.rechunk(str(tmp_path / "m"), str(tmp_path / "m2"), chunk_shape=[6.0] * 3)
    for oid in (0, 1):
        ra = await (await za.open(str(tmp_path / "m"))).read_object(oid)
        rb = await (await za.open(str(tmp_path / "m2"))).read_object(oid)
        fa = {tuple(map(tuple, ra.positions[f])) for f in ra.faces}
        fb = {tuple(map(tuple, rb.positions[f])) for f in rb.faces}
        assert fa == fb and len(fa)


def _edge_rows(sel) -> list:
    """Each edge/face as its vertices' coordinates (+ link attributes): independent of vertex order."""
    links = getattr(sel, "edges", None)
    if links is None:
        links = sel.faces
    extra = [np.asarray(sel.link_attributes[k]).reshape(len(links), -1) for k in sorted(sel.link_attributes)]
    return sorted(tuple(sel.positions[row].ravel().tolist()) + tuple(np.concatenate([e[i] for e in extra]).tolist()
                                                                      if extra else ())
                  for i, row in enumerate(links))


async def _same_objects(src: str, dst: str, ordered: bool) -> None:
    """Every object of ``dst`` reads as the one of ``src``: vertices (in order for paths, as a set for
    graphs, whose order follows the chunks), attributes, edges/faces and link attributes."""
    a, b = await za.open(src), await za.open(dst)
    ids = await a.object_ids()
    assert np.array_equal(ids, await b.object_ids())
    for ra, rb in zip(await a.read_objects(ids), await b.read_objects(ids)):
        assert ra.attributes.keys() == rb.attributes.keys()
        if ordered:
            assert np.array_equal(ra.positions, rb.positions)
            for k in ra.attributes:
                assert np.array_equal(ra.attributes[k], rb.attributes[k])
        else:
            assert np.array_equal(_sorted(ra), _sorted(rb))
            assert _edge_rows(ra) == _edge_rows(rb) and len(_edge_rows(ra))


@pytest.mark.parametrize("big", [False, True], ids=["sweep", "by-ids"])
@pytest.mark.parametrize("geometry", ["line", "graph", "skeleton", "streamline"])
async def test_objects_stream_through_in_batches(tmp_path, monkeypatch, geometry, big):
    rng = np.random.default_rng(5)
    src, dst = str(tmp_path / "s"), str(tmp_path / "d")
    if geometry == "line":
        ends = rng.uniform(0, 10, (40, 2, 3))
        await za.write_lines(src, ends, chunk_shape=[3.0] * 3, attributes={"w": rng.random((40, 2))})
    elif geometry == "streamline":
        lines = [rng.uniform(0, 10, (int(k), 3)) for k in rng.integers(2, 30, 30)]
        await za.write_polylines(src, lines, chunk_shape=[3.0] * 3, geometry_type="streamline")
    else:
        n = 90
        pos = rng.uniform(0, 10, (n, 3))
        oids = np.arange(n) // 10
        # a chain per object (valid skeleton trees and graphs alike), parent = previous vertex
        child = np.flatnonzero(np.arange(n) % 10)
        edges = np.stack([child, child - 1], axis=1)
        await za.write_graph(src, pos, edges, object_ids=oids, chunk_shape=[3.0] * 3, geometry_type=geometry,
                             link_attributes={"r": rng.random(len(edges))} if geometry == "graph" else None)
    # several batches, objects never split; big: a level over the sweep's cache, read by id batches instead
    with tuned(rewrite_object_batch=7, sweep_bytes=1 if big else DEFAULTS.sweep_bytes):
        await za.rechunk(src, dst, chunk_shape=[4.0] * 3, compression="zstd")
    await _same_objects(src, dst, ordered=geometry in ("line", "streamline"))
    assert (await za.open(dst)).chunk_shape == (4.0,) * 3


async def test_rechunk_errors(tmp_path):
    pos = np.random.default_rng(3).random((10, 3)).astype(np.float32)
    await za.write_points(str(tmp_path / "s"), pos, chunk_shape=[1.0] * 3)
    with pytest.raises(InvalidArgumentError, match="by_attribute"):
        await za.rechunk(str(tmp_path / "s"), str(tmp_path / "t"), by_attribute="kind")
    with pytest.raises(InvalidArgumentError, match="chunk_shape"):
        await za.rechunk(str(tmp_path / "s"), str(tmp_path / "t"), chunk_shape=[0.0] * 3)


def test_cli_rechunk(tmp_path, capsys):
    import zvf
    from zvf.cli.main import main

    pos = np.random.default_rng(4).random((500, 3)).astype(np.float32) * 10
    zvf.write_points(str(tmp_path / "s"), pos, chunk_shape=[2.0] * 3)
    assert main(["rechunk", str(tmp_path / "s"), str(tmp_path / "t"), "--chunk-shape", "5,5,5",
                 "--compression", "zstd"]) == 0
    assert "500 vertices" in capsys.readouterr().out
    assert zvf.open(str(tmp_path / "t")).chunk_shape == (5.0,) * 3
    cls = (pos[:, 0] > 5).astype(np.int32)
    zvf.write_points(str(tmp_path / "c"), pos, attributes={"cls": cls}, chunk_shape=[2.0] * 3)
    assert main(["rechunk", str(tmp_path / "c"), str(tmp_path / "u"), "--by-attribute", "cls", "-q"]) == 0
    with zvf.open(str(tmp_path / "u")) as ds:
        assert ds.select(where={"cls": 1}).count() == int(cls.sum())
