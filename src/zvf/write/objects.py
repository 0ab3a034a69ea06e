"""Object-geometry writers: the bytes zarr-vectors 0.9.2's ``write_polylines``,
``write_lines``, ``write_graph`` and ``write_mesh`` produce.

Shared shape of every writer: each vertex gets its chunk (``floor(p / c)``),
one stable sort groups rows by chunk and then by fragment key, fragments
are cut where the key changes, and manifests name (chunk, local fragment)
per block.  The fragment key is what differs:

* polylines / lines: a *run* -- consecutive vertices of one object in one
  chunk (an object re-entering a chunk gets a second fragment there), so
  rows stay in input order and manifests list runs in path order;
* graphs / skeletons / meshes: the object id, so a chunk holds one
  fragment per object (ascending id) and manifests list chunks in order.

Connectivity goes to ``links/0/`` through :mod:`.links`: polylines and
lines store only the bridges between consecutive runs, graphs every edge,
skeletons the edges the reader cannot imply, meshes every face.

Three things 0.9.2 gets wrong are *not* reproduced unless
``_reference_quirks=True`` (the compatibility tests use it to show that every
other byte matches):

* ``write_lines`` stores the chunk-local *fragment* index instead of the
  vertex index in its bridge links;
* ``write_polylines`` / ``write_graph`` / ``write_mesh`` label multi-channel
  vertex attributes ``row_shape: []`` without ``channel_names``;
* skeleton forests: only the first tree is stored depth-first, so another
  tree's root can land mid-fragment and read back with an invented parent
  (see :func:`_skeleton_order`).

The manifests layout follows ``object_index_layout`` (see :mod:`.object_index`;
``"reference"`` is 0.9.2's single zstd chunk).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgumentError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.fragments import FragmentIndex
from ..format.grid import Grid
from ..io.executor import Executor
from ..io.store import open_store
from . import inputs
from .engine import (
    StoreWriter,
    add_level0_documents,
    empty_group,
)
from .links import place_records, put_links
from .object_index import (
    check_layout,
    put_groups,
    put_object_attributes,
    put_object_index,
)
from .partition import Partition, partition
from .points import LevelWriter, put_rows, shard_tuple

__all__ = ["write_graph", "write_lines", "write_mesh", "write_polylines"]


# ---------------------------------------------------------------------------
# argument checks


def _as_given(values, name: str) -> list:
    """Shape values as the caller wrote them (ints stay ints, as 0.9.2 records them)."""
    try:
        out = [v.item() if hasattr(v, "item") else v for v in values]
    except TypeError as exc:
        raise InvalidArgumentError(f"{name} must be a sequence of numbers, got {values!r}") from exc
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgumentError(f"{name} must hold numbers, got {values!r}")
    return out


def _dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise InvalidArgumentError(f"dtype {dtype!r} is not a numpy dtype") from exc
    if dt.kind != "f" or dt.name not in md.NUMERIC_DTYPES:
        raise InvalidArgumentError(f"dtype must be a float type (float16, float32, float64), got {dt}")
    return dt


def _check_dtypes(arrays: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    """Attribute dtypes a zarr.json can name (refused here, not half-way through the upload)."""
    for name, values in arrays.items():
        if values.dtype.name not in md.NUMERIC_DTYPES:
            raise InvalidArgumentError(
                f"{what}[{name!r}]: dtype {values.dtype} is not supported (use one of {sorted(md.NUMERIC_DTYPES)})"
            )
    return arrays


def _bounds(pos64: np.ndarray, bounds, ndim: int, name: str):
    """``inputs.bounds_for`` with the caller's argument name in its message."""
    try:
        return inputs.bounds_for(pos64, bounds, ndim)
    except InvalidArgumentError as exc:
        msg = str(exc)
        raise InvalidArgumentError(name + msg[len("positions"):] if msg.startswith("positions") else msg) from None


def _check_geometry_options(compression, shard_shape, ndim: int, chunk_shape, bin_shape) -> tuple[Grid, CellCodec]:
    grid = Grid.create(chunk_shape, bin_shape, ndim=ndim)
    codec = CellCodec.for_writing(compression, shard_tuple(shard_shape, ndim))
    return grid, codec


