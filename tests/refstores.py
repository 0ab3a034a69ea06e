"""Reference stores written by zarr-vectors 0.9.2, with numpy ground truth.

Where the tests find them is decided here, once per process:
:func:`reference_dir` returns a directory holding ``<name>.zarrvectors`` +
``<name>.expected.json`` for every store in :data:`ALL_STORES`.
``ZVF_REF_STORES`` chooses the source:

* ``auto`` (default): the shared fixtures (``../shared/fixtures/ref-0.9.2``
  beside the repo, or ``ZVF_REF_FIXTURES``) when they hold every store, else
  ``generate``;
* ``shared``: the shared fixtures only (:class:`ReferenceStoresUnavailable` if incomplete);
* ``tool``: the shared builder ``shared/tools/make_ref_stores.py`` run into a temp dir;
* ``generate`` (or ``ZVF_REF_GENERATE=1``): the generators below, run with the
  installed reference package, so the suite passes without ``/work/shared``.

Generated stores go into one directory per process (the first ``tmp_root``
given, else a temp dir) and are written once; ``reference_stores(tmp_root,
names)`` is the same decision for a subset of names.

Ground truth comes from the inputs through numpy only, never from a reader,
in the same JSON shape as the shared fixtures (only the keys tests use):

* ``points`` (N, ndim) exact float32 values; ``attributes`` {name: rows}
* ``bbox_queries``: [{lo, hi, count, vertex_indices, vertices_sorted}] (closed box);
  polylines: [{lo, hi, count, objects_with_vertices_inside, vertex_indices_per_object}]
* with object ids: ``vertex_object_ids``, ``objects`` {oid: {vertex_indices,
  vertices_sorted, object_attributes}}; ``groups`` {gid: [oids]}, ``group_attributes``
* graphs/meshes: ``vertices``, ``vertex_attributes``, ``edges``/``faces`` and their
  ``*_xyz_sorted``; polylines: ``objects`` {oid: {vertices, vertex_attributes, object_attributes}}
* ``chunk_shape``, ``base_bin_shape``, ``bounds``, ``ndim``, ``kind``, ``store``

To add a kind of store, decorate a function ``fn(out_dir: Path, name: str) ->
dict`` that writes ``out_dir/<name>.zarrvectors`` and returns the expected dict
with ``@generator("name")``; ``reference_stores`` writes the JSON.  Nothing
here imports pytest (the fixtures are in tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

__all__ = [
    "ALL_STORES",
    "FIXTURES",
    "GENERATORS",
    "OBJECT_STORES",
    "POINT_STORES",
    "SHARED",
    "ReferenceStoresUnavailable",
    "bbox_truth",
    "f32",
    "generator",
    "load_expected",
    "reference_dir",
    "reference_stores",
    "sorted_rows",
    "source",
    "uses_shared",
]

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = Path(os.environ.get("ZVF_REF_FIXTURES") or SHARED / "fixtures" / "ref-0.9.2")
TOOL = SHARED / "tools" / "make_ref_stores.py"

POINT_STORES = ("points3d", "points3d_sharded_zstd", "points2d", "points_groups")
OBJECT_STORES = ("graph", "skeleton", "mesh", "streamlines", "polylines2", "streamlines_pyramid")
ALL_STORES = POINT_STORES + OBJECT_STORES

GENERATORS: dict[str, Callable[[Path, str], dict]] = {}
_lock = threading.Lock()
_gen_dir: Path | None = None  # where this process generates stores (first tmp_root asked for)
_tool_dir: Path | None = None


class ReferenceStoresUnavailable(Exception):
    """The chosen source cannot provide the reference stores (the message says why)."""


def generator(name: str):
    """Register ``fn(out_dir, name) -> expected dict`` as the way to make store ``name``."""

    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _complete(directory: Path, names: Iterable[str]) -> bool:
    return all((directory / f"{n}.zarrvectors").is_dir() and (directory / f"{n}.expected.json").is_file()
               for n in names)


def source() -> str:
    """The source ``ZVF_REF_STORES`` / ``ZVF_REF_GENERATE`` ask for: auto, shared, tool or generate."""
    if os.environ.get("ZVF_REF_GENERATE"):
        return "generate"
    mode = os.environ.get("ZVF_REF_STORES") or "auto"
    if mode not in ("auto", "shared", "tool", "generate"):
        raise ValueError(f"ZVF_REF_STORES={mode!r}: expected auto, shared, tool or generate")
    return mode


def uses_shared(names: Iterable[str] = ALL_STORES) -> bool:
    """Whether the shared fixtures serve ``names`` (decidable at collection time, nothing written)."""
    return source() in ("auto", "shared") and _complete(FIXTURES, names)


def reference_dir(tmp_root=None) -> Path:
    """The directory of every store in ALL_STORES, per the source chosen (see module doc)."""
    global _tool_dir
    mode = source()
    if mode == "shared" and not _complete(FIXTURES, ALL_STORES):
        missing = [n for n in ALL_STORES if not _complete(FIXTURES, [n])]
        raise ReferenceStoresUnavailable(f"ZVF_REF_STORES=shared but {FIXTURES} lacks {missing}")
    if mode == "tool":
        with _lock:
            if _tool_dir is None:
                if not TOOL.is_file():
                    raise ReferenceStoresUnavailable(f"ZVF_REF_STORES=tool but {TOOL} does not exist")
                out = Path(tempfile.mkdtemp(prefix="ref-tool-", dir=tmp_root))
                subprocess.run([sys.executable, str(TOOL), str(out)], check=True, capture_output=True, timeout=300)
                _tool_dir = out
            return _tool_dir
    return reference_stores(tmp_root, ALL_STORES)


def reference_stores(tmp_root=None, names: Iterable[str] | None = None) -> Path:
    """A directory with ``<name>.zarrvectors`` and ``<name>.expected.json`` for each name.

    ``names`` defaults to every registered generator.  The shared fixture
    directory is returned when it has them all (unless generation is forced);
    otherwise the missing stores are generated into this process's directory
    (under the first ``tmp_root`` given; later calls add to it).
    """
    global _gen_dir
    names = list(GENERATORS if names is None else names)
    if source() != "generate" and _complete(FIXTURES, names):
        return FIXTURES
    unknown = [n for n in names if n not in GENERATORS]
    if unknown:
        raise KeyError(f"no generator for reference stores {unknown} (known: {sorted(GENERATORS)})")
    with _lock:
        if _gen_dir is None or not _gen_dir.is_dir():
            if tmp_root is None:
                _gen_dir = Path(tempfile.mkdtemp(prefix="zvf-ref-0.9.2-"))
            else:
                _gen_dir = Path(tmp_root) / "ref-0.9.2-generated"
                _gen_dir.mkdir(parents=True, exist_ok=True)
        for n in names:
            if not _complete(_gen_dir, [n]):
                expected = _write_one(_gen_dir, n)
                (_gen_dir / f"{n}.expected.json").write_text(json.dumps(expected, indent=1))
        return _gen_dir


def _write_one(out: Path, name: str) -> dict:
    path = out / f"{name}.zarrvectors"
    if path.exists():
        shutil.rmtree(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = GENERATORS[name](out, name)
    expected.setdefault("store", f"{name}.zarrvectors")
    return expected


def load_expected(directory: Path, name: str) -> dict:
    return json.loads((Path(directory) / f"{name}.expected.json").read_text())


# ---------------------------------------------------------------- ground truth helpers

def f32(a) -> list:
    """Exact float32 values as JSON-able float64 lists."""
    return np.asarray(a, dtype=np.float32).astype(np.float64).tolist()


def sorted_rows(a) -> np.ndarray:
    """Rows in lexicographic order (a multiset of rows as one comparable array)."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.shape[0] == 0:
        return a
    return a[np.lexsort(a.T[::-1])]


