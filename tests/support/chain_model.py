"""A numpy model of what a ZVF store's level 0 must read as, and the inputs that build it.

The chain tests (tests/lifecycle/test_chains.py) write, append, rechunk, convert... a store and
keep this model in step; after every operation the store must read as the model says.  The model
is one table of vertices (positions, vertex attributes, owning object id) plus, per object, its
connectivity (polyline order, graph/skeleton edges, mesh faces as indices into the object's own
rows, in table order), the object and group tables and the root attributes the store must carry.

Everything here is plain numpy: no zvf internals, so a bug in zvf cannot hide in the oracle.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

KINDS = ("point_cloud", "point_ids", "polyline", "streamline", "line", "graph", "skeleton", "mesh")
"""What a machine run writes: ``point_ids`` is a point cloud with object ids (store geometry ``point_cloud``)."""
SEQUENTIAL = ("polyline", "streamline", "line")
LINKED = ("graph", "skeleton", "mesh")
NDIM = 3


def store_geometry(kind: str) -> str:
    return "point_cloud" if kind == "point_ids" else kind


def has_ids(kind: str) -> bool:
    return kind != "point_cloud"


# --------------------------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class AttrSpec:
    name: str
    dtype: str
    channels: int | None  # None: (N,), else (N, channels)

    def values(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = (n,) if self.channels is None else (n, self.channels)
        dt = np.dtype(self.dtype)
        if dt.kind == "f":
            # halves and quarters are exact in every float dtype, so means and round trips stay comparable
            return (rng.integers(-400, 400, shape) / 4.0).astype(dt)
        if dt.kind == "b":
            return rng.integers(0, 2, shape).astype(dt)
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -30000), min(info.max, 30000) + 1, shape).astype(dt)


@dataclass(frozen=True)
class DataSpec:
    """What every piece of one machine run shares: geometry, dtypes, attribute names, extent."""

    kind: str
    dtype: str  # stored position dtype
    vattrs: tuple[AttrSpec, ...]
    oattrs: tuple[AttrSpec, ...]
    gattrs: tuple[AttrSpec, ...]
    lo: tuple[float, ...]
    size: float
    step: float | None  # positions on a lattice of this step (boundary hits), or uniform


# --------------------------------------------------------------------------------------------- the model
@dataclass
class Model:
    """Level 0 of the store as it must read."""

    spec: DataSpec
    positions: np.ndarray  # (N, 3) of spec.dtype
    attrs: dict[str, np.ndarray]  # vertex attributes, row-aligned
    owners: np.ndarray | None  # (N,) object id per row, None for a point cloud without ids
    ids: np.ndarray  # (P,) every object id the index lists, ascending (may own no rows)
    links: dict[int, np.ndarray] = field(default_factory=dict)  # object id -> (m, 2|3) local row indices
    oattrs: dict[str, np.ndarray] = field(default_factory=dict)  # aligned with ids
    groups: list[np.ndarray] = field(default_factory=list)
    gattrs: dict[str, np.ndarray] = field(default_factory=dict)  # aligned with groups
    root_attrs: dict[str, Any] = field(default_factory=dict)  # attributes the root must carry

    @property
    def kind(self) -> str:
        return self.spec.kind

    def copy(self) -> Model:
        return copy.deepcopy(self)

    def rows_of(self, oid: int) -> np.ndarray:
        assert self.owners is not None
        return np.flatnonzero(self.owners == oid)

    def extended(self, piece: Piece, shift: int) -> Model:
        """This model with ``piece`` appended, its object and group ids shifted by ``shift``."""
        out = self.copy()
        out.positions = np.concatenate([self.positions, piece.positions]).astype(self.spec.dtype)
        out.attrs = {k: np.concatenate([v, piece.attrs[k]]) for k, v in self.attrs.items()}
        if self.owners is not None:
            out.owners = np.concatenate([self.owners, piece.owners + shift])
            out.ids = np.concatenate([self.ids, piece.ids + shift])
            order = np.argsort(out.ids, kind="stable")
            out.ids = out.ids[order]
            out.oattrs = {k: np.concatenate([v, piece.oattrs[k]])[order] for k, v in self.oattrs.items()}
            out.links.update({oid + shift: v for oid, v in piece.links.items()})
        out.groups = self.groups + [g + shift for g in piece.groups]
        out.gattrs = {k: np.concatenate([v, piece.gattrs[k]]) for k, v in self.gattrs.items()}
        return out


@dataclass
class Piece:
    """One write's or append's input, in the model's terms (ids as given to the writer)."""

    positions: np.ndarray
    attrs: dict[str, np.ndarray]
    owners: np.ndarray | None
    ids: np.ndarray
    links: dict[int, np.ndarray]
    oattrs: dict[str, np.ndarray]
    groups: list[np.ndarray]
    gattrs: dict[str, np.ndarray]

    def as_model(self, spec: DataSpec) -> Model:
        """The store one write of this piece makes (no groups: no group attribute arrays either)."""
        return Model(spec, self.positions, dict(self.attrs), self.owners, self.ids, dict(self.links),
                     dict(self.oattrs), list(self.groups), dict(self.gattrs) if self.groups else {})

    # ----------------------------------------------------------------------- writer arguments
    def writer_call(self, spec: DataSpec, *, append: bool, store_gattrs: bool = False) -> tuple[str, tuple, dict]:
        """(writer or append method name, positional args, keywords) that give this piece.

        An append passes group attributes exactly when the store has them (``store_gattrs``): zvf
        wants the store's names, also when the append adds no group."""
        kind = spec.kind
        kw: dict[str, Any] = {}
        if spec.vattrs:
            kw["attributes"] = self._vertex_attrs(kind)
        if spec.oattrs and has_ids(kind):
            kw["object_attributes"] = dict(self.oattrs)
        if self.groups:
            kw["groups"] = {g: members for g, members in enumerate(self.groups)}
        if spec.gattrs and (store_gattrs if append else bool(self.groups)):
            kw["group_attributes"] = dict(self.gattrs)
        pos = self.positions
        if kind in ("point_cloud", "point_ids"):
            if kind == "point_ids":
                kw["object_ids"] = self.owners
            return ("append_points" if append else "write_points"), (pos,), kw
        if kind in ("polyline", "streamline"):
            if not append:
                kw["geometry_type"] = kind
            return ("append_polylines" if append else "write_polylines"), (self.polylines(),), kw
        if kind == "line":
            return ("append_lines" if append else "write_lines"), (pos.reshape(-1, 2, NDIM),), kw
        assert self.owners is not None
        kw["object_ids"] = self.owners
        glinks = [self.rows_of(oid)[self.links[oid]] for oid in self.ids if len(self.links[oid])]
        width = 3 if kind == "mesh" else 2
        glob = np.concatenate(glinks).astype(np.int64) if glinks else np.zeros((0, width), np.int64)
        if kind == "mesh":
            return ("append_mesh" if append else "write_mesh"), (pos, glob), kw
        if not append:
            kw["geometry_type"] = kind
        return ("append_graph" if append else "write_graph"), (pos, glob), kw

    def rows_of(self, oid: int) -> np.ndarray:
        assert self.owners is not None
        return np.flatnonzero(self.owners == oid)

    def polylines(self) -> list[np.ndarray]:
        return [self.positions[self.rows_of(oid)] for oid in self.ids]

    def _vertex_attrs(self, kind: str) -> dict[str, Any]:
        if kind in ("polyline", "streamline"):
            return {k: [v[self.rows_of(oid)] for oid in self.ids] for k, v in self.attrs.items()}
        if kind == "line":
            return {k: v.reshape((-1, 2, *v.shape[1:])) for k, v in self.attrs.items()}
        return dict(self.attrs)


