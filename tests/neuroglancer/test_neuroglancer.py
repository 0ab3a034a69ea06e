"""Neuroglancer export and serve, checked with independent readers.

Annotations are read back with the ``neuroglancer`` package's
``AnnotationReader`` (tensorstore's ``neuroglancer_uint64_sharded`` kvstore
underneath); skeleton shards with tensorstore's sharded kvstore; meshes and
served files with tensorstore's file / http kvstores.  Every check compares
with what zvf reads from a store that zarr-vectors wrote.
"""

from __future__ import annotations

import json
import struct

import anyio
import numpy as np
import pytest

import zvf
from zvf.cli.main import main as cli
from zvf.neuroglancer import annotations as ann
from zvf.neuroglancer.export import export
from zvf.neuroglancer.sharded import (
    ShardingSpec,
    compressed_morton,
    encode_shards,
    murmurhash3_x86_128_low64,
)

ts = pytest.importorskip("tensorstore")
ngr = pytest.importorskip("neuroglancer.read_precomputed_annotations")

BOUNDS = ([0.0] * 3, [100.0] * 3)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    from zarr_vectors import building as zb

    root = tmp_path_factory.mktemp("ngstores")
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (600, 3)).astype(np.float32)
    zb.write_points(str(root / "pts.zarrvectors"), pos, chunk_shape=(25.0,) * 3, bounds=BOUNDS,
                    vertex_attributes={"inten": rng.random(600).astype(np.float32),
                                       "cls": rng.integers(0, 5, 600).astype(np.uint8)},
                    object_ids=np.repeat(np.arange(60), 10))
    pls = [(np.cumsum(rng.normal(0, 4, (int(rng.integers(3, 15)), 3)), axis=0) + 50).clip(1, 99).astype(np.float32)
           for _ in range(12)]
    zb.write_polylines(str(root / "sl.zarrvectors"), pls, chunk_shape=(25.0,) * 3, bounds=BOUNDS,
                       geometry_type="streamline")
    trunk = np.c_[np.linspace(8, 92, 8), np.full(8, 30.0), np.full(8, 45.0)]
    branch = np.c_[np.full(3, 44.0), np.linspace(40, 80, 3), np.full(3, 45.0)]
    sk = np.r_[trunk, branch, trunk + [0, 40, 10]].astype(np.float32)  # noqa: RUF005 - numpy addition
    edges = np.array([[i + 1, i] for i in range(7)] + [[8, 3], [9, 8], [10, 9]]
                     + [[12 + i, 11 + i] for i in range(7)])
    zb.write_graph(str(root / "sk.zarrvectors"), sk, edges, chunk_shape=(50.0,) * 3, bounds=BOUNDS,
                   object_ids=np.r_[np.zeros(11, int), np.ones(8, int)], kind="skeleton",
                   vertex_attributes={"radius": np.linspace(0.5, 2, len(sk)).astype(np.float32)})
    tet = np.array([[60, 60, 60], [72, 60, 60], [60, 72, 60], [60, 60, 72]], np.float32)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    zb.write_mesh(str(root / "mesh.zarrvectors"), np.r_[tet, tet - 40, tet - [10, 50, 0]],
                  np.r_[faces, faces + 4, faces + 8], chunk_shape=(50.0,) * 3, bounds=BOUNDS,
                  object_ids=np.r_[[0] * 4, [1] * 4, [5] * 4])
    return root


async def _export(src, out, **kw) -> dict:
    async with await zvf.aio.open(str(src)) as ds:
        return await export(ds, out, **kw)


async def _objects(src) -> dict[int, zvf.read.selection.Selection]:
    async with await zvf.aio.open(str(src)) as ds:
        oids = await ds.object_ids()
        return dict(zip(oids.tolist(), await ds.read_objects(oids)))


def _reader(path) -> ngr.AnnotationReader:
    return ngr.AnnotationReader(f"file://{path}/")


def _unique(annotations) -> dict[int, object]:
    return {int(a.id): a for a in annotations}


# ---------------------------------------------------------------- pure encoders


def test_murmurhash_matches_mmh3():
    mmh3 = pytest.importorskip("mmh3")
    keys = np.r_[np.arange(50, dtype=np.uint64), np.uint64(2**64 - 1), np.uint64(2**63 + 12345)]
    mine = murmurhash3_x86_128_low64(keys)
    ref = [mmh3.hash128(struct.pack("<Q", int(k)), 0, False, signed=False) & (2**64 - 1) for k in keys]
    assert mine.tolist() == ref


