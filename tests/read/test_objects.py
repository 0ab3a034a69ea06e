"""Object reads on our own zarr-vectors stores: edge cases, batching, errors.

Stores (built once per session with zarr-vectors 0.9.2, ground truth = inputs):

* ``walk``: random-walk streamlines through 10^3 chunks (many chunks each,
  re-entering chunks) plus tiny one-chunk polylines; bins finer than chunks
  (``walk5``) and one bin per chunk (``walk0``); a 3-channel attribute;
* ``neg``: polylines around the origin (negative chunk coords, grid origin),
  sharded and zstd-compressed;
* ``graphs`` (sparse object ids), ``trees`` (skeletons), ``meshes`` (a sphere
  over many chunks + a small sheet), cross-chunk links everywhere;
* ``pyramid``: ``walk5`` + build_pyramid with sparsity 2 (dropped objects).
"""

from __future__ import annotations

import re
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import zvf.aio as zaio
from tests.support.store_tree import copy_store
from tests.support.vlen_cells import (
    cell_path,
    decode_cell,
    plain_vlen_codecs,
    read_json,
    vlen_frame,
    vlen_items,
    write_vlen_items,
)
from zvf.errors import FormatError, InvalidArgumentError, MissingDataError

BOUNDS = ([0.0] * 3, [100.0] * 3)


def walk_polylines(rng, n_walk=40, n_tiny=12):
    pls = []
    for _ in range(n_walk):
        k = int(rng.integers(5, 60))
        start = rng.uniform(10, 90, 3)
        pls.append(np.clip(start + np.cumsum(rng.normal(0, 4.0, (k, 3)), axis=0), 0.5, 99.5).astype(np.float32))
    for _ in range(n_tiny):  # inside one chunk
        c = rng.integers(0, 10, 3) * 10.0
        pls.append((c + rng.uniform(1, 9, (int(rng.integers(2, 6)), 3))).astype(np.float32))
    return pls


def tree(rng, n, start):
    parent = np.full(n, -1)
    pos = np.zeros((n, 3))
    pos[0] = start
    for i in range(1, n):
        parent[i] = int(rng.integers(max(0, i - 3), i))
        pos[i] = np.clip(pos[parent[i]] + rng.normal(0, 7.0, 3), 0.5, 99.5)
    return pos, np.stack((np.arange(1, n), parent[1:]), axis=1)


def uv_sphere(center, r, nu=14, nv=9):
    verts = [center + np.array([0.0, 0.0, r])]  # center is an array: a vector sum
    for i in range(1, nv):
        th = np.pi * i / nv
        for j in range(nu):
            ph = 2 * np.pi * j / nu
            verts.append(center + r * np.array([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)]))
    verts.append(center - [0, 0, r])
    faces = []
    ring = lambda i, j: 1 + (i - 1) * nu + (j % nu)  # noqa: E731
    for j in range(nu):
        faces.append([0, ring(1, j), ring(1, j + 1)])
        faces.append([len(verts) - 1, ring(nv - 1, j + 1), ring(nv - 1, j)])
    for i in range(1, nv - 1):
        for j in range(nu):
            faces += [[ring(i, j), ring(i + 1, j), ring(i + 1, j + 1)],
                      [ring(i, j), ring(i + 1, j + 1), ring(i, j + 1)]]
    return np.asarray(verts), np.asarray(faces)


