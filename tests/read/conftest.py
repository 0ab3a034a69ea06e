"""Reference object stores for the read tests.

``ref_dir`` (session) is a directory of ``<name>.zarrvectors`` stores written
by zarr-vectors 0.9.2, each with ``<name>.expected.json`` ground truth computed
from the inputs with numpy.  Where it comes from (``ZVF_REF_STORES``):

* ``auto`` (default): /work/shared/fixtures/ref-0.9.2 (or ``ZVF_REF_FIXTURES``)
  when it holds every store the tests need; else the shared builder
  /work/shared/tools/make_ref_stores.py run into a temp dir; else ``generate``;
* ``shared`` / ``tool`` / ``generate``: force one source.  ``generate`` runs
  :func:`generate_reference_stores` below -- our own builder of the same kinds
  of stores (same expected.json keys), so the suite passes without /work/shared.

Helpers shared by the test modules live here too (``copy_store``,
``write_vlen_cell``, ``rewrite_array_meta``, ``run``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REF_FIXTURES as SHARED
from tests.conftest import SHARED as SHARED_DIR

TOOL = SHARED_DIR / "tools" / "make_ref_stores.py"
NEEDED = ("graph", "skeleton", "mesh", "streamlines", "polylines2", "streamlines_pyramid", "points_groups")

BOXES3 = [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]), ([45.0, 0.0, 40.0], [100.0, 52.5, 100.0])]


def _complete(d: Path) -> bool:
    return all((d / f"{n}.expected.json").is_file() and (d / f"{n}.zarrvectors").is_dir() for n in NEEDED)


@pytest.fixture(scope="session")
def ref_dir(tmp_path_factory) -> Path:
    mode = os.environ.get("ZVF_REF_STORES", "auto")
    if mode in ("auto", "shared") and _complete(SHARED):
        return SHARED
    if mode == "shared":
        pytest.skip(f"{SHARED} lacks the reference stores")
    out = tmp_path_factory.mktemp("ref-stores")
    if mode in ("auto", "tool") and TOOL.is_file():
        subprocess.run([sys.executable, str(TOOL), str(out)], check=True, capture_output=True, timeout=300)
        if _complete(out):
            return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generate_reference_stores(out)
    return out


@pytest.fixture(scope="session")
def expected(ref_dir):
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = json.loads((ref_dir / f"{name}.expected.json").read_text())
        return cache[name]

    return get


# --------------------------------------------------------------------------
# helpers for tests that rewrite stores
# --------------------------------------------------------------------------


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def vlen_frame(*items: bytes) -> bytes:
    """A vlen-bytes cell of ``items`` (no compression): u32 n, then (u32 len, bytes) each."""
    parts = [len(items).to_bytes(4, "little")]
    for it in items:
        parts += [len(it).to_bytes(4, "little"), bytes(it)]
    return b"".join(parts)


def _unframe(raw: bytes) -> list[bytes]:
    n = int.from_bytes(raw[:4], "little")
    out, p = [], 4
    for _ in range(n):
        ln = int.from_bytes(raw[p:p + 4], "little")
        out.append(bytes(raw[p + 4:p + 4 + ln]))
        p += 4 + ln
    return out


def plain_vlen_codecs(array_dir: Path) -> None:
    """Make an array's cells plain vlen-bytes frames (so tests can write cells directly)."""
    meta = read_json(array_dir / "zarr.json")
    meta["codecs"] = [{"name": "vlen-bytes", "configuration": {}}]
    write_json(array_dir / "zarr.json", meta)


def cell_path(array_dir: Path, coords) -> Path:
    """Chunk file of ``coords`` (grid coordinates) under the default '/' encoding."""
    return array_dir.joinpath("c", *[str(int(c)) for c in coords])


def _stored(array_dir: Path, p: Path) -> bytes:
    raw = p.read_bytes()
    codecs = [c["name"] for c in read_json(array_dir / "zarr.json")["codecs"]]
    if "zstd" in codecs or "blosc" in codecs:
        import numcodecs

        raw = (numcodecs.Zstd() if "zstd" in codecs else numcodecs.Blosc()).decode(raw)
    return bytes(raw)


