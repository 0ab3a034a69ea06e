"""Every operation carries the root forward: append, build_pyramid and rechunk keep the root attributes
they do not write (a user's, the converters' ``zvf_source``, axis names, the store's name) and rewrite
the consolidated section to name the new documents, so a cold open stays one round trip and a
converted file converts back with its header."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import zvf
import zvf.aio as za
from tests.support.convert_inputs import AFFINE, make_las, make_tractogram
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle
from zvf.read import load
from zvf.testing import MemoryTransport

MINE = {"project": "thesis", "tags": [1, 2]}
AXES = [{"name": n, "type": "space", "unit": "micrometer"} for n in ("u", "v", "w")]


def _decorate(path: Path) -> None:
    """A user's root attribute and named axes, as another tool would add them."""
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["mine"] = MINE
    doc["attributes"]["multiscales"][0]["axes"] = AXES
    section = doc.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps({**doc, **({"consolidated_metadata": section} if section else {})}))


def _nodes(path: Path) -> dict[str, dict]:
    """Every node document of the store but the root, by node path."""
    return {p.parent.relative_to(path).as_posix(): json.loads(p.read_text())
            for p in path.rglob("zarr.json") if p.parent != path}


async def _open_round_trips(path: Path) -> int:
    data = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    handle = StoreHandle.for_transport(MemoryTransport(data), concurrency=64, read_only=True)
    ex = Executor(handle)
    await load.load_root(ex, handle.url)
    return ex.stats.round_trips


def _points(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 100, (n, 3)).astype(np.float32), rng.integers(0, 200, n).astype(np.uint8)


OPS = ["append", "append-sharded", "append-to-pyramid", "pyramid", "rechunk"]


@pytest.mark.parametrize("op", OPS)
async def test_operations_carry_the_root(tmp_path, op):
    pos, u = _points()
    src = tmp_path / "store"
    kw = {"chunk_shape": (25,) * 3, "bin_shape": (12.5,) * 3}
    if op == "append-sharded":
        kw["shard_shape"] = (2, 2, 2)
    await za.write_points(str(src), pos, attributes={"u": u}, **kw)
    if op == "append-to-pyramid":
        await za.build_pyramid(str(src), [(2, 1)])
    _decorate(src)
    # one round trip: the root with its section; a sharded point level's open reads its shard indexes next
    opens = 2 if op == "append-sharded" else 1
    assert await _open_round_trips(src) == opens
    dst = src
    if op.startswith("append"):
        ds = await za.open(str(src), mode="a")
        await ds.append_points(pos[:20] + 0.25, attributes={"u": u[:20]})
        await ds.close()
    elif op == "pyramid":
        await za.build_pyramid(str(src), [(2, 1), (2, 1)])
    else:
        dst = tmp_path / "copy"
        await za.rechunk(str(src), str(dst), chunk_shape=(50,) * 3)
    doc = json.loads((dst / "zarr.json").read_text())
    attrs = doc["attributes"]
    assert attrs["mine"] == MINE
    assert attrs["multiscales"][0]["axes"] == AXES
    assert attrs["ome"]["name"] == dst.name
    assert doc["consolidated_metadata"]["metadata"] == _nodes(dst)  # names exactly the documents there are
    assert await _open_round_trips(dst) == opens  # root (with its section); then the object index or shard indexes
    report = await za.validate(str(dst), level=5)
    assert report.ok, report.errors
    ds = await za.open(str(dst))
    assert len(await ds.read_all()) == len(pos) + (20 if op.startswith("append") else 0)
    await ds.close()


async def test_a_root_without_section_gets_one_from_its_first_change(tmp_path):
    """0.9.2's layout (no consolidated section): an append publishes a root carrying every document (readers
    pinned to a version read documents from its root only, see zvf.write.publish), the root's own attributes
    kept."""
    pos, u = _points(500)
    src = tmp_path / "store"
    await za.write_points(str(src), pos, attributes={"u": u}, chunk_shape=(25,) * 3, object_index_layout="reference")
    _decorate(src)
    ds = await za.open(str(src), mode="a")
    await ds.append_points(pos[:5], attributes={"u": u[:5]})
    await ds.close()
    doc = json.loads((src / "zarr.json").read_text())
    assert "consolidated_metadata" in doc and doc["attributes"]["mine"] == MINE


# ------------------------------------------------------------------ converted files, an operation, and back