@pytest.fixture(scope="session")
def own(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _build_own(tmp_path_factory)


def _build_own(tmp_path_factory):
    from zarr_vectors import building as zb
    from zarr_vectors.multiresolution.coarsen import build_pyramid

    out = tmp_path_factory.mktemp("own")
    rng = np.random.default_rng(2024)
    truth: dict = {}

    pls = walk_polylines(rng)
    fa = [rng.random(len(p)).astype(np.float32) for p in pls]
    rgb = [rng.random((len(p), 3)).astype(np.float32) for p in pls]
    for name, bins in (("walk5", (5.0,) * 3), ("walk0", None)):
        zb.write_polylines(str(out / name), pls, chunk_shape=(10.0,) * 3, bin_shape=bins, bounds=BOUNDS,
                           vertex_attributes={"fa": fa, "rgb": rgb}, geometry_type="streamline")
        truth[name] = {"pls": pls, "fa": fa, "rgb": rgb}
    shutil.copytree(out / "walk5", out / "pyramid")
    build_pyramid(str(out / "pyramid"), factors=[(2.0, 2.0)], sparsity_seed=3)
    truth["pyramid"] = truth["walk5"]

    neg = [np.clip(rng.normal(0, 18, (int(rng.integers(3, 25)), 3)), -49, 49).astype(np.float32) for _ in range(8)]
    zb.write_polylines(str(out / "neg"), neg, chunk_shape=(20.0,) * 3, bin_shape=(10.0,) * 3,
                       bounds=([-50.0] * 3, [50.0] * 3), compressor="zstd", shard_shape=2,
                       vertex_attributes={"fa": [np.arange(len(p), dtype=np.float32) for p in neg]},
                       geometry_type="polyline")
    truth["neg"] = {"pls": neg}

    # graphs with sparse ids: random spanning trees + extra edges, random directions
    ids = [3, 7, 8, 20, 41]
    pos, oids, edges = [], [], []
    for oid in ids:
        n = int(rng.integers(12, 30))
        lo = rng.uniform(0, 50, 3)
        p = lo + rng.uniform(0, 50, (n, 3))
        e = [[i, int(rng.integers(0, i))] for i in range(1, n)]
        e += [list(rng.choice(n, 2, replace=False)) for _ in range(4)]
        e = np.asarray(e) + sum(len(q) for q in pos)
        flip = rng.random(len(e)) < 0.5
        e[flip] = e[flip][:, ::-1]
        pos.append(p)
        oids.append(np.full(n, oid))
        edges.append(e)
    gpos = np.concatenate(pos).astype(np.float32)
    gedges = np.unique(np.concatenate(edges), axis=0)
    gedges = gedges[gedges[:, 0] != gedges[:, 1]]
    goids = np.concatenate(oids)
    val = rng.random(len(gpos)).astype(np.float32)
    zb.write_graph(str(out / "graphs"), gpos, gedges, chunk_shape=(20.0,) * 3, bin_shape=(10.0,) * 3, bounds=BOUNDS,
                   object_ids=goids, kind="graph", vertex_attributes={"val": val})
    truth["graphs"] = {"pos": gpos, "conn": gedges, "oids": goids, "attr": ("val", val)}

    # skeletons: three random trees (child, parent), roots first
    pos, oids, edges = [], [], []
    for k in range(3):
        p, e = tree(rng, int(rng.integers(25, 45)), rng.uniform(20, 80, 3))
        edges.append(e + sum(len(q) for q in pos))
        pos.append(p)
        oids.append(np.full(len(p), k))
    tpos = np.concatenate(pos).astype(np.float32)
    tedges = np.concatenate(edges)
    toids = np.concatenate(oids)
    rad = rng.random(len(tpos)).astype(np.float32)
    zb.write_graph(str(out / "trees"), tpos, tedges, chunk_shape=(20.0,) * 3, bounds=BOUNDS, object_ids=toids,
                   kind="skeleton", vertex_attributes={"radius": rad})
    truth["trees"] = {"pos": tpos, "conn": tedges, "oids": toids, "attr": ("radius", rad)}

    # meshes: a sphere across many chunks + a small sheet
    sv, sf = uv_sphere(np.array([50.0, 50.0, 50.0]), 33.0)
    g = np.stack(np.meshgrid(np.linspace(5, 35, 4), np.linspace(5, 35, 4), indexing="ij"), -1).reshape(-1, 2)
    sheet = np.c_[g, np.full(16, 90.0)]
    shf = []
    for i in range(3):
        for j in range(3):
            a = i * 4 + j
            shf += [[a, a + 4, a + 1], [a + 1, a + 4, a + 5]]
    mpos = np.r_[sv, sheet].astype(np.float32)
    mfaces = np.r_[sf, np.asarray(shf) + len(sv)]
    moids = np.r_[np.zeros(len(sv), int), np.ones(16, int)]
    curv = rng.random(len(mpos)).astype(np.float32)
    zb.write_mesh(str(out / "meshes"), mpos, mfaces, chunk_shape=(20.0,) * 3, bounds=BOUNDS, object_ids=moids,
                  vertex_attributes={"curv": curv})
    truth["meshes"] = {"pos": mpos, "conn": mfaces, "oids": moids, "attr": ("curv", curv)}
    return out, truth


async def open_own(own, name):
    return await zaio.open(str(own[0] / name))


def inside(p, lo, hi):
    return np.all((p >= lo) & (p <= hi), axis=1)


def random_boxes(rng, n=6, lo=0.0, hi=100.0):
    a = rng.uniform(lo, hi, (n, 3))
    b = rng.uniform(lo, hi, (n, 3))
    return [(np.minimum(x, y), np.maximum(x, y)) for x, y in zip(a, b)]


# --------------------------------------------------------------------------
# polylines through many chunks
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["walk5", "walk0"])
async def test_walk_objects_exact(own, name):
    t = own[1][name]
    ds = await open_own(own, name)
    lvl = await ds.level(0)
    assert lvl.layout.bins_in_chunk == (8 if name == "walk5" else 1)
    _, table = await ds.manifests(0)
    n_chunks = [len(np.unique(table.coords[table.object_row == k], axis=0)) for k in range(len(t["pls"]))]
    assert max(n_chunks) >= 10 and min(n_chunks) == 1  # many-chunk and one-chunk objects
    reentry = [len(table.coords[table.object_row == k]) > n for k, n in enumerate(n_chunks)]
    assert any(reentry)  # some object leaves a chunk and comes back
    sels = await ds.read_objects(range(len(t["pls"])))
    for k, sel in enumerate(sels):
        np.testing.assert_array_equal(sel.positions, t["pls"][k])
        np.testing.assert_array_equal(sel.attributes["fa"], t["fa"][k])
        np.testing.assert_array_equal(sel.attributes["rgb"], t["rgb"][k])
        assert sel.edges.tolist() == [[i, i + 1] for i in range(len(t["pls"][k]) - 1)]
    one = await ds.read_object(5, attributes=["fa"])
    assert list(one.attributes) == ["fa"]
    np.testing.assert_array_equal(one.positions, t["pls"][5])


