"""Streaming object writers: polylines, lines, graphs, skeletons and meshes from batches.

The object writers of :mod:`.memory` accept an iterable or async iterable of
batches and land here.  Vertex rows go through the spill machinery of
:mod:`zvf.write.spill` (chunk-sorted runs on local disk, read back chunk by chunk in
input order), so the store is byte for byte the one the in-memory writer makes
from the concatenated input.  What needs every object is built from compact
summaries kept while batches pass:

* **paths** (polylines, streamlines, lines): per *run* (consecutive vertices of
  one object in one chunk: a fragment) its chunk and length, and per object its
  run count.  That gives each chunk's fragments, the manifests (runs in path
  order) and the bridge links between consecutive runs -- no vertex is held.
* **graphs, skeletons, meshes**: edges/faces are spilled too, keyed by the
  chunk the link cell belongs to (the lexicographically smallest endpoint
  chunk).  After the vertex pass, which records each vertex's chunk-local
  index (4 bytes per vertex, the one per-vertex table held), a second pass
  places each chunk's records into link cells.  Manifests come from the
  (object, chunk, fragment) triple of every fragment.

Memory: one spill buffer, one chunk, the summaries above and the upload
budget.  ``chunk_shape="auto"`` needs the whole extent up front and is refused.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, Unpack

import anyio
import numpy as np

from ...config import tuning
from ...errors import InvalidArgumentError
from ...format.grid import extremes
from ...format.layout import LevelLayout
from .. import inputs, layout
from ..fragment_attributes import FragmentAttributes
from ..level import fragment_shard, level0, resolve_shards, run_starts
from ..spill import ChunkIds, DistinctIds, RunSpill, batches_of, describe, open_new, shard_done
from ..store_writer import StoreWriter, add_level0_documents
from ..types import WriteSummary
from .cells import (
    PathRuns,
    graph_links,
    path_links,
    put_connected_chunk,
    put_connected_index,
    put_link_records,
    put_no_rows,
    put_path_chunk,
    put_path_index,
    put_tables,
)
from .inputs import (
    as_given,
    check_dtypes,
    graph_input,
    group_attributes_table,
    layout_and_codec,
    lines_input,
    mesh_input,
    object_attributes_table,
    object_tables,
    polyline_input,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ...format.codecs import CellCodec
    from ...io.store import Target
    from ..types import Bounds, ObjectBatches, ObjectWriteOptions, Shape, SpillDir, WriteConfig

# name -> (dtype, row shape) of a batch's named columns
Schema: TypeAlias = "dict[str, tuple[np.dtype, tuple[int, ...]]]"

_KEYS = {
    "polylines": ("polylines", {"polylines", "attributes", "object_attributes"}),
    "lines": ("endpoints", {"endpoints", "attributes", "object_attributes"}),
    "graph": ("positions", {"positions", "edges", "object_ids", "attributes", "link_attributes"}),
    "mesh": ("positions", {"positions", "faces", "object_ids", "attributes"}),
}


def is_object_stream(obj: object, kind: str) -> TypeGuard[ObjectBatches]:
    """True when ``obj`` is a stream of batches rather than one in-memory input of ``kind``.

    Generators, iterators and async iterables always are; a list or tuple is
    when its first item is a batch dict, or (polylines) a sequence of 2-D
    arrays, or (polylines, lines) a 3-D array.
    """
    if isinstance(obj, np.ndarray):
        return False
    if isinstance(obj, (AsyncIterable, Iterator)):
        return True
    if not isinstance(obj, (list, tuple)) or not obj:
        return False
    first = obj[0]
    if isinstance(first, Mapping):
        return True
    if kind in ("polylines", "lines") and isinstance(first, np.ndarray) and first.ndim == 3:
        return True
    return (kind == "polylines" and isinstance(first, (list, tuple)) and len(first) > 0
            and isinstance(first[0], np.ndarray) and first[0].ndim == 2)


def _fields(batch: object, kind: str, what: str) -> dict[str, Any]:
    """A batch as a dict of its fields (a bare polylines sequence / endpoints array is the main field)."""
    main, allowed = _KEYS[kind]
    if kind == "mesh" and isinstance(batch, Mapping) and "vertices" in batch and "positions" not in batch:
        batch = {("positions" if k == "vertices" else k): v for k, v in batch.items()}  # the old name
    if not isinstance(batch, Mapping):
        if kind in ("graph", "mesh"):
            raise InvalidArgumentError(f"{what} must be a dict with keys {sorted(allowed)}, got {type(batch).__name__}")
        return {main: batch}
    unknown = set(batch) - allowed
    if unknown or main not in batch:
        raise InvalidArgumentError(f"{what} must be a dict with {main!r} and optional "
                                   f"{sorted(allowed - {main})} (got keys {sorted(batch)})")
    return dict(batch)


def _schema_check(state: dict[str, Schema], key: str, arrays: dict[str, np.ndarray], what: str) -> None:
    """Every batch must carry the same named columns with the same dtypes and row shapes."""
    schema = {k: (v.dtype, v.shape[1:]) for k, v in arrays.items()}
    if key not in state:
        state[key] = schema
    elif schema != state[key]:
        raise InvalidArgumentError(f"{what} {describe(schema)} differ from the first batch's {describe(state[key])}")


class _Bounds:
    """Running extent of the vertices, and the check of each batch against declared bounds."""

    def __init__(self, bounds: Bounds | None, ndim: int):
        self.given = None if bounds is None else inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
        self.raw = bounds
        self.ndim = ndim
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None

    def add(self, pos64: np.ndarray, what: str) -> None:
        if not len(pos64):
            return
        if self.raw is not None:
            try:
                inputs.bounds_for(pos64, self.raw, self.ndim)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{what}: {exc}") from None
        lo, hi = extremes(pos64)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)

    def result(self) -> tuple[list[float], list[float]]:
        if self.given is not None:
            return self.given
        if self.lo is None or self.hi is None:  # set together
            raise InvalidArgumentError("bounds are required when there are no positions")
        return self.lo.astype(np.float64).tolist(), self.hi.astype(np.float64).tolist()


def _setup(chunk_shape: Shape, options: ObjectWriteOptions, spill_bytes: int
           ) -> tuple[WriteConfig, LevelLayout, CellCodec, list[float], list[float] | None, _Dtype, FragmentAttributes]:
    """The checked options, level layout, codec, given shapes, dtype and fragment attributes of a streamed
    write, before any batch is read."""
    frag_columns = options.pop("fragment_attributes", None)
    cfg = inputs.streamed_config(chunk_shape, options, spill_bytes)
    bin_shape = cfg.bin_shape
    level_layout, codec = layout_and_codec(cfg.compression, cfg.shard_shape, None, chunk_shape, bin_shape)
    bin_given = None if bin_shape is None else as_given(bin_shape, "bin_shape")
    return (cfg, level_layout, codec, as_given(chunk_shape, "chunk_shape"), bin_given, _Dtype(cfg.dtype),
            FragmentAttributes(frag_columns, level_layout.ndim))


async def _spill_all(sp: _Pass1, batches: ObjectBatches) -> None:
    """Pass 1: every batch checked and spilled, in a worker thread (numpy and file writes)."""
    async for batch in batches_of(batches):
        await anyio.to_thread.run_sync(sp.add, batch)
    await anyio.to_thread.run_sync(sp.rows.finish, len(sp.chunks))


class _Dtype:
    """The stored position dtype of a stream: ``dtype=``, else fixed by the first batch with rows."""

    def __init__(self, dtype: np.dtype | None):
        self.dt, self.explicit = dtype, dtype is not None

    def of(self, values: ArrayLike, what: str) -> np.dtype | None:
        """The dtype to cast a batch's ``values`` to (None: its own); refuses a silent narrowing."""
        given = values.dtype if isinstance(values, np.ndarray) else inputs.as_numeric(values, what).dtype
        return inputs.batch_dtype(given, self.dt, self.explicit, what)

    def seen(self, pos: np.ndarray) -> None:
        if len(pos):
            self.dt = pos.dtype

    def stored(self) -> np.dtype:
        return inputs.position_dtype(np.dtype(np.float32), self.dt)