def test_compressed_morton_matches_neuroglancer():
    grid = (4, 1, 8)
    cells = np.array([[x, 0, z] for x in range(4) for z in range(8)])
    assert compressed_morton(cells, grid).tolist() == [ngr._zorder_compressed(c, grid) for c in cells]


def test_sharded_round_trip_through_tensorstore(tmp_path):
    keys = np.array([3, 17, 2**40 + 5, 99, 1000], dtype=np.uint64)
    values = {int(k): bytes([int(k) % 251]) * (int(k) % 37 + 1) for k in keys}
    spec = ShardingSpec(shard_bits=1, minishard_bits=2)
    for name, data in encode_shards(spec, keys, lambda rows: [values[int(keys[r])] for r in rows]):
        (tmp_path / name).write_bytes(data)
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{tmp_path}/",
                          "metadata": spec.to_json()}).result()
    for k, v in values.items():
        assert kv.read(struct.pack(">Q", k)).result().value == v
    assert kv.read(struct.pack(">Q", 4)).result().state == "missing"


# ---------------------------------------------------------------- export


async def test_points_export_multilevel_read_by_neuroglancer(stores, tmp_path):
    out = tmp_path / "pts_ng"
    summary = await _export(stores / "pts.zarrvectors", out, limit=40)
    async with await zvf.aio.open(str(stores / "pts.zarrvectors")) as ds:
        lvl = await ds.level(0)
        chunks = [await ds.read_all(level=0)]  # totals
        per_chunk = []
        async for sel in ds.iter_chunks(batch_chunks=1):
            per_chunk.append(sel)
        assert len(per_chunk) == len(lvl.nonempty_chunks)
    expected = {}
    for i, sel in enumerate(per_chunk):
        for row, aid in enumerate(ann.point_ids(i, len(sel)).tolist()):
            expected[aid] = (sel.positions[row], sel.attributes["inten"][row], sel.attributes["cls"][row],
                             sel.object_ids[row])
    assert summary["annotations"] == len(expected) == len(chunks[0])

    r = _reader(out / "annotations")
    assert r.annotation_type == "point"
    levels = r.metadata["spatial"]
    assert len(levels) > 1 and levels[0]["grid_shape"] == [1, 1, 1]
    assert all(lv["limit"] <= 2 * 40 for lv in levels[:-1])  # a uniform sample of about 40 per cell
    for lv in levels:  # grid_shape x chunk_size spans the bounds on every level
        assert np.allclose(np.multiply(lv["grid_shape"], lv["chunk_size"]), 100.0)
    got = _unique(r.get_within_spatial_bounds())
    assert set(got) == set(expected)  # every annotation reachable through the spatial index
    names = [p.id for p in r.properties]
    for aid, (p, inten, cls, oid) in expected.items():
        a = got[aid]
        assert np.array_equal(np.asarray(a.point, np.float32), p)
        props = dict(zip(names, a.props))
        assert np.float32(props["inten"]) == inten and int(props["cls"]) == cls
        b = r.by_id[aid]
        assert np.array_equal(np.asarray(b.point, np.float32), p)
        assert [int(s) for s in b.segments[0]] == [int(oid)]
    for oid in (0, 7, 59):
        rel = r.relationships["object"][oid]
        assert sorted(int(a.id) for a in rel) == sorted(k for k, v in expected.items() if v[3] == oid)
    # each level's sample is disjoint from the others: a finer level holds what coarser ones left
    seen: set[int] = set()
    for li in range(len(levels)):
        level_ids = {int(a.id) for a in r.get_within_spatial_bounds(min_spatial_index_level=li)} - seen
        seen |= level_ids
    assert seen == set(expected)


async def test_streamlines_export_as_lines(stores, tmp_path):
    out = tmp_path / "sl_ng"
    await _export(stores / "sl.zarrvectors", out, limit=10)
    objs = await _objects(stores / "sl.zarrvectors")
    expected = {}
    for oid, sel in objs.items():
        assert len(sel.edges) == len(sel) - 1  # consecutive pairs of the streamline
        for k, aid in enumerate(ann.line_ids(oid, len(sel.edges)).tolist()):
            e = sel.edges[k]
            expected[aid] = (oid, sel.positions[e[0]], sel.positions[e[1]])
    r = _reader(out / "annotations")
    assert r.annotation_type == "line"
    got = _unique(r.get_within_spatial_bounds())
    assert set(got) == set(expected)
    for aid, (oid, a, b) in expected.items():
        line = r.by_id[aid]
        assert np.array_equal(np.asarray(line.point_a, np.float32), a)
        assert np.array_equal(np.asarray(line.point_b, np.float32), b)
        assert [int(s) for s in line.segments[0]] == [oid]
    for oid, sel in objs.items():  # the object's lines, in traversal order, rebuild the streamline
        rel = sorted(r.relationships["object"][oid], key=lambda a: int(a.id))
        pts = np.r_[[np.asarray(rel[0].point_a, np.float32)], [np.asarray(a.point_b, np.float32) for a in rel]]
        assert np.array_equal(pts, sel.positions)