async def test_batch_fetches_each_chunk_once(own):
    t = own[1]["walk5"]
    ds = await open_own(own, "walk5")
    await ds.object_ids()  # manifests loaded
    _, table = await ds.manifests(0)
    ids = list(range(0, len(t["pls"]), 2))
    need = np.unique(table.coords[np.isin(table.object_row, ids)], axis=0)
    before = ds.stats.requests
    sels = await ds.read_objects(ids, attributes=["fa"])
    assert ds.stats.requests - before == 3 * len(need)  # vertices, vertex_fragments, fa: once per chunk
    assert sum(len(s) for s in sels) == sum(len(t["pls"][i]) for i in ids)
    before = ds.stats.requests
    for i in ids:
        await ds.read_object(i, attributes=["fa"])
    assert ds.stats.requests - before > 3 * len(need)  # one by one refetches shared chunks


async def test_combined_and_repeats(own):
    t = own[1]["walk0"]
    ds = await open_own(own, "walk0")
    ids = [7, 3, 7, 50]
    comb = await ds.read_objects(ids, combined=True)
    assert comb.objects.tolist() == ids
    for k, oid in enumerate(ids):
        a, b = comb.offsets[k], comb.offsets[k + 1]
        np.testing.assert_array_equal(comb.positions[a:b], t["pls"][oid])
        np.testing.assert_array_equal(comb.attributes["rgb"][a:b], t["rgb"][oid])
        assert np.all(comb.object_ids[a:b] == oid)
    seg = np.repeat(np.arange(len(ids)), np.diff(comb.offsets))
    assert np.all(seg[comb.edges[:, 0]] == seg[comb.edges[:, 1]])
    assert len(comb.edges) == len(comb) - len(ids)
    lst = await ds.read_objects(np.array(ids))
    assert [s.objects.tolist() for s in lst] == [[i] for i in ids]
    assert await ds.read_objects([]) == []


