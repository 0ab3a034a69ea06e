"""Object stores from many sources written on Dask workers: byte-identical to the serial write of the
concatenated batches, whatever the sources are (callables, delayed objects, bag partitions), with
cells spread over the workers for paths, a killed worker and a resumed job included."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import zvf
from tests.support.failing_sources import FailOnce, KillOnce
from tests.support.fragments import fragment_counts, fragment_table
from tests.support.object_batches import OPTS, graph_batches, kw_of
from tests.support.store_tree import tree
from zvf.errors import InvalidArgumentError

zvf_dask = pytest.importorskip("zvf.dask")  # needs the dask extra

KW = {"chunk_shape": [4.0, 4.0, 4.0], "compression": "zstd", "bounds": ([0.0] * 3, [12.0] * 3)}


def polylines_of(seed: int) -> dict:
    """One source's batch: a few streamlines with a per-vertex attribute (runs on a worker)."""
    rng = np.random.default_rng(seed)
    lines = [rng.uniform(0, 12, (int(k), 3)).astype(np.float32) for k in rng.integers(2, 25, 15)]
    return {"polylines": lines, "attributes": {"w": [rng.random(len(p)).astype(np.float32) for p in lines]}}


def mesh_of(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 12, (30, 3)).astype(np.float32)
    faces = np.array([[0, 1, 2], [2, 3, 4], [5, 6, 7], [10, 11, 12], [20, 21, 22]]) + rng.integers(0, 5)
    return {"positions": pos, "faces": faces, "object_ids": np.repeat([seed * 2, seed * 2 + 1], 15)}


def lines_of(seed: int) -> dict:
    """Line segments with endpoint and per-line attributes."""
    rng = np.random.default_rng(seed)
    ep = rng.uniform(0, 12, (40, 2, 3))
    return {"endpoints": ep, "attributes": {"c": rng.integers(0, 9, (40, 2)).astype(np.int16)},
            "object_attributes": {"len": np.linalg.norm(ep[:, 1] - ep[:, 0], axis=1)}}


def test_polylines_from_callables_are_the_serial_store(client, tmp_path):
    sources = [functools.partial(polylines_of, s) for s in range(7)]
    progress = []
    dask_store, serial_store = tmp_path / "d" / "store", tmp_path / "s" / "store"
    got = zvf_dask.write_polylines(str(dask_store), sources, client=client, rows_per_task=300,
                                   progress=progress.append, geometry_type="streamline", **KW)
    zvf.write_polylines(str(serial_store), [polylines_of(s) for s in range(7)], geometry_type="streamline", **KW)
    assert tree(dask_store) == tree(serial_store)
    cells = [p for p in progress if p["stage"] == "cells"]
    assert got.object_count == 105 and len(cells) == cells[-1]["total"] > 1  # cells spread over several tasks
    assert np.array_equal(zvf.open(str(dask_store)).read_object(20).positions, polylines_of(1)["polylines"][5])


@pytest.mark.parametrize("layout", [{"shard_shape": 2}, {"bin_shape": [2.0, 2.0, 2.0], "compression": "blosc"}])
def test_lines_with_attributes_sharded_or_binned(client, tmp_path, layout):
    kw = {**KW, **layout, "groups": {0: [0, 5, 70], 3: [2]}, "group_attributes": {"w": [0.5, 1.5, 2.5, 3.5]}}
    zvf_dask.write_lines(str(tmp_path / "d" / "store"), [functools.partial(lines_of, s) for s in range(5)],
                         client=client, rows_per_task=100, **kw)
    zvf.write_lines(str(tmp_path / "s" / "store"), [lines_of(s) for s in range(5)], **kw)
    assert tree(tmp_path / "d" / "store") == tree(tmp_path / "s" / "store")


def test_fragment_attributes_and_object_attributes_argument(client, tmp_path):
    batches = [polylines_of(s) for s in range(3)]
    kw = {**KW, "object_attributes": {"q": np.arange(45, dtype=np.float32)}, "shard_shape": 2}
    zvf.write_polylines(str(tmp_path / "probe"), batches, **kw)
    kw["fragment_attributes"] = fragment_table(fragment_counts(tmp_path / "probe"))
    zvf.write_polylines(str(tmp_path / "s" / "store"), batches, **kw)
    zvf_dask.write_polylines(str(tmp_path / "d" / "store"), batches, client=client, rows_per_task=200, **kw)
    assert tree(tmp_path / "d" / "store") == tree(tmp_path / "s" / "store")
    kw["fragment_attributes"] = {"f": {(9, 9, 9): [1.0]}}
    with pytest.raises(InvalidArgumentError, match=r"\(9, 9, 9\) holds no fragments"):
        zvf_dask.write_polylines(str(tmp_path / "e"), batches, client=client, **kw)


def test_killed_worker_still_gives_the_identical_store(client, tmp_path):
    batches = [polylines_of(s) for s in range(6)]
    sources = list(batches)
    sources[2] = KillOnce(str(tmp_path / "killed"), batches[2])
    zvf_dask.write_polylines(str(tmp_path / "d" / "store"), sources, client=client, rows_per_task=250, **KW)
    assert (tmp_path / "killed").exists()
    zvf.write_polylines(str(tmp_path / "s" / "store"), batches, **KW)
    assert tree(tmp_path / "d" / "store") == tree(tmp_path / "s" / "store")


