"""Seeded random cases for the differential test against zarr-vectors 0.9.2.

``make_cases(n)`` returns ``n`` cases; case ``i`` depends on its seed only, so
a failure reproduces with ``make_case(seed)`` alone.  Each case holds the
inputs of one store (every geometry; 2-, 3- and 4-D; float32/float64; bins or
not; negative bounds; non-cubic chunks; every compressor; sharded or not;
scalar, one- and multi-channel attributes; object attributes; groups; tiny and
empty stores) with coordinates pulled onto chunk/bin seams and the bounds, plus
closed query boxes (random, degenerate, outside, on seams).  The ground truth
helpers here compute answers from the inputs with numpy, never from a reader.
Nothing here imports pytest.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

GEOMETRIES = ("points", "polyline", "streamline", "line", "graph", "skeleton", "mesh")
SEQUENTIAL = ("polyline", "streamline", "line")
GZIP = [{"name": "gzip", "configuration": {"level": 1}}]
COMPRESSIONS = ("none", "zstd", "blosc", "gzip")
# chunk edges that float32 cannot hold exactly (3.3 / 1.1 is the seam case) and exact ones
CHUNK_SIZES = (2.5, 3.3, 4.0, 5.0, 6.6, 7.5)


@dataclass
class Case:
    """One store's inputs (``pos`` already in ``dtype``), its options and its query boxes.

    Vertices are numbered as the flat rows of ``pos``: polylines and lines are
    concatenated (``lens``), ``oid`` is each vertex's object id and ``conn``
    the connectivity rows in those numbers (edges, (child, parent) rows, faces,
    or consecutive pairs for polylines and lines).
    """

    seed: int
    geometry: str
    ndim: int
    dtype: str
    compression: str
    shard: int | None
    chunk: tuple
    bins: tuple | None
    bounds: tuple | None  # explicit (lo, hi) or None (inferred by the writers)
    pos: np.ndarray
    oid: np.ndarray | None  # None: a cloud without object ids
    lens: np.ndarray | None = None  # polylines / lines: vertices per object
    conn: np.ndarray | None = None
    attrs: dict = field(default_factory=dict)  # per vertex, (N,) or (N, C)
    link_attrs: dict = field(default_factory=dict)  # graphs/skeletons, per conn row
    obj_attrs: dict = field(default_factory=dict)  # per sorted distinct object id
    groups: dict = field(default_factory=dict)  # gid -> [object ids]
    group_attrs: dict = field(default_factory=dict)
    boxes: list = field(default_factory=list)
    tags: tuple = ()

    @property
    def name(self) -> str:
        bits = [f"s{self.seed}", self.geometry, f"{self.ndim}d", self.dtype[-2:], self.compression]
        bits += ["sh" if self.shard else "", "bins" if self.bins else "", *self.tags]
        return "-".join(b for b in bits if b)

    @property
    def object_ids(self) -> np.ndarray:
        """Sorted distinct object ids (empty for a cloud without ids)."""
        if self.oid is None:
            return np.zeros(0, np.int64)
        if self.lens is not None:
            return np.arange(len(self.lens), dtype=np.int64)
        return np.unique(self.oid)

    # ------------------------------------------------------------ writer calls
    def pieces(self, values: np.ndarray) -> list[np.ndarray]:
        """Per-vertex rows split per polyline."""
        return np.split(values, np.cumsum(self.lens)[:-1]) if len(self.lens) else []

    def common(self) -> dict:
        """Keyword arguments both writers spell the same way."""
        kw = {"chunk_shape": self.chunk, "dtype": self.dtype}
        if self.bins is not None:
            kw["bin_shape"] = self.bins
        if self.bounds is not None:
            kw["bounds"] = (list(self.bounds[0]), list(self.bounds[1]))
        if self.shard:
            kw["shard_shape"] = self.shard
        if self.obj_attrs:
            kw["object_attributes"] = self.obj_attrs
        if self.link_attrs:
            kw["link_attributes"] = self.link_attrs
        if self.groups:
            kw["groups"] = self.groups
            if self.group_attrs:
                kw["group_attributes"] = self.group_attrs
        return kw

    def _compressor(self):
        return {"none": None, "gzip": GZIP}.get(self.compression, self.compression)

    def ref_write(self, path) -> None:
        """Write the case with zarr-vectors 0.9.2's ``building.write_*``."""
        from zarr_vectors import building

        kw = self.common()
        comp = self._compressor()
        if comp is not None:
            kw["compressor"] = comp
        g = self.geometry
        va = self.attrs
        if g in ("polyline", "streamline"):
            va = {k: self.pieces(v) for k, v in va.items()}
        if g == "line":
            va = {k: v.reshape(len(self.lens), 2, *v.shape[1:]) for k, v in va.items()}
        if va:
            kw["vertex_attributes"] = va
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if g == "points":
                if self.oid is not None:
                    kw["object_ids"] = self.oid
                building.write_points(str(path), self.pos, **kw)
            elif g in ("polyline", "streamline"):
                building.write_polylines(str(path), self.pieces(self.pos), geometry_type=g, **kw)
            elif g == "line":
                building.write_lines(str(path), self.pos.reshape(-1, 2, self.ndim), **kw)
            elif g in ("graph", "skeleton"):
                building.write_graph(str(path), self.pos, self.conn, kind=g, object_ids=self.oid, **kw)
            else:
                building.write_mesh(str(path), self.pos, self.conn, object_ids=self.oid, **kw)

    def zvf_write(self, path) -> dict:
        """Write the same inputs with zvf's blocking writers."""
        import zvf

        kw = self.common()
        kw["compression"] = self._compressor()
        g = self.geometry
        if self.attrs:
            kw["attributes"] = (self.attrs if g != "line" else
                                {k: v.reshape(len(self.lens), 2, *v.shape[1:]) for k, v in self.attrs.items()})
        if g == "points":
            return zvf.write_points(str(path), self.pos, object_ids=self.oid, **kw)
        if g in ("polyline", "streamline"):
            return zvf.write_polylines(str(path), self.pieces(self.pos), geometry_type=g, **kw)
        if g == "line":
            return zvf.write_lines(str(path), self.pos.reshape(-1, 2, self.ndim), **kw)
        if g in ("graph", "skeleton"):
            return zvf.write_graph(str(path), self.pos, self.conn, geometry_type=g, object_ids=self.oid, **kw)
        return zvf.write_mesh(str(path), self.pos, self.conn, object_ids=self.oid, **kw)


