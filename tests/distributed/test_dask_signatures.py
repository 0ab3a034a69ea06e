"""Issue 27: the Dask writers take exactly the serial writers' keywords; write_points' attributes= and
object_ids= are dask arrays row-aligned with the positions; an .npz source's unknown keys are an error;
a Dask export carries the objects and groups tables."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import zvf
from tests.support.store_tree import tree
from zvf.errors import InvalidArgumentError
from zvf.write import types
from zvf.write.objects import memory as serial_objects
from zvf.write.points import memory as serial_points

da = pytest.importorskip("dask.array")
zd = pytest.importorskip("zvf.dask")

DASK_ONLY = {"client", "job", "rows_per_task", "progress"}
WRITERS = ["write_points", "write_polylines", "write_lines", "write_graph", "write_mesh"]


def keywords(fn) -> set[str]:
    """Keyword-only parameters, plus the keys of the TypedDict a ``**options: Unpack[...]`` names."""
    out = set()
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY:
            out.add(p.name)
        elif p.kind is p.VAR_KEYWORD:
            typed = getattr(types, str(p.annotation).removeprefix("Unpack[").removesuffix("]"))
            out |= typed.__required_keys__ | typed.__optional_keys__
    return out


@pytest.mark.parametrize("name", WRITERS)
def test_dask_writers_take_the_serial_keywords(name):
    serial = getattr(serial_points if name == "write_points" else serial_objects, name)
    dask = getattr(zd, name)
    assert keywords(dask) - DASK_ONLY == keywords(serial), name
    assert keywords(dask) >= DASK_ONLY


def test_write_points_with_dask_attributes_and_ids_is_the_serial_store(tmp_path):
    rng = np.random.default_rng(4)
    n = 5000
    pos = rng.uniform(0, 100, (n, 3)).astype(np.float32)
    attrs = {"i": rng.integers(0, 9, n).astype(np.int32), "rgb": rng.integers(0, 255, (n, 3)).astype(np.uint8)}
    oids = np.repeat(np.arange(50), 100)
    zvf.write_points(str(tmp_path / "serial" / "s"), pos, chunk_shape=(25.0,) * 3, attributes=attrs, object_ids=oids)
    X = da.from_array(pos, chunks=(1200, 3))
    zd.write_points(str(tmp_path / "dask" / "s"), X, chunk_shape=(25.0,) * 3,
                    attributes={"i": da.from_array(attrs["i"], chunks=700), "rgb": attrs["rgb"]},
                    object_ids=da.from_array(oids, chunks=2000))
    assert tree(tmp_path / "dask" / "s") == tree(tmp_path / "serial" / "s")  # same bytes, names alike


def test_dask_writer_keyword_mistakes_are_named(tmp_path):
    X = da.zeros((10, 3), chunks=5)
    with pytest.raises(InvalidArgumentError, match=r"attributes\['i'\]: 9 rows, positions have 10"):
        zd.write_points(str(tmp_path / "a"), X, chunk_shape=(1.0,) * 3, attributes={"i": np.zeros(9)})
    with pytest.raises(InvalidArgumentError, match="go with a dask array of positions"):
        zd.write_points(str(tmp_path / "b"), ["x.npz"], chunk_shape=(1.0,) * 3, object_ids=np.zeros(3))
    with pytest.raises(InvalidArgumentError, match="chunk_by_attribute: not on Dask"):
        zd.write_points(str(tmp_path / "c"), X, chunk_shape=(1.0,) * 3, chunk_by_attribute="i")
    with pytest.raises(InvalidArgumentError, match="attributes: on Dask they go in each source's batches"):
        zd.write_polylines(str(tmp_path / "d"), [], chunk_shape=(1.0,) * 3, attributes={"fa": []})
    with pytest.raises(TypeError, match="chunk_shap"):  # an unknown keyword stays a TypeError (UnknownArgumentError)
        zd.write_polylines(str(tmp_path / "e"), [{"polylines": [np.zeros((2, 3))]}], chunk_shape=(1.0,) * 3,
                           chunk_shap=(1.0,) * 3)


def test_npz_source_with_unknown_keys_is_refused(tmp_path):
    np.savez(tmp_path / "p.npz", positions=np.zeros((4, 3)), attr_w=np.ones(4), vertex_index=np.arange(4))
    with pytest.raises(InvalidArgumentError, match=r"keys \['vertex_index'\] are not a point source's"):
        zd.write_points(str(tmp_path / "s"), [str(tmp_path / "p.npz")], chunk_shape=(1.0,) * 3)


def test_dask_export_writes_objects_and_groups(tmp_path):
    rng = np.random.default_rng(2)
    lines = [np.cumsum(rng.normal(size=(6, 3)), axis=0) + 20 for _ in range(12)]
    store = str(tmp_path / "sl")
    zvf.write_polylines(store, lines, chunk_shape=(4.0,) * 3, object_attributes={"len": np.arange(12.0)},
                        groups={0: [3, 5]})
    s = zd.export(store, str(tmp_path / "out"), format="csv")
    assert str(tmp_path / "out" / "objects.csv") in s["files"] and str(tmp_path / "out" / "groups.csv") in s["files"]
    assert (tmp_path / "out" / "groups.csv").read_text() == "group_id,object_id\n0,3\n0,5\n"
    objects = np.loadtxt(tmp_path / "out" / "objects.csv", delimiter=",", skiprows=1)
    assert np.array_equal(objects, np.column_stack([np.arange(12), np.arange(12.0)]))