# ---------------------------------------------------------------------------
# polylines, streamlines, lines


class _Pass1:
    """What pass 1 of every object stream keeps: vertex rows spilled per chunk, extent, dtype, schemas."""

    def __init__(self, directory: str, level_layout: LevelLayout, dt: _Dtype, bounds: Bounds | None,
                 spill_bytes: int):
        self.level_layout, self.dt = level_layout, dt
        self.ndim = level_layout.ndim
        self.bounds = _Bounds(bounds, level_layout.ndim)
        self.chunks = ChunkIds(level_layout.ndim)
        self.rows = RunSpill(directory, "v", spill_bytes)
        self.state: dict[str, Schema] = {}  # the first batch's column schemas
        self.n_rows = 0
        self._batches = 0

    def add(self, batch: object) -> None:
        raise NotImplementedError

    def _next(self) -> str:
        """The name of the batch being added, for messages."""
        self._batches += 1
        return f"batches[{self._batches - 1}]"


class _PathSpill(_Pass1):
    """Pass 1 of a paths write: vertex rows spilled per chunk, runs and objects summarized."""

    def __init__(self, directory: str, level_layout: LevelLayout, dt: _Dtype, bounds: Bounds | None, kind: str,
                 spill_bytes: int):
        super().__init__(directory, level_layout, dt, bounds, spill_bytes)
        self.kind = kind
        self.run_gid: list[np.ndarray] = []
        self.run_count: list[np.ndarray] = []
        self.obj_runs: list[np.ndarray] = []
        self.obj_attrs: dict[str, list[np.ndarray]] = {}
        self.n_objects = 0

    def add(self, batch: object) -> None:
        what = self._next()
        fields = _fields(batch, self.kind, what)
        try:
            if self.kind == "polylines":
                main = fields["polylines"]
                if hasattr(main, "__len__") and len(main) == 0:
                    pos, lens, attrs = np.zeros((0, self.ndim), self.dt.stored()), np.zeros(0, np.int64), None
                    pos64 = pos
                else:
                    pos64, pos, lens, attrs = polyline_input(main, fields.get("attributes"), self.dt.dt)
                    self.dt.of(pos64, "polylines")  # refuses a batch the cast to the first one's dtype narrowed
            else:
                ep = fields["endpoints"]
                pos, m, attrs = lines_input(ep, fields.get("attributes"), self.dt.of(ep, "endpoints"))
                pos64, lens = pos.astype(np.float64), np.full(m, 2, dtype=np.int64)
            if pos.shape[1] != self.ndim:
                raise InvalidArgumentError(f"vertices are {pos.shape[1]}-D but chunk_shape has {self.ndim} values")
            obj_attrs = check_dtypes(inputs.row_attributes(fields.get("object_attributes"), len(lens),
                                                            "object_attributes"), "object_attributes")
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{what}: {exc}") from None
        if attrs is not None:
            _schema_check(self.state, "attributes", attrs, f"{what}['attributes']")
        if len(lens):
            _schema_check(self.state, "object_attributes", obj_attrs, f"{what}['object_attributes']")
            for k, v in obj_attrs.items():
                self.obj_attrs.setdefault(k, []).append(v)
        self.bounds.add(pos64, what)
        del pos64
        self.dt.seen(pos)
        n = len(pos)
        starts = (np.cumsum(lens) - lens).astype(np.int64)
        chunks = self.level_layout.chunk_of(pos) if n else np.zeros((0, self.ndim), np.int64)
        gids = self.chunks.of(chunks)
        rs = run_starts(chunks, starts)
        self.run_gid.append(gids[rs].astype(np.int64))
        self.run_count.append(np.diff(np.append(rs, n)).astype(np.int64))
        self.obj_runs.append(np.bincount(np.searchsorted(starts, rs, side="right") - 1, minlength=len(lens)))
        self.n_rows += n
        self.n_objects += len(lens)
        if n:
            self.rows.push(gids, {"positions": pos, **{f"attr:{k}": v for k, v in (attrs or {}).items()}})

    def attr_schema(self) -> Schema:
        return self.state.get("attributes", {})