def bbox_truth(points: np.ndarray, boxes) -> list[dict]:
    """Closed-box membership of each box, computed with numpy from the inputs."""
    pts = np.asarray(points, dtype=np.float64)
    out = []
    for lo, hi in boxes:
        mask = np.all((pts >= np.asarray(lo, np.float64)) & (pts <= np.asarray(hi, np.float64)), axis=1)
        out.append({
            "lo": [float(v) for v in lo], "hi": [float(v) for v in hi],
            "semantics": "closed: lo <= p <= hi",
            "count": int(mask.sum()),
            "vertex_indices": np.flatnonzero(mask).tolist(),
            "vertices_sorted": sorted_rows(pts[mask]).tolist(),
        })
    return out


def _common(kind: str, ndim: int, chunk, bins, bounds, writer: str) -> dict:
    return {
        "kind": kind, "ndim": ndim, "writer": writer,
        "chunk_shape": [float(c) for c in chunk],
        "base_bin_shape": None if bins is None else [float(b) for b in bins],
        "bounds": [list(bounds[0]), list(bounds[1])],
        "generated_by": "tests/refstores.py",
    }


# ---------------------------------------------------------------- point-cloud stores

@generator("points3d")
def _points3d(out: Path, name: str) -> dict:
    """3-D cloud, bins inside chunks, a scalar and a 3-channel float attribute, no compression."""
    from zarr_vectors import building

    rng = np.random.default_rng(71)
    n = 360
    pos = rng.uniform(0.0, 100.0, (n, 3)).astype(np.float32)
    intensity = rng.random(n, dtype=np.float32)
    rgb = rng.random((n, 3), dtype=np.float32)
    chunk, bins, bounds = (50.0,) * 3, (25.0,) * 3, ([0.0] * 3, [100.0] * 3)
    building.write_points(str(out / f"{name}.zarrvectors"), pos, chunk_shape=chunk, bin_shape=bins,
                          bounds=bounds, vertex_attributes={"intensity": intensity, "rgb": rgb})
    exp = _common("point_cloud", 3, chunk, bins, bounds, "building.write_points")
    exp.update(points=f32(pos), attributes={"intensity": f32(intensity), "rgb": f32(rgb)},
               bbox_queries=bbox_truth(pos, [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]),
                                             ([50.0, 0.0, 40.0], [100.0, 50.0, 100.0])]))
    return exp


