"""Checked inputs of the object writers (polylines, lines, graphs, skeletons, meshes).

Shared by the in-memory writers (:mod:`.memory`) and their streamed twins
(:mod:`.stream`): everything refused here is refused before any byte
is uploaded, with the caller's argument name in the message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from ...errors import InvalidArgumentError
from ...format import metadata as md
from ...format.codecs import CellCodec
from ...format.grid import extremes
from ...format.layout import LevelLayout
from .. import inputs
from ..level import ShardShape, shard_tuple

if TYPE_CHECKING:
    from ..types import Bounds, Columns, Groups


def as_given(values: Iterable[object], name: str) -> list[float]:
    """Shape values as the caller wrote them (ints stay ints, as 0.9.2 records them)."""
    try:
        out = [v.item() if hasattr(v, "item") else v for v in values]
    except TypeError as exc:
        raise InvalidArgumentError(f"{name} must be a sequence of numbers, got {values!r}") from exc
    numbers: list[float] = []
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgumentError(f"{name} must hold numbers, got {values!r}")
        numbers.append(v)
    return numbers


def check_dtypes(arrays: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    """Attribute dtypes a zarr.json can name (refused here, not half-way through the upload)."""
    for name, values in arrays.items():
        if values.dtype.name not in md.NUMERIC_DTYPES:
            raise InvalidArgumentError(
                f"{what}[{name!r}]: dtype {values.dtype} is not supported (use one of {sorted(md.NUMERIC_DTYPES)})"
            )
    return arrays


def named_bounds(pos64: np.ndarray, bounds: Bounds | None, ndim: int, name: str) -> tuple[list[float], list[float]]:
    """``inputs.bounds_for`` with the caller's argument name in its message."""
    try:
        return inputs.bounds_for(pos64, bounds, ndim)
    except InvalidArgumentError as exc:
        msg = str(exc)
        raise InvalidArgumentError(name + msg[len("positions"):] if msg.startswith("positions") else msg) from None


def layout_and_codec(compression: str | list[Any] | Literal[False] | None, shard_shape: ShardShape, ndim: int | None,
                     chunk_shape: ArrayLike, bin_shape: ArrayLike | None) -> tuple[LevelLayout, CellCodec]:
    """Level 0's layout (objects: filed by chunk) and cell codec, from the caller's options."""
    level_layout = LevelLayout.for_writing(chunk_shape, bin_shape, with_ids=True, ndim=ndim)
    ndim = level_layout.ndim
    codec = CellCodec.for_writing(compression, shard_tuple(shard_shape, ndim))
    return level_layout, codec


def _finite(pos: np.ndarray, name: str) -> None:
    """Refuse NaN/inf from the per-axis extremes (NaN propagates into min and max): no (N, ndim) mask."""
    if pos.size and not all(np.isfinite(e).all() for e in extremes(pos.reshape(-1, pos.shape[-1]))):
        raise InvalidArgumentError(f"{name} has NaN or infinite coordinates")


def _index_array(values: ArrayLike, name: str, width: int | None, n_vertices: int, what: str) -> np.ndarray:
    """(M, width) integer rows indexing ``[0, n_vertices)``."""
    arr = np.asarray(values)
    if arr.size == 0 and (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[0] == 0)):
        return np.zeros((0, arr.shape[1] if arr.ndim == 2 else width or 3), dtype=np.int64)
    if arr.ndim != 2 or (width is not None and arr.shape[1] != width):
        want = f"(M, {width})" if width is not None else "(F, L)"
        raise InvalidArgumentError(f"{name} must be an {want} integer array, got shape {arr.shape}")
    arr = inputs.as_int64(arr, name, "integer vertex indices", verb="hold")
    bad = (arr < 0) | (arr >= n_vertices)
    if bad.any():
        r = int(np.flatnonzero(bad.any(axis=1))[0])
        raise InvalidArgumentError(
            f"{name}[{r}] = {arr[r].tolist()} indexes outside the {n_vertices} {what} (valid: 0..{n_vertices - 1})"
        )
    return arr


def _object_ids(object_ids: ArrayLike | None, n: int) -> np.ndarray:
    if object_ids is None:
        return np.zeros(n, dtype=np.int64)
    ids = inputs.integer_ids(object_ids, n, "object_ids")
    if ids.size and ids.min() < 0:
        raise InvalidArgumentError(f"object_ids must be >= 0, got {int(ids.min())} at row {int(np.argmin(ids))}")
    return ids


def object_attributes_table(object_attributes: Columns | None, count: int) -> dict[str, np.ndarray]:
    out = check_dtypes(inputs.row_attributes(object_attributes, count, "object_attributes"), "object_attributes")
    for name, values in out.items():
        if values.dtype.kind == "b":
            raise InvalidArgumentError(
                f"object_attributes[{name!r}]: bool has no 'absent' sentinel (use uint8 or int8)"
            )
    return out


