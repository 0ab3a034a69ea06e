"""Random stores of every geometry written by zarr-vectors 0.9.2, with the inputs kept for numpy truth.

``stores`` (session) maps a geometry name to a ``Store``: path, positions,
per-vertex object ids, vertex attributes, object attributes, groups and
connectivity (polylines as lists); tests/support/query_truth.py computes what a
query must return from those inputs with numpy only.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.support.query_truth import Store

CS = (25.0, 25.0, 25.0)
BOUNDS = ([-50.0] * 3, [50.0] * 3)


def _write(tmp, seed=3) -> dict[str, Store]:
    from zarr_vectors import building as zb

    rng = np.random.default_rng(seed)
    out = {}
    # plain point cloud: bins finer than chunks, negative coordinates, a 3-channel attribute
    n = 4000
    pos = rng.uniform(-49.5, 49.5, (n, 3)).astype(np.float32)
    cls = rng.integers(0, 8, n).astype(np.int32)
    rgb = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    p = str(tmp / "points.zarrvectors")
    zb.write_points(p, pos, chunk_shape=CS, bin_shape=(12.5,) * 3, bounds=BOUNDS,
                    vertex_attributes={"cls": cls, "rgb": rgb})
    out["points"] = Store("point_cloud", p, pos, None, {"cls": cls, "rgb": rgb})
    # point cloud with object ids (clusters spanning chunks), groups, an object attribute
    k, per = 25, 40
    centers = rng.uniform(-35, 35, (k, 3))
    pos = (centers[:, None] + rng.normal(0, 9, (k, per, 3))).reshape(-1, 3).clip(-49.5, 49.5).astype(np.float32)
    oid = np.repeat(np.arange(k), per)
    inten = rng.random(len(pos)).astype(np.float32)
    size = rng.random(k).astype(np.float32)
    groups = {0: [1, 3, 5, 7], 1: [0, 2, 4], 2: list(range(10, 20))}
    p = str(tmp / "points_ids.zarrvectors")
    zb.write_points(p, pos, chunk_shape=CS, bin_shape=(12.5,) * 3, bounds=BOUNDS, vertex_attributes={"inten": inten},
                    object_ids=oid, object_attributes={"size": size}, groups=groups)
    out["points_ids"] = Store("point_cloud", p, pos, oid, {"inten": inten}, {"size": size}, groups)
    # streamlines: random walks crossing many chunks, a 1- and a 3-channel vertex attribute
    lines, start = [], 0
    pls, fa, col = [], [], []
    for _ in range(30):
        m = int(rng.integers(10, 60))
        steps = rng.normal(0, 3.0, (m, 3))
        w = (rng.uniform(-40, 40, 3) + np.cumsum(steps, axis=0)).clip(-49.5, 49.5).astype(np.float32)
        pls.append(w)
        fa.append(rng.random(m).astype(np.float32))
        col.append(rng.random((m, 3)).astype(np.float32))
        lines.append(np.arange(start, start + m))
        start += m
    length = np.array([np.linalg.norm(np.diff(w, axis=0), axis=1).sum() for w in pls], np.float32)
    groups = {0: [0, 2, 4, 6], 1: [1, 3, 5], 2: list(range(10, 30))}
    p = str(tmp / "streamlines.zarrvectors")
    zb.write_polylines(p, pls, chunk_shape=CS, bin_shape=(12.5,) * 3, bounds=BOUNDS,
                       vertex_attributes={"fa": fa, "col": col}, object_attributes={"length": length},
                       groups=groups, geometry_type="streamline")
    allpos = np.concatenate(pls)
    out["streamlines"] = Store("streamline", p, allpos, np.repeat(np.arange(len(pls)), [len(w) for w in pls]),
                               {"fa": np.concatenate(fa), "col": np.concatenate(col)}, {"length": length}, groups,
                               lines=lines)
    # graph: 4 objects, random edges inside each object
    pos = rng.uniform(-49.5, 49.5, (400, 3)).astype(np.float32)
    oid = rng.integers(0, 4, 400)
    order = np.argsort(oid, kind="stable")
    pos, oid = pos[order], oid[order]
    edges = []
    for o in range(4):
        idx = np.flatnonzero(oid == o)
        a = rng.choice(idx, 150)
        b = rng.choice(idx, 150)
        edges.append(np.stack((a, b), 1)[a != b])
    edges = np.unique(np.concatenate(edges), axis=0).astype(np.int64)
    val = rng.random(400).astype(np.float32)
    p = str(tmp / "graph.zarrvectors")
    zb.write_graph(p, pos, edges, chunk_shape=CS, bounds=BOUNDS, object_ids=oid, kind="graph",
                   vertex_attributes={"val": val}, object_attributes={"score": np.arange(4, dtype=np.float32)})
    out["graph"] = Store("graph", p, pos, oid, {"val": val}, {"score": np.arange(4, dtype=np.float32)}, conn=edges)
    # mesh: two sheets across chunks
    g = np.stack(np.meshgrid(np.linspace(-45, 45, 12), np.linspace(-45, 45, 12), indexing="ij"), -1).reshape(-1, 2)
    sheets, faces = [], []
    for s, z in enumerate((-20.0, 17.0)):
        base = s * len(g)
        sheets.append(np.c_[g, np.full(len(g), z)])
        for i in range(11):
            for j in range(11):
                a = base + i * 12 + j
                faces += [[a, a + 12, a + 1], [a + 1, a + 12, a + 13]]
    pos = np.concatenate(sheets).astype(np.float32)
    faces = np.array(faces, np.int64)
    oid = np.repeat([0, 1], len(g))
    curv = rng.random(len(pos)).astype(np.float32)
    p = str(tmp / "mesh.zarrvectors")
    zb.write_mesh(p, pos, faces, chunk_shape=CS, bounds=BOUNDS, object_ids=oid, vertex_attributes={"curv": curv})
    out["mesh"] = Store("mesh", p, pos, oid, {"curv": curv}, conn=faces)
    return out


@pytest.fixture(scope="session")
def stores(tmp_path_factory) -> dict[str, Store]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _write(tmp_path_factory.mktemp("query-stores"))