async def test_skeleton_export_read_by_tensorstore(stores, tmp_path):
    from neuroglancer.skeleton import Skeleton, VertexAttributeInfo

    out = tmp_path / "sk_ng"
    summary = await _export(stores / "sk.zarrvectors", out)
    assert summary["layers"] == ["annotations", "skeletons"] and summary["skeletons"] == 2
    info = json.loads((out / "skeletons" / "info").read_text())
    assert info["@type"] == "neuroglancer_skeletons"
    assert info["vertex_attributes"] == [{"id": "radius", "data_type": "float32", "num_components": 1}]
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{out}/skeletons/",
                          "metadata": info["sharding"]}).result()
    source = type("Source", (), {"vertex_attributes": {"radius": VertexAttributeInfo("float32", 1)}})()
    for oid, sel in (await _objects(stores / "sk.zarrvectors")).items():
        raw = kv.read(struct.pack(">Q", oid)).result().value
        nv, ne = np.frombuffer(raw, "<u4", 2)
        pos = np.frombuffer(raw, "<f4", 3 * nv, 8).reshape(nv, 3)
        edges = np.frombuffer(raw, "<u4", 2 * ne, 8 + 12 * nv).reshape(ne, 2)
        radius = np.frombuffer(raw, "<f4", nv, 8 + 12 * nv + 8 * ne)
        assert np.array_equal(pos, sel.positions) and np.array_equal(edges, sel.edges)
        assert np.array_equal(radius, sel.attributes["radius"])
        # neuroglancer's own skeleton encoder gives the same bytes
        ref = Skeleton(sel.positions, sel.edges, {"radius": sel.attributes["radius"]}).encode(source)
        assert raw == ref
    assert kv.read(struct.pack(">Q", 9)).result().state == "missing"


async def test_mesh_export_legacy_format(stores, tmp_path):
    out = tmp_path / "mesh_ng"
    summary = await _export(stores / "mesh.zarrvectors", out)
    assert summary["layers"] == ["mesh"] and summary["meshes"] == 3
    kv = ts.KvStore.open(f"file://{out}/mesh/").result()
    assert json.loads(kv.read(b"info").result().value) == {"@type": "neuroglancer_legacy_mesh"}
    for oid, sel in (await _objects(stores / "mesh.zarrvectors")).items():
        manifest = json.loads(kv.read(f"{oid}:0".encode()).result().value)
        (frag,) = manifest["fragments"]
        raw = kv.read(frag.encode()).result().value
        nv = int(np.frombuffer(raw, "<u4", 1)[0])
        verts = np.frombuffer(raw, "<f4", 3 * nv, 4).reshape(nv, 3)
        faces = np.frombuffer(raw, "<u4", offset=4 + 12 * nv).reshape(-1, 3)
        assert np.array_equal(verts, sel.positions) and np.array_equal(faces, sel.faces)


async def test_export_refuses_existing_output_and_leaves_nothing_on_error(stores, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    with pytest.raises(zvf.errors.StoreExistsError, match="exists"):
        await _export(stores / "pts.zarrvectors", out)
    with pytest.raises(zvf.errors.InvalidArgumentError, match="unit"):
        await _export(stores / "pts.zarrvectors", tmp_path / "new", unit="furlong")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_cli_export(stores, tmp_path, capsys):
    out = tmp_path / "cli_ng"
    assert cli(["neuroglancer", "export", str(stores / "sl.zarrvectors"), str(out), "-q"]) == 0
    assert f"precomputed://file://{out}/annotations" in capsys.readouterr().out
    assert cli(["neuroglancer", "export", str(stores / "sl.zarrvectors"), str(out), "-q"]) == 2
    assert "exists" in capsys.readouterr().err


# ---------------------------------------------------------------- serve


@pytest.fixture
async def served(stores):
    """Start ``make_app`` for a store on 127.0.0.1; yields (base url, dataset)."""
    from aiohttp import web

    from zvf.neuroglancer.serve import make_app

    runners = []
    dss = []

    async def start(name: str):
        ds = await zvf.aio.open(str(stores / name))
        dss.append(ds)
        runner = web.AppRunner(make_app(ds))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}", ds

    yield start
    for runner in runners:
        await runner.cleanup()
    for ds in dss:
        await ds.close()