@pytest.mark.parametrize("name", ["walk5", "walk0", "neg"])
async def test_bbox_per_vertex(own, name):
    pls = own[1][name]["pls"]
    ds = await open_own(own, name)
    rng = np.random.default_rng(5)
    lo_b, hi_b = (-50.0, 50.0) if name == "neg" else (0.0, 100.0)
    for lo, hi in [*random_boxes(rng, 4, lo_b, hi_b), (np.full(3, lo_b), np.full(3, hi_b))]:
        sel = await ds.query((lo, hi))
        want = [i for i, p in enumerate(pls) if inside(p, lo, hi).any()]
        assert sel.objects.tolist() == want
        for k, oid in enumerate(want):
            np.testing.assert_array_equal(sel.positions[sel.offsets[k]:sel.offsets[k + 1]], pls[oid])
        clip = await ds.query((lo, hi), clip=True)
        assert clip.objects.tolist() == want
        for k, oid in enumerate(want):
            np.testing.assert_array_equal(clip.positions[clip.offsets[k]:clip.offsets[k + 1]],
                                          pls[oid][inside(pls[oid], lo, hi)])
        assert np.all(inside(clip.positions, lo, hi))


async def test_negative_sharded_objects(own):
    pls = own[1]["neg"]["pls"]
    ds = await open_own(own, "neg")
    lvl = await ds.level(0)
    assert lvl.array("vertices").codec.shard is not None
    assert tuple(lvl.array("vertices").meta.grid_origin) == (-3, -3, -3)
    for k, sel in enumerate(await ds.read_objects(range(len(pls)))):
        np.testing.assert_array_equal(sel.positions, pls[k])
        np.testing.assert_array_equal(sel.attributes["fa"], np.arange(len(pls[k]), dtype=np.float32))


# --------------------------------------------------------------------------
# empty objects and coarser levels
# --------------------------------------------------------------------------


async def test_empty_object(own, tmp_path):
    pls = own[1]["walk5"]["pls"]
    dst = copy_store(own[0] / "walk5", tmp_path / "w")
    mdir = dst / "0" / "object_index" / "manifests"
    items = vlen_items(mdir)
    items[4] = struct.pack("<I", 0)
    write_vlen_items(mdir, items)
    ds = await zaio.open(str(dst))
    assert 4 in (await ds.object_ids()).tolist()
    sel = await ds.read_object(4)
    assert len(sel) == 0 and sel.positions.shape == (0, 3) and sel.edges.shape == (0, 2)
    assert len(sel.attributes["rgb"]) == 0 and sel.attributes["fa"].shape == (0,)
    assert sel.offsets.tolist() == [0, 0] and sel.objects.tolist() == [4]
    both = await ds.read_objects([4, 5])
    assert len(both[0]) == 0
    np.testing.assert_array_equal(both[1].positions, pls[5])
    comb = await ds.read_objects([5, 4, 6], combined=True)
    assert np.diff(comb.offsets).tolist() == [len(pls[5]), 0, len(pls[6])]
    full = await ds.query(([0] * 3, [100] * 3))
    assert 4 not in full.objects.tolist() and len(full.objects) == len(pls) - 1