def _finite(pos: np.ndarray, name: str) -> None:
    if pos.size and not np.all(np.isfinite(pos)):
        raise InvalidArgumentError(f"{name} has NaN or infinite coordinates")


def _index_array(values, name: str, width: int | None, n_vertices: int, what: str) -> np.ndarray:
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


def _object_ids(object_ids, n: int) -> np.ndarray:
    if object_ids is None:
        return np.zeros(n, dtype=np.int64)
    ids = inputs.integer_ids(object_ids, n, "object_ids")
    if ids.size and ids.min() < 0:
        raise InvalidArgumentError(f"object_ids must be >= 0, got {int(ids.min())} at row {int(np.argmin(ids))}")
    return ids


def _check_object_attributes(object_attributes, count: int) -> dict[str, np.ndarray]:
    out = _check_dtypes(inputs.row_attributes(object_attributes, count, "object_attributes"), "object_attributes")
    for name, values in out.items():
        if values.dtype.kind == "b":
            raise InvalidArgumentError(
                f"object_attributes[{name!r}]: bool has no 'absent' sentinel (use uint8 or int8)"
            )
    return out


def _check_group_attributes(group_attributes, groups: list) -> dict[str, np.ndarray]:
    out = _check_dtypes(inputs.row_attributes(group_attributes, len(groups), "group_attributes"), "group_attributes")
    if out and not groups:
        raise InvalidArgumentError("group_attributes need groups")
    return out


def _check_link_attributes(link_attributes, n_links: int) -> dict[str, np.ndarray]:
    return _check_dtypes(inputs.row_attributes(link_attributes, n_links, "link_attributes"), "link_attributes")


# ---------------------------------------------------------------------------
# layout shared by every geometry


class Layout:
    """Rows partitioned into chunks and fragments, plus where each input row went."""

    def __init__(self, pos: np.ndarray, chunks: np.ndarray, part: Partition):
        self.pos = pos
        self.chunks = chunks
        self.part = part
        n = len(pos)
        self.read_idx = np.empty(n, dtype=np.int64)  # sorted (read-order) row of each input row
        self.read_idx[part.order] = np.arange(n, dtype=np.int64)
        sorted_chunk = np.repeat(np.arange(len(part.chunks), dtype=np.int64), np.diff(part.chunk_starts))
        self.local = self.read_idx - part.chunk_starts[sorted_chunk[self.read_idx]] if n else self.read_idx
        # first sorted row of each fragment, fragment of each sorted row, chunk-local fragment index
        self.frag_first = part.chunk_starts[part.frag_chunk] + part.frag_starts
        self.sorted_frag = np.repeat(np.arange(len(self.frag_first), dtype=np.int64), part.frag_counts)
        first_of_chunk = np.searchsorted(part.frag_chunk, part.frag_chunk)
        self.frag_local = np.arange(len(self.frag_first), dtype=np.int64) - first_of_chunk

    @classmethod
    def by_key(cls, grid: Grid, pos: np.ndarray, keys: np.ndarray) -> Layout:
        """One fragment per (chunk, key), keys ascending inside a chunk (graphs, meshes)."""
        chunks = grid.chunk_of(pos) if len(pos) else np.zeros((0, pos.shape[1]), np.int64)
        return cls(pos, chunks, partition(chunks, keys))

    @classmethod
    def by_runs(cls, pos: np.ndarray, chunks: np.ndarray, run_start: np.ndarray) -> Layout:
        """Fragments are contiguous input runs (``run_start`` ascending, first = 0); a chunk
        lists its runs in input order.  Sorts runs, not rows: the same result as
        ``partition(chunks, run_id)`` at a fraction of the cost."""
        n, ndim = chunks.shape
        if n == 0:
            return cls(pos, chunks, partition(chunks, np.zeros(0, np.int64)))
        counts = np.diff(np.append(run_start, n))
        rc = chunks[run_start]
        ro = np.lexsort([rc[:, d] for d in range(ndim - 1, -1, -1)])  # stable: run order kept per chunk
        sc = rc[ro]
        new = np.ones(len(ro), dtype=bool)
        new[1:] = np.any(sc[1:] != sc[:-1], axis=1)
        frag_chunk = np.cumsum(new) - 1
        cnt = counts[ro]
        first = np.cumsum(cnt) - cnt  # sorted row of each run's first vertex
        order = np.repeat(run_start[ro] - first, cnt) + np.arange(n, dtype=np.int64)
        chunk_starts = np.append(first[new], n).astype(np.int64)
        part = Partition(order.astype(np.int64), sc[new].astype(np.int64), chunk_starts, frag_chunk.astype(np.int64),
                         (first - chunk_starts[frag_chunk]).astype(np.int64), cnt.astype(np.int64),
                         ro.astype(np.int64))
        return cls(pos, chunks, part)

    def fragments_of(self, k: int) -> FragmentIndex:
        s = self.part.chunk_fragments(k)
        return FragmentIndex.from_ranges(self.part.frag_starts[s], self.part.frag_counts[s])


