"""select(): property tests against numpy truth over random stores of every geometry."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import zvf
from tests.support.query_truth import object_pass, vertex_pass
from tests.support.recorder import record
from zvf.errors import InvalidArgumentError

SEED = int(os.environ.get("ZVF_QUERY_SEED", "0"))

WHERE = {  # store -> candidate where clauses (vertex and object attributes, channels)
    "points": [lambda r: {"cls": [int(x) for x in r.choice(8, 3, replace=False)]},
               lambda r: {"rgb[1]": (int(r.integers(0, 128)), int(r.integers(128, 256)))},
               lambda r: {"cls": int(r.integers(0, 8)), "rgb[0]": (0, int(r.integers(50, 256)))}],
    "points_ids": [lambda r: {"inten": (float(r.uniform(0, .5)), float(r.uniform(.5, 1)))},
                   lambda r: {"size": (0.0, float(r.uniform(0.2, 1)))}],
    "streamlines": [lambda r: {"fa": (float(r.uniform(0, .5)), float(r.uniform(.5, 1)))},
                    lambda r: {"col[2]": (0.0, float(r.uniform(0.05, 0.6)))},
                    lambda r: {"length": (float(r.uniform(0, 100)), 1e9)}],
    "graph": [lambda r: {"val": (float(r.uniform(0, .5)), float(r.uniform(.5, 1)))},
              lambda r: {"score": [0.0, 2.0]}],
    "mesh": [lambda r: {"curv": (float(r.uniform(0, .3)), 1.0)}],
}


def _box(r):
    if r.random() < 0.3:  # on chunk seams
        lo = r.choice([-50.0, -25.0, 0.0, 25.0], 3)
        return lo, lo + r.choice([25.0, 50.0], 3)
    lo = r.uniform(-60, 40, 3)
    return lo, lo + r.uniform(0, 60, 3)


def _near(r):
    if r.random() < 0.3:  # a ball touching a chunk seam
        c = r.uniform(-40, 40, 3)
        c[int(r.integers(3))] = 0.0
        return c.tolist(), float(r.uniform(0, 15))
    return r.uniform(-45, 45, 3).tolist(), float(r.uniform(0, 35))


def random_spec(st, name, r) -> dict:
    kw = {}
    if r.random() < 0.5:
        kw["bbox"] = _box(r)
    if r.random() < 0.4:
        kw["near"] = _near(r)
    if st.oid is not None and r.random() < 0.35:
        ids = np.unique(st.oid)
        kw["objects"] = sorted(int(x) for x in r.choice(ids, int(r.integers(0, min(8, len(ids)) + 1)), replace=False))
    if st.groups and r.random() < 0.3:
        kw["groups"] = sorted(int(g) for g in r.choice(list(st.groups), int(r.integers(1, 3)), replace=False))
    if r.random() < 0.5:
        kw["where"] = WHERE[name][int(r.integers(len(WHERE[name])))](r)
    if st.geometry == "streamline" and r.random() < 0.5:
        kw["clip"] = True
    return kw


def rows(*cols) -> np.ndarray:
    a = np.column_stack([np.asarray(c, np.float64).reshape(len(c), int(np.prod(np.shape(c)[1:]))) for c in cols])
    return a[np.lexsort(a.T[::-1])] if len(a) else a


def check_points(st, sel, kw):
    keep = vertex_pass(st, kw)
    ids = object_pass(st, kw)
    if ids is not None:
        keep &= np.isin(st.oid, ids)
    cols = [st.pos[keep]] + [v[keep] for v in st.vattrs.values()]
    got = [sel.positions] + [sel.attributes[n] for n in st.vattrs]
    if st.oid is not None:
        cols.append(st.oid[keep])
        got.append(sel.object_ids)
    np.testing.assert_array_equal(rows(*got), rows(*cols))


def check_streamlines(st, sel, kw):
    p = vertex_pass(st, kw)
    ids = object_pass(st, kw)
    objs = np.arange(len(st.lines))
    predicates = any(kw.get(k) is not None for k in ("bbox", "near")) or any(
        k.partition("[")[0] in st.vattrs for k in (kw.get("where") or {}))
    if predicates:
        objs = np.array([o for o in objs if p[st.lines[o]].any()], dtype=np.int64)
    if ids is not None:
        objs = np.intersect1d(objs, ids)
    np.testing.assert_array_equal(sel.objects, objs)
    parts = [st.lines[o][p[st.lines[o]]] if kw.get("clip") else st.lines[o] for o in objs]
    idx = np.concatenate(parts) if parts else np.zeros(0, int)
    np.testing.assert_array_equal(sel.positions, st.pos[idx])
    if len(idx):  # 0.9.2 labels multi-channel polyline attributes row_shape [], so an empty result has no width
        np.testing.assert_array_equal(sel.attributes["col"], st.vattrs["col"][idx])
    np.testing.assert_array_equal(np.diff(sel.offsets), [len(x) for x in parts])
    np.testing.assert_array_equal(sel.object_ids, st.oid[idx])


def check_linked(st, sel, kw):
    keep = vertex_pass(st, kw)
    ids = object_pass(st, kw)
    if ids is not None:
        keep &= np.isin(st.oid, ids)
    np.testing.assert_array_equal(rows(sel.positions, sel.object_ids), rows(st.pos[keep], st.oid[keep]))
    conn = st.conn[np.all(keep[st.conn], axis=1)]
    got = sel.faces if st.geometry == "mesh" else sel.edges
    want = rows(st.pos[conn].reshape(len(conn), conn.shape[1] * 3))
    np.testing.assert_array_equal(rows(sel.positions[got].reshape(len(got), got.shape[1] * 3)), want)


CHECK = {"point_cloud": check_points, "streamline": check_streamlines, "graph": check_linked, "mesh": check_linked}


@pytest.mark.parametrize("name", ["points", "points_ids", "streamlines", "graph", "mesh"])
def test_random_narrowings_match_numpy(stores, name):
    st = stores[name]
    r = np.random.default_rng([zlib.crc32(name.encode()), SEED])
    with zvf.open(st.path) as ds:
        for i in range(30):
            kw = random_spec(st, name, r)
            q = ds.select(**kw)
            sel = q.read()
            try:
                CHECK[st.geometry](st, sel, kw)
                assert q.count() == len(sel)
                want_ids = np.unique(sel.object_ids) if sel.object_ids is not None else np.zeros(0)
                np.testing.assert_array_equal(q.object_ids(), want_ids[want_ids >= 0])
            except AssertionError as e:
                raise AssertionError(f"combination {i}: {kw}: {e}") from None


@pytest.mark.parametrize("name", ["points", "points_ids", "streamlines", "graph", "mesh"])
def test_chained_select_intersects(stores, name):
    st = stores[name]
    r = np.random.default_rng(5)
    with zvf.open(st.path) as ds:
        for _ in range(6):
            a, b = random_spec(st, name, r), random_spec(st, name, r)
            if "near" in a:
                b.pop("near", None)
            if set(a.get("where") or {}) & set(b.get("where") or {}):
                b.pop("where")
            merged = dict(a)
            if "bbox" in b:
                merged["bbox"] = b["bbox"] if "bbox" not in a else (
                    np.maximum(a["bbox"][0], b["bbox"][0]), np.minimum(a["bbox"][1], b["bbox"][1]))
            for k in ("objects", "groups"):
                if k in b:
                    merged[k] = b[k] if k not in a else sorted(set(a[k]) & set(b[k]))
            if "near" in b:
                merged["near"] = b["near"]
            merged["where"] = {**(a.get("where") or {}), **(b.get("where") or {})}
            merged["clip"] = a.get("clip", False) or b.get("clip", False)
            if np.any(np.asarray(merged.get("bbox", ([0] * 3, [0] * 3))[0]) >
                      np.asarray(merged.get("bbox", ([0] * 3, [0] * 3))[1])):
                assert len(ds.select(**a).select(**b).read()) == 0
                continue
            CHECK[st.geometry](st, ds.select(**a).select(**b).read(), merged)


def test_empty_results(stores):
    for name in ("points", "points_ids", "streamlines", "graph", "mesh"):
        with zvf.open(stores[name].path) as ds:
            for kw in ({"bbox": ([200] * 3, [300] * 3)}, {"near": ([0, 0, 0], 0.0)},
                       {"bbox": ([-10] * 3, [10] * 3), "near": ([40, 40, 40], 1.0)}):
                q = ds.select(**kw)
                assert len(q.read()) == 0 and q.count() == 0 and len(q.object_ids()) == 0
            before = ds.stats.requests
            assert len(ds.select(bbox=([-10] * 3, [10] * 3)).select(bbox=([20] * 3, [30] * 3)).read()) == 0
            assert ds.stats.requests == before  # disjoint boxes: nothing to fetch


def test_limit(stores):
    st = stores["points"]
    with zvf.open(st.path) as ds:
        full = ds.select(bbox=([-40] * 3, [40] * 3)).read()
        sel = ds.select(bbox=([-40] * 3, [40] * 3), limit=50).read()
        assert len(sel) == 50
        np.testing.assert_array_equal(sel.positions, full.positions[:50])  # a prefix, in chunk order
        assert ds.select(limit=10).count() == 10
        batches = list(ds.select(limit=70).iter(batch=4))
        assert sum(len(b) for b in batches) == 70
    st = stores["streamlines"]
    with zvf.open(st.path) as ds:
        sel = ds.select(bbox=([-20] * 3, [20] * 3), limit=3).read()
        full = ds.select(bbox=([-20] * 3, [20] * 3)).read()
        np.testing.assert_array_equal(sel.objects, full.objects[:3])


def test_objects_spanning_many_chunks_read_only_their_chunks(stores):
    st = stores["streamlines"]
    with zvf.open(st.path) as ds:
        ids = [int(np.argmax([len(x) for x in st.lines]))]
        rec = record(ds)
        ds.select(objects=ids).read()
        ds.aio.context.ex.clear_caches()
        rec.clear()
        sel = ds.select(objects=ids).read()
        lvl = ds.aio.context.levels[0]
        chunks = {tuple(c) for c in lvl.layout.chunk_of(st.pos[st.lines[ids[0]]]).tolist()}
        assert len(chunks) > 2
        vkeys = {k for k in rec.requested() if "/vertices/" in k}
        assert len(vkeys) == len(chunks)
        np.testing.assert_array_equal(sel.positions, st.pos[st.lines[ids[0]]])


def test_iter_matches_read(stores):
    for name, kw in (("points", {"bbox": ([-30] * 3, [30] * 3), "where": {"cls": (2, 5)}}),
                     ("streamlines", {"near": ([0, 0, 0], 20.0), "clip": True}),
                     ("graph", {"where": {"val": (0.2, 0.9)}})):
        with zvf.open(stores[name].path) as ds:
            q = ds.select(**kw)
            whole = q.read()
            parts = list(q.iter(batch=3, prefetch=2))
            got = np.concatenate([p.positions for p in parts])
            np.testing.assert_array_equal(rows(got), rows(whole.positions))


def test_query_is_select_shorthand(stores):
    for name in ("points", "points_ids", "streamlines", "graph", "mesh"):
        with zvf.open(stores[name].path) as ds:
            box = ([-20, -30, -10], [25, 10, 30])
            a, b = ds.query(box, clip=True), ds.select(bbox=box, clip=True).read()
            np.testing.assert_array_equal(a.positions, b.positions)


async def test_async_query(stores):
    ds = await zvf.aio.open(stores["points_ids"].path)
    q = ds.select(groups=[0]).select(where={"inten": (0.1, 0.9)})
    assert isinstance(q, zvf.aio.AsyncQuery)
    sel = await q.read()
    check_points(stores["points_ids"], sel, {"groups": [0], "where": {"inten": (0.1, 0.9)}})
    assert await q.count() == len(sel)
    assert "wave" in await q.explain()
    n = 0
    async for part in q.iter(batch=2):
        n += len(part)
    assert n == len(sel)
    await ds.close()


def test_level_auto(tmp_path):
    import warnings

    from zarr_vectors import building as zb
    from zarr_vectors.multiresolution.coarsen import build_pyramid

    rng = np.random.default_rng(1)
    pls = [(rng.uniform(5, 95, 3) + np.cumsum(rng.normal(0, 2, (40, 3)), 0)).clip(0, 99).astype(np.float32)
           for _ in range(20)]
    path = str(tmp_path / "pyr.zarrvectors")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zb.write_polylines(path, pls, chunk_shape=(50.0,) * 3, bin_shape=(25.0,) * 3,
                           bounds=([0.0] * 3, [100.0] * 3), geometry_type="streamline")
        build_pyramid(path, factors=[(2.0, 1.0)], sparsity_seed=0)
    with zvf.open(path) as ds:
        assert ds.levels == [0, 1]
        big = ds.select(level="auto", max_vertices=10_000)
        assert big.plan().level == 0
        small = ds.select(level="auto", max_vertices=100)
        plan = small.plan()
        assert plan.level == 1 and "auto" in plan.explain()
        assert len(small.read()) == len(ds.select(level=1).read())


def test_bad_arguments_name_the_problem(stores):
    with zvf.open(stores["points"].path) as ds:
        for kw, word in (({"where": {"rgb": (0, 5)}}, "channels"), ({"where": {"nope": 1}}, "nope"),
                         ({"where": {"rgb[7]": 1}}, "rgb"), ({"near": ([0, 0], 1)}, "near"),
                         ({"objects": [1]}, "object ids"), ({"level": "auto"}, "max_vertices"),
                         ({"max_vertices": 5}, "level='auto'"), ({"limit": -1}, "limit"),
                         ({"where": {"cls": (5, 1)}}, "lo")):
            with pytest.raises(InvalidArgumentError, match=word):
                ds.select(**kw).read()
    with zvf.open(stores["points_ids"].path) as ds, pytest.raises(InvalidArgumentError, match="group"):
        ds.select(groups=[99]).read()