def coarse_truth(pls, kept, bin_edge):
    """Level-1 vertices of kept objects: means over the kept objects' vertices per coarse bin."""
    allv = np.concatenate([pls[i] for i in kept]).astype(np.float64)
    bins = np.floor(allv / bin_edge).astype(np.int64)
    _, inv = np.unique(bins, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    means = np.stack([np.bincount(inv, weights=allv[:, d]) / np.bincount(inv) for d in range(3)], axis=1)
    out, at = {}, 0
    for i in kept:
        seq = inv[at:at + len(pls[i])]
        at += len(pls[i])
        out[i] = means[seq[np.r_[True, seq[1:] != seq[:-1]]]].astype(np.float32)
    return out


async def test_pyramid_dropped_objects(own):
    pls = own[1]["pyramid"]["pls"]
    ds = await open_own(own, "pyramid")
    assert ds.levels == [0, 1]
    items = vlen_items(own[0] / "pyramid" / "1" / "object_index" / "manifests")
    kept = [i for i, m in enumerate(items) if struct.unpack_from("<I", m)[0] > 0]
    dropped = [i for i in range(len(pls)) if i not in kept]
    assert kept and dropped
    truth = coarse_truth(pls, kept, 10.0)
    sels = await ds.read_objects(range(len(pls)), level=1)
    for i, sel in enumerate(sels):
        if i in dropped:
            assert len(sel) == 0 and sel.edges.shape == (0, 2) and sel.objects.tolist() == [i]
        else:
            np.testing.assert_allclose(sel.positions, truth[i], rtol=1e-6)
            assert len(sel.edges) == len(truth[i]) - 1
    assert len(await ds.read_object(dropped[0], level=1)) == 0
    q = await ds.query(([0] * 3, [100] * 3), level=1)
    assert q.objects.tolist() == kept
    rng = np.random.default_rng(9)
    for lo, hi in random_boxes(rng, 5):
        q = await ds.query((lo, hi), level=1)
        assert q.objects.tolist() == [i for i in kept if inside(truth[i], lo, hi).any()]
    with pytest.raises(InvalidArgumentError, match="fa"):
        await ds.read_object(kept[0], level=1, attributes=["fa"])  # coarse levels carry no vertex attributes
    with pytest.raises(InvalidArgumentError, match="level=2"):
        await ds.read_object(0, level=2)


# --------------------------------------------------------------------------
# graphs, skeletons, meshes over many chunks
# --------------------------------------------------------------------------


def pos_set(p) -> list:
    return sorted(map(tuple, np.asarray(p, np.float64).tolist()))


def tuples(pos, conn, undirected):
    out = []
    for row in np.asarray(conn).reshape(len(conn), -1) if len(conn) else []:
        pts = [tuple(np.asarray(pos[i], np.float64).tolist()) for i in row]
        if undirected:
            pts = sorted(pts)
        elif len(pts) == 3:  # faces: winding kept, rotation free
            k = pts.index(min(pts))
            pts = pts[k:] + pts[:k]
        out.append(tuple(pts))
    return sorted(out)


@pytest.mark.parametrize("name", ["graphs", "trees", "meshes"])
async def test_linked_objects_many_chunks(own, name):
    t = own[1][name]
    ds = await open_own(own, name)
    ids = sorted(set(t["oids"].tolist()))
    assert (await ds.object_ids()).tolist() == ids
    _, table = await ds.manifests(0)
    assert max(len(np.unique(table.coords[table.object_row == k], axis=0)) for k in range(len(ids))) >= 6
    aname, aval = t["attr"]
    for oid, sel in zip(ids, await ds.read_objects(ids)):
        mine = np.flatnonzero(t["oids"] == oid)
        conn = t["conn"][np.all(np.isin(t["conn"], mine), axis=1)]
        assert pos_set(sel.positions) == pos_set(t["pos"][mine])
        got = sel.faces if name == "meshes" else sel.edges
        # direction (graph input order, skeleton (child, parent)) and face winding survive
        assert tuples(sel.positions, got, undirected=False) == tuples(t["pos"], conn, undirected=False)
        order_g = np.lexsort(sel.positions.T[::-1])
        order_w = np.lexsort(t["pos"][mine].T[::-1])
        np.testing.assert_array_equal(sel.attributes[aname][order_g], aval[mine][order_w])


@pytest.mark.parametrize("name", ["graphs", "trees", "meshes"])
async def test_linked_bbox_many_chunks(own, name):
    t = own[1][name]
    ds = await open_own(own, name)
    rng = np.random.default_rng(11)
    for lo, hi in [*random_boxes(rng, 6), (np.zeros(3), np.full(3, 100.0)), (np.full(3, 30.0), np.full(3, 70.0))]:
        sel = await ds.query((lo, hi))
        ins = inside(t["pos"], lo, hi)
        assert pos_set(sel.positions) == pos_set(t["pos"][ins])
        conn = t["conn"][np.all(ins[t["conn"]], axis=1)]
        got = sel.faces if name == "meshes" else sel.edges
        assert tuples(sel.positions, got, undirected=False) == tuples(t["pos"], conn, undirected=False)
        assert sorted(zip(map(tuple, sel.positions.tolist()), sel.object_ids.tolist())) == \
            sorted(zip(map(tuple, t["pos"][ins].astype(np.float64).tolist()), t["oids"][ins].tolist()))
        assert sel.objects.tolist() == sorted(set(t["oids"][ins].tolist()))


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------


async def test_unknown_object_ids(ref_dir, own):
    ds = await zaio.open(str(ref_dir / "streamlines.zarrvectors"))
    n = len(await ds.object_ids())
    for bad in (n, -1, 10**12):
        with pytest.raises(InvalidArgumentError, match=rf"object id {bad} .*0\.\.{n - 1}"):
            await ds.read_object(bad)
    with pytest.raises(InvalidArgumentError, match=f"object id {n} "):
        await ds.read_objects([0, n])
    for bad in ("a", 1.5, None, True):
        with pytest.raises(InvalidArgumentError, match="object ids must be integers"):
            await ds.read_object(bad)
    g = await open_own(own, "graphs")
    with pytest.raises(InvalidArgumentError, match=r"object id 4 .*5 ids between 3 and 41"):
        await g.read_object(4)


def set_manifest(store: Path, oid: int, blocks):
    mdir = store / "0" / "object_index" / "manifests"
    items = vlen_items(mdir)
    items[oid] = struct.pack("<I", len(blocks)) + b"".join(
        struct.pack("<3qBq", *coords, 0, frag) for coords, frag in blocks)
    write_vlen_items(mdir, items)


def first_block(store: Path, oid: int) -> tuple[tuple, int]:
    """(chunk coords, fragment) of the first block of an object's (0.9.2, mode-0) manifest."""
    m = vlen_items(store / "0" / "object_index" / "manifests")[oid]
    *coords, mode, frag = struct.unpack_from("<3qBq", m, 4)
    assert mode == 0
    return tuple(coords), frag


def key_of(coords) -> str:
    return "/".join(str(c) for c in coords)


async def test_manifest_names_missing_chunk(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "streamlines.zarrvectors", tmp_path / "s")
    c, f = first_block(dst, 1)
    set_manifest(dst, 1, [(c, f), ((7, 7, 7), 0)])
    ds = await zaio.open(str(dst))
    with pytest.raises(MissingDataError, match=r"0/vertices/c/7/7/7.*object 1"):
        await ds.read_object(1)
    await ds.read_object(0)  # others still read


async def test_manifest_fragment_past_count(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "streamlines.zarrvectors", tmp_path / "s")
    c, f = first_block(dst, 2)
    set_manifest(dst, 2, [(c, f), (c, 9)])
    ds = await zaio.open(str(dst))
    with pytest.raises(MissingDataError, match=rf"0/vertex_fragments/c/{key_of(c)}.*fragment 9.* \d+ fragments"):
        await ds.read_objects([0, 2])


async def test_missing_fragment_cell(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "streamlines.zarrvectors", tmp_path / "s")
    c, _ = first_block(dst, 2)
    cell_path(dst / "0" / "vertex_fragments", c).unlink()
    ds = await zaio.open(str(dst))
    with pytest.raises(MissingDataError, match=rf"0/vertex_fragments/c/{key_of(c)}: missing"):
        await ds.read_object(2)


async def test_intra_link_past_chunk_vertices(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "graph.zarrvectors", tmp_path / "g")
    arr = dst / "0" / "links" / "0" / "0.0.0"
    src = tuple(int(x) for x in read_json(arr / "zarr.json")["attributes"]["nonempty_chunks"][0].split("."))
    rows = np.frombuffer(decode_cell(arr, src), dtype="<i8").copy().reshape(-1, 2)
    rows[-1, 1] = 999
    plain_vlen_codecs(arr)
    cell_path(arr, src).write_bytes(vlen_frame(rows.tobytes()))
    ds = await zaio.open(str(dst))
    key = rf"0/links/0/0\.0\.0/c/{key_of(src)}"
    with pytest.raises(FormatError, match=key + rf": link row {len(rows) - 1} .*999.*past"):
        await ds.read_objects(await ds.object_ids())
    with pytest.raises(FormatError, match=key):
        await ds.query(([0] * 3, [100] * 3))


async def test_cross_link_past_chunk_vertices(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "mesh.zarrvectors", tmp_path / "m")
    arr = dst / "0" / "links" / "0" / "0.0.0_+1.0.0"
    attrs = read_json(arr / "zarr.json")["attributes"]
    src = tuple(int(x) for x in attrs["nonempty_chunks"][0].split("."))
    payload = decode_cell(arr, src)
    k = int.from_bytes(payload[:8], "little")
    data = np.frombuffer(payload[8 + 8 * k:], dtype="<i8").copy().reshape(-1, 4)  # perm + 3 endpoints
    data[0, 3] = 555
    plain_vlen_codecs(arr)
    cell_path(arr, src).write_bytes(vlen_frame(payload[:8 + 8 * k] + data.tobytes()))
    ds = await zaio.open(str(dst))
    key = f"0/links/0/0.0.0_+1.0.0/c/{'/'.join(map(str, src))}"
    with pytest.raises(FormatError, match=re.escape(key) + r": link row 0 endpoint 2 is vertex 555.*past"):
        await ds.read_objects(await ds.object_ids())


async def test_missing_vertices_cell(ref_dir, tmp_path):
    dst = copy_store(ref_dir / "mesh.zarrvectors", tmp_path / "m")
    c, _ = first_block(dst, 1)
    cell_path(dst / "0" / "vertices", c).unlink()
    ds = await zaio.open(str(dst))
    with pytest.raises(MissingDataError, match=rf"0/vertices/c/{key_of(c)}: missing"):
        await ds.read_object(1)


async def test_queries_on_empty_boxes(own):
    for name in ("walk5", "graphs", "trees", "meshes"):
        ds = await open_own(own, name)
        for box in (([101.0] * 3, [120.0] * 3), ([50.0, 50.0, 50.0], [50.0, 50.0, 50.0])):
            for clip in (False, True):
                sel = await ds.query(box, clip=clip)
                assert len(sel) == 0 and sel.positions.shape == (0, 3)
                assert sel.objects.tolist() == [] and sel.offsets.tolist() == [0]
                conn = sel.faces if name == "meshes" else sel.edges
                assert conn.shape == (0, 3 if name == "meshes" else 2)


async def test_point_cloud_without_objects(tmp_path):
    from zarr_vectors import building as zb

    warnings.simplefilter("ignore")
    pts = np.random.default_rng(1).uniform(0, 100, (50, 3)).astype(np.float32)
    zb.write_points(str(tmp_path / "p"), pts, chunk_shape=(50.0,) * 3, bounds=BOUNDS)
    ds = await zaio.open(str(tmp_path / "p"))
    with pytest.raises(InvalidArgumentError, match="no objects"):
        await ds.read_object(0)
    assert len(await ds.query(([0] * 3, [100] * 3))) == 50  # point queries unchanged