async def test_serve_points_answers_viewer_requests(served):
    import aiohttp

    base, ds = await served("pts.zarrvectors")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/annotations/info") as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "*"
            info = await resp.json()
        assert info["annotation_type"] == "POINT" and "sharding" not in info["by_id"]
        async with s.head(f"{base}/annotations/info") as resp:
            assert resp.status == 200
        async with s.options(f"{base}/annotations/by_id/1") as resp:
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "*"
        for path in ("by_id/99999999999", "by_id/abc", "spatial0/9_9_9", "nothing"):
            async with s.get(f"{base}/annotations/{path}") as resp:
                assert resp.status == 404 and resp.headers["Access-Control-Allow-Origin"] == "*", path
        async with s.get(f"{base}/skeletons/info") as resp:
            assert resp.status == 404
    # the neuroglancer reader over HTTP (in a thread: this loop serves it) sees every point once
    r = await anyio.to_thread.run_sync(ngr.AnnotationReader, f"{base}/annotations/")
    got = await anyio.to_thread.run_sync(lambda: _unique(r.get_within_spatial_bounds()))
    everything = await ds.read_all()
    assert len(got) == len(everything)
    pts = np.array([a.point for a in got.values()], np.float32)
    assert np.array_equal(pts[np.lexsort(pts.T[::-1])], everything.positions[np.lexsort(everything.positions.T[::-1])])
    aid = sorted(got)[5]
    one = await anyio.to_thread.run_sync(lambda: r.by_id[aid])
    assert np.array_equal(np.asarray(one.point, np.float32), np.asarray(got[aid].point, np.float32))


async def test_serve_lines_skeletons_and_meshes(served, stores, tmp_path):
    import aiohttp

    base, _ = await served("sk.zarrvectors")
    objs = await _objects(stores / "sk.zarrvectors")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/skeletons/info") as resp:
            info = await resp.json()
        assert info["vertex_attributes"][0]["id"] == "radius" and "sharding" not in info
        for oid, sel in objs.items():
            async with s.get(f"{base}/skeletons/{oid}") as resp:
                raw = await resp.read()
            nv, ne = np.frombuffer(raw, "<u4", 2)
            assert np.array_equal(np.frombuffer(raw, "<f4", 3 * nv, 8).reshape(-1, 3), sel.positions)
            assert np.array_equal(np.frombuffer(raw, "<u4", 2 * ne, 8 + 12 * nv).reshape(-1, 2), sel.edges)
        async with s.get(f"{base}/skeletons/77") as resp:
            assert resp.status == 404
    r = await anyio.to_thread.run_sync(ngr.AnnotationReader, f"{base}/annotations/")
    got = await anyio.to_thread.run_sync(lambda: _unique(r.get_within_spatial_bounds()))
    assert set(got) == {int(a) for oid, sel in objs.items() for a in ann.line_ids(oid, len(sel.edges))}
    rel = await anyio.to_thread.run_sync(lambda: r.relationships["object"][1])
    assert len(rel) == len(objs[1].edges)
    line = await anyio.to_thread.run_sync(lambda: r.by_id[int(ann.line_ids(1, 3)[2])])
    assert np.array_equal(np.asarray(line.point_a, np.float32), objs[1].positions[objs[1].edges[2, 0]])

    base, _ = await served("mesh.zarrvectors")
    meshes = await _objects(stores / "mesh.zarrvectors")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/mesh/info") as resp:
            assert (await resp.json())["@type"] == "neuroglancer_legacy_mesh"
        async with s.get(f"{base}/mesh/5:0") as resp:
            frag = json.loads(await resp.read())["fragments"][0]
        async with s.get(f"{base}/mesh/{frag}") as resp:
            raw = await resp.read()
        nv = int(np.frombuffer(raw, "<u4", 1)[0])
        assert np.array_equal(np.frombuffer(raw, "<f4", 3 * nv, 4).reshape(-1, 3), meshes[5].positions)
        assert np.array_equal(np.frombuffer(raw, "<u4", offset=4 + 12 * nv).reshape(-1, 3), meshes[5].faces)
        for path in ("mesh/3:0", "mesh/3.frag", "annotations/info"):
            async with s.get(f"{base}/{path}") as resp:
                assert resp.status == 404, path