@generator("points3d_sharded_zstd")
def _points3d_sharded(out: Path, name: str) -> dict:
    """3-D cloud, int32 attribute, zstd inside sharding_indexed (shard_shape=2)."""
    from zarr_vectors import building

    rng = np.random.default_rng(72)
    n = 280
    pos = rng.uniform(0.0, 120.0, (n, 3)).astype(np.float32)
    label = rng.integers(-500, 1000, n).astype(np.int32)
    chunk, bins, bounds = (30.0,) * 3, (15.0,) * 3, ([0.0] * 3, [120.0] * 3)
    building.write_points(str(out / f"{name}.zarrvectors"), pos, chunk_shape=chunk, bin_shape=bins,
                          bounds=bounds, vertex_attributes={"label": label}, compressor="zstd", shard_shape=2)
    exp = _common("point_cloud", 3, chunk, bins, bounds, "building.write_points(compressor='zstd', shard_shape=2)")
    exp.update(points=f32(pos), attributes={"label": label.tolist()},
               bbox_queries=bbox_truth(pos, [([0.0] * 3, [45.0] * 3), ([50.0, 20.0, 70.0], [119.0, 90.0, 119.0])]))
    return exp


@generator("points2d")
def _points2d(out: Path, name: str) -> dict:
    """2-D cloud through the reference's Schema API (zstd by default, ceil grid)."""
    import zarr_vectors as zv

    rng = np.random.default_rng(73)
    n = 240
    pos = rng.uniform(0.0, 64.0, (n, 2)).astype(np.float32)
    weight = rng.normal(0.0, 1.0, n).astype(np.float32)
    bounds = ([0.0, 0.0], [64.0, 64.0])
    schema = zv.Schema(ndim=2, bounds=bounds, kind="point_cloud",
                       layout=zv.Layout(cell_size=(16.0, 16.0), subcells=2, pack=False))
    ds = zv.create(str(out / f"{name}.zarrvectors"), schema=schema)
    ds.add_points(pos, attributes={"weight": weight})
    exp = _common("point_cloud", 2, (16.0, 16.0), (8.0, 8.0), bounds, "zv.create(Schema(ndim=2)).add_points")
    exp.update(points=f32(pos), attributes={"weight": f32(weight)},
               bbox_queries=bbox_truth(pos, [([8.0, 8.0], [40.0, 24.0]), ([30.0, 30.0], [64.0, 64.0])]))
    return exp