def decode_cell(array_dir: Path, coords) -> bytes | None:
    """Payload of a one-item vlen cell as 0.9.2 stores it (optional zstd/blosc, no sharding)."""
    p = cell_path(array_dir, coords)
    if not p.exists():
        return None
    return _unframe(_stored(array_dir, p))[0]


def vlen_items(array_dir: Path) -> list[bytes]:
    """All items of a 1-D vlen array (object_index/manifests, groups), in order."""
    meta = read_json(array_dir / "zarr.json")
    n = meta["shape"][0]
    per = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    out: list[bytes] = []
    for c in range(-(-n // per) if n else 0):
        p = cell_path(array_dir, (c,))
        want = min(per, n - c * per)
        out += _unframe(_stored(array_dir, p))[:want] if p.exists() else [b""] * want
    return out


def write_vlen_items(array_dir: Path, items: list[bytes]) -> None:
    """Rewrite a 1-D vlen array as one plain cell holding ``items``."""
    meta = read_json(array_dir / "zarr.json")
    meta["shape"] = [len(items)]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [max(len(items), 1)]
    meta["codecs"] = [{"name": "vlen-bytes", "configuration": {}}]
    write_json(array_dir / "zarr.json", meta)
    shutil.rmtree(array_dir / "c", ignore_errors=True)
    p = cell_path(array_dir, (0,))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(vlen_frame(*items))


# --------------------------------------------------------------------------
# our own generator of reference-style stores (used when /work/shared is absent)
# --------------------------------------------------------------------------


def _f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64).tolist()


def _inside(p, lo, hi):
    p = np.asarray(p, dtype=np.float64)
    return np.all((p >= np.asarray(lo)) & (p <= np.asarray(hi)), axis=1)


def _sorted_rows(a):
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    return a[np.lexsort(a.T[::-1])].tolist() if len(a) else []


def _bbox_vertices(pos, boxes):
    out = []
    for lo, hi in boxes:
        m = _inside(pos, lo, hi)
        out.append({"lo": lo, "hi": hi, "count": int(m.sum()), "vertex_indices": np.flatnonzero(m).tolist(),
                    "vertices_sorted": _sorted_rows(np.asarray(pos, np.float32)[m])})
    return out


def _dump(out: Path, name: str, doc: dict) -> None:
    (out / f"{name}.expected.json").write_text(json.dumps(doc))


def _polylines(rng, n, lo, hi, k_range):
    out = []
    for _ in range(n):
        k = int(rng.integers(*k_range))
        a, b = rng.uniform(lo + 6, hi - 6, 3), rng.uniform(lo + 6, hi - 6, 3)
        t = np.linspace(0, 1, k)[:, None]
        out.append(np.clip(a + t * (b - a) + rng.normal(0, 2.0, (k, 3)), lo + 0.5, hi - 0.5).astype(np.float32))
    return out


def _polyline_doc(name, kind, pls, fa, objattr, groups, extra):
    objs = {}
    for i, p in enumerate(pls):
        objs[str(i)] = {"vertices": _f32(p), "vertex_attributes": {"fa": _f32(fa[i])},
                        "object_attributes": {k: float(v[i]) for k, v in objattr.items()}}
    bq = []
    for lo, hi in BOXES3:
        per = {str(i): np.flatnonzero(_inside(p, lo, hi)).tolist() for i, p in enumerate(pls)}
        per = {k: v for k, v in per.items() if v}
        bq.append({"lo": lo, "hi": hi, "objects_with_vertices_inside": sorted(int(k) for k in per),
                   "vertex_indices_per_object": per, "count": sum(map(len, per.values()))})
    doc = {"store": f"{name}.zarrvectors", "kind": kind, "ndim": 3, "objects": objs, "bbox_queries": bq,
           "groups": {str(k): v for k, v in groups.items()}}
    doc.update(extra)
    return doc


def _graph_doc(name, kind, pos, edges, oids, vattr, extra):
    pos32 = np.asarray(pos, np.float32)
    doc = {"store": f"{name}.zarrvectors", "kind": kind, "ndim": 3,
           "vertices": _f32(pos32), "vertex_object_ids": np.asarray(oids).tolist(),
           "vertex_attributes": {k: _f32(v) for k, v in vattr.items()},
           "bbox_queries": _bbox_vertices(pos32, BOXES3), "objects": {}}
    if kind == "mesh":
        doc["faces"] = edges.tolist()
        doc["faces_xyz_sorted"] = sorted(sorted(_f32(pos32[f])) for f in edges)
    else:
        doc["edges"] = edges.tolist()
        doc["edges_xyz_sorted"] = sorted(sorted([_f32(pos32[a]), _f32(pos32[b])]) for a, b in edges)
    for o in np.unique(oids):
        vi = np.flatnonzero(oids == o)
        mine = edges[np.all(np.isin(edges, vi), axis=1)]
        entry = {"vertex_indices": vi.tolist(), "vertices_sorted": _sorted_rows(pos32[vi])}
        entry["faces" if kind == "mesh" else "edges"] = mine.tolist()
        doc["objects"][str(int(o))] = entry
    doc.update(extra)
    return doc


def generate_reference_stores(out: Path) -> None:
    """Write the object stores the tests need, with zarr-vectors, plus numpy ground truth."""
    from zarr_vectors import building as zb
    from zarr_vectors.multiresolution.coarsen import build_pyramid

    out.mkdir(parents=True, exist_ok=True)
    cs = (50.0, 50.0, 50.0)
    bounds = ([0.0] * 3, [100.0] * 3)

    # streamlines (+ pyramid): bins finer than chunks, groups, object attributes
    for name, pyramid in (("streamlines", False), ("streamlines_pyramid", True)):
        rng = np.random.default_rng(7)
        pls = _polylines(rng, 7, 0.0, 100.0, (5, 18))
        fa = [rng.random(len(p)).astype(np.float32) for p in pls]
        length = np.array([np.linalg.norm(np.diff(p, axis=0), axis=1).sum() for p in pls], np.float32)
        groups = {0: [0, 2], 1: [1, 3, 4], 2: [5, 6]}
        zb.write_polylines(str(out / f"{name}.zarrvectors"), pls, chunk_shape=cs, bin_shape=(25.0,) * 3,
                           bounds=bounds, vertex_attributes={"fa": fa}, object_attributes={"length": length},
                           groups=groups, geometry_type="streamline")
        if pyramid:
            build_pyramid(str(out / f"{name}.zarrvectors"), factors=[(2.0, 1.0)], sparsity_seed=0)
        _dump(out, name, _polyline_doc(name, "streamline", pls, fa, {"length": length}, groups,
                                       {"base_bin_shape": [25.0] * 3, "chunk_shape": list(cs)}))

    # polylines: one bin per chunk, zstd
    rng = np.random.default_rng(8)
    pls = _polylines(rng, 5, 0.0, 100.0, (3, 10))
    fa = [rng.random(len(p)).astype(np.float32) for p in pls]
    w = np.arange(len(pls), dtype=np.float32) * 2.5
    zb.write_polylines(str(out / "polylines2.zarrvectors"), pls, chunk_shape=cs, bounds=bounds,
                       vertex_attributes={"fa": fa}, object_attributes={"w": w}, geometry_type="polyline",
                       compressor="zstd")
    _dump(out, "polylines2", _polyline_doc("polylines2", "polyline", pls, fa, {"w": w}, {},
                                           {"base_bin_shape": None, "chunk_shape": list(cs)}))

    # graph: two objects, intra + cross-chunk edges, bins finer than chunks
    rng = np.random.default_rng(9)
    ang = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    ring = np.c_[50 + 25 * np.cos(ang), 50 + 25 * np.sin(ang), 45 + 10 * (np.arange(12) % 2)]
    blob = np.r_[rng.uniform(4, 46, (7, 3)), [[90.0, 10.0, 90.0]]]
    pos = np.r_[ring, blob].astype(np.float32)
    oids = np.r_[np.zeros(12, int), np.ones(8, int)]
    edges = np.array([[i, (i + 1) % 12] for i in range(12)] + [[0, 6], [3, 9]]
                     + [[12 + i, 13 + i] for i in range(7)] + [[12, 16]], dtype=np.int64)
    val = rng.random(len(pos)).astype(np.float32)
    zb.write_graph(str(out / "graph.zarrvectors"), pos, edges, chunk_shape=cs, bin_shape=(25.0,) * 3,
                   bounds=bounds, object_ids=oids, kind="graph", vertex_attributes={"val": val},
                   object_attributes={"score": np.array([0.5, -1.0], np.float32)})
    _dump(out, "graph", _graph_doc("graph", "graph", pos, edges, oids, {"val": val},
                                   {"object_attributes": {"score": [0.5, -1.0]}}))

    # skeleton: a trunk across chunks with two branches, (child, parent) edges, root 0
    trunk = np.c_[np.linspace(8, 92, 8), np.full(8, 30.0), np.full(8, 45.0)]
    b1 = np.c_[np.full(3, 44.0), np.linspace(40, 80, 3), np.full(3, 45.0)]
    b2 = np.c_[np.full(3, 80.0), np.full(3, 30.0), np.linspace(52, 90, 3)]
    pos = np.r_[trunk, b1, b2].astype(np.float32)
    edges = np.array([[i + 1, i] for i in range(7)] + [[8, 3], [9, 8], [10, 9], [11, 6], [12, 11], [13, 12]],
                     dtype=np.int64)
    radius = np.linspace(0.5, 2.0, len(pos)).astype(np.float32)
    oids = np.zeros(len(pos), int)
    zb.write_graph(str(out / "skeleton.zarrvectors"), pos, edges, chunk_shape=cs, bounds=bounds,
                   object_ids=oids, kind="skeleton", vertex_attributes={"radius": radius})
    _dump(out, "skeleton", _graph_doc("skeleton", "skeleton", pos, edges, oids, {"radius": radius},
                                      {"root_vertex": 0, "edge_convention": "(child, parent)"}))

    # mesh: a 5x5 sheet across 4 chunks + a tetrahedron in one chunk
    g = np.stack(np.meshgrid(np.linspace(12, 88, 5), np.linspace(12, 88, 5), indexing="ij"), -1).reshape(-1, 2)
    sheet = np.c_[g, np.full(len(g), 47.0)]
    faces = []
    for i in range(4):
        for j in range(4):
            a = i * 5 + j
            faces += [[a, a + 5, a + 1], [a + 1, a + 5, a + 6]]
    base = len(sheet)
    tet = np.array([[60, 60, 60], [72, 60, 60], [60, 72, 60], [60, 60, 72]], float)
    faces += [[base, base + 2, base + 1], [base, base + 1, base + 3], [base, base + 3, base + 2],
              [base + 1, base + 2, base + 3]]
    pos = np.r_[sheet, tet].astype(np.float32)
    faces = np.array(faces, dtype=np.int64)
    oids = np.r_[np.zeros(len(sheet), int), np.ones(4, int)]
    curv = np.cos(np.arange(len(pos)) * 0.4).astype(np.float32)
    zb.write_mesh(str(out / "mesh.zarrvectors"), pos, faces, chunk_shape=cs, bounds=bounds, object_ids=oids,
                  vertex_attributes={"curv": curv})
    _dump(out, "mesh", _graph_doc("mesh", "mesh", pos, faces, oids, {"curv": curv}, {}))

    # points with object ids and groups
    rng = np.random.default_rng(10)
    centers = rng.uniform(15, 85, (6, 3))
    pos = np.concatenate([c + rng.normal(0, 5, (10, 3)) for c in centers]).clip(0.5, 99.5).astype(np.float32)
    oids = np.repeat(np.arange(6), 10)
    size = rng.random(6).astype(np.float32)
    groups = {0: [0, 3], 1: [1, 2, 4], 2: [5]}
    zb.write_points(str(out / "points_groups.zarrvectors"), pos, chunk_shape=cs, bin_shape=(25.0,) * 3,
                    bounds=bounds, object_ids=oids, object_attributes={"size": size}, groups=groups)
    doc = {"store": "points_groups.zarrvectors", "kind": "point_cloud", "ndim": 3, "points": _f32(pos),
           "vertex_object_ids": oids.tolist(), "groups": {str(k): v for k, v in groups.items()},
           "objects": {str(o): {"vertex_indices": np.flatnonzero(oids == o).tolist(),
                                "vertices_sorted": _sorted_rows(pos[oids == o]),
                                "object_attributes": {"size": float(size[o])}} for o in range(6)},
           "bbox_queries": _bbox_vertices(pos, BOXES3)}
    _dump(out, "points_groups", doc)
