"""Regressions for the bugs the chain test (test_chains.py) found, each in its smallest form.

A test marked ``xfail(strict=True)`` fails today; whoever fixes the bug removes the mark (see
/tmp/zvf/stateful_findings.md while issue 23 is open)."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import ZvfError

CHUNK = [5.0, 5.0, 5.0]


def _inside(p, lo, hi):
    return ((p >= np.asarray(lo, float)) & (p <= np.asarray(hi, float))).all(axis=1)


def test_append_refuses_vertex_values_the_stored_dtype_cannot_hold(tmp_path):
    url = str(tmp_path / "s")
    zvf.write_points(url, np.zeros((2, 3), np.float32), chunk_shape=CHUNK,
                     attributes={"klass": np.array([1, 2], np.uint8)})
    with zvf.open(url, mode="a") as ds, pytest.raises(ZvfError, match="klass"):
        ds.append_points(np.ones((3, 3), np.float32), attributes={"klass": np.array([0.7, -1.0, 300.0])})
    with zvf.open(url) as ds:
        assert ds.read_all().attributes["klass"].tolist() == [1, 2]


def test_append_refuses_object_values_the_stored_dtype_cannot_hold(tmp_path):
    url = str(tmp_path / "s")
    zvf.write_polylines(url, [np.zeros((2, 3), np.float32)], chunk_shape=CHUNK,
                        object_attributes={"n": np.array([1], np.uint8)})
    with zvf.open(url, mode="a") as ds, pytest.raises(ZvfError, match="n"):
        ds.append_polylines([np.ones((2, 3), np.float32)], object_attributes={"n": np.array([300.5])})
    with zvf.open(url) as ds:
        assert ds.object_attribute("n").tolist() == [1]


def test_level_with_bins_straddling_chunks_answers_boxes(tmp_path):
    """Chunk scale 3 and coarsen 2 on 5-unit chunks: level 1 has 15-unit chunks and 10-unit bins."""
    url = str(tmp_path / "s")
    pts = (np.random.default_rng(0).integers(0, 21, (33, 3)) * 1.25).astype(np.float64)
    zvf.write_points(url, pts, chunk_shape=CHUNK)
    zvf.build_pyramid(url, [(2, 1)], chunk_scale_factors=[3])
    with zvf.open(url) as ds:
        level = ds.read_all(level=1).positions
        for batch in ds.iter_chunks(level=1, batch_chunks=1):  # one chunk per batch
            assert len(np.unique(np.floor(batch.positions / 15.0), axis=0)) == 1
        lo, hi = [15.0, 0.0, 0.0], [30.0, 30.0, 30.0]
        assert len(ds.query((lo, hi), level=1)) == _inside(level, lo, hi).sum()


def _two_objects():
    pos = np.random.default_rng(0).uniform(0, 10, (6, 3)).astype(np.float32)
    return pos, np.array([0, 0, 0, 7, 7, 7]), {"w": np.array([1.5, 2.5])}


def test_mesh_objects_survive_ply_round_trip(tmp_path):
    pytest.importorskip("plyfile")
    pos, oids, oattrs = _two_objects()
    zvf.write_mesh(str(tmp_path / "m"), pos, np.array([[0, 1, 2], [3, 4, 5]]), object_ids=oids, chunk_shape=CHUNK,
                   object_attributes=oattrs)
    zvf.convert(str(tmp_path / "m"), str(tmp_path / "m.ply"))
    zvf.convert(str(tmp_path / "m.ply"), str(tmp_path / "back"), chunk_shape=CHUNK)
    with zvf.open(str(tmp_path / "back")) as ds:
        assert ds.object_ids().tolist() == [0, 7]
        assert "object_id" not in ds.read_all().attributes
        assert ds.object_attribute("w").tolist() == [1.5, 2.5]


def test_graph_attributes_survive_graphml_round_trip_or_are_refused(tmp_path):
    pytest.importorskip("networkx")
    pos, oids, oattrs = _two_objects()
    rgb = np.arange(18, dtype=np.uint8).reshape(6, 3)
    zvf.write_graph(str(tmp_path / "g"), pos, np.array([[0, 1], [1, 2], [3, 4]]), object_ids=oids, chunk_shape=CHUNK,
                    attributes={"rgb": rgb}, object_attributes=oattrs)
    try:
        zvf.convert(str(tmp_path / "g"), str(tmp_path / "g.graphml"))
    except ZvfError as e:  # refusing, naming what cannot be written, is an answer too
        assert "rgb" in str(e) or "w" in str(e)
        return
    zvf.convert(str(tmp_path / "g.graphml"), str(tmp_path / "back"), chunk_shape=CHUNK)
    with zvf.open(str(tmp_path / "back")) as ds:
        back = ds.read_all()
        assert back.attributes["rgb"].shape == (6, 3)
        assert ds.object_attribute("w").tolist() == [1.5, 2.5]


def test_group_attributes_survive_trx_round_trip(tmp_path):
    pytest.importorskip("trx")
    lines = [np.random.default_rng(k).uniform(0, 10, (4, 3)).astype(np.float32) for k in range(3)]
    zvf.write_polylines(str(tmp_path / "s"), lines, geometry_type="streamline", chunk_shape=CHUNK,
                        groups={0: [0, 2]}, group_attributes={"g": np.array([4.5])})
    zvf.convert(str(tmp_path / "s"), str(tmp_path / "s.trx"))
    zvf.convert(str(tmp_path / "s.trx"), str(tmp_path / "back"), chunk_shape=CHUNK)
    with zvf.open(str(tmp_path / "back")) as ds:
        assert [g.tolist() for g in ds.groups()] == [[0, 2]]
        assert ds.group_attribute("g").tolist() == [4.5]


def test_coarse_level_whose_kept_objects_have_no_vertices(tmp_path):
    """Sparsity 3 kept one of three polylines, an empty one: the level had no vertex array and the build
    failed with a FormatError (the 44-minute chain run).  Now the level is there, empty, and reads so."""
    url = str(tmp_path / "s")
    lines = [np.zeros((0, 3), np.float32), np.array([[1, 1, 1], [2, 2, 2]], np.float32), np.zeros((0, 3), np.float32)]
    zvf.write_polylines(url, lines, chunk_shape=[2.5] * 3)
    zvf.build_pyramid(url, [(1, 3)], seed=0)
    with zvf.open(url) as ds:
        assert ds.select(level=1).count() == 0
        assert len(ds.read_all(level=1)) == 0 and len(ds.select(level=1).read()) == 0
        assert all(len(o) == 0 for o in ds.read_objects(ds.object_ids(level=1), level=1))
    assert zvf.validate(url, level=5).ok