@generator("points_groups")
def _points_groups(out: Path, name: str) -> dict:
    """Clustered 3-D cloud with object ids, an object attribute, groups and a group attribute."""
    from zarr_vectors import building

    rng = np.random.default_rng(74)
    n_obj, per = 7, 11
    centers = rng.uniform(20.0, 80.0, (n_obj, 3))
    pos = (centers[:, None, :] + rng.normal(0.0, 7.0, (n_obj, per, 3))).reshape(-1, 3)
    pos = pos.clip(0.5, 99.5).astype(np.float32)
    oids = np.repeat(np.arange(n_obj), per)
    size = rng.random(n_obj, dtype=np.float32)
    groups = {0: [1, 3, 5], 1: [0, 6], 2: [2, 4]}
    gval = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    chunk, bins, bounds = (50.0,) * 3, (25.0,) * 3, ([0.0] * 3, [100.0] * 3)
    building.write_points(str(out / f"{name}.zarrvectors"), pos, chunk_shape=chunk, bin_shape=bins, bounds=bounds,
                          object_ids=oids, object_attributes={"size": size}, groups=groups,
                          group_attributes={"gval": gval})
    exp = _common("point_cloud", 3, chunk, bins, bounds, "building.write_points(object_ids, groups)")
    exp.update(
        points=f32(pos), vertex_object_ids=oids.tolist(),
        objects={str(o): {"vertex_indices": np.flatnonzero(oids == o).tolist(),
                          "vertices_sorted": sorted_rows(pos[oids == o]).tolist(),
                          "object_attributes": {"size": float(size[o])}} for o in range(n_obj)},
        groups={str(g): m for g, m in groups.items()},
        group_attributes={"gval": f32(gval)},
        bbox_queries=bbox_truth(pos, [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]),
                                      ([45.0, 0.0, 40.0], [100.0, 52.5, 100.0])]),
    )
    return exp


# ---------------------------------------------------------------- object stores (polylines, graphs, meshes)

BOXES3 = [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]), ([45.0, 0.0, 40.0], [100.0, 52.5, 100.0])]
_CUBE = ([0.0] * 3, [100.0] * 3)


def _polylines(rng, n, k_range):
    """``n`` noisy straight runs of ``k_range`` vertices inside the 0..100 cube."""
    out = []
    for _ in range(n):
        k = int(rng.integers(*k_range))
        a, b = rng.uniform(6.0, 94.0, 3), rng.uniform(6.0, 94.0, 3)
        t = np.linspace(0, 1, k)[:, None]
        out.append(np.clip(a + t * (b - a) + rng.normal(0, 2.0, (k, 3)), 0.5, 99.5).astype(np.float32))
    return out


def _polyline_truth(pls, fa, objattr: dict, groups: dict) -> dict:
    """Per-object vertices in traversal order, and per-object vertex hits of each box."""
    objs = {str(i): {"vertices": f32(p), "vertex_attributes": {"fa": f32(fa[i])},
                     "object_attributes": {k: np.asarray(v[i]).astype(np.float64).tolist() for k, v in objattr.items()}}
            for i, p in enumerate(pls)}
    bq = []
    for lo, hi in BOXES3:
        hits = [np.flatnonzero(np.all((p >= lo) & (p <= hi), axis=1)).tolist() for p in pls]
        per = {str(i): h for i, h in enumerate(hits) if h}
        bq.append({"lo": lo, "hi": hi, "semantics": "closed: lo <= p <= hi",
                   "objects_with_vertices_inside": sorted(int(k) for k in per),
                   "vertex_indices_per_object": per, "count": sum(map(len, per.values()))})
    return {"objects": objs, "bbox_queries": bq, "groups": {str(k): v for k, v in groups.items()}}