def _attribute_docs(attrs: dict[str, np.ndarray], quirk_row_shape: bool) -> dict[str, dict] | None:
    """0.9.2's object writers label multi-channel attributes ``row_shape: []`` (reproduced on request only)."""
    if not quirk_row_shape:
        return None
    return {n: {"zv_array": "attribute", "name": n, "dtype": np.dtype(a.dtype).name, "row_shape": []}
            for n, a in attrs.items()}


async def _put_object_data(writer: StoreWriter, lay: Layout, frag_object: np.ndarray, frag_order: np.ndarray,
                           object_ids: np.ndarray, ndim: int, obj_attrs: dict, group_rows: list, grp_attrs: dict,
                           compression, layout: str) -> None:
    """Object index (each object's fragments sorted by ``frag_order``), object attributes, groups."""
    part = lay.part
    order = np.lexsort((frag_order, frag_object))
    await put_object_index(writer, 0, frag_object[order], part.chunks[part.frag_chunk[order]], lay.frag_local[order],
                           object_ids, ndim, compression=compression, layout=layout)
    codec = CellCodec.for_writing(compression)  # unlike write_points, these writers follow the compressor
    await put_object_attributes(writer, 0, obj_attrs, codec)
    await put_groups(writer, group_rows, grp_attrs, codec)


# ---------------------------------------------------------------------------
# polylines and lines


def _polyline_arrays(polylines) -> list[np.ndarray]:
    if isinstance(polylines, np.ndarray):
        if polylines.ndim != 3:
            raise InvalidArgumentError(
                f"polylines must be a sequence of (N_k, ndim) arrays or one (P, K, ndim) array, got shape {polylines.shape}"
            )
        return list(polylines)
    if isinstance(polylines, (str, bytes)) or not isinstance(polylines, Sequence):
        raise InvalidArgumentError(f"polylines must be a sequence of (N_k, ndim) arrays, got {type(polylines).__name__}")
    try:
        return [np.asarray(p) for p in polylines]
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError("polylines must be a sequence of (N_k, ndim) numeric arrays") from exc