# --------------------------------------------------------------------------------------------- generators
def _coords(rng: np.random.Generator, spec: DataSpec, n: int, lo=None, size=None) -> np.ndarray:
    lo = np.asarray(spec.lo if lo is None else lo, np.float64)
    size = spec.size if size is None else size
    if spec.step:
        cells = max(1, int(size / spec.step))
        p = lo + rng.integers(0, cells + 1, (n, NDIM)) * spec.step
    else:
        p = lo + rng.uniform(0, size, (n, NDIM))
    return p.astype(spec.dtype)


def _walk(rng: np.random.Generator, spec: DataSpec, n: int) -> np.ndarray:
    """A polyline: a random walk starting inside the extent (steps of about an eighth of it)."""
    start = _coords(rng, spec, 1).astype(np.float64)
    steps = rng.normal(0, spec.size / 8, (n, NDIM))
    steps[:1] = 0
    p = start + np.cumsum(steps, axis=0)
    if spec.step:
        p = np.round(p / spec.step) * spec.step
    return p.astype(spec.dtype)


def make_piece(rng: np.random.Generator, spec: DataSpec, scale: int, first_id: int = 0) -> Piece:
    """A random input of about ``scale`` vertices (objects: a few objects of a few vertices).

    ``first_id`` is where the given ids start (point clouds with ids: appended ids must be new);
    polylines/lines number their objects from it, graphs/meshes draw distinct ids above it.
    """
    kind = spec.kind
    if kind == "point_cloud":
        n = scale
        pos = _coords(rng, spec, n)
        return Piece(pos, {a.name: a.values(rng, n) for a in spec.vattrs}, None, np.zeros(0, np.int64), {}, {}, [],
                     {})
    if kind == "point_ids":
        n = scale
        pos = _coords(rng, spec, n)
        nobj = int(rng.integers(1, max(2, n // 4) + 1))
        ids = np.unique(first_id + rng.choice(3 * nobj + 1, size=nobj, replace=False)).astype(np.int64)
        owners = ids[rng.integers(0, len(ids), n)] if n else np.zeros(0, np.int64)
        ids = np.unique(owners) if n else ids[:0]
        return _tables(rng, spec, Piece(pos, {a.name: a.values(rng, n) for a in spec.vattrs}, owners, ids, {}, {}, [],
                                        {}))
    nobj = int(rng.integers(1, max(2, scale // 5) + 1))
    parts, links, owners = [], {}, []
    if kind in SEQUENTIAL:
        ids = np.arange(first_id, first_id + nobj, dtype=np.int64)
    else:
        ids = np.sort(first_id + rng.choice(3 * nobj + 1, size=nobj, replace=False)).astype(np.int64)
    for oid in ids:
        if kind == "line":
            n = 2
        elif kind in SEQUENTIAL:
            n = int(rng.integers(0 if rng.random() < 0.1 else 1, 9))  # now and then an empty polyline
        else:
            n = int(rng.integers(2 if kind != "mesh" else 3, 12))
        if kind in SEQUENTIAL:
            p = _walk(rng, spec, n)
        else:
            corner = _coords(rng, spec, 1)[0].astype(np.float64)
            p = _coords(rng, spec, n, lo=corner - spec.size / 6, size=spec.size / 3)
        parts.append(p)
        owners.append(np.full(n, oid, np.int64))
        if kind in LINKED:
            links[int(oid)] = _links(rng, kind, n)
    pos = np.concatenate(parts).astype(spec.dtype) if parts else np.zeros((0, NDIM), spec.dtype)
    n = len(pos)
    piece = Piece(pos, {a.name: a.values(rng, n) for a in spec.vattrs}, np.concatenate(owners), ids, links, {}, [], {})
    return _tables(rng, spec, piece)


def _links(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "skeleton":  # a tree: (child, parent), one root (row 0)
        parent = np.array([rng.integers(0, i) for i in range(1, n)], np.int64)
        return np.stack([np.arange(1, n), parent], axis=1) if n > 1 else np.zeros((0, 2), np.int64)
    if kind == "graph":
        pairs = {tuple(sorted(rng.choice(n, 2, replace=False).tolist())) for _ in range(int(rng.integers(1, 2 * n)))}
        return np.array(sorted(pairs), np.int64).reshape(-1, 2)
    tris = {tuple(rng.choice(n, 3, replace=False).tolist()) for _ in range(int(rng.integers(1, 2 * n)))}
    # one winding per vertex set (a face and its mirror are different faces, but keep the model simple)
    seen, faces = set(), []
    for t in sorted(tris):
        if frozenset(t) not in seen:
            seen.add(frozenset(t))
            faces.append(t)
    return np.array(faces, np.int64).reshape(-1, 3)


def _tables(rng: np.random.Generator, spec: DataSpec, piece: Piece) -> Piece:
    """Object attributes for every id, and (sometimes) a few groups of them with group attributes."""
    p = len(piece.ids)
    piece.oattrs = {a.name: a.values(rng, p) for a in spec.oattrs}
    ngroups = int(rng.integers(0, 3)) if p else 0
    if spec.gattrs and rng.random() < 0.7:
        ngroups = max(ngroups, 1) if p else 0
    piece.groups = [np.unique(rng.choice(piece.ids, size=int(rng.integers(1, p + 1)))) for _ in range(ngroups)]
    piece.gattrs = {a.name: a.values(rng, ngroups) for a in spec.gattrs}
    return piece


# --------------------------------------------------------------------------------------------- comparisons
def attr_columns(attrs: dict[str, np.ndarray], names: list[str], n: int) -> np.ndarray:
    arrays = [np.asarray(attrs[k], np.float64) for k in names]
    cols = [a.reshape(n, int(np.prod(a.shape[1:]))) for a in arrays]
    return np.concatenate(cols, axis=1) if cols else np.zeros((n, 0))


def table(positions, attrs: dict, names: list[str], owners=None) -> np.ndarray:
    """Rows ``x y z [owner] attrs...`` as float64 (exact for every dtype the model uses)."""
    n = len(positions)
    cols = [np.asarray(positions, np.float64).reshape(n, NDIM)]
    if owners is not None:
        cols.append(np.asarray(owners, np.float64).reshape(n, 1))
    cols.append(attr_columns(attrs, names, n))
    return np.concatenate(cols, axis=1)


def sort_rows(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, np.float64)
    if rows.ndim != 2 or not len(rows):
        return rows
    return rows[np.lexsort(rows.T[::-1])]


def unique_rows(rows: np.ndarray, decimals: int | None = None) -> np.ndarray:
    rows = np.asarray(rows, np.float64)
    if decimals is not None:
        rows = np.round(rows, decimals)
    return np.unique(rows, axis=0) if len(rows) else rows.reshape(0, rows.shape[1] if rows.ndim == 2 else NDIM)


def same_rows(got: np.ndarray, want: np.ndarray, *, atol: float = 0.0) -> str | None:
    """None when ``got`` and ``want`` hold the same rows as multisets, else what differs."""
    got, want = sort_rows(got), sort_rows(want)
    if got.shape != want.shape:
        return f"{len(got)} rows (width {got.shape[1:]}) where the model has {len(want)} (width {want.shape[1:]})" \
            + _diff_hint(got, want)
    if atol:
        ok = np.allclose(got, want, atol=atol, rtol=1e-6, equal_nan=True)
    else:
        ok = np.array_equal(got, want, equal_nan=True)
    if not ok:
        return "same number of rows, different values" + _diff_hint(got, want)
    return None


def _diff_hint(got: np.ndarray, want: np.ndarray) -> str:
    if got.ndim != 2 or want.ndim != 2 or got.shape[1:] != want.shape[1:]:
        return ""
    g = {tuple(r) for r in got.tolist()}
    w = {tuple(r) for r in want.tolist()}
    extra, missing = sorted(g - w)[:3], sorted(w - g)[:3]
    return f"; e.g. unexpected {extra}, missing {missing}"


def inside(positions: np.ndarray, lo, hi) -> np.ndarray:
    p = np.asarray(positions, np.float64).reshape(-1, NDIM)
    return ((p >= np.asarray(lo, np.float64)) & (p <= np.asarray(hi, np.float64))).all(axis=1)


def link_rows(rows: np.ndarray, links: np.ndarray, kind: str) -> np.ndarray:
    """Connectivity as rows of the vertices it joins (position+attribute rows, concatenated).

    Graph edges are undirected (smaller row first), skeleton edges (child, parent), mesh faces
    keep their winding and start at their smallest row."""
    links = np.asarray(links, np.int64).reshape(-1, 3 if kind == "mesh" else 2)
    if not len(links):
        return np.zeros((0, rows.shape[1] * links.shape[1]))
    ends = [rows[links[:, j]] for j in range(links.shape[1])]
    if kind == "graph":
        a, b = ends
        swap = np.array([tuple(x) > tuple(y) for x, y in zip(a.tolist(), b.tolist())])
        ends = [np.where(swap[:, None], b, a), np.where(swap[:, None], a, b)]
    elif kind == "mesh":
        out = []
        for face in zip(*(e.tolist() for e in ends)):
            k = min(range(3), key=lambda i: face[i])
            out.append([x for j in range(3) for x in face[(k + j) % 3]])
        return np.asarray(out, np.float64)
    return np.concatenate(ends, axis=1)


# --------------------------------------------------------------------------------------------- coarse levels
def bins_of(positions: np.ndarray, bin_shape) -> set[tuple[int, ...]]:
    b = np.floor(np.asarray(positions, np.float64) / np.asarray(bin_shape, np.float64)).astype(np.int64)
    return {tuple(r) for r in b.tolist()}


def thinned_count(positions: np.ndarray, bin_shape, coarsen, sparsity: float) -> int:
    """Vertices a point level keeps from ``positions`` (the level below): every bin of the new level
    keeps ``max(1, ceil(n / (prod(coarsen) * sparsity)))`` of its points (LIFECYCLE.md)."""
    if not len(positions):
        return 0
    b = np.floor(np.asarray(positions, np.float64) / np.asarray(bin_shape, np.float64)).astype(np.int64)
    _, counts = np.unique(b, axis=0, return_counts=True)
    per_bin = float(np.prod(np.broadcast_to(np.asarray(coarsen, np.float64), (NDIM,)))) * float(sparsity)
    return int(np.maximum(1, np.ceil(counts / per_bin)).sum())


# --------------------------------------------------------------------------------------------- conversions
CONVERSIONS = {
    "point_cloud": ("parquet", "csv", "ply"),
    "point_ids": ("parquet", "csv"),
    "polyline": ("parquet", "csv"),
    "streamline": ("parquet", "csv", "trx"),
    "mesh": ("ply",),
    "graph": ("graphml",),
}
"""File formats a store of each kind goes out to and comes back from as :func:`converted` says."""


OBJECT_ID = "object_id"
"""A table's object id column, and the object attribute a table's ids that are not 0..P-1 come back as."""


def table_ids_clash(model: Model) -> bool:
    """Whether a table export must refuse: an object attribute object_id whose values are not distinct."""
    ids = model.oattrs.get(OBJECT_ID)
    return ids is not None and len(np.unique(ids)) != len(ids)


def converted(model: Model, fmt: str) -> Model:
    """What a store holding ``model`` reads as after ``convert`` to ``fmt`` and back (README "Conversions").

    Tables (CSV, Parquet): positions come back float64 (CSV: the float64 of the ``%.9g`` text of a
    float32); point clouds lose their object ids (a table's ``object_id`` column means polylines),
    polylines come back ``polyline`` with the objects that have vertices, numbered in order, object
    attributes kept (``object.<name>`` columns), no groups; CSV keeps values only (integers int64,
    the rest float64).  TRX keeps dtypes, groups and group attributes.  PLY (meshes) and GraphML
    (graphs) keep objects, links and vertex/object attributes with their dtypes, not groups or group
    attributes (PLY refuses several channels and objects with no vertices).  No root attribute of
    the source store comes back (the new store's ``zvf_source`` is what the file knew).
    """
    spec, m = model.spec, model.copy()
    m.root_attrs = {}
    kind = spec.kind
    vattrs, oattrs, gattrs = spec.vattrs, spec.oattrs, spec.gattrs
    if fmt in ("parquet", "csv"):
        dtype = "float64"
        if kind == "point_ids":
            kind, m.owners, m.ids, oattrs, m.oattrs = "point_cloud", None, np.zeros(0, np.int64), (), {}
        if kind in SEQUENTIAL:
            kind = "polyline"
            # the file's ids: an object attribute object_id when there is one, else the object ids; objects
            # with no vertices have no row; the table comes back in file-id order, numbered 0..P-1, the
            # file's ids kept as the object attribute object_id unless they are 0..P-1 already
            file_ids = m.oattrs.get(OBJECT_ID, m.ids).astype(np.int64)
            has_rows = np.array([(m.owners == oid).any() for oid in m.ids], bool)
            rows_of = np.flatnonzero(has_rows)[np.argsort(file_ids[has_rows], kind="stable")]
            kept_ids = file_ids[rows_of]
            m.oattrs = {k: v[rows_of] for k, v in m.oattrs.items() if k != OBJECT_ID}
            oattrs = tuple(a for a in oattrs if a.name != OBJECT_ID)
            if not np.array_equal(kept_ids, np.arange(len(kept_ids))):
                m.oattrs[OBJECT_ID] = kept_ids
                oattrs = (*oattrs, AttrSpec(OBJECT_ID, "int64", None))
            rank = np.full(len(m.ids), -1, np.int64)
            rank[rows_of] = np.arange(len(rows_of))
            m.owners = rank[np.searchsorted(m.ids, m.owners)]
            m.ids = np.arange(len(kept_ids), dtype=np.int64)
        gattrs, m.groups, m.gattrs = (), [], {}
        if fmt == "csv":
            vattrs, oattrs = _widened(vattrs), _widened(oattrs)
            if np.dtype(spec.dtype).itemsize <= 4:
                m.positions = np.array([[float(f"{x:.9g}") for x in row] for row in m.positions.tolist()],
                                       np.float64).reshape(-1, NDIM)
    else:
        dtype = spec.dtype
        if fmt in ("ply", "graphml"):
            gattrs, m.groups, m.gattrs = (), [], {}
    m.spec = dataclasses.replace(spec, kind=kind, dtype=dtype, vattrs=vattrs, oattrs=oattrs, gattrs=gattrs)
    m.positions = m.positions.astype(dtype)
    m.attrs = {a.name: m.attrs[a.name].astype(a.dtype) for a in vattrs}
    m.oattrs = {a.name: m.oattrs[a.name].astype(a.dtype) for a in oattrs}
    return m


def _widened(specs: tuple[AttrSpec, ...]) -> tuple[AttrSpec, ...]:
    return tuple(dataclasses.replace(a, dtype="float64" if np.dtype(a.dtype).kind == "f" else "int64") for a in specs)