def group_attributes_table(group_attributes: Columns | None, groups: list[np.ndarray]) -> dict[str, np.ndarray]:
    out = check_dtypes(inputs.row_attributes(group_attributes, len(groups), "group_attributes"), "group_attributes")
    if out and not groups:
        raise InvalidArgumentError("group_attributes need groups")
    return out


def _check_link_attributes(link_attributes: Columns | None, n_links: int) -> dict[str, np.ndarray]:
    return check_dtypes(inputs.row_attributes(link_attributes, n_links, "link_attributes"), "link_attributes")


def _polyline_arrays(polylines: Sequence[ArrayLike] | np.ndarray) -> list[np.ndarray]:
    if isinstance(polylines, np.ndarray):
        if polylines.ndim != 3:
            raise InvalidArgumentError(
                "polylines must be a sequence of (N_k, ndim) arrays or one (P, K, ndim) array, "
                f"got shape {polylines.shape}"
            )
        return list(polylines)
    if isinstance(polylines, (str, bytes)) or not isinstance(polylines, Sequence):
        raise InvalidArgumentError(
            f"polylines must be a sequence of (N_k, ndim) arrays, got {type(polylines).__name__}")
    try:
        return [np.asarray(p) for p in polylines]
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError("polylines must be a sequence of (N_k, ndim) numeric arrays") from exc


