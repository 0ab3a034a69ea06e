"""Every reference object store reads back to its expected.json ground truth.

Ground truth is the numpy data computed from the writer's inputs (never the
reference package's own reads).  Polylines/streamlines compare vertices in
traversal order; graphs, skeletons and meshes compare coordinate sets, and
edges/faces as coordinate tuples.
"""

from __future__ import annotations

import numpy as np
import pytest

import zvf
import zvf.aio as zaio

POLY = ("streamlines", "polylines2", "streamlines_pyramid")
LINKED = ("graph", "skeleton", "mesh")


def rows_sorted(a) -> list:
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    return a[np.lexsort(a.T[::-1])].tolist() if len(a) else []


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def edge_tuples(pos, edges, *, undirected=True) -> list:
    """Edges/faces as coordinate tuples (sorted inside each row when undirected), sorted."""
    pos = np.asarray(pos, dtype=np.float64)
    out = []
    for row in np.asarray(edges, dtype=np.int64).reshape(-1, np.shape(edges)[-1] if len(edges) else 2):
        pts = [tuple(pos[i].tolist()) for i in row]
        out.append(tuple(sorted(pts)) if undirected else tuple(pts))
    return sorted(out)


def canonical_face(pts) -> tuple:
    """A face up to rotation (winding kept): start at the smallest vertex."""
    k = min(range(len(pts)), key=lambda i: pts[i])
    return tuple(pts[k:] + pts[:k])


async def open_ref(ref_dir, name):
    return await zaio.open(str(ref_dir / f"{name}.zarrvectors"))


# --------------------------------------------------------------------------
# polylines / streamlines
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", POLY)
async def test_polyline_objects(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    ids = sorted(int(k) for k in exp["objects"])
    assert (await ds.object_ids()).tolist() == ids
    for oid in ids:
        o = exp["objects"][str(oid)]
        sel = await ds.read_object(oid)
        np.testing.assert_array_equal(sel.positions, f32(o["vertices"]))  # traversal order, exact
        for n, vals in o["vertex_attributes"].items():
            np.testing.assert_array_equal(sel.attributes[n], f32(vals))
        n = len(o["vertices"])
        assert sel.object_ids.tolist() == [oid] * n
        assert sel.edges.tolist() == [[i, i + 1] for i in range(n - 1)]
        assert sel.offsets.tolist() == [0, n] and sel.objects.tolist() == [oid]
    for attr in next(iter(exp["objects"].values()))["object_attributes"]:
        got = await ds.object_attribute(attr)
        want = [exp["objects"][str(i)]["object_attributes"][attr] for i in ids]
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6)