async def write_paths_stream(target: Target, batches: ObjectBatches, *, geometry: str, chunk_shape: Shape,
                             spill_dir: SpillDir = None, spill_bytes: int | None = None,
                             upload_bytes: int | None = None, **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """Polylines/streamlines (``geometry``) or lines (``geometry="line"``) from batches; the in-memory bytes."""
    spill_bytes = tuning().spill_bytes if spill_bytes is None else spill_bytes
    upload_bytes = tuning().upload_bytes if upload_bytes is None else upload_bytes
    kind = "lines" if geometry == "line" else "polylines"
    if kind == "polylines" and geometry not in ("polyline", "streamline"):
        raise InvalidArgumentError(f"geometry_type must be 'polyline' or 'streamline', got {geometry!r}")
    cfg, level_layout, codec, chunk_given, bin_given, dt, frag_attrs = _setup(chunk_shape, options, spill_bytes)
    ndim = level_layout.ndim
    handle, ex = await open_new(target, cfg)
    with tempfile.TemporaryDirectory(prefix="zvf-stream-", dir=spill_dir) as tmp:
        sp = _PathSpill(tmp, level_layout, dt, cfg.bounds, kind, spill_bytes)
        try:
            await _spill_all(sp, batches)
            num, n = sp.n_objects, sp.n_rows
            if num == 0 and kind == "polylines":
                raise InvalidArgumentError(f"{kind} is empty: nothing to write (0.9.2 refuses this too)")
            lo, hi = sp.bounds.result()
            if cfg.object_attributes is not None and sp.obj_attrs:
                raise InvalidArgumentError("object_attributes: give them either per batch or as the argument, not both")
            obj_attrs = object_attributes_table(
                cfg.object_attributes if cfg.object_attributes is not None else
                {k: np.concatenate(v) for k, v in sp.obj_attrs.items()}, num)
            group_rows = inputs.groups_table(cfg.groups, np.arange(num, dtype=np.int64))
            grp_attrs = group_attributes_table(cfg.group_attributes, group_rows)
            coords = sp.chunks.coords()
            layout.check_cells(n, len(coords), chunk_given, lo, hi)
            origin, grid_shape = level_layout.extent(lo, hi)
            codec = resolve_shards(codec, cfg.shard_shape, grid_shape, n * len(grid_shape) * dt.stored().itemsize)
            visit, rank, shard_of = sp.chunks.visit_order(origin, codec.shard)

            runs = PathRuns.build(np.concatenate(sp.run_gid), np.concatenate(sp.run_count),
                                  np.concatenate(sp.obj_runs), rank)
            sp.run_gid = sp.run_count = sp.obj_runs = []

            attr_schema = sp.attr_schema()
            arrays_present = ["vertices", "object_index"]
            if kind == "lines" and attr_schema:
                arrays_present.append("vertex_attributes")
            async with StoreWriter.for_config(ex, cfg, upload_bytes) as writer:
                level = level0(writer, origin, grid_shape, codec, bool(attr_schema),
                               fragment_shard(codec, cfg.object_index_layout, grid_shape))
                links = path_links(level, ndim)
                for i, gid in enumerate(visit.tolist()):
                    cols = await anyio.to_thread.run_sync(sp.rows.read, gid)
                    pos = cols.pop("positions")
                    attrs = {k[5:]: v for k, v in cols.items()}
                    await put_path_chunk(level, links, frag_attrs, coords[gid], *runs.fragments(gid), pos, attrs,
                                         *runs.bridges(gid, coords))
                    shard = shard_done(visit, shard_of, i)
                    if shard is not None:
                        await links.flush()
                        for arr in level.arrays.values():
                            await arr.flush_shard(writer, shard)
                    del pos, attrs, cols
                if not len(visit):
                    await put_no_rows(level, ndim, dt.stored(), attr_schema)
                await links.flush()
                frag_attrs.finish(writer, arrays_present)
                await level.finish()
                links.finish()
                await put_path_index(writer, runs, coords, num, ndim, compression=cfg.compression,
                                     layout=cfg.object_index_layout)
                await put_tables(writer, obj_attrs, group_rows, grp_attrs, cfg.compression)
                add_level0_documents(writer, handle.url, geometry=geometry, n=n, arrays_present=arrays_present,
                                     chunk_shape=chunk_given, bounds=(lo, hi), bin_shape=bin_given)
        finally:
            sp.rows.close()
    return WriteSummary.of(
        writer, geometry, object_count=int(num), vertex_count=int(n), chunk_count=len(coords),
        fragment_count=len(runs.run_gid), cross_chunk_link_count=int(links.total), group_count=len(group_rows))


# ---------------------------------------------------------------------------
# graphs, skeletons, meshes


def _smallest_endpoint(ends: np.ndarray) -> np.ndarray:
    """Per record (M, L, ndim), the endpoint whose chunk is lexicographically smallest: where
    ``place_records`` files the record (ties keep the first)."""
    m = len(ends)
    rows = np.arange(m)
    best = np.zeros(m, np.int64)
    cur = ends[:, 0, :]
    for j in range(1, ends.shape[1]):
        c = ends[:, j, :]
        diff = c != cur
        axis = np.argmax(diff, axis=1)
        less = diff.any(axis=1) & (c[rows, axis] < cur[rows, axis])
        best[less] = j
        cur = np.where(less[:, None], c, cur)
    return best


class _ConnectedSpill(_Pass1):
    """Pass 1 of a graph/skeleton/mesh write: vertex rows and link records spilled per chunk."""

    def __init__(self, directory: str, level_layout: LevelLayout, dt: _Dtype, bounds: Bounds | None, geometry: str,
                 spill_bytes: int):
        super().__init__(directory, level_layout, dt, bounds, spill_bytes)
        self.geometry = geometry
        self.records = RunSpill(directory, "e", spill_bytes)
        self.width: int | None = None
        self.explicit_ids: bool | None = None
        self.roots: list[np.ndarray] = []  # object id of every skeleton root
        self.ids = DistinctIds()
        self.n_records = 0

    def add(self, batch: object) -> None:
        what = self._next()
        kind = "mesh" if self.geometry == "mesh" else "graph"
        fields = _fields(batch, kind, what)
        has_ids = fields.get("object_ids") is not None
        if self.explicit_ids is None:
            self.explicit_ids = has_ids
        elif has_ids != self.explicit_ids:
            raise InvalidArgumentError(f"{what}: either every batch has 'object_ids' or none does")
        try:
            raw = inputs.as_numeric(fields["positions"], "positions")
            dt = self.dt.of(raw, "positions")
            if kind == "mesh":
                pos, oids, rec, attrs = mesh_input(raw, fields.get("faces", np.zeros((0, 3))),
                                                   fields.get("object_ids"), fields.get("attributes"), dt)
                link_attrs: dict[str, np.ndarray] = {}
            else:
                pos, oids, rec, attrs, link_attrs = graph_input(
                    raw, fields.get("edges", np.zeros((0, 2))), fields.get("object_ids"),
                    fields.get("attributes"), fields.get("link_attributes"), dt,
                    skeleton=self.geometry == "skeleton")
            if pos.shape[1] != self.ndim:
                raise InvalidArgumentError(f"vertices are {pos.shape[1]}-D but chunk_shape has {self.ndim} values")
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{what}: {exc}") from None
        _schema_check(self.state, "attributes", attrs, f"{what}['attributes']")
        if len(rec):
            if self.width is None:
                self.width = rec.shape[1]
            elif rec.shape[1] != self.width:
                raise InvalidArgumentError(f"{what}: faces have {rec.shape[1]} vertices, the first batch's "
                                           f"{self.width}")
            _schema_check(self.state, "link_attributes", link_attrs, f"{what}['link_attributes']")
        self.bounds.add(pos.astype(np.float64, copy=False), what)
        self.dt.seen(pos)
        n, base = len(pos), self.n_rows
        self.ids.add(oids)
        if self.geometry == "skeleton" and len(rec) < n:
            has_parent = np.zeros(n, bool)
            has_parent[rec[:, 0]] = True
            self.roots.append(oids[~has_parent])
        chunks = self.level_layout.chunk_of(pos) if n else np.zeros((0, self.ndim), np.int64)
        gids = self.chunks.of(chunks).astype(np.int64)
        if n:
            self.rows.push(gids, {"positions": pos, "object_ids": oids,
                                  "vertex": np.arange(base, base + n, dtype=np.int64),
                                  **{f"attr:{k}": v for k, v in attrs.items()}})
        if len(rec):
            src = gids[rec[np.arange(len(rec)), _smallest_endpoint(chunks[rec])]]
            self.records.push(src, {"vertex": rec + base, "chunk": gids[rec],
                                    **{f"attr:{k}": v for k, v in link_attrs.items()}})
        self.n_rows += n
        self.n_records += len(rec)



def check_roots(roots: list[np.ndarray]) -> None:
    """Refuse a skeleton object with several roots (``roots``: the root objects of each batch or source)."""
    if len(roots) > 1:
        ro = np.sort(np.concatenate(roots))
        rep = ro[1:][ro[1:] == ro[:-1]]
        if rep.size:
            raise InvalidArgumentError(
                f"object_ids: object {int(rep[0])} holds more than one tree (several roots); a skeleton stores "
                "one rooted tree per object -- give each tree its own id, or use geometry_type='graph'")


async def write_connected_stream(target: Target, batches: ObjectBatches, *, geometry: str, chunk_shape: Shape,
                                 spill_dir: SpillDir = None, spill_bytes: int | None = None,
                                 upload_bytes: int | None = None,
                                 **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """A graph, skeleton or mesh (``geometry``) from batches; the in-memory writer's bytes."""
    spill_bytes = tuning().spill_bytes if spill_bytes is None else spill_bytes
    upload_bytes = tuning().upload_bytes if upload_bytes is None else upload_bytes
    cfg, level_layout, codec, chunk_given, bin_given, dt, frag_attrs = _setup(chunk_shape, options, spill_bytes)
    ndim = level_layout.ndim
    skeleton = geometry == "skeleton"
    handle, ex = await open_new(target, cfg)
    with tempfile.TemporaryDirectory(prefix="zvf-stream-", dir=spill_dir) as tmp:
        sp = _ConnectedSpill(tmp, level_layout, dt, cfg.bounds, geometry, spill_bytes)
        try:
            await _spill_all(sp, batches)
            check_roots(sp.roots)
            await anyio.to_thread.run_sync(sp.records.finish, len(sp.chunks))
            n = sp.n_rows
            lo, hi = sp.bounds.result()
            coords = sp.chunks.coords()
            layout.check_cells(n, len(coords), chunk_given, lo, hi)
            origin, grid_shape = level_layout.extent(lo, hi)
            codec = resolve_shards(codec, cfg.shard_shape, grid_shape, n * len(grid_shape) * dt.stored().itemsize)
            visit, rank, shard_of = sp.chunks.visit_order(origin, codec.shard)
            attr_schema = sp.state.get("attributes", {})
            uniq = sp.ids.result()
            obj_attrs, group_rows, grp_attrs = object_tables(uniq, cfg.object_attributes, cfg.groups,
                                                             cfg.group_attributes)
            link_names = [k for k in sp.state.get("link_attributes", {})]
            local_of = np.zeros(n, np.int32 if n < 2**31 else np.int64)  # chunk-local row of each vertex
            frag_start = np.zeros(n, bool) if skeleton else None
            frag_oid, frag_rank, frag_local = [], [], []
            arrays_present = ["vertices", "links", "object_index"]
            async with StoreWriter.for_config(ex, cfg, upload_bytes) as writer:
                level = level0(writer, origin, grid_shape, codec, bool(attr_schema),
                               fragment_shard(codec, cfg.object_index_layout, grid_shape))
                for i, gid in enumerate(visit.tolist()):
                    cols = await anyio.to_thread.run_sync(sp.rows.read, gid)
                    pos, oids, vertex = cols.pop("positions"), cols.pop("object_ids"), cols.pop("vertex")
                    attrs = {k[5:]: v for k, v in cols.items()}
                    got = await put_connected_chunk(level, frag_attrs, level_layout, coords[gid], pos, oids, attrs,
                                                    skeleton)
                    local_of[vertex] = got.local
                    if frag_start is not None:  # skeletons
                        frag_start[vertex] = got.starts
                    frag_oid.append(got.frag_keys)
                    frag_rank.append(np.full(len(got.frag_keys), rank[gid], np.int64))
                    frag_local.append(np.arange(len(got.frag_keys), dtype=np.int64))
                    shard = shard_done(visit, shard_of, i)
                    if shard is not None:
                        for arr in level.arrays.values():
                            await arr.flush_shard(writer, shard)
                    del pos, oids, vertex, attrs, cols, got
                if not len(visit):
                    await put_no_rows(level, ndim, dt.stored(), attr_schema)
                frag_attrs.finish(writer, arrays_present)

                links = graph_links(level, ndim, sp.width or (3 if geometry == "mesh" else 2), link_names)
                for i, gid in enumerate(visit.tolist()):
                    rec = await anyio.to_thread.run_sync(sp.records.read, gid)
                    ends, ends_chunk = rec.pop("vertex", None), rec.pop("chunk", None)
                    if ends is not None and len(ends):
                        await put_link_records(links, coords[ends_chunk], local_of[ends].astype(np.int64),
                                               {k[5:]: v for k, v in rec.items()},
                                               None if frag_start is None else frag_start[ends[:, 0]])
                    shard = shard_done(visit, shard_of, i)
                    if shard is not None:
                        for arr in level.arrays.values():
                            await arr.flush_shard(writer, shard)
                del local_of, frag_start
                await level.finish()
                links.finish()

                fo = np.concatenate(frag_oid) if frag_oid else np.zeros(0, np.int64)
                fr = np.concatenate(frag_rank) if frag_rank else np.zeros(0, np.int64)
                fl = np.concatenate(frag_local) if frag_local else np.zeros(0, np.int64)
                await put_connected_index(writer, fo, fr, fl, uniq, coords[np.argsort(rank)], ndim,
                                          compression=cfg.compression, layout=cfg.object_index_layout)
                await put_tables(writer, obj_attrs, group_rows, grp_attrs, cfg.compression)
                add_level0_documents(writer, handle.url, geometry=geometry, n=n, arrays_present=arrays_present,
                                     chunk_shape=chunk_given, bounds=(lo, hi), bin_shape=bin_given)
        finally:
            sp.rows.close()
            sp.records.close()
    return WriteSummary.of(
        writer, geometry, object_count=len(uniq), vertex_count=int(n), link_count=int(sp.n_records),
        stored_link_count=int(links.total), chunk_count=len(coords), fragment_count=len(fo),
        group_count=len(group_rows))