def _concat_polylines(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """-> (raw concatenated vertices (N, ndim), lengths (P,)).

    One ``np.concatenate`` checks the shapes of all polylines at once; only a
    failed or odd concatenation walks the polylines to name the bad one.
    """
    if not arrays:
        raise InvalidArgumentError("polylines is empty: nothing to write (0.9.2 refuses this too)")
    lens = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    kinds = {a.dtype.kind for a in arrays}
    try:
        raw = np.concatenate(arrays, axis=0) if kinds <= set("iuf") else None
    except ValueError:
        raw = None
    if raw is None or raw.ndim != 2 or raw.shape[1] < 1:
        return _concat_polylines_checked(arrays)
    if not lens.sum():
        raw = np.zeros((0, raw.shape[1]), dtype=np.float64)
    return raw, lens


def _concat_polylines_checked(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_concat_polylines` one polyline at a time: empty ones of any shape, errors naming the index."""
    shapes = [a.shape for a in arrays]
    ndims = {s[1] for s in shapes if len(s) == 2 and s[0] > 0}
    if len(ndims) > 1:
        raise InvalidArgumentError(f"polylines mix dimensionalities {sorted(ndims)}")
    ndim = ndims.pop() if ndims else next((s[1] for s in shapes if len(s) == 2), None)
    if ndim is None or ndim < 1:
        raise InvalidArgumentError("polylines: cannot tell the dimensionality (give empty ones shape (0, ndim))")
    fixed = []
    for i, (a, s) in enumerate(zip(arrays, shapes)):
        if a.size == 0:
            a = a.reshape(0, ndim)
        elif len(s) != 2 or s[1] != ndim:
            raise InvalidArgumentError(f"polylines[{i}] has shape {s}; expected (N, {ndim})")
        if a.dtype.kind not in "iuf":
            raise InvalidArgumentError(f"polylines[{i}] must be numeric, got dtype {a.dtype}")
        fixed.append(a)
    lens = np.fromiter((a.shape[0] for a in fixed), dtype=np.int64, count=len(fixed))
    raw = np.concatenate(fixed, axis=0) if lens.sum() else np.zeros((0, ndim), dtype=np.float64)
    return raw, lens


def _per_vertex_attributes(attributes: Columns | None, lens: np.ndarray,
                           what: str = "attributes") -> dict[str, np.ndarray]:
    """Per-vertex attributes: one concatenated array, or a list with one array per polyline."""
    n = int(lens.sum())
    out: dict[str, np.ndarray] = {}
    for name, values in (attributes or {}).items():
        inputs.check_name(name, "attribute")
        if isinstance(values, (list, tuple)) and len(values) == len(lens) and not (
            len(values) == n and all(np.ndim(v) == 0 for v in values[:1])
        ):
            parts = [np.asarray(v) for v in values]
            got = np.fromiter((p.shape[0] if p.ndim else -1 for p in parts), dtype=np.int64, count=len(parts))
            bad = np.flatnonzero(got != lens)
            if bad.size:
                i = int(bad[0])
                raise InvalidArgumentError(
                    f"{what}[{name!r}][{i}] has {parts[i].shape[0] if parts[i].ndim else 'no'} rows but "
                    f"polylines[{i}] has {int(lens[i])} vertices"
                )
            tails = {p.shape[1:] for p in parts if p.shape[0]}  # empty polylines may pass np.zeros(0)
            if len(tails) > 1:
                raise InvalidArgumentError(f"{what}[{name!r}]: per-polyline arrays disagree on shape {sorted(tails)}")
            tail = tails.pop() if tails else ()
            filled = [p for p in parts if p.shape[0]]
            if filled:
                values = np.concatenate(filled, axis=0)
            else:
                values = np.zeros((0, *tail), dtype=np.result_type(*parts) if parts else np.float64)
        out.update(check_dtypes(inputs.row_attributes({name: values}, n, what), what))
    return out


def polyline_input(polylines: Sequence[ArrayLike] | np.ndarray, attributes: Columns | None,
                   dt: np.dtype | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Checked polylines -> (vertices as given, for the bounds, stored vertices, lengths, attributes).

    0.9.2 takes (and checks) the bounds on the vertices as given, before the
    dtype cast; comparisons promote exactly, so no float64 copy is needed.
    The stored vertices are the input itself when it already has ``dt``.
    """
    raw, lens = _concat_polylines(_polyline_arrays(polylines))
    pos = raw.astype(inputs.position_dtype(raw.dtype, dt), copy=False)
    _finite(pos, "polylines")  # a cast keeps NaN/inf and turns an overflow into inf: ``raw`` is finite too
    return raw, pos, lens, _per_vertex_attributes(attributes, lens)


def lines_input(endpoints: ArrayLike, attributes: Columns | None,
                dt: np.dtype | None) -> tuple[np.ndarray, int, dict[str, np.ndarray]]:
    """Checked (M, 2, ndim) endpoints -> (stored vertices (2M, ndim), M, per-endpoint attributes)."""
    try:
        ep = np.asarray(endpoints)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError("endpoints must be an (M, 2, ndim) numeric array") from exc
    if ep.ndim != 3 or ep.shape[1] != 2 or ep.shape[2] < 1:
        raise InvalidArgumentError(f"endpoints must be an (M, 2, ndim) array, got shape {ep.shape}")
    if ep.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"endpoints must be numeric, got dtype {ep.dtype}")
    m, _, ndim = ep.shape
    pos = ep.astype(inputs.position_dtype(ep.dtype, dt)).reshape(2 * m, ndim)
    _finite(pos, "endpoints")
    attrs: dict[str, np.ndarray] = {}
    for name, values in (attributes or {}).items():
        inputs.check_name(name, "attribute")
        arr = np.asarray(values)
        if arr.ndim not in (2, 3) or arr.shape[:2] != (m, 2):
            raise InvalidArgumentError(f"attributes[{name!r}] has shape {arr.shape}; expected ({m}, 2) or ({m}, 2, C)")
        rows = inputs.row_attributes({name: arr.reshape(2 * m, *arr.shape[2:])}, 2 * m, "attributes")
        attrs.update(check_dtypes(rows, "attributes"))
    return pos, m, attrs


def _skeleton_order(n: int, edges: np.ndarray, object_ids: np.ndarray, *, reference: bool) -> np.ndarray:
    """Skeleton vertex order: depth-first preorder (children in edge order) of every tree,
    trees in the order of their roots' indices.

    0.9.2 (``reference=True``) orders only the tree of the first root that way and
    appends every other vertex in index order.  Then a later tree's root can sit in
    the middle of its fragment, where the implicit rule (parent = previous row) hands
    it a parent nobody wrote -- zarr-vectors reads that edge back too.  Preorder of
    every tree puts each root first among its tree's rows, so a root always starts
    its fragment; for a single tree both orders are the same.

    Vectorized with an Euler tour ranked by pointer jumping.  ``edges`` rows are
    (child, parent); the edges must form a forest with one root per object.
    """
    child, par = edges[:, 0], edges[:, 1]
    if np.unique(child).size != child.size:
        dup = np.sort(child)
        c = int(dup[1:][dup[1:] == dup[:-1]][0])
        raise InvalidArgumentError(
            f"edges: vertex {c} is the child of two edges; a skeleton needs one parent per vertex")
    parent = np.full(n, -1, dtype=np.int64)
    parent[child] = par
    rounds = max(1, math.ceil(math.log2(max(n, 2)))) + 1
    anc = np.where(parent < 0, np.arange(n), parent)
    for _ in range(rounds):
        anc = anc[anc]
    if n and np.any(parent[anc] >= 0):
        v = int(np.flatnonzero(parent[anc] >= 0)[0])
        raise InvalidArgumentError(
            f"edges: vertex {v} lies on a cycle; a skeleton's (child, parent) edges must form a forest")
    roots = np.flatnonzero(parent < 0)
    if roots.size > 1:
        ro = np.sort(object_ids[roots])
        rep = ro[1:][ro[1:] == ro[:-1]]
        if rep.size:
            raise InvalidArgumentError(
                f"object_ids: object {int(rep[0])} holds more than one tree (several roots); a skeleton stores "
                "one rooted tree per object -- give each tree its own id, or use geometry_type='graph'"
            )
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    root = int(roots[0])
    # children in edge order: stable sort of the edges by parent
    srt = np.argsort(par, kind="stable")
    sc, sp = child[srt], par[srt]
    first_child = np.full(n, -1, dtype=np.int64)
    is_first = np.ones(sc.size, dtype=bool)
    is_first[1:] = sp[1:] != sp[:-1]
    first_child[sp[is_first]] = sc[is_first]
    next_sib = np.full(n, -1, dtype=np.int64)
    same = sp[1:] == sp[:-1]
    next_sib[sc[:-1][same]] = sc[1:][same]
    # events: enter(v) = v, exit(v) = n + v
    vertex = np.arange(n, dtype=np.int64)
    nxt = np.empty(2 * n, dtype=np.int64)
    nxt[:n] = np.where(first_child >= 0, first_child, n + vertex)
    up = np.where(parent >= 0, n + parent, -1)
    nxt[n:] = np.where(next_sib >= 0, next_sib, up)
    terminal = nxt < 0
    ev = np.arange(2 * n, dtype=np.int64)
    ptr = np.where(terminal, ev, nxt)
    dist = (~terminal).astype(np.int64)
    while not np.all(terminal[ptr]):
        dist = dist + dist[ptr]
        ptr = ptr[ptr]
    tree_root = ptr[:n] - n  # every tour ends at exit(root)
    if not reference:
        return np.lexsort((-dist[:n], tree_root)).astype(np.int64)
    in_tree = tree_root == root
    tree = np.flatnonzero(in_tree)
    tree = tree[np.argsort(-dist[tree], kind="stable")]
    return np.concatenate([tree, np.flatnonzero(~in_tree)]).astype(np.int64)


def sorted_unique(ids: ArrayLike) -> np.ndarray:
    """``np.unique(ids)``; ids already in ascending order (polyline numbers, sorted object ids) take one
    comparison pass instead of a hash or sort."""
    a = np.asarray(ids)
    if a.ndim == 1 and a.size > 1 and not np.any(a[1:] < a[:-1]):
        return a[np.concatenate(([True], a[1:] != a[:-1]))]
    return np.unique(a)


def object_tables(oids: ArrayLike, object_attributes: Columns | None, groups: Groups | None,
                  group_attributes: Columns | None,
                  ) -> tuple[dict[str, np.ndarray], list[np.ndarray], dict[str, np.ndarray]]:
    uniq = sorted_unique(oids)
    obj_attrs = object_attributes_table(object_attributes, len(uniq))
    group_rows = inputs.groups_table(groups, uniq)
    grp_attrs = group_attributes_table(group_attributes, group_rows)
    return obj_attrs, group_rows, grp_attrs


def graph_input(positions: ArrayLike, edges: ArrayLike, object_ids: ArrayLike | None, attributes: Columns | None,
                link_attributes: Columns | None, dt: np.dtype | None, *, skeleton: bool, reference: bool = False,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Checked graph input -> (positions, object ids, edges, attributes, link attributes), skeletons in
    depth-first order (edges renumbered to it; link attribute rows keep the edges' order)."""
    pos = inputs.positions_array(positions, dt, "positions")
    n = len(pos)
    e = _index_array(edges, "edges", 2, n, "positions")
    oids = _object_ids(object_ids, n)
    attrs = check_dtypes(inputs.row_attributes(attributes, n, "attributes"), "attributes")
    link_attrs = _check_link_attributes(link_attributes, len(e))
    if skeleton:
        order = _skeleton_order(n, e, oids, reference=reference)
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n, dtype=np.int64)
        pos, oids = pos[order], oids[order]
        attrs = {k: v[order] for k, v in attrs.items()}
        e = inv[e]
    return pos, oids, e, attrs, link_attrs


def mesh_input(positions: ArrayLike, faces: ArrayLike, object_ids: ArrayLike | None, attributes: Columns | None,
               dt: np.dtype | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Checked mesh input -> (vertex positions, object ids, faces, attributes)."""
    pos = inputs.positions_array(positions, dt, "positions")
    n = len(pos)
    f = _index_array(faces, "faces", None, n, "vertices")
    if f.shape[1] < 3 or f.shape[1] > 8:
        raise InvalidArgumentError(f"faces must be (F, L) with 3 <= L <= 8, got shape {f.shape}")
    oids = _object_ids(object_ids, n)
    attrs = check_dtypes(inputs.row_attributes(attributes, n, "attributes"), "attributes")
    return pos, oids, f, attrs