def test_a_failed_object_job_resumes(client, tmp_path):
    batches = [lines_of(s) for s in range(4)]
    sources = list(batches)
    sources[3] = FailOnce(str(tmp_path / "failed"), batches[3])
    target = str(tmp_path / "d" / "store")
    with pytest.raises(RuntimeError, match="source unavailable"):
        zvf_dask.write_lines(target, sources, job="nightly", client=client, **KW)
    with pytest.raises(InvalidArgumentError, match="other arguments"):
        zvf_dask.write_lines(target, sources, job="nightly", client=client, **{**KW, "compression": None})
    zvf_dask.write_lines(target, sources, job="nightly", client=client, **KW)
    zvf.write_lines(str(tmp_path / "s" / "store"), batches, **KW)
    assert tree(tmp_path / "s" / "store") == tree(target)


def test_sources_must_agree_as_batches_do(tmp_path):
    a, b = polylines_of(0), polylines_of(1)
    b64 = {"polylines": [p.astype(np.float64) for p in b["polylines"]], "attributes": b["attributes"]}
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\] positions"):
        zvf_dask.write_polylines(str(tmp_path / "x"), [a, b64], **KW)
    other = {"polylines": b["polylines"], "attributes": {"v": b["attributes"]["w"]}}
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\] has attributes"):
        zvf_dask.write_polylines(str(tmp_path / "y"), [a, other], **KW)
    with pytest.raises(InvalidArgumentError, match=r"sources\[0\]: batches\[0\]"):
        zvf_dask.write_polylines(str(tmp_path / "z"), [{"polylines": [np.zeros((3, 2))]}], **KW)


def test_meshes_from_a_bag_and_delayed_sources(client, tmp_path):
    import dask
    import dask.bag as db

    bag = db.from_sequence(range(6), npartitions=3).map(mesh_of)
    zvf_dask.write_mesh(str(tmp_path / "bag" / "store"), bag, client=client, **KW)
    delayed = [dask.delayed(mesh_of)(s) for s in range(6)]
    zvf_dask.write_mesh(str(tmp_path / "delayed" / "store"), delayed, **KW)  # Dask's local scheduler
    zvf.write_mesh(str(tmp_path / "s" / "store"), [mesh_of(s) for s in range(6)], **KW)
    assert tree(tmp_path / "bag" / "store") == tree(tmp_path / "s" / "store") == tree(tmp_path / "delayed" / "store")


@pytest.mark.parametrize("geometry", ["graph", "skeleton", "mesh"])
@pytest.mark.parametrize("opt", OPTS[1:], ids=["2d-zstd-sharded", "3d-zstd-sharded"])
def test_graphs_skeletons_meshes_cells_and_links_on_workers(client, tmp_path, geometry, opt):
    rng = np.random.default_rng(5)
    batches, cat = graph_batches(rng, [40, 0, 1, 33, 60, 25], opt["ndim"], skeleton=geometry == "skeleton",
                                 mesh=geometry == "mesh")
    uniq = np.unique(cat["oid"])
    kw = dict(kw_of(opt), object_attributes={"s": np.arange(len(uniq), dtype=np.float32)},
              groups=[uniq[:2].tolist(), uniq[-1:].tolist()])
    progress = []
    if geometry == "mesh":
        serial = zvf.write_mesh(tmp_path / "s" / "store", batches, **kw)
        got = zvf_dask.write_mesh(str(tmp_path / "d" / "store"), batches, client=client, rows_per_task=30,
                                  progress=progress.append, **kw)
    else:
        serial = zvf.write_graph(tmp_path / "s" / "store", batches, geometry_type=geometry, **kw)
        got = zvf_dask.write_graph(str(tmp_path / "d" / "store"), batches, geometry_type=geometry, client=client,
                                   rows_per_task=30, progress=progress.append, **kw)
    assert tree(tmp_path / "d" / "store") == tree(tmp_path / "s" / "store")
    for k in ("object_count", "vertex_count", "link_count", "stored_link_count", "fragment_count", "chunk_count",
              "cells_written", "bytes_written"):
        assert getattr(got, k) == getattr(serial, k), k
    links = [p for p in progress if p["stage"] == "links"]
    assert links[-1]["total"] > 1  # link cells spread over several tasks too


def test_connected_sources_must_agree(tmp_path):
    tree4 = {"positions": np.zeros((2, 3)), "edges": [[1, 0]], "object_ids": [4, 4]}
    with pytest.raises(InvalidArgumentError, match="object 4 holds more than one tree"):
        zvf_dask.write_graph(str(tmp_path / "a"), [tree4, {"positions": np.ones((1, 3)), "object_ids": [4]}],
                             geometry_type="skeleton", **KW)
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\]: either every source has 'object_ids'"):
        zvf_dask.write_graph(str(tmp_path / "b"), [tree4, {"positions": np.ones((1, 3))}], **KW)
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\]: faces have 4 vertices"):
        zvf_dask.write_mesh(str(tmp_path / "c"), [{"positions": np.zeros((4, 3)), "faces": [[0, 1, 2]]},
                                                  {"positions": np.zeros((4, 3)), "faces": [[0, 1, 2, 3]]}], **KW)


def test_object_sources_errors(tmp_path):
    with pytest.raises(InvalidArgumentError, match="sources must be"):
        zvf_dask.write_graph(str(tmp_path / "g"), "nope", **KW)
    with pytest.raises(InvalidArgumentError, match="nothing to write"):
        zvf_dask.write_lines(str(tmp_path / "g"), [], **KW)
    with pytest.raises(InvalidArgumentError, match="geometry_type"):
        zvf_dask.write_graph(str(tmp_path / "g"), [mesh_of(0)], geometry_type="mesh", **KW)
    with pytest.raises(InvalidArgumentError, match="rows_per_task"):
        zvf_dask.write_polylines(str(tmp_path / "g"), [polylines_of(0)], rows_per_task=0, **KW)