def _append_own_rows(store: str) -> None:
    """Append the store's first rows (or objects) again, every attribute included."""
    with zvf.open(store, mode="a") as ds:
        if ds.geometry_type == "point_cloud":
            sel = ds.read_all()
            ds.append_points(sel.positions[:40], attributes={n: a[:40] for n, a in sel.attributes.items()})
            return
        objs = ds.read_objects(ds.object_ids()[:5])  # a tractogram's: per-streamline weight and cluster
        ds.append_polylines([o.positions for o in objs],
                            attributes={n: [o.attributes[n] for o in objs] for n in objs[0].attributes},
                            object_attributes={n: ds.object_attribute(n)[:5] for n in ("weight", "cluster")})


def _operate(store: str, op: str, tmp_path: Path) -> str:
    if op == "append":
        _append_own_rows(store)
        return store
    if op == "pyramid":
        zvf.build_pyramid(store, [(2, 1)])
        return store
    out = str(tmp_path / "rechunked.zarrvectors")
    zvf.rechunk(store, out, chunk_shape="auto")
    return out


@pytest.mark.parametrize("op", ["append", "pyramid", "rechunk"])
def test_las_header_survives(tmp_path, op):
    laspy = pytest.importorskip("laspy")
    orig = make_las(tmp_path / "in.las", n=2000)
    store = str(tmp_path / "pc.zarrvectors")
    zvf.convert(tmp_path / "in.las", store)
    store = _operate(store, op, tmp_path)
    zvf.convert(store, tmp_path / "out.las")
    back = laspy.read(str(tmp_path / "out.las"))
    assert np.array_equal(back.header.scales, orig.header.scales)
    assert np.array_equal(back.header.offsets, orig.header.offsets)
    assert [d.name for d in back.point_format.extra_dimensions] == ["temperature", "normal", "label"]
    assert next(back.point_format.extra_dimensions).description == "deg C"
    assert back.header.point_count == len(orig.points) + (40 if op == "append" else 0)


@pytest.mark.parametrize("op", ["append", "pyramid", "rechunk"])
def test_trk_header_survives(tmp_path, op):
    nib = pytest.importorskip("nibabel")
    from nibabel.streamlines import Field

    hdr = {Field.VOXEL_TO_RASMM: AFFINE, Field.DIMENSIONS: np.array([91, 109, 91], np.int16),
           Field.VOXEL_SIZES: np.array([2, 2, 2], np.float32), Field.VOXEL_ORDER: "RAS"}
    nib.streamlines.save(make_tractogram(100), str(tmp_path / "t.trk"), header=hdr)
    orig = nib.streamlines.load(str(tmp_path / "t.trk"))
    store = str(tmp_path / "t.zarrvectors")
    zvf.convert(tmp_path / "t.trk", store)
    store = _operate(store, op, tmp_path)
    zvf.convert(store, tmp_path / "o.trk")
    back = nib.streamlines.load(str(tmp_path / "o.trk"))
    for f in (Field.VOXEL_TO_RASMM, Field.DIMENSIONS, Field.VOXEL_SIZES, Field.VOXEL_ORDER):
        assert np.array_equal(np.asarray(back.header[f]), np.asarray(orig.header[f])), f
    assert len(back.streamlines) == 100 + (5 if op == "append" else 0)


@pytest.mark.parametrize("op", ["append", "pyramid", "rechunk"])
def test_ply_header_survives(tmp_path, op):
    plyfile = pytest.importorskip("plyfile")
    rng = np.random.default_rng(0)
    v = np.empty(800, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("label", "i4"), ("red", "u1"), ("conf", "f8")])
    for name in ("x", "y", "z", "conf"):
        v[name] = rng.random(800) * 10
    v["label"], v["red"] = rng.integers(0, 1000, 800), rng.integers(0, 255, 800)
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")], comments=["made by test", "second"]).write(
        str(tmp_path / "p.ply"))
    store = str(tmp_path / "p.zarrvectors")
    zvf.convert(tmp_path / "p.ply", store)
    store = _operate(store, op, tmp_path)
    zvf.convert(store, tmp_path / "o.ply")
    back = plyfile.PlyData.read(str(tmp_path / "o.ply"))
    assert back.comments == ["made by test", "second"]
    assert back["vertex"].data.dtype == v.dtype  # property order and types
    assert len(back["vertex"].data) == 800 + (40 if op == "append" else 0)