# ---------------------------------------------------------------- generation


def _f32_floor(x: float) -> float:
    """The largest float32 value <= x (bounds that every float32 coordinate respects exactly)."""
    v = np.float32(x)
    return float(v if float(v) <= x else np.nextafter(v, np.float32(-np.inf)))


def _grid(rng, ndim: int):
    chunk = tuple(float(rng.choice(CHUNK_SIZES)) for _ in range(ndim))  # non-cubic as often as not
    r = rng.random()
    if r < 0.35:
        bins = None
    elif r < 0.5:
        bins = chunk
    else:
        bins = tuple(c / int(rng.choice([2, 3])) for c in chunk)
    lo = np.array([c * int(rng.integers(-3, 2)) + float(rng.choice([0.0, 0.0, -1.25, 0.5])) for c in chunk])
    hi = lo + np.array([c * float(rng.choice([1.0, 1.5, 2.0, 3.0])) for c in chunk])
    lo = np.array([-_f32_floor(-v) for v in lo])  # float32-exact corners
    hi = np.array([_f32_floor(v) for v in hi])
    return chunk, bins, lo, hi


def _seam_values(chunk, bins, lo, hi) -> list[np.ndarray]:
    """Per axis: chunk and bin edges inside [lo, hi], plus both bounds."""
    out = []
    for d in range(len(chunk)):
        step = bins[d] if bins is not None else chunk[d]
        k = np.arange(np.ceil(lo[d] / step) - 1, np.floor(hi[d] / step) + 2)
        vals = np.concatenate([k * step, [lo[d], hi[d]]])
        out.append(vals[(vals >= lo[d]) & (vals <= hi[d])])
    return out


def _snap(rng, pts: np.ndarray, seams, frac: float) -> np.ndarray:
    """Put a fraction of the coordinates exactly on seams/bounds (as float64, cast later)."""
    pts = pts.copy()
    if pts.size == 0:
        return pts
    mask = rng.random(pts.shape) < frac
    for d in range(pts.shape[1]):
        m = mask[:, d]
        pts[m, d] = rng.choice(seams[d], int(m.sum()))
    return pts