def _linked_truth(pos, links, oids, vattr: dict, key: str) -> dict:
    """Ground truth of a graph / skeleton (``key`` "edges") or mesh ("faces")."""
    pos = np.asarray(pos, np.float32)
    doc = {"vertices": f32(pos), "vertex_object_ids": np.asarray(oids).tolist(),
           "vertex_attributes": {k: f32(v) for k, v in vattr.items()},
           "bbox_queries": bbox_truth(pos, BOXES3), "objects": {},
           key: links.tolist(), f"{key}_xyz_sorted": sorted(sorted(f32(pos[row])) for row in links)}
    for o in np.unique(oids):
        vi = np.flatnonzero(oids == o)
        doc["objects"][str(int(o))] = {"vertex_indices": vi.tolist(), "vertices_sorted": sorted_rows(pos[vi]).tolist(),
                                       key: links[np.all(np.isin(links, vi), axis=1)].tolist()}
    return doc


def _streamlines(out: Path, name: str, pyramid: bool) -> dict:
    """Streamlines across chunks, bins finer than chunks, groups, float + int object attributes."""
    from zarr_vectors import building

    rng = np.random.default_rng(7)
    pls = _polylines(rng, 7, (5, 18))
    fa = [rng.random(len(p)).astype(np.float32) for p in pls]
    objattr = {"length": np.array([np.linalg.norm(np.diff(p, axis=0), axis=1).sum() for p in pls], np.float32),
               "tract": (np.arange(len(pls)) // 3).astype(np.int32)}
    groups = {0: [0, 2], 1: [1, 3, 4], 2: [5, 6]}
    chunk, bins = (50.0,) * 3, (25.0,) * 3
    path = str(out / f"{name}.zarrvectors")
    building.write_polylines(path, pls, chunk_shape=chunk, bin_shape=bins, bounds=_CUBE, vertex_attributes={"fa": fa},
                             object_attributes=objattr, groups=groups, geometry_type="streamline")
    writer = "building.write_polylines(geometry_type='streamline')"
    if pyramid:
        from zarr_vectors.multiresolution.coarsen import build_pyramid

        build_pyramid(path, factors=[(2.0, 1.0)], sparsity_seed=0)
        writer += " + build_pyramid(factors=[(2.0, 1.0)])"
    exp = _common("streamline", 3, chunk, bins, _CUBE, writer)
    exp.update(_polyline_truth(pls, fa, objattr, groups))
    return exp


@generator("streamlines")
def _streamlines_flat(out: Path, name: str) -> dict:
    return _streamlines(out, name, pyramid=False)


@generator("streamlines_pyramid")
def _streamlines_pyramid(out: Path, name: str) -> dict:
    return _streamlines(out, name, pyramid=True)


@generator("polylines2")
def _polylines2(out: Path, name: str) -> dict:
    """Plain polylines through the Schema API: one bin per chunk, zstd, ceil grid."""
    import zarr_vectors as zv

    rng = np.random.default_rng(8)
    pls = _polylines(rng, 5, (3, 10))
    fa = [rng.random(len(p)).astype(np.float32) for p in pls]
    w = np.arange(len(pls), dtype=np.float32) * 2.5
    chunk = (50.0,) * 3
    schema = zv.Schema(ndim=3, bounds=_CUBE, kind="polyline", layout=zv.Layout(cell_size=chunk, subcells=1, pack=False))
    zv.create(str(out / f"{name}.zarrvectors"), schema=schema).add_polylines(pls, attributes={"fa": fa},
                                                                           object_attributes={"w": w})
    exp = _common("polyline", 3, chunk, chunk, _CUBE, "zv.create(Schema(kind='polyline')).add_polylines")
    exp.update(_polyline_truth(pls, fa, {"w": w}, {}))
    return exp


@generator("graph")
def _graph(out: Path, name: str) -> dict:
    """Two objects, intra- and cross-chunk edges, bins finer than chunks, edge + object attributes."""
    from zarr_vectors import building

    rng = np.random.default_rng(9)
    ang = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    ring = np.c_[50 + 25 * np.cos(ang), 50 + 25 * np.sin(ang), 45 + 10 * (np.arange(12) % 2)]
    blob = np.r_[rng.uniform(4, 46, (7, 3)), [[90.0, 10.0, 90.0]]]
    pos = np.r_[ring, blob].astype(np.float32)
    oids = np.r_[np.zeros(12, int), np.ones(8, int)]
    edges = np.array([[i, (i + 1) % 12] for i in range(12)] + [[0, 6], [3, 9]]
                     + [[12 + i, 13 + i] for i in range(7)] + [[12, 16]], dtype=np.int64)
    val = rng.random(len(pos)).astype(np.float32)
    w = (np.arange(len(edges)) * 0.5).astype(np.float32)
    chunk, bins = (50.0,) * 3, (25.0,) * 3
    building.write_graph(str(out / f"{name}.zarrvectors"), pos, edges, chunk_shape=chunk, bin_shape=bins,
                         bounds=_CUBE, object_ids=oids, kind="graph", vertex_attributes={"val": val},
                         link_attributes={"w": w}, object_attributes={"score": np.array([0.5, -1.0], np.float32)})
    exp = _common("graph", 3, chunk, bins, _CUBE, "building.write_graph(kind='graph')")
    exp.update(_linked_truth(pos, edges, oids, {"val": val}, "edges"),
               object_attributes={"score": [0.5, -1.0]}, edge_attributes={"w": f32(w)})
    return exp


@generator("skeleton")
def _skeleton(out: Path, name: str) -> dict:
    """A trunk across chunks with two branches, (child, parent) edges, root 0, radius per vertex."""
    from zarr_vectors import building

    trunk = np.c_[np.linspace(8, 92, 8), np.full(8, 30.0), np.full(8, 45.0)]
    b1 = np.c_[np.full(3, 44.0), np.linspace(40, 80, 3), np.full(3, 45.0)]
    b2 = np.c_[np.full(3, 80.0), np.full(3, 30.0), np.linspace(52, 90, 3)]
    pos = np.r_[trunk, b1, b2].astype(np.float32)
    edges = np.array([[i + 1, i] for i in range(7)] + [[8, 3], [9, 8], [10, 9], [11, 6], [12, 11], [13, 12]],
                     dtype=np.int64)
    radius = np.linspace(0.5, 2.0, len(pos)).astype(np.float32)
    oids = np.zeros(len(pos), int)
    chunk = (50.0,) * 3
    building.write_graph(str(out / f"{name}.zarrvectors"), pos, edges, chunk_shape=chunk, bounds=_CUBE,
                         object_ids=oids, kind="skeleton", vertex_attributes={"radius": radius})
    exp = _common("skeleton", 3, chunk, None, _CUBE, "building.write_graph(kind='skeleton')")
    exp.update(_linked_truth(pos, edges, oids, {"radius": radius}, "edges"),
               root_vertex=0, edge_convention="(child, parent)")
    return exp


@generator("mesh")
def _mesh(out: Path, name: str) -> dict:
    """A 5x5 sheet across 4 chunks plus a tetrahedron inside one chunk."""
    from zarr_vectors import building

    g = np.stack(np.meshgrid(np.linspace(12, 88, 5), np.linspace(12, 88, 5), indexing="ij"), -1).reshape(-1, 2)
    sheet = np.c_[g, np.full(len(g), 47.0)]
    a = (np.arange(4)[:, None] * 5 + np.arange(4)).ravel()
    faces = np.stack([np.c_[a, a + 5, a + 1], np.c_[a + 1, a + 5, a + 6]], axis=1).reshape(-1, 3)
    base = len(sheet)
    tet = np.array([[60, 60, 60], [72, 60, 60], [60, 72, 60], [60, 60, 72]], float)
    faces = np.r_[faces, base + np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])].astype(np.int64)
    pos = np.r_[sheet, tet].astype(np.float32)
    oids = np.r_[np.zeros(len(sheet), int), np.ones(4, int)]
    curv = np.cos(np.arange(len(pos)) * 0.4).astype(np.float32)
    chunk = (50.0,) * 3
    building.write_mesh(str(out / f"{name}.zarrvectors"), pos, faces, chunk_shape=chunk, bounds=_CUBE,
                        object_ids=oids, vertex_attributes={"curv": curv})
    exp = _common("mesh", 3, chunk, None, _CUBE, "building.write_mesh")
    exp.update(_linked_truth(pos, faces, oids, {"curv": curv}, "faces"))
    return exp
