"""Reference stores written by zarr-vectors 0.9.2, with numpy ground truth.

``reference_stores(tmp_root)`` returns a directory holding
``<name>.zarrvectors`` + ``<name>.expected.json`` for every store a test
asks for.  It uses the shared fixtures (/work/shared/fixtures/ref-0.9.2, or
``ZVF_REF_FIXTURES``) when they hold all the requested names, and otherwise
writes equivalent stores into ``tmp_root`` with the installed reference
package (``ZVF_REF_GENERATE=1`` forces that even when the fixtures exist).
Generated stores are cached per process, so several conftests can share them.

Ground truth comes from the inputs through numpy only, never from a reader,
in the same JSON shape as the shared fixtures (only the keys tests use):

* ``points`` (N, ndim) exact float32 values; ``attributes`` {name: rows}
* ``bbox_queries``: [{lo, hi, count, vertex_indices, vertices_sorted}] (closed box)
* with object ids: ``vertex_object_ids``, ``objects`` {oid: {vertex_indices,
  vertices_sorted, object_attributes}}; ``groups`` {gid: [oids]}, ``group_attributes``
* ``chunk_shape``, ``base_bin_shape``, ``bounds``, ``ndim``, ``kind``, ``store``

To add a kind of store (say an object fixture), decorate a function
``fn(out_dir: Path, name: str) -> dict`` that writes ``out_dir/<name>.zarrvectors``
and returns the expected dict with ``@generator("name")``; ``reference_stores``
writes the JSON.  Nothing here imports pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

__all__ = [
    "FIXTURES",
    "GENERATORS",
    "POINT_STORES",
    "bbox_truth",
    "f32",
    "generator",
    "load_expected",
    "reference_stores",
    "sorted_rows",
]

from tests.conftest import REF_FIXTURES as FIXTURES

POINT_STORES = ("points3d", "points3d_sharded_zstd", "points2d", "points_groups")

GENERATORS: dict[str, Callable[[Path, str], dict]] = {}
_lock = threading.Lock()
_gen_dir: Path | None = None  # where this process generates stores (first tmp_root asked for)


def generator(name: str):
    """Register ``fn(out_dir, name) -> expected dict`` as the way to make store ``name``."""

    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _complete(directory: Path, names: Iterable[str]) -> bool:
    return all((directory / f"{n}.zarrvectors").is_dir() and (directory / f"{n}.expected.json").is_file()
               for n in names)


def reference_stores(tmp_root, names: Iterable[str] | None = None) -> Path:
    """A directory with ``<name>.zarrvectors`` and ``<name>.expected.json`` for each name.

    ``names`` defaults to every registered generator.  The shared fixture
    directory is returned when it has them all (and ZVF_REF_GENERATE is not
    set); otherwise the missing stores are generated under ``tmp_root`` (the
    first one given in this process; later calls add to that directory).
    """
    global _gen_dir
    names = list(GENERATORS if names is None else names)
    if not os.environ.get("ZVF_REF_GENERATE") and _complete(FIXTURES, names):
        return FIXTURES
    unknown = [n for n in names if n not in GENERATORS]
    if unknown:
        raise KeyError(f"no generator for reference stores {unknown} (known: {sorted(GENERATORS)})")
    with _lock:
        if _gen_dir is None or not _gen_dir.is_dir():
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