def _cast(pts: np.ndarray, dtype: str, lo, hi) -> np.ndarray:
    """Cast to ``dtype`` and keep every coordinate inside [lo, hi] (0.9.2 refuses points outside)."""
    out = pts.astype(dtype)
    return np.clip(out, np.asarray(lo, dtype), np.asarray(hi, dtype))


def _walk(rng, n: int, lo, hi, step) -> np.ndarray:
    start = rng.uniform(lo, hi)
    return np.clip(start + np.cumsum(rng.normal(0.0, 1.0, (n, len(lo))) * step, axis=0), lo, hi)


def _vertex_attributes(rng, n: int, kinds: list[str]) -> dict:
    out = {}
    for k in kinds:
        if k == "scalar":
            out["s"] = rng.random(n).astype(np.float32)
        elif k == "multi":
            out["rgb"] = rng.random((n, 3)).astype(np.float32)
        elif k == "onechan":
            out["one"] = rng.random((n, 1)).astype(np.float32)
        elif k == "int":
            out["label"] = rng.integers(-1000, 1000, n).astype(np.int32)
    return out


def _object_attributes(rng, count: int) -> dict:
    pick = rng.random()
    if pick < 0.35:
        return {}
    if pick < 0.7:
        return {"w": rng.random(count)}
    return {"w": rng.random(count).astype(np.float32), "v": rng.integers(0, 50, (count, 2)).astype(np.int32)}


def _groups(rng, ids: np.ndarray) -> tuple[dict, dict]:
    if len(ids) == 0 or rng.random() < 0.4:
        return {}, {}
    n = int(rng.integers(1, 4))
    groups = {g: sorted(int(x) for x in rng.choice(ids, int(rng.integers(1, len(ids) + 1)), replace=False))
              for g in range(n)}
    gattrs = {"gw": rng.random(n).astype(np.float32)} if rng.random() < 0.6 else {}
    return groups, gattrs


def _forest(rng, sizes) -> tuple[np.ndarray, np.ndarray]:
    """(child, parent) rows of one random tree per size; trees contiguous, each root first,
    every parent made before its child; object id per vertex (one id per tree)."""
    edges, oid, at = [], [], 0
    for t, s in enumerate(sizes):
        for i in range(at + 1, at + s):
            edges.append((i, int(rng.integers(max(at, i - 3), i))))
        oid += [3 * t + 1] * s
        at += s
    return np.array(edges, np.int64).reshape(-1, 2), np.array(oid, np.int64)