def _concat_polylines(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """-> (raw concatenated vertices (N, ndim), lengths (P,)); per polyline only shape checks."""
    if not arrays:
        raise InvalidArgumentError("polylines is empty: nothing to write (0.9.2 refuses this too)")
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


def _per_vertex_attributes(attributes, lens: np.ndarray, what: str = "attributes") -> dict[str, np.ndarray]:
    """Per-vertex attributes: one concatenated array, or a list with one array per polyline."""
    n = int(lens.sum())
    out = {}
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
        out.update(_check_dtypes(inputs.row_attributes({name: values}, n, what), what))
    return out


def _run_starts(chunks: np.ndarray, obj_start: np.ndarray) -> np.ndarray:
    """First vertex of every run: a new run starts at each object start or chunk change."""
    n = len(chunks)
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
        new[1:] = np.any(chunks[1:] != chunks[:-1], axis=1)
        new[obj_start[obj_start < n]] = True
    return np.flatnonzero(new)


async def _write_paths(target, pos: np.ndarray, lens: np.ndarray, *, geometry: str, grid: Grid, codec: CellCodec,
                       bounds, chunk_shape, bin_shape, attrs, obj_attrs, group_rows, grp_attrs, compression,
                       overwrite, storage_options, arrays_present, quirk_row_shape: bool,
                       fragment_index_links: bool, object_index_layout: str) -> dict:
    """Shared body of polylines and lines: every object is an ordered path of vertices."""
    n, ndim = pos.shape
    num = len(lens)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    obj_of = np.repeat(np.arange(num, dtype=np.int64), lens)
    chunks = grid.chunk_of(pos) if n else np.zeros((0, ndim), np.int64)
    lay = Layout.by_runs(pos, chunks, _run_starts(chunks, starts))
    # bridges: vertex i-1 -> i where a path crosses into another chunk
    is_start = np.zeros(n, dtype=bool)
    is_start[starts[lens > 0]] = True
    cross = np.flatnonzero(~is_start[1:] & np.any(chunks[1:] != chunks[:-1], axis=1)) + 1 if n else np.zeros(0, np.int64)
    ends = np.stack([cross - 1, cross], axis=1)
    if fragment_index_links:  # 0.9.2 write_lines: chunk-local fragment index, not vertex index
        vi = lay.frag_local[lay.sorted_frag[lay.read_idx[ends]]]
    else:
        vi = lay.local[ends]
    cells = place_records(lay.chunks[ends], vi)

    handle = open_store(target, mode="w", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreWriter(ex, overwrite=overwrite) as writer:
        level = LevelWriter(writer, 0, *grid.layout(bounds[0], bounds[1]), codec)
        if attrs:
            empty_group(writer, "0/vertex_attributes")
        await put_rows(level, lay.part, lay.pos, attrs, lay.fragments_of, _attribute_docs(attrs, quirk_row_shape))
        await put_links(level, cells, ndim=ndim, link_attributes={}, intra_array=False, link_fragments=False)
        await level.finish()
        part = lay.part
        frag_object = obj_of[part.order[lay.frag_first]] if n else np.zeros(0, np.int64)
        await _put_object_data(writer, lay, frag_object, part.frag_keys, np.arange(num, dtype=np.int64), ndim,
                               obj_attrs, group_rows, grp_attrs, compression, object_index_layout)
        add_level0_documents(writer, handle.url, geometry=geometry, n=n, arrays_present=arrays_present,
                             chunk_shape=chunk_shape, bounds=bounds, bin_shape=bin_shape)
    return {
        "geometry": geometry,
        "object_count": int(num),
        "vertex_count": int(n),
        "chunk_count": len(lay.part.chunks),
        "fragment_count": len(lay.part.frag_chunk),
        "cross_chunk_link_count": int(cells.num_links),
        "group_count": len(group_rows),
        "requests": ex.stats.snapshot(),
    }


async def write_polylines(
    target,
    polylines,
    *,
    chunk_shape,
    bin_shape=None,
    bounds=None,
    geometry_type: str = "polyline",
    attributes=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
    _reference_quirks: bool = False,
) -> dict:
    """Write polylines (or streamlines): one object per polyline, ids 0..P-1.

    ``polylines``: a sequence of (N_k, ndim) arrays (empty ones allowed: they
    get an empty manifest).  ``attributes``: per-vertex, ``{name: [array per
    polyline]}`` or ``{name: (N,) / (N, C) concatenated}``.
    ``object_attributes``: ``{name: (P,) / (P, C)}``.  ``groups``:
    ``{group_id: [polyline indices]}``.
    """
    check_layout(object_index_layout)
    if geometry_type not in ("polyline", "streamline"):
        raise InvalidArgumentError(f"geometry_type must be 'polyline' or 'streamline', got {geometry_type!r}")
    dt = _dtype(dtype)
    raw, lens = _concat_polylines(_polyline_arrays(polylines))
    ndim = raw.shape[1]
    grid, codec = _check_geometry_options(compression, shard_shape, ndim, chunk_shape, bin_shape)
    chunk_given = _as_given(chunk_shape, "chunk_shape")
    bin_given = None if bin_shape is None else _as_given(bin_shape, "bin_shape")
    # 0.9.2 takes the bounds (and checks them) on the vertices as given, before the dtype cast
    raw64 = raw.astype(np.float64)
    _finite(raw64, "polylines")
    bounds_lh = _bounds(raw64, bounds, ndim, "polylines")
    pos = raw.astype(dt)
    _finite(pos, "polylines")
    num = len(lens)
    attrs = _per_vertex_attributes(attributes, lens)
    obj_attrs = _check_object_attributes(object_attributes, num)
    group_rows = inputs.groups_table(groups, np.arange(num, dtype=np.int64))
    grp_attrs = _check_group_attributes(group_attributes, group_rows)
    return await _write_paths(
        target, pos, lens, geometry=geometry_type, grid=grid, codec=codec, bounds=bounds_lh,
        chunk_shape=chunk_given, bin_shape=bin_given, attrs=attrs, obj_attrs=obj_attrs, group_rows=group_rows,
        grp_attrs=grp_attrs, compression=compression, overwrite=overwrite, storage_options=storage_options,
        arrays_present=["vertices", "object_index"], quirk_row_shape=_reference_quirks,
        fragment_index_links=False, object_index_layout=object_index_layout,
    )


async def write_lines(
    target,
    endpoints,
    *,
    chunk_shape,
    bin_shape=None,
    bounds=None,
    attributes=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
    _reference_quirks: bool = False,
) -> dict:
    """Write M line segments ``endpoints`` (M, 2, ndim): one 2-vertex object per line.

    ``attributes``: per endpoint, ``{name: (M, 2) / (M, 2, C)}``;
    ``object_attributes``: per line, ``{name: (M,) / (M, C)}``.
    """
    check_layout(object_index_layout)
    dt = _dtype(dtype)
    try:
        ep = np.asarray(endpoints)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError("endpoints must be an (M, 2, ndim) numeric array") from exc
    if ep.ndim != 3 or ep.shape[1] != 2 or ep.shape[2] < 1:
        raise InvalidArgumentError(f"endpoints must be an (M, 2, ndim) array, got shape {ep.shape}")
    if ep.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"endpoints must be numeric, got dtype {ep.dtype}")
    m, _, ndim = ep.shape
    grid, codec = _check_geometry_options(compression, shard_shape, ndim, chunk_shape, bin_shape)
    chunk_given = _as_given(chunk_shape, "chunk_shape")
    bin_given = None if bin_shape is None else _as_given(bin_shape, "bin_shape")
    pos = ep.astype(dt).reshape(2 * m, ndim)
    _finite(pos, "endpoints")
    bounds_lh = _bounds(pos.astype(np.float64), bounds, ndim, "endpoints")
    attrs = {}
    for name, values in (attributes or {}).items():
        inputs.check_name(name, "attribute")
        arr = np.asarray(values)
        if arr.ndim not in (2, 3) or arr.shape[:2] != (m, 2):
            raise InvalidArgumentError(f"attributes[{name!r}] has shape {arr.shape}; expected ({m}, 2) or ({m}, 2, C)")
        attrs.update(_check_dtypes(inputs.row_attributes({name: arr.reshape(2 * m, *arr.shape[2:])}, 2 * m, "attributes"), "attributes"))
    obj_attrs = _check_object_attributes(object_attributes, m)
    group_rows = inputs.groups_table(groups, np.arange(m, dtype=np.int64))
    grp_attrs = _check_group_attributes(group_attributes, group_rows)
    return await _write_paths(
        target, pos, np.full(m, 2, dtype=np.int64), geometry="line", grid=grid, codec=codec, bounds=bounds_lh,
        chunk_shape=chunk_given, bin_shape=bin_given, attrs=attrs, obj_attrs=obj_attrs, group_rows=group_rows,
        grp_attrs=grp_attrs, compression=compression, overwrite=overwrite, storage_options=storage_options,
        arrays_present=["vertices", "object_index"] + (["vertex_attributes"] if attrs else []),
        quirk_row_shape=False, fragment_index_links=_reference_quirks, object_index_layout=object_index_layout,
    )


# ---------------------------------------------------------------------------
# graphs, skeletons, meshes


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
        raise InvalidArgumentError(f"edges: vertex {c} is the child of two edges; a skeleton needs one parent per vertex")
    parent = np.full(n, -1, dtype=np.int64)
    parent[child] = par
    rounds = max(1, math.ceil(math.log2(max(n, 2)))) + 1
    anc = np.where(parent < 0, np.arange(n), parent)
    for _ in range(rounds):
        anc = anc[anc]
    if n and np.any(parent[anc] >= 0):
        v = int(np.flatnonzero(parent[anc] >= 0)[0])
        raise InvalidArgumentError(f"edges: vertex {v} lies on a cycle; a skeleton's (child, parent) edges must form a forest")
    roots = np.flatnonzero(parent < 0)
    if roots.size > 1:
        ro = np.sort(object_ids[roots])
        rep = ro[1:][ro[1:] == ro[:-1]]
        if rep.size:
            raise InvalidArgumentError(
                f"object_ids: object {int(rep[0])} holds more than one tree (several roots); a skeleton stores "
                "one rooted tree per object -- give each tree its own id, or use kind='graph'"
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
    v = np.arange(n, dtype=np.int64)
    nxt = np.empty(2 * n, dtype=np.int64)
    nxt[:n] = np.where(first_child >= 0, first_child, n + v)
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


async def _write_connected(target, pos: np.ndarray, oids: np.ndarray, records: np.ndarray, *, geometry: str,
                           grid: Grid, codec: CellCodec, bounds, chunk_shape, bin_shape, attrs, link_attrs, obj_attrs,
                           group_rows, grp_attrs, compression, overwrite, storage_options, quirk_row_shape: bool,
                           skeleton: bool, object_index_layout: str) -> dict:
    """Shared body of graphs, skeletons and meshes: one fragment per (object, chunk), explicit links."""
    n, ndim = pos.shape
    lay = Layout.by_key(grid, pos, oids)
    part = lay.part
    uniq = np.unique(oids)
    if skeleton and len(records):
        child, par = records[:, 0], records[:, 1]
        frag_start = np.zeros(n, dtype=bool)
        frag_start[lay.frag_first[part.frag_counts > 0]] = True
        implied = (lay.read_idx[child] == lay.read_idx[par] + 1) & ~frag_start[lay.read_idx[child]]
        stored = np.flatnonzero(~implied)
    else:
        stored = np.arange(len(records), dtype=np.int64)
    rec = records[stored]
    cells = place_records(lay.chunks[rec], lay.local[rec])
    link_attrs = {k: v[stored] for k, v in link_attrs.items()}

    handle = open_store(target, mode="w", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreWriter(ex, overwrite=overwrite) as writer:
        level = LevelWriter(writer, 0, *grid.layout(bounds[0], bounds[1]), codec)
        if attrs:
            empty_group(writer, "0/vertex_attributes")
        await put_rows(level, lay.part, lay.pos, attrs, lay.fragments_of, _attribute_docs(attrs, quirk_row_shape))
        await put_links(level, cells, ndim=ndim, link_attributes=link_attrs, intra_array=True, link_fragments=True)
        await level.finish()
        frag_object = np.searchsorted(uniq, part.frag_keys)
        await _put_object_data(writer, lay, frag_object, part.frag_chunk, uniq, ndim, obj_attrs, group_rows,
                               grp_attrs, compression, object_index_layout)
        add_level0_documents(writer, handle.url, geometry=geometry, n=n,
                             arrays_present=["vertices", "links", "object_index"],
                             chunk_shape=chunk_shape, bounds=bounds, bin_shape=bin_shape)
    return {
        "geometry": geometry,
        "object_count": len(uniq),
        "vertex_count": int(n),
        "link_count": len(records),
        "stored_link_count": int(cells.num_links),
        "chunk_count": len(part.chunks),
        "fragment_count": len(part.frag_chunk),
        "group_count": len(group_rows),
        "requests": ex.stats.snapshot(),
    }


def _vertex_setup(positions, dtype, chunk_shape, bin_shape, bounds, compression, shard_shape, name: str):
    dt = _dtype(dtype)
    pos = inputs.positions_array(positions, dt, name)
    ndim = pos.shape[1]
    grid, codec = _check_geometry_options(compression, shard_shape, ndim, chunk_shape, bin_shape)
    bounds_lh = _bounds(pos, bounds, ndim, name)
    return pos, grid, codec, bounds_lh, _as_given(chunk_shape, "chunk_shape"), (
        None if bin_shape is None else _as_given(bin_shape, "bin_shape"))


def _object_tables(oids, object_attributes, groups, group_attributes):
    uniq = np.unique(oids)
    obj_attrs = _check_object_attributes(object_attributes, len(uniq))
    group_rows = inputs.groups_table(groups, uniq)
    grp_attrs = _check_group_attributes(group_attributes, group_rows)
    return obj_attrs, group_rows, grp_attrs


async def write_graph(
    target,
    positions,
    edges,
    *,
    chunk_shape,
    kind: str = "graph",
    object_ids=None,
    attributes=None,
    link_attributes=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    bin_shape=None,
    bounds=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
    _reference_quirks: bool = False,
) -> dict:
    """Write a graph (every edge explicit) or a skeleton (``kind="skeleton"``: edges are
    (child, parent) rows of a forest with one root per object; vertices are stored in
    depth-first order and only the edges the reader cannot imply are kept).

    ``object_ids`` (N,) >= 0 (default: one object 0); object attributes and groups
    refer to the sorted distinct ids.  ``link_attributes``: ``{name: (M,) / (M, C)}``.
    """
    check_layout(object_index_layout)
    if kind not in ("graph", "skeleton"):
        raise InvalidArgumentError(f"kind must be 'graph' or 'skeleton', got {kind!r}")
    pos, grid, codec, bounds_lh, chunk_given, bin_given = _vertex_setup(
        positions, dtype, chunk_shape, bin_shape, bounds, compression, shard_shape, "positions")
    n = len(pos)
    e = _index_array(edges, "edges", 2, n, "positions")
    oids = _object_ids(object_ids, n)
    attrs = _check_dtypes(inputs.row_attributes(attributes, n, "attributes"), "attributes")
    link_attrs = _check_link_attributes(link_attributes, len(e))
    obj_attrs, group_rows, grp_attrs = _object_tables(oids, object_attributes, groups, group_attributes)
    skeleton = kind == "skeleton"
    if skeleton:
        order = _skeleton_order(n, e, oids, reference=_reference_quirks)
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n, dtype=np.int64)
        pos, oids = pos[order], oids[order]
        attrs = {k: v[order] for k, v in attrs.items()}
        e = inv[e]
    return await _write_connected(
        target, pos, oids, e, geometry=kind, grid=grid, codec=codec, bounds=bounds_lh, chunk_shape=chunk_given,
        bin_shape=bin_given, attrs=attrs, link_attrs=link_attrs, obj_attrs=obj_attrs, group_rows=group_rows,
        grp_attrs=grp_attrs, compression=compression, overwrite=overwrite, storage_options=storage_options,
        quirk_row_shape=_reference_quirks, skeleton=skeleton, object_index_layout=object_index_layout,
    )


async def write_mesh(
    target,
    vertices,
    faces,
    *,
    chunk_shape,
    object_ids=None,
    attributes=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    bin_shape=None,
    bounds=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
    _reference_quirks: bool = False,
) -> dict:
    """Write a mesh: ``faces`` (F, L) vertex indices, L >= 3 (triangles, quads...).

    Every face is a link record; winding survives the canonical sort through
    the perm column.  ``object_ids`` as for :func:`write_graph`.
    """
    check_layout(object_index_layout)
    pos, grid, codec, bounds_lh, chunk_given, bin_given = _vertex_setup(
        vertices, dtype, chunk_shape, bin_shape, bounds, compression, shard_shape, "vertices")
    n = len(pos)
    f = _index_array(faces, "faces", None, n, "vertices")
    if f.shape[1] < 3 or f.shape[1] > 8:
        raise InvalidArgumentError(f"faces must be (F, L) with 3 <= L <= 8, got shape {f.shape}")
    oids = _object_ids(object_ids, n)
    attrs = _check_dtypes(inputs.row_attributes(attributes, n, "attributes"), "attributes")
    obj_attrs, group_rows, grp_attrs = _object_tables(oids, object_attributes, groups, group_attributes)
    return await _write_connected(
        target, pos, oids, f, geometry="mesh", grid=grid, codec=codec, bounds=bounds_lh, chunk_shape=chunk_given,
        bin_shape=bin_given, attrs=attrs, link_attrs={}, obj_attrs=obj_attrs, group_rows=group_rows,
        grp_attrs=grp_attrs, compression=compression, overwrite=overwrite, storage_options=storage_options,
        quirk_row_shape=_reference_quirks, skeleton=False, object_index_layout=object_index_layout,
    )