@pytest.mark.parametrize("name", POLY)
async def test_polyline_read_objects_batch(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    ids = sorted(int(k) for k in exp["objects"])
    order = ids[::-1] + ids[:1]  # any order, repeats allowed
    sels = await ds.read_objects(order)
    assert len(sels) == len(order)
    for oid, sel in zip(order, sels):
        np.testing.assert_array_equal(sel.positions, f32(exp["objects"][str(oid)]["vertices"]))
    comb = await ds.read_objects(order, combined=True)
    assert comb.objects.tolist() == order
    for k, oid in enumerate(order):
        a, b = comb.offsets[k], comb.offsets[k + 1]
        np.testing.assert_array_equal(comb.positions[a:b], f32(exp["objects"][str(oid)]["vertices"]))
        assert set(comb.object_ids[a:b].tolist()) <= {oid}
    e = comb.edges
    assert np.all(e[:, 1] == e[:, 0] + 1)
    assert len(e) == len(comb) - len(order)


@pytest.mark.parametrize("name", POLY)
async def test_polyline_groups(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    groups = await ds.groups()
    want = exp.get("groups") or {}
    assert {str(g): m.tolist() for g, m in enumerate(groups) if len(m) or str(g) in want} == want


@pytest.mark.parametrize("name", POLY)
async def test_polyline_bbox_per_vertex(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    for q in exp["bbox_queries"]:
        sel = await ds.query((q["lo"], q["hi"]))
        want = q["objects_with_vertices_inside"]
        assert sel.objects.tolist() == want
        for k, oid in enumerate(want):
            a, b = sel.offsets[k], sel.offsets[k + 1]
            np.testing.assert_array_equal(sel.positions[a:b], f32(exp["objects"][str(oid)]["vertices"]))
        clipped = await ds.query((q["lo"], q["hi"]), clip=True)
        assert clipped.objects.tolist() == want
        assert len(clipped) == q["count"]
        for k, oid in enumerate(want):
            a, b = clipped.offsets[k], clipped.offsets[k + 1]
            verts = f32(exp["objects"][str(oid)]["vertices"])[q["vertex_indices_per_object"][str(oid)]]
            np.testing.assert_array_equal(clipped.positions[a:b], verts)
            fa = f32(exp["objects"][str(oid)]["vertex_attributes"]["fa"])[q["vertex_indices_per_object"][str(oid)]]
            np.testing.assert_array_equal(clipped.attributes["fa"][a:b], fa)
        # clipped edges join consecutive original vertices that are both inside
        want_edges = []
        for k, oid in enumerate(want):
            idx = q["vertex_indices_per_object"][str(oid)]
            base = clipped.offsets[k]
            want_edges += [[base + j, base + j + 1] for j in range(len(idx) - 1) if idx[j + 1] == idx[j] + 1]
        assert clipped.edges.tolist() == want_edges


def level1_truth(exp, factor=2.0):
    """Per-object level-1 vertices of a per-object pyramid, from level-0 inputs with numpy.

    A coarse vertex is the float64 mean of every level-0 vertex (all objects)
    in its coarse bin (= level-0 bin x factor); an object visits its bins in
    traversal order with consecutive repeats dropped.
    """
    bin_shape = np.asarray(exp.get("base_bin_shape") or exp["chunk_shape"], np.float64) * factor
    ids = sorted(int(k) for k in exp["objects"])
    verts = [f32(exp["objects"][str(i)]["vertices"]) for i in ids]
    allv = np.concatenate(verts).astype(np.float64)
    bins = np.floor(allv / bin_shape).astype(np.int64)
    keys, inv = np.unique(bins, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    means = np.stack([np.bincount(inv, weights=allv[:, d]) / np.bincount(inv) for d in range(3)], axis=1)
    out, at = {}, 0
    for i, v in zip(ids, verts):
        seq = inv[at:at + len(v)]
        at += len(v)
        seq = seq[np.r_[True, seq[1:] != seq[:-1]]]
        out[i] = means[seq].astype(np.float32)
    return out, len(keys)


async def test_pyramid_level1(ref_dir, expected):
    exp = expected("streamlines_pyramid")
    ds = await open_ref(ref_dir, "streamlines_pyramid")
    assert ds.levels == [0, 1]
    truth, n_meta = level1_truth(exp)
    lvl1 = await ds.level(1)
    assert lvl1.meta.vertex_count == n_meta
    assert (await ds.object_ids(level=1)).tolist() == sorted(truth)
    sels = await ds.read_objects(sorted(truth), level=1)
    for (oid, want), sel in zip(sorted(truth.items()), sels):
        np.testing.assert_allclose(sel.positions, want, rtol=1e-6, atol=1e-5)
        assert sel.edges.tolist() == [[i, i + 1] for i in range(len(want) - 1)]
        assert sel.object_ids.tolist() == [oid] * len(want)
    one = await ds.read_object(sorted(truth)[0], level=1)
    np.testing.assert_array_equal(one.positions, sels[0].positions)
    # level-0 objects are untouched by the pyramid
    for oid in sorted(truth):
        s0 = await ds.read_object(oid, level=0)
        np.testing.assert_array_equal(s0.positions, f32(exp["objects"][str(oid)]["vertices"]))


async def test_pyramid_level1_bbox(ref_dir, expected):
    exp = expected("streamlines_pyramid")
    ds = await open_ref(ref_dir, "streamlines_pyramid")
    truth, _ = level1_truth(exp)
    for lo, hi in ([[0, 0, 0], [60, 60, 60]], [[40, 40, 40], [100, 100, 100]], [[0, 0, 0], [100, 100, 100]]):
        sel = await ds.query((lo, hi), level=1)
        want = [o for o, v in sorted(truth.items()) if np.any(np.all((v >= lo) & (v <= hi), axis=1))]
        assert sel.objects.tolist() == want
        for k, oid in enumerate(want):
            np.testing.assert_allclose(sel.positions[sel.offsets[k]:sel.offsets[k + 1]], truth[oid], rtol=1e-6)


# --------------------------------------------------------------------------
# graphs, skeletons, meshes
# --------------------------------------------------------------------------


def _linked_truth(exp, oid=None):
    pos = f32(exp["vertices"])
    key = "faces" if exp["kind"] == "mesh" else "edges"
    conn = np.asarray(exp[key] if oid is None else exp["objects"][str(oid)][key], dtype=np.int64)
    return pos, conn.reshape(-1, 3 if key == "faces" else 2)


@pytest.mark.parametrize("name", LINKED)
async def test_linked_objects(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    ids = sorted(int(k) for k in exp["objects"])
    assert (await ds.object_ids()).tolist() == ids
    all_pos, all_conn = [], []
    for oid in ids:
        o = exp["objects"][str(oid)]
        sel = await ds.read_object(oid)
        pos, conn = _linked_truth(exp, oid)
        assert rows_sorted(sel.positions) == rows_sorted(pos[o["vertex_indices"]])
        assert sel.object_ids.tolist() == [oid] * len(o["vertex_indices"])
        for n, vals in exp["vertex_attributes"].items():
            want = f32(vals)[o["vertex_indices"]]
            order_w = np.lexsort(pos[o["vertex_indices"]].T[::-1])
            order_g = np.lexsort(sel.positions.T[::-1])
            np.testing.assert_array_equal(sel.attributes[n][order_g], want[order_w])
        got_conn = sel.faces if name == "mesh" else sel.edges
        assert (sel.edges if name == "mesh" else sel.faces) is None
        assert edge_tuples(sel.positions, got_conn) == edge_tuples(pos, conn)
        if name == "skeleton":  # (child, parent) direction
            assert edge_tuples(sel.positions, got_conn, undirected=False) == edge_tuples(pos, conn, undirected=False)
        if name == "mesh":  # winding restored from perm
            got = sorted(canonical_face([tuple(sel.positions[i].tolist()) for i in f]) for f in got_conn)
            want = sorted(canonical_face([tuple(pos[i].astype(np.float64).tolist()) for i in f]) for f in conn)
            assert got == want
        all_pos.append(sel.positions)
        all_conn.append(got_conn + sum(len(p) for p in all_pos[:-1]))
    # the union of the objects' connectivity is the store's
    key = "faces_xyz_sorted" if name == "mesh" else "edges_xyz_sorted"
    union = edge_tuples(np.concatenate(all_pos), np.concatenate(all_conn))
    assert [list(map(list, t)) for t in union] == exp[key]


@pytest.mark.parametrize("name", LINKED)
async def test_linked_read_objects_batch(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    ids = sorted(int(k) for k in exp["objects"])
    singles = [await ds.read_object(i) for i in ids]
    batch = await ds.read_objects(ids[::-1])
    for s, b in zip(singles[::-1], batch):
        np.testing.assert_array_equal(s.positions, b.positions)
        c1 = s.faces if name == "mesh" else s.edges
        c2 = b.faces if name == "mesh" else b.edges
        assert sorted(map(tuple, c1.tolist())) == sorted(map(tuple, c2.tolist()))
    comb = await ds.read_objects(ids, combined=True)
    conn = comb.faces if name == "mesh" else comb.edges
    key = "faces_xyz_sorted" if name == "mesh" else "edges_xyz_sorted"
    assert [list(map(list, t)) for t in edge_tuples(comb.positions, conn)] == exp[key]


@pytest.mark.parametrize("name", LINKED)
async def test_linked_bbox(ref_dir, expected, name):
    exp = expected(name)
    ds = await open_ref(ref_dir, name)
    pos, conn = _linked_truth(exp)
    oids = np.asarray(exp["vertex_object_ids"])
    for q in exp["bbox_queries"]:
        sel = await ds.query((q["lo"], q["hi"]))
        assert rows_sorted(sel.positions) == q["vertices_sorted"]
        inside = np.zeros(len(pos), bool)
        inside[q["vertex_indices"]] = True
        want_conn = conn[np.all(inside[conn], axis=1)]
        got_conn = sel.faces if name == "mesh" else sel.edges
        assert edge_tuples(sel.positions, got_conn) == edge_tuples(pos, want_conn)
        if name == "skeleton":
            assert edge_tuples(sel.positions, got_conn, undirected=False) == \
                edge_tuples(pos, want_conn, undirected=False)
        # object ids per row, rows grouped by object
        want_ids = sorted(zip(map(tuple, pos[inside].astype(np.float64).tolist()), oids[inside].tolist()))
        got_ids = sorted(zip(map(tuple, sel.positions.astype(np.float64).tolist()), sel.object_ids.tolist()))
        assert got_ids == want_ids
        assert np.all(np.diff(sel.object_ids) >= 0)
        assert sel.objects.tolist() == sorted(set(oids[inside].tolist()))
        for n, vals in exp["vertex_attributes"].items():
            a = f32(vals)[inside]
            order_w = np.lexsort(pos[inside].T[::-1])
            order_g = np.lexsort(sel.positions.T[::-1])
            np.testing.assert_array_equal(sel.attributes[n][order_g], a[order_w])


async def test_graph_object_attributes(ref_dir, expected):
    exp = expected("graph")
    ds = await open_ref(ref_dir, "graph")
    for n, vals in exp["object_attributes"].items():
        np.testing.assert_allclose(await ds.object_attribute(n), vals)


# --------------------------------------------------------------------------
# point clouds with object ids
# --------------------------------------------------------------------------


async def test_point_objects(ref_dir, expected):
    exp = expected("points_groups")
    ds = await open_ref(ref_dir, "points_groups")
    ids = sorted(int(k) for k in exp["objects"])
    sels = await ds.read_objects(ids)
    for oid, sel in zip(ids, sels):
        assert rows_sorted(sel.positions) == exp["objects"][str(oid)]["vertices_sorted"]
        assert sel.edges is None and sel.faces is None
        assert sel.object_ids.tolist() == [oid] * len(sel)
    groups = await ds.groups()
    assert {str(g): m.tolist() for g, m in enumerate(groups)} == exp["groups"]


def test_sync_facade(ref_dir, expected):
    exp = expected("streamlines")
    with zvf.open(str(ref_dir / "streamlines.zarrvectors")) as ds:
        sel = ds.read_object(1)
        np.testing.assert_array_equal(sel.positions, f32(exp["objects"]["1"]["vertices"]))
        both = ds.read_objects([0, 1])
        assert [len(s) for s in both] == [len(exp["objects"]["0"]["vertices"]), len(exp["objects"]["1"]["vertices"])]
