"""Object stores from many sources loaded on Dask workers: byte-identical to the serial write of the
concatenated batches, whatever the sources are (callables, delayed objects, bag partitions)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError

from .conftest import tree

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


def test_polylines_from_callables_are_the_serial_store(client, tmp_path):
    sources = [functools.partial(polylines_of, s) for s in range(7)]
    progress = []
    dask_store, serial_store = tmp_path / "d" / "store", tmp_path / "s" / "store"
    got = zvf_dask.write_polylines(str(dask_store), sources, client=client, window=3, progress=progress.append,
                                   geometry_type="streamline", **KW)
    zvf.write_polylines(str(serial_store), [polylines_of(s) for s in range(7)], geometry_type="streamline", **KW)
    assert tree(dask_store) == tree(serial_store)
    assert got.object_count == 105 and progress[-1] == {"stage": "load", "done": 7, "total": 7}
    assert np.array_equal(zvf.open(str(dask_store)).read_object(20).positions, polylines_of(1)["polylines"][5])


def test_meshes_from_a_bag_and_delayed_sources(client, tmp_path):
    import dask
    import dask.bag as db

    bag = db.from_sequence(range(6), npartitions=3).map(mesh_of)
    zvf_dask.write_mesh(str(tmp_path / "bag" / "store"), bag, client=client, **KW)
    delayed = [dask.delayed(mesh_of)(s) for s in range(6)]
    zvf_dask.write_mesh(str(tmp_path / "delayed" / "store"), delayed, **KW)  # Dask's local scheduler
    zvf.write_mesh(str(tmp_path / "s" / "store"), [mesh_of(s) for s in range(6)], **KW)
    assert tree(tmp_path / "bag" / "store") == tree(tmp_path / "s" / "store") == tree(tmp_path / "delayed" / "store")


def test_object_sources_errors(tmp_path):
    with pytest.raises(InvalidArgumentError, match="sources must be"):
        zvf_dask.write_graph(str(tmp_path / "g"), "nope", **KW)
    with pytest.raises(InvalidArgumentError, match="nothing to write"):
        zvf_dask.write_lines(str(tmp_path / "g"), [], **KW)
    with pytest.raises(InvalidArgumentError, match="window"):
        zvf_dask.write_polylines(str(tmp_path / "g"), [polylines_of(0)], window=0, **KW)
