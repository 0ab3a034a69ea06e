"""One input per object geometry and option set, written by zarr-vectors 0.9.2 and by zvf: the cases the
object writers' byte-compatibility tests (and the tests built on them) compare."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

import zvf
from zvf.write.quirks import reference_quirks

CHUNK = 40.0


@dataclass(frozen=True)
class Options:
    ndim: int
    compression: str | None
    shard: int | None
    bins: str  # "none" | "finer" | "chunk"
    bounds: str  # "negative" | "inferred"


# Every compressor, sharding, 2-D and 3-D, bins finer than / equal to / absent from the chunks,
# bounds below zero (chunk_grid_origin) and inferred from the data -- each at least once per geometry.
OPTIONS = {
    "2d-zstd-finebins": Options(2, "zstd", None, "finer", "inferred"),
    "3d-blosc-chunkbins": Options(3, "blosc", None, "chunk", "negative"),
    "2d-raw-sharded": Options(2, None, 2, "none", "negative"),
    "3d-zstd-sharded-finebins": Options(3, "zstd", 2, "finer", "inferred"),
}


@dataclass
class Case:
    """One input: the zvf call and the equivalent 0.9.2 call."""

    geometry: str
    args: tuple
    kwargs: dict  # zvf spelling
    multichannel: tuple = ()  # vertex attribute names with C > 1

    def zvf_write(self, path, **extra):
        fn = {"line": zvf.write_lines, "graph": zvf.write_graph, "skeleton": zvf.write_graph,
              "mesh": zvf.write_mesh}.get(self.geometry, zvf.write_polylines)
        kw = {"dtype": "float32", **self.kwargs, **extra}  # 0.9.2's default (zvf keeps float64 input)
        if self.geometry in ("polyline", "streamline"):
            kw["geometry_type"] = self.geometry
        if self.geometry in ("graph", "skeleton"):
            kw["geometry_type"] = self.geometry
        return fn(str(path), *self.args, **kw)

    def ref_write(self, path):
        from zarr_vectors import building

        kw = dict(self.kwargs)
        if "attributes" in kw:
            kw["vertex_attributes"] = kw.pop("attributes")
        if "compression" in kw:
            kw["compressor"] = kw.pop("compression")
        fn = {"line": building.write_lines, "graph": building.write_graph, "skeleton": building.write_graph,
              "mesh": building.write_mesh}.get(self.geometry, building.write_polylines)
        if self.geometry in ("polyline", "streamline"):
            kw["geometry_type"] = self.geometry
        if self.geometry in ("graph", "skeleton"):
            kw["kind"] = self.geometry
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(str(path), *self.args, **kw)


def random_walks(rng, lens, ndim, lo, hi, step):
    """One random walk per length in ``lens``, clipped to [lo, hi] in every dimension."""
    out = []
    for n in lens:
        start = rng.uniform(lo + 10, hi - 10, ndim)
        out.append(np.clip(start + np.cumsum(rng.normal(0, step, (n, ndim)), axis=0), lo, hi))
    return out


def forest(rng, sizes):
    """(child, parent) edges of one random tree per size, vertex labels shuffled; object id per
    tree; ``label[i]`` is the vertex made i-th (parents are made shortly before their children)."""
    n = sum(sizes)
    label = rng.permutation(n)
    edges, oid, at = [], np.empty(n, np.int64), 0
    for t, s in enumerate(sizes):
        ids = np.arange(at, at + s)
        parents = [rng.integers(max(at, i - 4), i) for i in ids[1:]]
        edges += list(zip(label[ids[1:]], label[parents]))
        oid[label[ids]] = 10 * t + 2
        at += s
    e = np.array(edges, np.int64)
    return e[rng.permutation(len(e))], oid, label


def make_case(geometry: str, opt: Options, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    d = opt.ndim
    lo, hi = -55.0, 95.0
    kw: dict = {"chunk_shape": (CHUNK,) * d, "compression": opt.compression, "shard_shape": opt.shard}
    if opt.bins == "finer":
        kw["bin_shape"] = (CHUNK / 2,) * d
    elif opt.bins == "chunk":
        kw["bin_shape"] = (CHUNK,) * d
    if opt.bounds == "negative":
        kw["bounds"] = ([-60.0] * d, [100.0] * d)
    if geometry in ("polyline", "streamline"):
        lens = [12, 0, 1, 30, 7, 20, 5, 9]
        polys = random_walks(rng, lens, d, lo, hi, 9.0)
        if geometry == "streamline":
            polys = [p.astype(np.float32) for p in polys]
        kw["attributes"] = {"fa": [rng.random(n).astype(np.float32) for n in lens],
                            "rgb": [rng.random((n, 3)).astype(np.float32) for n in lens]}
        kw["object_attributes"] = {"length": rng.random(len(lens)),
                                   "label": rng.integers(0, 9, len(lens)).astype(np.int32)}
        kw["groups"] = {0: [0, 3], 2: [1, 5, 7]}
        kw["group_attributes"] = {"w": np.array([1.5, 0.0, -2.0], np.float32)}
        return Case(geometry, (polys,), kw, ("rgb",))
    if geometry == "line":
        m = 24
        a = rng.uniform(lo, hi, (m, d))
        b = np.clip(a + rng.normal(0, 15, (m, d)), lo, hi)
        b[::5] = a[::5] + 0.25  # some lines stay inside their chunk
        kw["attributes"] = {"t": rng.random((m, 2)).astype(np.float32),
                            "c": rng.integers(0, 200, (m, 2, 2)).astype(np.uint8)}
        kw["object_attributes"] = {"len": rng.random(m)}
        return Case(geometry, (np.stack([a, b], axis=1).astype(np.float32),), kw)
    # vertices along a random walk, so that index-near vertices are near in space: most links reach
    # a neighbouring chunk at most (fewer offsets arrays, faster tests); a few long ones reach further
    n = 45
    walk = np.clip(rng.uniform(lo + 20, hi - 20, d) + np.cumsum(rng.normal(0, 10, (n, d)), axis=0), lo, hi)
    pos = walk.astype(np.float32)
    kw["attributes"] = {"r": rng.random(n).astype(np.float32), "xyz": rng.random((n, 3)).astype(np.float32)}
    if geometry == "graph":
        a = rng.integers(0, n - 4, 40)
        e = np.stack([a, a + rng.integers(1, 4, 40)], axis=1)
        e[:20] = e[:20, ::-1]  # both directions
        e[0] = [4, 4]  # a self loop
        e[1] = [0, n - 1]  # a long edge
        kw["object_ids"] = rng.integers(0, 3, n) * 4 + 1
        kw["link_attributes"] = {"w": rng.random(40).astype(np.float32),
                                 "pair": rng.integers(-9, 9, (40, 2)).astype(np.int16)}
        kw["object_attributes"] = {"score": rng.random(3).astype(np.float32)}
        return Case(geometry, (pos, e), kw, ("xyz",))
    if geometry == "skeleton":
        e, oid, label = forest(rng, [20, 15, 10])
        pos = pos[np.argsort(label)]  # vertex label[i] sits at walk[i]: trees grow along the walk
        kw["object_ids"] = oid
        kw["link_attributes"] = {"radius": rng.random(len(e)).astype(np.float32)}
        kw["object_attributes"] = {"kind": np.array([1, 2, 3], np.uint16)}
        return Case(geometry, (pos, e), kw, ("xyz",))
    a = rng.integers(0, n - 3, 40)
    faces = np.stack([a, a + 1, a + 2], axis=1)
    faces = np.take_along_axis(faces, rng.permuted(np.tile([0, 1, 2], (40, 1)), axis=1), axis=1)  # any winding
    faces[0] = [0, n // 2, n - 1]  # a large face
    kw["object_ids"] = rng.integers(0, 2, n) * 7
    kw["object_attributes"] = {"area": rng.random(2)}
    return Case("mesh", (pos, faces), kw, ("xyz",))


def write_three(case: Case, base, geometry: str) -> dict:
    """The case written by 0.9.2 ("ref"), by zvf with the reference's quirks and object-index layout
    ("same": expected to be the same bytes), and by zvf with its defaults ("mine")."""
    paths = {k: base / k / f"{geometry}.zarrvectors" for k in ("same", "mine", "ref")}
    for p in paths.values():
        p.parent.mkdir()
    case.ref_write(paths["ref"])
    with reference_quirks():
        case.zvf_write(paths["same"], object_index_layout="reference")
    case.zvf_write(paths["mine"])
    return paths
