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
    assert json.loads(kv.read(b"info").result().value) == {"@type": "neuroglancer_legacy_mesh",
                                                            "segment_properties": "segment_properties"}
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
    printed = capsys.readouterr().out
    assert "--url-base" in printed and "precomputed://" not in printed  # a file:// source no viewer can open
    assert cli(["neuroglancer", "export", str(stores / "sl.zarrvectors"), str(out), "-q"]) == 2
    assert "exists" in capsys.readouterr().err
    hosted = "https://data.example.org/sl"
    assert cli(["neuroglancer", "export", str(stores / "sl.zarrvectors"), str(tmp_path / "b"), "-q", "--json",
                "--url-base", hosted + "/"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sources"] == {"annotations": f"precomputed://{hosted}/annotations"}
    assert doc["state"]["layers"][0]["source"] == f"precomputed://{hosted}/annotations"
    assert doc["url"].startswith("https://neuroglancer-demo.appspot.com/#!")


# ---------------------------------------------------------------- serve

LOCAL = {"Origin": "http://127.0.0.1:9000"}  # a viewer on this machine


@pytest.fixture
async def served(stores):
    """Start ``make_app`` for a store on 127.0.0.1; yields (base url, dataset, app)."""
    from zvf.neuroglancer.http import start as start_app
    from zvf.neuroglancer.serve import make_app

    runners = []
    dss = []

    async def start(name, **kw):
        ds = await zvf.aio.open(str(name if not isinstance(name, str) else stores / name))
        dss.append(ds)
        app = make_app(ds, **kw)
        runner, base = await start_app(app, "127.0.0.1", 0)
        runners.append(runner)
        return base, ds, app

    yield start
    for runner in runners:
        await runner.cleanup()
    for ds in dss:
        await ds.close()


async def _get(session, url, **kw) -> tuple[int, bytes, dict]:
    async with session.get(url, **kw) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


def _cell(raw: bytes, schema_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    n = int(np.frombuffer(raw, "<u8", 1)[0])
    recs = np.frombuffer(raw, schema_dtype, n, 8)
    return recs, np.frombuffer(raw, "<u8", n, 8 + n * schema_dtype.itemsize)


async def test_serve_points_multilevel_index(served):
    """Several spatial levels, each a disjoint sample, every point once; limits from metadata; cells in a
    random order fixed by the ids; the neuroglancer reader over HTTP agrees."""
    import aiohttp

    from zvf.neuroglancer.serve import VIEW

    base, ds, app = await served("pts.zarrvectors", limit=40)
    schema = app[VIEW].schema
    async with aiohttp.ClientSession(headers=LOCAL) as s:
        status, body, headers = await _get(s, f"{base}/annotations/info")
        assert status == 200 and headers["Access-Control-Allow-Origin"] == LOCAL["Origin"]
        info = json.loads(body)
        assert info["annotation_type"] == "POINT" and "sharding" not in info["by_id"]
        levels = info["spatial"]
        assert len(levels) > 1 and levels[0]["grid_shape"] == [1, 1, 1] and levels[0]["limit"] <= 40
        for lv in levels:  # grid_shape x chunk_size spans the index's bounds on every level
            assert np.allclose(np.multiply(lv["grid_shape"], lv["chunk_size"]),
                               np.subtract(info["upper_bound"], info["lower_bound"]))
        seen: dict[int, int] = {}
        for k, lv in enumerate(levels):
            fullest = 0
            for cell in np.ndindex(*lv["grid_shape"]):
                status, raw, _ = await _get(s, f"{base}/annotations/spatial{k}/{'_'.join(map(str, cell))}")
                assert status == 200
                recs, ids = _cell(raw, schema.dtype)
                lo = np.add(info["lower_bound"], np.multiply(cell, lv["chunk_size"]))
                assert np.all((recs["geometry"] >= lo) & (recs["geometry"] <= lo + lv["chunk_size"]))
                assert np.array_equal(np.argsort(ann.uniform(ids), kind="stable"), np.arange(len(ids)))  # random
                assert (await _get(s, f"{base}/annotations/spatial{k}/{'_'.join(map(str, cell))}"))[1] == raw
                fullest = max(fullest, len(ids))
                for i in ids.tolist():
                    seen[i] = seen.get(i, 0) + 1
            assert fullest <= 2 * lv["limit"] + 10, (k, fullest, lv["limit"])  # an expected count, not a cap
        assert len(seen) == len(await ds.read_all()) and set(seen.values()) == {1}
    r = await anyio.to_thread.run_sync(ngr.AnnotationReader, f"{base}/annotations/")
    got = await anyio.to_thread.run_sync(lambda: _unique(r.get_within_spatial_bounds()))
    everything = await ds.read_all()
    pts = np.array([a.point for a in got.values()], np.float32)
    assert np.array_equal(pts[np.lexsort(pts.T[::-1])], everything.positions[np.lexsort(everything.positions.T[::-1])])
    aid = sorted(got)[5]
    one = await anyio.to_thread.run_sync(lambda: r.by_id[aid])
    assert np.array_equal(np.asarray(one.point, np.float32), np.asarray(got[aid].point, np.float32))


async def test_serve_refuses_malformed_ids_and_foreign_pages(served):
    """400 (never 500) on any malformed id or cell, 404 on absent ones; 403 for an origin not allowed, 421 for
    a Host header not naming the server (DNS rebinding); loopback and listed origins are answered."""
    import aiohttp

    from zvf.neuroglancer.http import Access

    base, _, _ = await served("sl.zarrvectors", access=Access.create("127.0.0.1", ["https://viewer.example.org"]))
    async with aiohttp.ClientSession(headers=LOCAL) as s:
        bad = ["%C2%B2", "1" * 5000, str(2**64), "-1", "abc", "1.0", "%20", "0x10", "١٢"]
        for path in ("by_id", "rel_object"):
            for text in bad:
                status, _, headers = await _get(s, f"{base}/annotations/{path}/{text}")
                assert status == 400 and headers["Access-Control-Allow-Origin"] == LOCAL["Origin"], (path, text)
            assert (await _get(s, f"{base}/annotations/{path}/{2**40}"))[0] == 404
        for cell in ("1_2", "a_b_c", "0_0_%C2%B2", "0_0_" + "9" * 5000):
            assert (await _get(s, f"{base}/annotations/spatial0/{cell}"))[0] == 400, cell
        assert (await _get(s, f"{base}/annotations/spatial0/9_9_9"))[0] == 404
        assert (await _get(s, f"{base}/annotations/spatial99/0_0_0"))[0] == 404
        assert (await _get(s, f"{base}/annotations/spatial{'9' * 5000}/0_0_0"))[0] == 400
        assert (await _get(s, f"{base}/skeletons/info"))[0] == 404
        assert (await _get(s, f"{base}/nothing"))[0] == 404
        async with s.options(f"{base}/annotations/by_id/1", headers={"Access-Control-Request-Method": "GET"}) as resp:
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == LOCAL["Origin"]
        async with s.head(f"{base}/annotations/info") as resp:
            assert resp.status == 200
    for origin, status in (("https://viewer.example.org", 200), ("http://localhost:1234", 200),
                           ("https://evil.example.com", 403), ("null", 403), ("http://127.0.0.1.evil.com", 403)):
        async with aiohttp.ClientSession() as s:
            got, _, headers = await _get(s, f"{base}/annotations/info", headers={"Origin": origin})
            assert got == status, origin
            assert headers.get("Access-Control-Allow-Origin") == (origin if status == 200 else None)
    async with aiohttp.ClientSession() as s:
        assert (await _get(s, f"{base}/annotations/info"))[0] == 200  # no Origin: a tool, not a page
        port = base.rsplit(":", 1)[1]
        for host, status in ((f"localhost:{port}", 200), (f"evil.example.com:{port}", 421), ("", 421)):
            assert (await _get(s, f"{base}/annotations/info", headers={"Host": host}))[0] == status, host


async def _memory(path):
    """``path`` opened from memory, with the transport's request log."""
    from zvf.aio import AsyncDataset
    from zvf.io.executor import Executor
    from zvf.io.store import StoreHandle
    from zvf.read import load
    from zvf.testing import MemoryTransport

    tr = MemoryTransport({p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()})
    handle = StoreHandle.for_transport(tr, concurrency=32, read_only=True)
    ex = Executor(handle)
    root, level0 = await load.load_root(ex, handle.url)
    return AsyncDataset(handle, ex, root, level0), tr


@pytest.mark.parametrize("name", ["pts.zarrvectors", "sl.zarrvectors", "sk.zarrvectors"])
async def test_serve_startup_reads_no_vertex_cell(stores, name):
    from aiohttp.test_utils import TestClient, TestServer

    from zvf.neuroglancer.serve import make_app

    ds, tr = await _memory(stores / name)
    async with TestClient(TestServer(make_app(ds, limit=20))) as client:
        cells = [e.key for e in tr.log if not e.key.endswith(("zarr.json", "/"))]  # documents, listings
        assert cells and not [k for k in cells if "/vertices/" in k or "/vertex_attributes/" in k], cells
        resp = await client.get("/annotations/info")
        assert resp.status in (200, 421)  # TestClient's Host may not be loopback; startup is what counts
    await ds.close()


async def test_serve_lines_levels_follow_the_pyramid(tmp_path):
    """Objects a coarser pyramid level keeps are drawn first: the coarsest spatial level holds only those."""
    import aiohttp

    from zvf.neuroglancer.serve import VIEW

    rng = np.random.default_rng(5)
    lines = [(np.cumsum(rng.normal(0, 3, (20, 3)), axis=0) + rng.uniform(20, 80, 3)).clip(0, 100) for _ in range(200)]
    path = tmp_path / "pyr.zarrvectors"
    await zvf.aio.write_polylines(str(path), lines, chunk_shape=(25.0,) * 3, geometry_type="streamline",
                                  bounds=([0.0] * 3, [100.0] * 3))
    await zvf.aio.build_pyramid(str(path), [(2, 4)])
    async with await zvf.aio.open(str(path)) as ds:
        ids, table = await ds.manifests(1)
        kept = set(np.unique(ids[table.object_row]).tolist())
    assert 0 < len(kept) < 200
    from zvf.neuroglancer.http import start
    from zvf.neuroglancer.serve import make_app

    async with await zvf.aio.open(str(path)) as ds:
        app = make_app(ds, limit=200)
        runner, base = await start(app, "127.0.0.1", 0)
        try:
            view = app[VIEW]
            assert len(view.levels) > 1
            async with aiohttp.ClientSession() as s:
                _, raw, _ = await _get(s, f"{base}/annotations/spatial0/0_0_0")
            _, aids = _cell(raw, view.schema.dtype)
            first = {int(a) >> 32 for a in aids.tolist()}
            assert first and first <= kept
        finally:
            await runner.cleanup()


async def test_serve_lines_skeletons_meshes_and_segment_properties(served, stores, tmp_path):
    import aiohttp

    base, _, _ = await served("sk.zarrvectors")
    objs = await _objects(stores / "sk.zarrvectors")
    async with aiohttp.ClientSession() as s:
        _, body, _ = await _get(s, f"{base}/skeletons/info")
        info = json.loads(body)
        assert info["vertex_attributes"][0]["id"] == "radius" and "sharding" not in info
        assert info["segment_properties"] == "segment_properties"
        _, body, _ = await _get(s, f"{base}/skeletons/segment_properties/info")
        assert json.loads(body)["inline"]["ids"] == ["0", "1"]
        for oid, sel in objs.items():
            _, raw, _ = await _get(s, f"{base}/skeletons/{oid}")
            nv, ne = np.frombuffer(raw, "<u4", 2)
            assert np.array_equal(np.frombuffer(raw, "<f4", 3 * nv, 8).reshape(-1, 3), sel.positions)
            assert np.array_equal(np.frombuffer(raw, "<u4", 2 * ne, 8 + 12 * nv).reshape(-1, 2), sel.edges)
        assert (await _get(s, f"{base}/skeletons/77"))[0] == 404
    r = await anyio.to_thread.run_sync(ngr.AnnotationReader, f"{base}/annotations/")
    got = await anyio.to_thread.run_sync(lambda: _unique(r.get_within_spatial_bounds()))
    assert set(got) == {int(a) for oid, sel in objs.items() for a in ann.line_ids(oid, len(sel.edges))}
    rel = await anyio.to_thread.run_sync(lambda: r.relationships["object"][1])
    assert len(rel) == len(objs[1].edges)
    line = await anyio.to_thread.run_sync(lambda: r.by_id[int(ann.line_ids(1, 3)[2])])
    assert np.array_equal(np.asarray(line.point_a, np.float32), objs[1].positions[objs[1].edges[2, 0]])

    base, _, _ = await served("mesh.zarrvectors")
    meshes = await _objects(stores / "mesh.zarrvectors")
    async with aiohttp.ClientSession() as s:
        _, body, _ = await _get(s, f"{base}/mesh/info")
        assert json.loads(body)["@type"] == "neuroglancer_legacy_mesh"
        _, body, _ = await _get(s, f"{base}/mesh/5:0")
        frag = json.loads(body)["fragments"][0]
        _, raw, _ = await _get(s, f"{base}/mesh/{frag}")
        nv = int(np.frombuffer(raw, "<u4", 1)[0])
        assert np.array_equal(np.frombuffer(raw, "<f4", 3 * nv, 4).reshape(-1, 3), meshes[5].positions)
        assert np.array_equal(np.frombuffer(raw, "<u4", offset=4 + 12 * nv).reshape(-1, 3), meshes[5].faces)
        for path in ("mesh/3:0", "mesh/3.frag", "annotations/info"):
            assert (await _get(s, f"{base}/{path}"))[0] == 404, path
        for path in ("mesh/x:0", "mesh/%C2%B2.frag"):
            assert (await _get(s, f"{base}/{path}"))[0] == 400, path
        _, body, _ = await _get(s, f"{base}/mesh/segment_properties/info")
        assert json.loads(body)["inline"]["ids"] == ["0", "1", "5"]


# ---------------------------------------------------------------- segment properties, offsets, viewer state


async def test_segment_properties_from_object_attributes_and_groups(tmp_path):
    """Serve and export give the same properties: ids, numeric attributes (exact types, NaN kept), int64 as
    text, a label, a tag per group."""
    import aiohttp

    from zvf.neuroglancer.http import start
    from zvf.neuroglancer.serve import make_app

    path = tmp_path / "attrs.zarrvectors"
    pos = np.array([[10, 10, 10], [20, 10, 10], [30, 10, 10], [10, 50, 50], [20, 50, 50], [60, 60, 60],
                    [70, 60, 60]], np.float32)
    edges = np.array([[1, 0], [2, 1], [4, 3], [6, 5]])
    await zvf.aio.write_graph(str(path), pos, edges, chunk_shape=(50.0,) * 3, geometry_type="skeleton",
                              object_ids=np.array([0, 0, 0, 1, 1, 2, 2]), bounds=([0.0] * 3, [100.0] * 3),
                              object_attributes={"length": np.array([2.5, np.nan, 1.0], np.float32),
                                                 "kind": np.array([3, 4, 5], np.uint8),
                                                 "big": np.array([2**40, 1, 2], np.int64)},
                              groups={0: [0, 2], 1: [2]})
    async with await zvf.aio.open(str(path)) as ds:
        await export(ds, tmp_path / "out", label="kind")
        runner, base = await start(make_app(ds, label="kind"), "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                _, body, _ = await _get(s, f"{base}/skeletons/segment_properties/info")
        finally:
            await runner.cleanup()
    served_props = json.loads(body)
    exported = json.loads((tmp_path / "out" / "skeletons" / "segment_properties" / "info").read_text())
    assert served_props == exported
    inline = exported["inline"]
    assert inline["ids"] == ["0", "1", "2"]
    props = {p["id"]: p for p in inline["properties"]}
    assert props["label"] == {"id": "label", "type": "label", "values": ["3", "4", "5"]}
    assert props["length"]["data_type"] == "float32" and props["length"]["values"] == [2.5, "NaN", 1.0]
    assert props["kind"] == {"id": "kind", "type": "number", "data_type": "uint8", "values": [3, 4, 5]}
    assert props["big"] == {"id": "big", "type": "string", "values": [str(2**40), "1", "2"]}
    assert props["groups"]["tags"] == ["group0", "group1"] and props["groups"]["values"] == [[0], [], [0, 1]]


async def test_offset_keeps_utm_precision_and_warns_without_it(tmp_path, recwarn):
    from zvf.errors import PrecisionWarning
    from zvf.neuroglancer.state import viewer_state

    rng = np.random.default_rng(9)
    origin = np.array([4.1e6, 5.3e5, 100.0])
    pos = origin + np.round(rng.uniform(0, 500, (300, 3)), 3)  # UTM metres, millimetre resolution
    path = tmp_path / "utm.zarrvectors"
    await zvf.aio.write_points(str(path), pos, chunk_shape=(100.0,) * 3, dtype="float64")
    async with await zvf.aio.open(str(path)) as ds:
        with pytest.warns(PrecisionWarning, match="offset"):
            await export(ds, tmp_path / "raw", offset="none")
        recwarn.clear()
        summary = await export(ds, tmp_path / "auto")
        assert not [w for w in recwarn if issubclass(w.category, PrecisionWarning)]
        everything = await ds.read_all()
    offset = np.array(summary["offset"])
    assert np.all(offset == np.floor(everything.positions.min(axis=0) / 100) * 100)
    r = _reader(tmp_path / "auto" / "annotations")
    got = np.array([a.point for a in r.get_within_spatial_bounds()], np.float64) + offset
    want = everything.positions
    assert np.abs(np.sort(got, axis=0) - np.sort(want, axis=0)).max() < 1e-4  # float32 near 0..500: ~3e-5
    raw = np.array([a.point for a in _reader(tmp_path / "raw" / "annotations").get_within_spatial_bounds()],
                   np.float64)
    assert np.abs(np.sort(raw, axis=0) - np.sort(want, axis=0)).max() > 0.1  # float32 at 4.1e6: 0.25 apart
    state = viewer_state(geometry="point_cloud", base="http://127.0.0.1:1", layers=["annotations"],
                         axes=["x", "y", "z"], unit="m", lower=summary["bounds"][0], upper=summary["bounds"][1],
                         offset=summary["offset"])
    source = state["layers"][0]["source"]
    assert [row[-1] for row in source["transform"]["matrix"]] == summary["offset"]
    assert state["dimensions"]["x"] == [1.0, "m"] and source["transform"]["outputDimensions"]["x"] == [1.0, "m"]
    assert np.allclose(state["position"], np.add(*summary["bounds"]) / 2)


def test_viewer_state_and_url_round_trip():
    from urllib.parse import unquote

    from zvf.neuroglancer.state import viewer_state, viewer_url

    state = viewer_state(geometry="skeleton", base="https://h.example/data/", layers=["annotations", "skeletons"],
                         axes=["x", "y", "z"], unit="um", lower=[0, 0, 0], upper=[10, 20, 40], segments=range(3000))
    assert [(layer["type"], layer["name"]) for layer in state["layers"]] == [("annotation", "skeleton edges"),
                                                                               ("segmentation", "skeletons")]
    assert state["layers"][0]["linkedSegmentationLayer"] == {"object": "skeletons"}
    assert state["layers"][1]["source"] == "precomputed://https://h.example/data/skeletons"
    assert len(state["layers"][1]["segments"]) == 1000 and state["layers"][1]["segments"][:2] == ["0", "1"]
    assert state["position"] == [5, 10, 20] and state["projectionScale"] == pytest.approx(1.25 * 40)
    assert state["dimensions"]["z"] == [pytest.approx(1e-6), "m"]
    url = viewer_url("http://127.0.0.1:8080/v/abc/", state)
    head, frag = url.split("#!", 1)
    assert head == "http://127.0.0.1:8080/v/abc/" and json.loads(unquote(frag)) == state
    for bad in ("file:///tmp/x", "s3://bucket/x"):
        with pytest.raises(zvf.errors.InvalidArgumentError, match="http"):
            viewer_state(geometry="point_cloud", base=bad, layers=["annotations"], axes=["x", "y", "z"],
                         unit="nm", lower=[0, 0, 0], upper=[1, 1, 1])


def test_cli_serve_prints_a_ready_link(stores, tmp_path):
    """``zvf neuroglancer serve --json`` prints one line: sources on 127.0.0.1, the state, the URL; the sources
    answer; Ctrl-C (SIGINT) ends it."""
    import signal
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-c", "from zvf.cli.main import main; raise SystemExit(main())",
                             "neuroglancer", "serve", str(stores / "sk.zarrvectors"), "--port", "0", "--json",
                             "--viewer", "http://127.0.0.1:1/v/x/"], stdout=subprocess.PIPE, text=True)
    try:
        doc = json.loads(proc.stdout.readline())
        assert set(doc) == {"sources", "state", "url"} and doc["url"].startswith("http://127.0.0.1:1/v/x/#!")
        for source in doc["sources"].values():
            url = source.removeprefix("precomputed://")
            assert url.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(url + "/info", timeout=10) as resp:
                assert json.loads(resp.read())["@type"].startswith("neuroglancer_")
        assert doc["state"]["layers"][1]["segments"] == ["0", "1"]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0  # a minute on a machine loaded several times over


async def test_export_hosting_serves_the_directory_alone(stores, tmp_path):
    """``export --serve``'s host: ranged GETs of the export, nothing outside it (no traversal, no symlink out),
    the same origin and Host rules as serve."""
    import aiohttp

    from zvf.neuroglancer.http import Access, directory_app, start

    out = tmp_path / "ng"
    await _export(stores / "sk.zarrvectors", out)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the viewer")
    (out / "annotations" / "leak").symlink_to(secret)
    runner, base = await start(directory_app(out, Access.create("127.0.0.1")), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(headers=LOCAL) as s:
            status, body, headers = await _get(s, f"{base}/skeletons/info")
            assert status == 200 and json.loads(body)["@type"] == "neuroglancer_skeletons"
            assert headers["Access-Control-Allow-Origin"] == LOCAL["Origin"]
            shard = next((out / "annotations" / "by_id").iterdir()).name
            status, body, _ = await _get(s, f"{base}/annotations/by_id/{shard}", headers={"Range": "bytes=0-15"})
            assert status == 206 and body == (out / "annotations" / "by_id" / shard).read_bytes()[:16]
            for path in ("annotations/leak", "../secret.txt", "%2e%2e/secret.txt", "annotations/..%2f..%2fsecret.txt",
                         ""):
                status, body, _ = await _get(s, f"{base}/{path}")
                assert status in (403, 404) and b"not for the viewer" not in body, path
        async with aiohttp.ClientSession(headers={"Origin": "https://evil.example.com"}) as s:
            assert (await _get(s, f"{base}/skeletons/info"))[0] == 403
    finally:
        await runner.cleanup()
