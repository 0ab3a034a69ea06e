"""What a query must return, from a store's inputs with numpy only: the vertex predicate P(v) and the
object predicate O(o) of a ``select`` (the query tests' stores are tests/query/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Store:
    geometry: str
    path: str
    pos: np.ndarray  # (N, 3) float32, input order
    oid: np.ndarray | None  # (N,) object id of each vertex
    vattrs: dict
    oattrs: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    conn: np.ndarray | None = None  # edges/faces in input vertex indices
    lines: list | None = None  # polylines: vertex index arrays per object (id = position)


def channel(values: np.ndarray, ch) -> np.ndarray:
    return values if values.ndim == 1 else values[:, ch]


def vertex_pass(st: Store, kw: dict) -> np.ndarray:
    """P(v): box, ball and vertex where, in float64."""
    p = st.pos.astype(np.float64)
    keep = np.ones(len(p), bool)
    if kw.get("bbox") is not None:
        lo, hi = kw["bbox"]
        keep &= np.all((p >= lo) & (p <= hi), axis=1)
    if kw.get("near") is not None:
        c, r = kw["near"]
        keep &= ((p - np.asarray(c, np.float64)) ** 2).sum(1) <= r * r
    for key, cond in (kw.get("where") or {}).items():
        name, _, ch = key.partition("[")
        if name not in st.vattrs:
            continue
        v = channel(st.vattrs[name], int(ch[:-1]) if ch else None)
        keep &= _test(v, cond)
    return keep


def object_pass(st: Store, kw: dict) -> np.ndarray | None:
    """O(o) as the sorted allowed ids (None: no id narrowing)."""
    ids = None
    if kw.get("objects") is not None:
        ids = np.unique(kw["objects"])
    if kw.get("groups") is not None:
        m = np.unique(np.concatenate([st.groups[g] for g in kw["groups"]] + [np.zeros(0, int)]))
        ids = m if ids is None else np.intersect1d(ids, m)
    for key, cond in (kw.get("where") or {}).items():
        if key in st.oattrs:
            m = np.flatnonzero(_test(st.oattrs[key], cond))
            ids = m if ids is None else np.intersect1d(ids, m)
    return ids


def _test(v, cond):
    if isinstance(cond, tuple):
        return (v >= cond[0]) & (v <= cond[1])
    if isinstance(cond, list):
        return np.isin(v, cond)
    return v == cond