def make_case(seed: int, geometry: str | None = None) -> Case:
    """Case number ``seed`` (its geometry cycles through GEOMETRIES unless given)."""
    rng = np.random.default_rng([20261122, seed])
    g = geometry or GEOMETRIES[seed % len(GEOMETRIES)]
    ndim = int(rng.choice([2, 3, 4])) if g == "points" else int(rng.choice([2, 3, 3, 2, 4]))
    dtype = "float64" if rng.random() < 0.3 else "float32"
    compression = str(rng.choice(COMPRESSIONS))
    shard = int(rng.choice([2, 3])) if rng.random() < 0.35 else None
    chunk, bins, lo, hi = _grid(rng, ndim)
    size = str(rng.choice(["normal"] * 8 + ["tiny", "empty"]))
    seams = _seam_values(chunk, bins, lo, hi)
    frac = float(rng.choice([0.0, 0.2, 0.5]))
    explicit = rng.random() < 0.7 or size == "empty"
    kinds = [k for k in ("scalar", "multi", "onechan", "int") if rng.random() < 0.35]
    tags = [size] if size != "normal" else []
    if frac:
        tags.append("seams")
    case = Case(seed=seed, geometry=g, ndim=ndim, dtype=dtype, compression=compression, shard=shard,
                chunk=chunk, bins=bins, bounds=(lo.tolist(), hi.tolist()) if explicit else None,
                pos=np.zeros((0, ndim), dtype), oid=None, tags=tuple(tags))
    step = np.asarray(chunk) * 0.6

    if g == "points":
        n = {"tiny": 1, "empty": 0}.get(size, int(rng.integers(20, 90)))
        case.pos = _cast(_snap(rng, rng.uniform(lo, hi, (n, ndim)), seams, frac), dtype, lo, hi)
        if n and rng.random() < 0.45:
            k = int(rng.integers(1, 6))
            case.oid = np.concatenate([np.arange(k), rng.integers(0, k, max(n - k, 0))])[:n].astype(np.int64)
            rng.shuffle(case.oid)
            case.obj_attrs = _object_attributes(rng, len(np.unique(case.oid)))
            case.groups, case.group_attrs = _groups(rng, np.unique(case.oid))
        case.attrs = _vertex_attributes(rng, n, kinds)
    elif g in ("polyline", "streamline"):
        if size == "empty":
            lens = np.array([0, 0])  # 0.9.2 refuses an empty list, not empty polylines
        elif size == "tiny":
            lens = np.array([1])
        else:
            lens = rng.integers(0, 12, int(rng.integers(2, 7)))
            lens[int(rng.integers(len(lens)))] = max(2, lens.max())
        pts = np.concatenate([_walk(rng, int(m), lo, hi, step) for m in lens]) if lens.sum() else np.zeros((0, ndim))
        case.pos = _cast(_snap(rng, pts, seams, frac), dtype, lo, hi)
        case.lens = lens.astype(np.int64)
        case.oid = np.repeat(np.arange(len(lens)), lens).astype(np.int64)
        case.conn = _sequential_pairs(case.lens)
        case.attrs = _vertex_attributes(rng, int(lens.sum()), kinds)
        case.obj_attrs = _object_attributes(rng, len(lens))
        case.groups, case.group_attrs = _groups(rng, np.arange(len(lens)))
    elif g == "line":
        m = {"tiny": 1, "empty": 0}.get(size, int(rng.integers(3, 20)))
        a = rng.uniform(lo, hi, (m, ndim))
        b = np.clip(a + rng.normal(0.0, 1.0, (m, ndim)) * step, lo, hi)
        pts = np.stack([a, b], axis=1).reshape(2 * m, ndim)
        case.pos = _cast(_snap(rng, pts, seams, frac), dtype, lo, hi)
        case.lens = np.full(m, 2, np.int64)
        case.oid = np.repeat(np.arange(m), 2).astype(np.int64)
        case.conn = _sequential_pairs(case.lens)
        case.attrs = _vertex_attributes(rng, 2 * m, kinds)
        case.obj_attrs = _object_attributes(rng, m)
    elif g == "skeleton":
        # 0.9.2 cannot write a skeleton without vertices: "empty" means one lone root there
        sizes = {"tiny": [1], "empty": [1]}.get(size, list(rng.integers(2, 12, int(rng.integers(1, 4)))))
        case.conn, case.oid = _forest(rng, sizes)
        n = int(sum(sizes))
        pts = np.concatenate([_walk(rng, int(s), lo, hi, step) for s in sizes]) if n else np.zeros((0, ndim))
        case.pos = _cast(_snap(rng, pts, seams, frac), dtype, lo, hi)
        case.attrs = _vertex_attributes(rng, n, kinds)
        if len(case.conn) and rng.random() < 0.4:
            case.link_attrs = {"radius": rng.random(len(case.conn)).astype(np.float32)}
        case.obj_attrs = _object_attributes(rng, len(sizes))
    else:  # graph, mesh
        n = {"tiny": 1 if g == "graph" else 3, "empty": 0}.get(size, int(rng.integers(8, 40)))
        pts = _walk(rng, n, lo, hi, step) if n else np.zeros((0, ndim))
        case.pos = _cast(_snap(rng, pts, seams, frac), dtype, lo, hi)
        ids = np.sort(rng.choice(40, int(rng.integers(1, 4)), replace=False)) if n else np.zeros(1, np.int64)
        case.oid = ids[rng.integers(0, len(ids), n)].astype(np.int64) if size == "normal" else np.full(n, ids[0])
        if g == "graph":
            m = 0 if n < 2 else int(rng.integers(1, 2 * n))
            a = rng.integers(0, max(n - 3, 1), m)
            conn = np.stack([a, np.minimum(a + rng.integers(0, 4, m), n - 1)], axis=1) if m else np.zeros((0, 2))
            conn[: m // 2] = conn[: m // 2, ::-1]
            if m and rng.random() < 0.4:
                case.link_attrs = {"w": rng.random(m).astype(np.float32)}
        else:
            m = 0 if n < 3 else int(rng.integers(1, 2 * n))
            a = rng.integers(0, n - 2, m) if m else np.zeros(0, np.int64)
            tri = np.stack([a, a + 1, a + 2], axis=1)
            conn = np.take_along_axis(tri, rng.permuted(np.tile([0, 1, 2], (m, 1)), axis=1), axis=1)
        case.conn = np.asarray(conn, np.int64).reshape(-1, 2 if g == "graph" else 3)
        case.attrs = _vertex_attributes(rng, n, kinds)
        case.obj_attrs = _object_attributes(rng, len(np.unique(case.oid))) if n else {}
    case.boxes = _boxes(rng, case, seams, lo, hi)
    return case


def _sequential_pairs(lens: np.ndarray) -> np.ndarray:
    """(i, i+1) rows inside each object of a concatenation."""
    n = int(lens.sum())
    starts = np.cumsum(lens) - lens
    last = np.zeros(n, bool)
    last[(starts + lens - 1)[lens > 0]] = True
    i = np.flatnonzero(~last)
    return np.stack([i, i + 1], axis=1).astype(np.int64)


def _boxes(rng, case: Case, seams, lo, hi) -> list[tuple[np.ndarray, np.ndarray]]:
    """Closed query boxes: random, whole bounds, degenerate at a vertex, zero-width slabs on
    seams, seam-to-seam, outside the bounds, straddling a bound."""
    d = case.ndim
    span = hi - lo
    out = []
    for _ in range(3):
        a, b = rng.uniform(lo - 0.1 * span, hi + 0.1 * span, (2, d))
        out.append((np.minimum(a, b), np.maximum(a, b)))
    out.append((lo.copy(), hi.copy()))
    if len(case.pos):
        p = case.pos[int(rng.integers(len(case.pos)))].astype(np.float64)
        out.append((p.copy(), p.copy()))  # degenerate: exactly one stored vertex (or its duplicates)
        q = case.pos[int(rng.integers(len(case.pos)))].astype(np.float64)
        out.append((np.minimum(p, q), np.maximum(p, q)))  # corners on stored coordinates
    slab_lo, slab_hi = lo - 1.0, hi + 1.0
    ax = int(rng.integers(d))
    slab_lo[ax] = slab_hi[ax] = float(rng.choice(seams[ax]))  # zero-width slab on a seam
    out.append((slab_lo, slab_hi))
    a = np.array([rng.choice(s) for s in seams])
    b = np.array([rng.choice(s) for s in seams])
    out.append((np.minimum(a, b), np.maximum(a, b)))  # seam to seam
    top = hi.copy()
    out.append((top - 0.25 * span, top))  # up to the upper bound exactly
    out.append((hi + 1.0, hi + 5.0))  # outside
    out.append((lo - span - 2.0, lo - 0.5))  # outside, below the lower corner
    out.append((lo - 3.0, lo + 0.3 * span))  # straddling the lower bound
    return [(np.asarray(a, np.float64), np.asarray(b, np.float64)) for a, b in out]


def make_cases(n: int, start: int = 0) -> list[Case]:
    return [make_case(s) for s in range(start, start + n)]


# ---------------------------------------------------------------- ground truth


def inside(pos: np.ndarray, lo, hi) -> np.ndarray:
    """Closed-box membership, exact: the stored values as float64 against the box."""
    p = np.asarray(pos, np.float64)
    return np.all((p >= lo) & (p <= hi), axis=1)


def conn_coords(pos: np.ndarray, conn) -> np.ndarray:
    """Connectivity as rows of endpoint coordinates (K, L * ndim): compares edges/faces whatever
    the vertex numbering, direction and winding kept."""
    conn = np.zeros((0, 2), np.int64) if conn is None else np.asarray(conn, np.int64)
    p = np.asarray(pos, np.float64)
    return p[conn].reshape(len(conn), conn.size // max(len(conn), 1) * p.shape[1])
