"""``fragment_attributes=`` on the object writers: 0.9.2's bytes, read back by zvf and by 0.9.2.

The per-chunk rows are built from the fragment count of each chunk of a first
zvf write (the fragments do not depend on the attributes), then the same input
is written by zarr-vectors 0.9.2 and by zvf in its reference spelling: the
stores must match file for file.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf
from tests.support.fragments import fragment_counts, fragment_table
from tests.support.object_cases import OPTIONS, make_case, write_three
from tests.support.store_tree import store_files
from zvf.errors import InvalidArgumentError

# 0.9.2 takes fragment_attributes on write_polylines and write_graph (graphs and skeletons)
CASES = [("polyline", "2d-raw-sharded"), ("streamline", "3d-zstd-sharded-finebins"),
         ("graph", "3d-blosc-chunkbins"), ("skeleton", "2d-zstd-finebins")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{g}-{o}" for g, o in CASES])
def written(request, tmp_path_factory):
    geometry, okey = request.param
    case = make_case(geometry, OPTIONS[okey], seed=3)
    base = tmp_path_factory.mktemp(f"fa-{geometry}")
    probe = base / "probe" / "s.zarrvectors"
    case.zvf_write(probe)
    table = fragment_table(fragment_counts(probe))
    case.kwargs["fragment_attributes"] = table
    return case, table, write_three(case, base, geometry)


def test_bytes_match_reference(written):
    _, _, paths = written
    mine, ref = store_files(paths["same"]), store_files(paths["ref"])
    assert sorted(mine) == sorted(ref), sorted(set(mine) ^ set(ref))[:6]
    differ = [k for k in ref if mine[k] != ref[k]]
    assert not differ, differ[:6]
    assert any(k.startswith("0/fragment_attributes/pair/") for k in ref)


def test_zvf_reads_every_row_and_per_object(written):
    _, table, paths = written
    with zvf.open(str(paths["mine"])) as ds:
        for name, per_chunk in table.items():
            got = ds.fragment_attribute(name)
            for c, rows in per_chunk.items():
                sel = np.all(got.chunks == np.asarray(c), axis=1)
                assert np.array_equal(got.values[sel].reshape(rows.shape), rows), (name, c)
        ids = ds.object_ids()
        per_obj = ds.fragment_attribute("weight", objects=ids[:3])
        for c, f, v in zip(per_obj.chunks.tolist(), per_obj.fragments.tolist(), per_obj.values.tolist()):
            assert table["weight"][tuple(c)][f] == np.float32(v)


def test_reference_reads_zvf_rows(written):
    from zarr_vectors.core.arrays import read_chunk_fragment_attributes
    from zarr_vectors.core.store import get_resolution_level, open_store

    _, table, paths = written
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = get_resolution_level(open_store(str(paths["mine"])), 0)
        for name, per_chunk in table.items():
            for c, rows in per_chunk.items():
                got = np.asarray(read_chunk_fragment_attributes(group, name, c))
                assert np.array_equal(got.reshape(rows.shape), rows), (name, c)


def test_mesh_and_lines_take_them_too(tmp_path):
    rng = np.random.default_rng(5)
    pos = rng.uniform(0, 100, (60, 3)).astype(np.float32)
    faces = rng.integers(0, 60, (30, 3))
    zvf.write_mesh(tmp_path / "probe", pos, faces, chunk_shape=(50, 50, 50))
    counts = fragment_counts(tmp_path / "probe")
    fa = {"q": {c: np.arange(k, dtype=np.float64) for c, k in counts.items()}}
    zvf.write_mesh(tmp_path / "m", pos, faces, chunk_shape=(50, 50, 50), fragment_attributes=fa)
    with zvf.open(str(tmp_path / "m")) as ds:
        assert len(ds.fragment_attribute("q")) == sum(counts.values())
    ep = rng.uniform(0, 100, (20, 2, 2)).astype(np.float32)
    zvf.write_lines(tmp_path / "lp", ep, chunk_shape=(50, 50))
    counts = fragment_counts(tmp_path / "lp")
    zvf.write_lines(tmp_path / "l", ep, chunk_shape=(50, 50),
                    fragment_attributes={"k": {c: np.ones(k, np.int32) for c, k in counts.items()}})
    with zvf.open(str(tmp_path / "l")) as ds:
        assert ds.fragment_attribute("k").values.sum() == sum(counts.values())


@pytest.mark.parametrize("bad, match", [
    ({"w": {(0, 0): np.zeros(99)}}, r"fragment_attributes\['w'\]\[\(0, 0\)\] has 99 rows but chunk \(0, 0\) has"),
    ({"w": {(7, 7): np.zeros(1)}}, r"fragment_attributes\['w'\]\[\(7, 7\)\]: chunk \(7, 7\) holds no fragments"),
    ({"w": {}}, r"fragment_attributes\['w'\] must be a non-empty"),
    ({"a/b": {(0, 0): np.zeros(1)}}, r"fragment attribute name 'a/b'"),
    ({"w": {(0,): np.zeros(1)}}, r"key \(0,\) must be a tuple of 2"),
    ({"w": {(0, 0): np.array(["x"])}}, r"fragment_attributes\['w'\]\[\(0, 0\)\] must be a numeric"),
    ({"w": {(0, 0): np.zeros(1), (0, 1): np.zeros((1, 2))}}, r"rows of shape \(2,\)"),
])
def test_bad_fragment_attributes_are_named(tmp_path, bad, match):
    pl = [np.array([[1.0, 1.0], [2.0, 2.0]]), np.array([[3.0, 60.0]])]
    with pytest.raises(InvalidArgumentError, match=match):
        zvf.write_polylines(tmp_path / "s", pl, chunk_shape=(50, 50), fragment_attributes=bad)
    assert not (tmp_path / "s" / "zarr.json").exists()
