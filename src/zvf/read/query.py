"""Composable queries: ``ds.select(...)`` -> an immutable ``AsyncQuery``.

Every narrowing is pushed into the read plan rather than applied after it:

* box and ball pick the candidate chunks (the ball through its bounding
  box), and on binned point clouds the bins, by row span;
* ``objects`` / ``groups`` / object-attribute ``where`` become an id set whose
  manifests name the only chunks (and, for point clouds, the only fragment
  rows) worth reading;
* ``where`` on a vertex attribute reads the candidates' attribute cells first
  and then only the vertex rows that pass (row ranges when the latency x
  bandwidth cost model favours them over whole cells);
* ``limit`` reads point chunks one wave at a time and stops once satisfied.

Per geometry (the README has the table): point clouds return matching
vertices in chunk order (``limit`` counts vertices); polylines/streamlines
return whole objects with at least one matching vertex in ascending id, or
with ``clip=True`` only the matching vertices (``limit`` counts objects);
graphs/skeletons/meshes return matching vertices plus the edges/faces among
them, grouped by object (``limit`` counts objects).  "Matching" means inside
the box and the ball and passing every vertex ``where``, owned by an object
of the id set.

``plan()`` runs the same planning code as ``read()`` and reports the waves of
cell requests; it may read metadata the query needs anyway (level documents,
object index, groups, object attributes) but no cell of a spatial array.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Unpack, cast

import numpy as np
from numpy.typing import NDArray

from ..errors import InvalidArgumentError
from ..format.fragments import FragmentIndex, decode_fragment_index
from ..format.shard import index_nbytes
from ..io.plan import choose_fetch
from . import load
from .box import clip_objects, linked_rows_by_object, needs_chunkset
from .cells import VLEN_HEADER, rows_from_payload
from .chunkset import ChunkSet, is_draco
from .context import Owners, ReadContext
from .dense import dense_attribute, read_groups
from .links import level_links
from .load import LINKED
from .objects import SEQUENTIAL, combined_selection, level_attributes, object_table, read_grouped
from .points import attribute_layout, attribute_rows, fetch, fragment_indexes, row_nbytes
from .query_plan import PlannedRead, QueryPlan, Wave
from .query_spec import SelectArgs, Spec, Term
from .rowops import expand_ranges, match_rows
from .selection import Selection

if TYPE_CHECKING:
    from .cells import CellArray
    from .export import Batches

__all__ = ["AsyncQuery"]

Reads = tuple[list[PlannedRead], list[PlannedRead]]
"""What reading some cells of one array asks: (shard-index reads, cell reads)."""


class AsyncQuery:
    """A pending read of one dataset; nothing is fetched until a terminal runs.

    ``select(...)`` returns a narrower query (this one is unchanged).
    Terminals: ``read()``, ``count()``, ``object_ids()``, ``iter()``,
    ``plan()``, ``explain()``.
    """

    __slots__ = ("_rc", "_spec")

    def __init__(self, rc: ReadContext, spec: Spec):
        self._rc = rc
        self._spec = spec

    @classmethod
    def build(cls, rc: ReadContext, **narrowing: Unpack[SelectArgs]) -> AsyncQuery:
        return cls(rc, Spec.build(rc.ndim, **narrowing))

    def select(self, **narrowing: Unpack[SelectArgs]) -> AsyncQuery:
        """This query narrowed further: boxes intersect, id sets intersect, ``where`` terms AND."""
        return AsyncQuery(self._rc, self._spec.and_(Spec.build(self._rc.ndim, **narrowing)))

    @property
    def spec(self) -> Spec:
        return self._spec

    def __repr__(self) -> str:
        return f"AsyncQuery(level={self._spec.level!r}, {self._spec.describe()})"

    # ------------------------------------------------------------- terminals
    async def read(self) -> Selection:
        """The matching data as one Selection (see the module docstring for per-geometry semantics)."""
        return await self._rc.retrying(self._read)

    async def _read(self) -> Selection:
        return await _read(self._rc, await _resolve(self._rc, self._spec))

    async def count(self) -> int:
        """Number of vertices ``read()`` returns; from metadata and fragment indexes where the
        narrowing allows (unnarrowed level, objects only, boxes covering whole bins)."""
        return await self._rc.retrying(self._count)

    async def _count(self) -> int:
        ctx = await _resolve(self._rc, self._spec)
        n = await _count_without_vertices(self._rc, ctx)
        if n is not None:
            return n
        return len(await _read(self._rc, replace(ctx, names=[])))

    async def object_ids(self) -> NDArray[np.int64]:
        """Sorted ids of the objects the result holds (empty for a cloud without object ids)."""
        return await self._rc.retrying(self._object_ids)

    async def _object_ids(self) -> NDArray[np.int64]:
        return (await _object_ids(self._rc, await _resolve(self._rc, self._spec))).astype(np.int64, copy=False)

    def iter(self, *, batch: int | None = None, prefetch: int = 4) -> Batches[Selection]:
        """The result in batches (``async for``), at most ``prefetch`` batches fetched ahead:
        point clouds ``batch`` chunks (default 16) at a time, object geometries ``batch`` objects
        (default 256).  ``limit`` cuts the stream."""
        return _iterate(self, batch, prefetch)

    async def plan(self) -> QueryPlan:
        """The cell requests ``read()`` would make on a cold cache, in waves, with estimates."""
        ctx = await _resolve(self._rc, self._spec)
        return await _plan(self._rc, ctx)

    async def explain(self) -> str:
        """``plan()`` in words."""
        return (await self.plan()).explain()


# --------------------------------------------------------------------------
# resolution: spec + store -> what to read
# --------------------------------------------------------------------------


@dataclass
class _Ctx:
    spec: Spec
    level: load.Level
    names: list[str]  # stored attributes to return
    with_cat: bool  # add the chunking attribute (attribute-chunked levels)
    vterms: tuple[Term, ...]  # where on vertex attributes
    allowed: np.ndarray | None  # object id set (objects & groups & object-attribute where)
    level_note: str
    categories: list[Any] | None = None  # values of the chunking attribute a ``where`` on it keeps

    def chunks_in(self, box: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        """Stored chunks of the box (all when None), within ``categories`` when a ``where`` named them."""
        lo, hi = box if box is not None else (None, None)
        return self.level.chunks_in(lo, hi, self.categories)

    @property
    def box(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self.spec.box()

    @property
    def vertex_predicates(self) -> bool:
        return self.spec.bbox is not None or self.spec.near is not None or bool(self.vterms)


async def _resolve(rc: ReadContext, spec: Spec) -> _Ctx:
    if not isinstance(spec.level, int):  # "auto"
        lvl, note = await _pick_level(rc, spec)
    else:
        lvl, note = await rc.level(spec.level), f"level {spec.level} (asked for)"
    names, with_cat = level_attributes(lvl, list(spec.attributes) if spec.attributes is not None else None)
    vnames = lvl.named("vertex_attributes")
    cname = lvl.category_name
    cterms = tuple(t for t in spec.where if cname is not None and t.name == cname and cname not in vnames)
    oterms = tuple(t for t in spec.where if t.name not in vnames and t not in cterms)
    vterms = tuple(t for t in spec.where if t.name in vnames)
    categories = None
    if cterms:  # the chunking attribute: a where on it picks whole categories, before any request
        values = np.asarray(lvl.categories)
        keep = np.ones(len(values), dtype=bool)
        for t in cterms:
            keep &= t.test(t.column(values, None))
        categories = values[keep].tolist()
    if oterms and not rc.has_objects(lvl.index):
        raise InvalidArgumentError(f"where {oterms[0].name!r}: no such vertex attribute (it has {vnames})")
    narrowed_by_id = spec.objects is not None or spec.groups is not None
    if narrowed_by_id and not rc.has_objects(lvl.index):
        raise InvalidArgumentError(f"objects=/groups=/object-attribute where need object ids; level {lvl.index} "
                                   f"is a point cloud without them")
    if oterms:
        await rc.family(lvl.index, "object_attributes")
        onames = lvl.named("object_attributes")
        bad = [t.name for t in oterms if t.name not in onames]
        if bad:
            raise InvalidArgumentError(f"where {bad[0]!r}: no such attribute (vertex attributes: {vnames}, "
                                       f"object attributes: {onames})")
    allowed = None if spec.objects is None else np.asarray(spec.objects, dtype=np.int64)
    if spec.groups is not None:
        groups = await read_groups(rc, lvl.index)
        out_of_range = [g for g in spec.groups if not 0 <= g < len(groups)]
        if out_of_range:
            raise InvalidArgumentError(
                f"groups: group {out_of_range[0]} out of range (the level has {len(groups)} groups)")
        members = np.unique(np.concatenate([groups[g] for g in spec.groups] + [np.zeros(0, np.int64)]))
        allowed = members if allowed is None else np.intersect1d(allowed, members)
    if oterms:
        ids = await rc.object_ids(lvl.index)
        keep = np.ones(len(ids), dtype=bool)
        for t in oterms:
            values = await dense_attribute(rc, "object_attributes", t.name, lvl.index)
            arr = lvl.need(f"object_attributes/{t.name}")
            keep &= t.test(t.column(np.asarray(values)[: len(ids)], arr.meta.attributes.get("channel_names")))
        ids = np.unique(ids[keep])
        allowed = ids if allowed is None else np.intersect1d(allowed, ids)
    for t in vterms:  # channel errors before any request, where the metadata tells the width
        arr = lvl.need(f"vertex_attributes/{t.name}")
        _, rshape = attribute_layout(arr)
        channels = arr.meta.attributes.get("channel_names")
        width = int(np.prod(rshape)) if rshape else len(channels or [])
        if width:
            t.column(np.zeros((0, width) if width > 1 else (0,)), channels)
    return _Ctx(spec, lvl, names, with_cat, vterms, allowed, note, categories)


async def _pick_level(rc: ReadContext, spec: Spec) -> tuple[load.Level, str]:
    """Finest level whose estimated result fits ``max_vertices``: the level's ``vertex_count``
    scaled by the share of its stored chunks the box touches."""
    box = spec.box()
    notes = []
    chosen = None
    for index in rc.level_ids:
        lvl = await rc.level(index)
        chunks = lvl.nonempty_chunks
        share = 1.0
        if box is not None and len(chunks):
            share = len(lvl.chunks_in(*box)) / len(chunks)
        est = round((lvl.meta.vertex_count or 0) * share)
        notes.append(f"level {index} ~{est:,}")
        if est <= (spec.max_vertices or 0):  # set whenever level="auto" (Spec.build)
            chosen = lvl
            break
    if chosen is None:
        chosen = await rc.level(rc.level_ids[-1])
        return chosen, (f"level {chosen.index} (auto: none fits max_vertices={spec.max_vertices:,}; "
                        f"coarsest; estimates {', '.join(notes)})")
    return chosen, f"level {chosen.index} (auto: finest within max_vertices={spec.max_vertices:,}; {', '.join(notes)})"


# --------------------------------------------------------------------------
# point clouds
# --------------------------------------------------------------------------


@dataclass
class _PointJob:
    """Everything ``read()`` decides before its first cell request (and ``plan()`` reports)."""

    chunks: np.ndarray  # (K, ndim) candidate chunks, in result order
    final: dict[str, CellArray]  # array name -> array read last (vertices, attributes, [fragments])
    where: dict[str, CellArray]  # array name -> array read first for vertex ``where``
    first_fi: np.ndarray  # chunk indexes whose fragment index is read before the cells
    bins: np.ndarray | None  # (K, B) bins a box touches, for bin-narrowed spans
    obj_frags: dict[tuple[int, ...], list[int]] | None  # chunk -> fragments of the id set (clouds with ids)
    owners: Owners | None  # chunk -> object id per fragment
    ranged: bool  # every array can be read by row range
    owner_fi_only: bool = False  # fragment indexes serve only to name owners (read beside the where cells)


async def _point_job(rc: ReadContext, ctx: _Ctx, subset: np.ndarray | None = None) -> _PointJob:
    lvl = ctx.level
    box = ctx.box
    cand = ctx.chunks_in(box)
    if subset is not None:
        cand = cand[match_rows(subset, cand) >= 0]
    obj_frags: dict[tuple[int, ...], list[int]] | None = None
    if ctx.allowed is not None:
        _, sub = await object_table(rc, lvl, ctx.allowed)
        obj_frags = {}
        for c, f in zip(map(tuple, sub.coords.tolist()), sub.fragment.tolist()):
            obj_frags.setdefault(c, []).append(f)
        cand = cand[[tuple(c) in obj_frags for c in cand.tolist()]] if len(cand) else cand
    owners = await rc.fragment_owners(lvl.index) if rc.has_objects(lvl.index) else None
    wnames = list(dict.fromkeys(t.name for t in ctx.vterms))
    where_names = [f"vertex_attributes/{n}" for n in wnames]
    final_names = ["vertices", *(f"vertex_attributes/{n}" for n in ctx.names if n not in wnames)]
    missing = [k for k in final_names + where_names if lvl.array(k) is None]
    if missing:
        raise InvalidArgumentError(f"{lvl.index}/{missing[0]}: missing or not an array")
    where = {k: lvl.need(k) for k in where_names}
    final = {k: lvl.need(k) for k in final_names}
    frag = lvl.array("vertex_fragments")
    ranged = all(a.partial_rows_ok for a in (*final.values(), *where.values()))
    first = np.zeros(0, dtype=np.int64)
    bins = None
    if obj_frags is not None and frag is not None:
        first = np.arange(len(cand))
    elif (box is not None and ranged and frag is not None and owners is None and lvl.layout.fragments_are_bins
          and lvl.layout.bins_in_chunk > 1):  # with object ids, fragments are per object, not per bin
        mask = lvl.layout.bins_touching(cand, *box)
        partial = np.flatnonzero(~mask.all(axis=1))
        if len(partial) and _narrow_pays(rc, lvl, cand, partial, mask, {**final, **where}):
            first, bins = partial, mask
    if owners is not None and obj_frags is None:
        if where:  # rows get picked by where: owners come from indexes read beside the where cells
            first = np.arange(len(cand))
        else:
            final["vertex_fragments"] = lvl.need("vertex_fragments")
    return _PointJob(cand, final, where, first, bins, obj_frags, owners, ranged,
                     owners is not None and obj_frags is None and bool(where))


def _fi_key(frag: CellArray, chunk: Sequence[int] | np.ndarray) -> str:
    key: str = frag.key_of(frag.cell_coords(chunk))
    return key


def _narrow_pays(rc: ReadContext, lvl: load.Level, cand: np.ndarray, partial: np.ndarray, mask: np.ndarray,
                 arrays: dict[str, CellArray]) -> bool:
    """Bin spans are worth it when the fragment indexes are cached, or by the cost model
    (one more round trip against the bytes of untouched bins)."""
    frag = lvl.need("vertex_fragments")
    cache = frag.executor.cache("fragment_index")
    if all(_fi_key(frag, cand[i]) in cache for i in partial):
        return True
    handle = frag.executor.handle
    row_bytes = sum(row_nbytes(a) for a in arrays.values())
    per_chunk = row_bytes * max(1, lvl.meta.vertex_count or 0) / max(1, len(lvl.nonempty_chunks))
    whole = int(per_chunk * len(partial))
    needed = int(whole * mask[partial].mean())
    return choose_fetch(whole, [(0, needed)], handle.latency_hint, handle.bandwidth_hint,
                        ranged_round_trips=2) == "ranges"


def _runs(rows: np.ndarray) -> np.ndarray:
    """Sorted unique rows as (start, stop) runs."""
    if rows.size == 0:
        return np.zeros((0, 2), np.int64)
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = rows[np.r_[0, cut]]
    stops = rows[np.r_[cut - 1, rows.size - 1]] + 1
    return np.stack((starts, stops), axis=1).astype(np.int64)


def _span_rows(spans: np.ndarray) -> np.ndarray:
    return expand_ranges(spans[:, 0], spans[:, 1] - spans[:, 0]) if len(spans) else np.zeros(0, np.int64)


async def _read_points(rc: ReadContext, ctx: _Ctx, subset: np.ndarray | None = None) -> Selection:
    job = await _point_job(rc, ctx, subset)
    limit = ctx.spec.limit
    step = len(job.chunks) if limit is None else max(1, rc.ex.concurrency // max(1, len(job.final)))
    parts, got = [], 0
    for a in range(0, max(len(job.chunks), 1), max(step, 1)):  # one wave of chunks per step with a limit
        idx = np.arange(a, min(a + step, len(job.chunks)))
        sel = await _point_wave(rc, ctx, job, idx)
        parts.append(sel)
        got += len(sel)
        if limit is not None and got >= limit:
            break
    out = concat(parts)
    if limit is not None and len(out) > limit:
        out = _take(out, np.arange(limit))
    return out


async def _point_wave(rc: ReadContext, ctx: _Ctx, job: _PointJob, idx: np.ndarray) -> Selection:
    lvl = ctx.level
    chunks = [tuple(int(x) for x in job.chunks[i]) for i in idx]
    first = set(job.first_fi.tolist())
    need_fi = [k for k, i in enumerate(idx) if int(i) in first]
    fis: dict[int, FragmentIndex] = {}
    if need_fi and not job.owner_fi_only:
        fis = dict(zip(need_fi, await fragment_indexes(lvl.need("vertex_fragments"), [chunks[k] for k in need_fi])))
    spans: dict[int, np.ndarray] = {}  # k -> row spans to read (absent = whole cell)
    for k, fi in ({} if job.owner_fi_only else fis).items():
        frags: list[int] | np.ndarray
        if job.obj_frags is not None:
            frags = [f for f in job.obj_frags[chunks[k]] if f < fi.num_fragments]
        else:
            if fi.num_fragments != lvl.layout.bins_in_chunk:
                continue  # fragments do not line up with bins: whole cell
            assert job.bins is not None  # a chunk's index is read first for its ids or for its bins
            frags = np.flatnonzero(job.bins[idx[k]])
        s, e = fi.spans(np.asarray(frags, dtype=np.int64))
        spans[k] = np.stack((s, e), axis=1)
    if not job.ranged:  # spans still say which rows are wanted; the cells come whole
        wanted = {k: _span_rows(v) for k, v in spans.items()}
        spans = {}
    else:
        wanted = {}
    live = [k for k in range(len(chunks)) if k not in spans or len(spans[k])]
    where_vals: dict[str, dict[int, np.ndarray]] = {}  # array name -> chunk -> passing rows
    fetched: dict[int, np.ndarray | None] = {k: (_span_rows(spans[k]) if k in spans else None) for k in live}
    if job.where:
        jobs: list[Awaitable[object]] = [fetch(lvl.need("vertices").executor, job.where, [chunks[k] for k in live],
                                                {j: spans[k] for j, k in enumerate(live) if k in spans})]
        if job.owner_fi_only:  # owners' fragment indexes in the same wave as the where cells
            jobs.append(fragment_indexes(lvl.need("vertex_fragments"), [chunks[k] for k in live]))
        first_got, *more = await rc.ex.gather(jobs)
        got = cast("dict[str, list[Any]]", first_got)  # jobs[0] is the fetch of the where cells
        if more:
            fis = dict(zip(live, cast("list[FragmentIndex]", more[0])))
        keep_live: list[int] = []
        new_spans: dict[int, np.ndarray] = {}
        channels: dict[str, int] = {}
        for j, k in enumerate(live):
            rows_k = fetched[k]
            vals = {}
            n = None
            for name, arr in job.where.items():
                adt, rshape = attribute_layout(arr)
                key = arr.key_of(arr.cell_coords(chunks[k]))
                raw = rows_from_payload(got[name][j], adt, (), key=key) if got[name][j] is not None else None
                n = (len(rows_k) if rows_k is not None else
                     (len(raw) // max(1, int(np.prod(rshape or (1,)))) if raw is not None else 0))
                vals[name] = attribute_rows(name.split("/", 1)[1], arr, got[name][j], n, key, channels)
            mask = np.ones(n or 0, dtype=bool)
            for t in ctx.vterms:
                arr = job.where[f"vertex_attributes/{t.name}"]
                mask &= t.test(t.column(vals[f"vertex_attributes/{t.name}"], arr.meta.attributes.get("channel_names")))
            if k in wanted:
                mask &= np.isin(np.arange(len(mask)), wanted[k])
            absrows = rows_k if rows_k is not None else np.arange(len(mask), dtype=np.int64)
            passing = absrows[mask]
            if not len(passing):
                continue
            keep_live.append(k)
            for name, v in vals.items():
                where_vals.setdefault(name, {})[k] = v[mask]
            wanted[k] = passing
            if job.ranged and _ranges_pay(rc, job, passing, rows_k, n or 0):
                new_spans[k] = _runs(passing)
        live = keep_live
        spans = new_spans
        fetched = {k: (_span_rows(spans[k]) if k in spans else None) for k in live}
    payloads = await fetch(lvl.need("vertices").executor, job.final, [chunks[k] for k in live],
                           {j: spans[k] for j, k in enumerate(live) if k in spans})
    return _assemble_points(ctx, job, chunks, live, payloads, fetched, wanted, where_vals, fis)


def _ranges_pay(rc: ReadContext, job: _PointJob, passing: np.ndarray, rows_read: np.ndarray | None,
                n_rows: int) -> bool:
    """Row ranges of the passing rows instead of whole cells, by the cost model."""
    row_bytes = sum(row_nbytes(a) for a in job.final.values())
    total = int(rows_read.max()) + 1 if rows_read is not None and len(rows_read) else n_rows
    runs = _runs(passing)
    handle = rc.ex.handle
    return choose_fetch(total * row_bytes, (runs * row_bytes).tolist(), handle.latency_hint,
                        handle.bandwidth_hint) == "ranges"


def _assemble_points(ctx: _Ctx, job: _PointJob, chunks: list[tuple[int, ...]], live: list[int],
                     payloads: dict[str, list[Any]], fetched: dict[int, np.ndarray | None],
                     wanted: dict[int, np.ndarray], where_vals: dict[str, dict[int, np.ndarray]],
                     fis: dict[int, FragmentIndex]) -> Selection:
    lvl = ctx.level
    vert = job.final["vertices"]
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32"))
    ndim = lvl.layout.ndim
    pos_parts: list[np.ndarray] = []
    oid_parts: list[np.ndarray] = []
    attr_parts: dict[str, list[np.ndarray]] = {n: [] for n in ctx.names}
    channels: dict[str, int] = {}
    for j, k in enumerate(live):
        c = chunks[k]
        pos = rows_from_payload(payloads["vertices"][j], dtype, (ndim,), key=vert.key_of(vert.cell_coords(c)))
        rows_read = fetched[k]
        absrows = rows_read if rows_read is not None else np.arange(len(pos), dtype=np.int64)
        if k in wanted:
            local = np.searchsorted(absrows, wanted[k]) if rows_read is not None else wanted[k]
        else:
            local = np.arange(len(pos), dtype=np.int64)
        keep = ctx.spec.vertex_mask(pos[local])
        oids = None
        if job.owners is not None:
            fi = fis.get(k)
            if fi is None:
                fpay = payloads["vertex_fragments"][j]
                fi = decode_fragment_index(fpay or b"", key=_fi_key(job.final["vertex_fragments"], c),
                                           n_rows=len(pos) if fetched[k] is None else None)
            oids = _row_owners(fi, job.owners.get(c), absrows[local])
            if ctx.allowed is not None:
                keep &= np.isin(oids, ctx.allowed)
            oid_parts.append(oids[keep])
        pos_parts.append(pos[local][keep])
        for n in ctx.names:
            name = f"vertex_attributes/{n}"
            if name in job.where:
                attr_parts[n].append(where_vals[name][k][keep])
                continue
            arr = job.final[name]
            rows = attribute_rows(n, arr, payloads[name][j], len(pos), arr.key_of(arr.cell_coords(c)), channels)
            attr_parts[n].append(rows[local][keep])
    positions = np.concatenate(pos_parts) if pos_parts else np.zeros((0, ndim), dtype)
    attrs = {n: np.concatenate(attr_parts[n]) if attr_parts[n] else _no_rows(lvl.need(f"vertex_attributes/{n}"))
             for n in ctx.names}
    oids = None
    if job.owners is not None:
        oids = np.concatenate(oid_parts) if oid_parts else np.zeros(0, np.int64)
    return Selection(positions, attrs, oids)


def _row_owners(fi: FragmentIndex, per_frag: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """Object id of each absolute row of a chunk (-1 where no manifest names its fragment)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    if per_frag is None or fi.num_fragments == 0 or not len(rows):
        return out
    frows, lengths = fi.gather(np.arange(fi.num_fragments))
    frag_of = np.full(max(int(frows.max()) + 1, int(rows.max()) + 1) if len(frows) else int(rows.max()) + 1, -1,
                      dtype=np.int64)
    frag_of[frows] = np.repeat(np.arange(fi.num_fragments, dtype=np.int64), lengths)
    f = frag_of[rows]
    ok = (f >= 0) & (f < len(per_frag))
    out[ok] = per_frag[f[ok]]
    return out


def concat(parts: list[Selection]) -> Selection:
    if len(parts) == 1:
        return parts[0]
    parts = [p for p in parts if len(p)] or parts[:1]
    oids = None if parts[0].object_ids is None else np.concatenate([p.object_ids for p in parts])
    return Selection(np.concatenate([p.positions for p in parts]),
                     {n: np.concatenate([p.attributes[n] for p in parts]) for n in parts[0].attributes}, oids)


def _take(sel: Selection, rows: np.ndarray) -> Selection:
    return Selection(sel.positions[rows], {n: v[rows] for n, v in sel.attributes.items()},
                     None if sel.object_ids is None else sel.object_ids[rows])


# --------------------------------------------------------------------------
# object geometries
# --------------------------------------------------------------------------


def _candidates(ctx: _Ctx, sub_coords: np.ndarray | None) -> np.ndarray:
    """Chunks that can hold a matching vertex: the box's, and the id set's when there is one."""
    cand = ctx.chunks_in(ctx.box)
    if sub_coords is not None:
        cand = cand[match_rows(np.unique(sub_coords, axis=0), cand) >= 0] if len(sub_coords) else cand[:0]
    return cand


def _vertex_pass(ctx: _Ctx, positions: np.ndarray, attrs: dict[str, np.ndarray]) -> np.ndarray:
    keep = ctx.spec.vertex_mask(positions)
    for t in ctx.vterms:
        arr = ctx.level.need(f"vertex_attributes/{t.name}")
        keep &= t.test(t.column(attrs[t.name], arr.meta.attributes.get("channel_names")))
    return keep


def _with_where(ctx: _Ctx) -> list[str]:
    return list(dict.fromkeys([*ctx.names, *(t.name for t in ctx.vterms)]))


async def _read_sequential(rc: ReadContext, ctx: _Ctx) -> Selection:
    lvl = ctx.level
    names = _with_where(ctx)
    cs = ChunkSet(rc, lvl, names, category=ctx.with_cat)
    limit = ctx.spec.limit
    if not ctx.vertex_predicates:
        ids = ctx.allowed if ctx.allowed is not None else np.unique(await rc.object_ids(lvl.index))
        got_ids, sub = await object_table(rc, lvl, ids)
        nonempty = np.bincount(sub.object_row, minlength=len(got_ids)) > 0
        rows = np.flatnonzero(nonempty)[:limit]
        return _strip(combined_selection(await read_grouped(rc, cs, got_ids[rows], sub.take_objects(rows))), ctx)
    oids, table = await rc.manifests(lvl.index)
    sub_coords = None
    if ctx.allowed is not None:
        in_set = np.isin(oids[table.object_row], ctx.allowed)
        sub_coords = table.coords[in_set]
    cand = _candidates(ctx, sub_coords)
    await cs.load(cand, attributes=bool(ctx.vterms))
    hit_keys = []
    for c in map(tuple, cand.tolist()):  # per chunk
        s = cs.slot[c]
        if not cs.counts[s] or cs.fis[s].num_fragments == 0:
            continue
        attrs: dict[str, np.ndarray] = {}
        for t in ctx.vterms:
            loaded = cs.attrs[t.name][s]
            assert loaded is not None  # loaded with attributes whenever there are vertex terms (above)
            attrs[t.name] = loaded
        ok = _vertex_pass(ctx, cs.pos[s], attrs)
        if not ok.any():
            continue
        frows, seg = cs.all_fragment_rows(s)
        f = np.unique(seg[ok[frows]])
        hit_keys.append(np.concatenate((np.broadcast_to(np.asarray(c, np.int64), (len(f), cs.kdim)), f[:, None]),
                                       axis=1))
    if hit_keys:
        keys = np.unique(np.concatenate(hit_keys), axis=0)
        qkeys = np.concatenate((table.coords, table.fragment[:, None]), axis=1)
        rows = np.unique(table.object_row[match_rows(keys, qkeys) >= 0])
    else:
        rows = np.zeros(0, np.int64)
    if ctx.allowed is not None:
        rows = rows[np.isin(oids[rows], ctx.allowed)]
    rows = rows[np.argsort(oids[rows], kind="stable")][:limit]
    sel = combined_selection(await read_grouped(rc, cs, oids[rows], table.take_objects(rows)))
    if ctx.spec.clip:
        sel = clip_objects(sel, _vertex_pass(ctx, sel.positions, sel.attributes))
    return _strip(sel, ctx)


def _strip(sel: Selection, ctx: _Ctx) -> Selection:
    """Drop attributes read only to test ``where``."""
    category = ctx.level.category_name
    keep = [*ctx.names, *([category] if ctx.with_cat and category is not None else [])]
    sel.attributes = {n: sel.attributes[n] if len(sel.attributes[n]) or n not in ctx.names
                      else _no_rows(ctx.level.need(f"vertex_attributes/{n}")) for n in keep}
    return sel


async def _linked_chunks(rc: ReadContext, ctx: _Ctx) -> np.ndarray:
    sub_coords = None
    if ctx.allowed is not None:
        _, sub = await object_table(rc, ctx.level, ctx.allowed)
        sub_coords = sub.coords
    return _candidates(ctx, sub_coords)


async def _read_linked(rc: ReadContext, ctx: _Ctx) -> Selection:
    geometry = rc.geometry_type
    lvl = ctx.level
    links = await level_links(rc, lvl.index)
    cs = ChunkSet(rc, lvl, _with_where(ctx), links, geometry == "skeleton", category=ctx.with_cat)
    cand = await _linked_chunks(rc, ctx)
    owners = await rc.fragment_owners(lvl.index)
    await cs.load(cand)
    _, _, pos_all, attrs_all = cs.concat()
    owner = cs.row_owners(owners)
    ok = _vertex_pass(ctx, pos_all, attrs_all) if len(pos_all) else np.zeros(0, bool)
    if ctx.allowed is not None:
        ok &= np.isin(owner, ctx.allowed)
    sel = np.flatnonzero(ok)
    sel = sel[np.argsort(owner[sel], kind="stable")]
    if ctx.spec.limit is not None:
        first_objects = np.unique(owner[sel])[: ctx.spec.limit]
        sel = sel[np.isin(owner[sel], first_objects)]
    return _strip(linked_rows_by_object(cs, sel, owner, geometry), ctx)


# --------------------------------------------------------------------------
# dispatch, count, object ids, iteration
# --------------------------------------------------------------------------


def _no_rows(arr: CellArray) -> np.ndarray:
    """An empty attribute column; channels from ``channel_names`` when ``row_shape`` is [] (0.9.2 object writers)."""
    adt, rshape = attribute_layout(arr)
    width = len(arr.meta.attributes.get("channel_names") or [])
    return np.zeros((0, *(rshape or ((width,) if width > 1 else ()))), adt)


def _empty(rc: ReadContext, ctx: _Ctx) -> Selection:
    lvl = ctx.level
    vert = lvl.array("vertices")
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32")) if vert is not None else np.float32
    attrs = {n: _no_rows(lvl.need(f"vertex_attributes/{n}")) for n in ctx.names}
    pos = np.zeros((0, rc.ndim), dtype)
    g = rc.geometry_type
    if g == "point_cloud":
        return Selection(pos, attrs, np.zeros(0, np.int64) if rc.has_objects(lvl.index) else None)
    width = 3 if g == "mesh" else 2
    conn = np.zeros((0, width), np.int64)
    return Selection(pos, attrs, np.zeros(0, np.int64), edges=None if g == "mesh" else conn,
                     faces=conn if g == "mesh" else None, offsets=np.zeros(1, np.int64), objects=np.zeros(0, np.int64))


async def _read(rc: ReadContext, ctx: _Ctx, subset: np.ndarray | None = None) -> Selection:
    if ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed)):
        return _empty(rc, ctx)
    g = rc.geometry_type
    if g in SEQUENTIAL:
        return await _read_sequential(rc, ctx)
    if g in LINKED:
        return await _read_linked(rc, ctx)
    if needs_chunkset(ctx.level):
        return await _read_points_cs(rc, ctx, subset)
    return await _read_points(rc, ctx, subset)


async def _read_points_cs(rc: ReadContext, ctx: _Ctx, subset: np.ndarray | None) -> Selection:
    """Points of attribute-chunked or Draco levels, through a ChunkSet (whole cells)."""
    lvl = ctx.level
    cs = ChunkSet(rc, lvl, _with_where(ctx), category=ctx.with_cat)
    sub_coords = None
    if ctx.allowed is not None:
        _, sub = await object_table(rc, lvl, ctx.allowed)
        sub_coords = sub.coords
    cand = _candidates(ctx, sub_coords)
    if subset is not None:
        cand = cand[match_rows(subset, cand) >= 0]
    owners = await rc.fragment_owners(lvl.index) if rc.has_objects(lvl.index) else None
    await cs.load(cand)
    _, _, pos, attrs = cs.concat()
    ok = _vertex_pass(ctx, pos, attrs)
    oids = None if owners is None else cs.row_owners(owners)
    if ctx.allowed is not None:
        assert oids is not None  # _resolve refuses an id narrowing on a level without object ids
        ok &= np.isin(oids, ctx.allowed)
    rows = np.flatnonzero(ok)[: ctx.spec.limit]
    positions, attrs = cs.rows(rows)
    return _strip(Selection(positions, attrs, None if oids is None else oids[rows]), ctx)


async def _count_without_vertices(rc: ReadContext, ctx: _Ctx) -> int | None:
    """The count from metadata and fragment indexes, or None when vertices must be read."""
    spec, lvl = ctx.spec, ctx.level
    g = rc.geometry_type
    if spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed)):
        return 0
    limit = spec.limit

    def cap(n: int) -> int:
        """Point clouds: ``limit`` counts vertices (object geometries' limit counts objects)."""
        return n if limit is None or g != "point_cloud" else min(n, limit)

    if ctx.vterms or spec.near is not None or ctx.categories is not None:
        return None  # vertex rows to test, or some categories only: read them
    if ctx.allowed is None and spec.bbox is None:
        if g in SEQUENTIAL and (lvl.meta.shared_fragments or limit is not None):
            return None
        if g in LINKED and limit is not None:
            return None
        return cap(int(lvl.meta.vertex_count)) if lvl.meta.vertex_count is not None else None
    if lvl.array("vertex_fragments") is None:
        return None
    if spec.bbox is None and g in (*SEQUENTIAL, "point_cloud"):  # objects only: fragment lengths
        assert ctx.allowed is not None  # no objects and no box returned above
        got_ids, sub = await object_table(rc, lvl, ctx.allowed)
        if g in SEQUENTIAL and limit is not None:
            nonempty = np.flatnonzero(np.bincount(sub.object_row, minlength=len(got_ids)) > 0)[:limit]
            sub = sub.take_objects(nonempty)
        coords = [tuple(c) for c in np.unique(sub.coords, axis=0).tolist()]
        by_chunk = dict(zip(coords, await fragment_indexes(lvl.need("vertex_fragments"), coords)))
        counts = [int(by_chunk[tuple(c)].counts[f]) if f < by_chunk[tuple(c)].num_fragments else 0
                  for c, f in zip(sub.coords.tolist(), sub.fragment.tolist())]
        return cap(int(sum(counts)))
    layout = lvl.layout
    if g != "point_cloud" or ctx.allowed is not None or not layout.fragments_are_bins or needs_chunkset(lvl):
        return None
    box = spec.box()
    if box is None:
        return None
    lo, hi = box
    cand = lvl.chunks_in(lo, hi)
    vdt = np.dtype(lvl.need("vertices").meta.attributes.get("dtype", "float32"))
    covered = layout.bins_covered(cand, lo, hi, vdt)
    cut = layout.bins_touching(cand, lo, hi) & ~covered
    fis = await fragment_indexes(lvl.need("vertex_fragments"), [tuple(c) for c in cand.tolist()])
    total = 0
    for fi, cov, part in zip(fis, covered, cut):
        if fi.num_fragments != len(cov):
            return None
        if np.any(fi.counts[part] > 0):
            return None  # a bin the box cuts holds points: their positions decide
        total += int(fi.counts[cov].sum())
    return cap(total)


async def _object_ids(rc: ReadContext, ctx: _Ctx) -> np.ndarray:
    if not rc.has_objects(ctx.level.index):
        return np.zeros(0, np.int64)
    if ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed)):
        return np.zeros(0, np.int64)
    if not ctx.vertex_predicates and ctx.spec.limit is None:
        oids, table = await rc.manifests(ctx.level.index)
        ids = np.unique(oids[table.object_row])
        return ids if ctx.allowed is None else np.intersect1d(ids, ctx.allowed)
    sel = await _read(rc, replace(ctx, names=[]))
    owned = sel.objects if sel.objects is not None else sel.object_ids
    found = np.unique(owned if owned is not None else np.zeros(0, np.int64))
    return found[found >= 0]


def _iterate(query: AsyncQuery, batch: int | None, prefetch: int) -> Batches[Selection]:
    from .export import BatchStream

    rc = query._rc
    state: dict[str, _Ctx] = {}
    points = rc.geometry_type == "point_cloud"
    size = batch if batch is not None else (16 if points else 256)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidArgumentError(f"batch must be an integer >= 1, got {batch!r}")

    async def setup() -> list[np.ndarray]:
        ctx = await _resolve(rc, query.spec)
        state["ctx"] = ctx
        if points:
            if ctx.spec.is_empty():
                return []
            job = await _point_job(rc, ctx)
            return [job.chunks[a:a + size] for a in range(0, len(job.chunks), size)]
        ids = await _object_ids(rc, ctx)
        return [ids[a:a + size] for a in range(0, len(ids), size)]

    async def fetch(part: np.ndarray) -> Selection:
        ctx = state["ctx"]
        if points:
            return await _read_points(rc, replace(ctx, spec=replace(ctx.spec, limit=None)), part)
        narrowed = replace(ctx, allowed=part, spec=replace(ctx.spec, limit=None))
        return await _read(rc, narrowed)

    stream: BatchStream[Selection] = BatchStream(setup, fetch, prefetch=prefetch)
    limit = query.spec.limit
    if limit is None or not points:
        return stream
    return _Limited(stream, limit)


class _Limited:
    """Point batches cut at ``limit`` vertices; the stream stops (and its prefetch ends) there."""

    def __init__(self, stream: Batches[Selection], limit: int):
        self.stream = stream
        self.limit = limit

    async def __aenter__(self) -> AsyncIterator[Selection]:
        return self.__aiter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.aclose()

    async def aclose(self) -> None:
        await self.stream.aclose()

    def __aiter__(self) -> AsyncIterator[Selection]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Selection]:
        left = self.limit
        try:
            async for sel in self.stream:
                if left <= 0:
                    break
                if len(sel) > left:
                    sel = _take(sel, np.arange(left))
                left -= len(sel)
                yield sel
        finally:
            await self.stream.aclose()


# --------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------


def _cell_reads(arr: CellArray, chunks: Sequence[tuple[int, ...]], what: str,
                spans: dict[int, np.ndarray] | None = None, est_rows: float = 0.0) -> Reads:
    """(shard-index reads, cell reads) ``arr.payloads`` / ``row_spans`` would issue for ``chunks``."""
    spans = spans or {}
    ex = arr.executor
    est = int(est_rows * row_nbytes(arr)) if arr.meta.attributes.get("zv_array") in ("vertices", None) or \
        "vertex_attributes" in arr.path else None
    if arr.codec.shard is None:
        reads: list[PlannedRead] = []
        for j, c in enumerate(chunks):
            key = arr.key_of(arr.cell_coords(c))
            if j in spans:
                rb = row_nbytes(arr)
                reads += [PlannedRead(key, VLEN_HEADER + int(a) * rb, VLEN_HEADER + int(b) * rb, what,
                                      int(b - a) * rb) for a, b in spans[j]]
            else:
                reads.append(PlannedRead(key, None, None, what, est))
        return [], reads
    inner = np.asarray(arr.codec.shard, dtype=np.int64)
    n_inner = int(np.prod(inner))
    shards = sorted({tuple(int(x) for x in np.asarray(arr.cell_coords(c)) // inner) for c in chunks})
    index_reads: list[PlannedRead] = []
    for s in shards:
        key = arr.key_of(s)
        if ("suffix", key, index_nbytes(n_inner)) not in ex.cache("shard_index"):
            index_reads.append(PlannedRead(key, -index_nbytes(n_inner), None, f"{what} shard index",
                                           index_nbytes(n_inner)))
        reads.append(PlannedRead(key, 0, None, f"{what} inner chunks (ranges)", None))
    return index_reads, reads


def _wave(purpose: str, parts: Sequence[Reads], exact: bool = True) -> list[Wave]:
    """Waves for a list of (index reads, cell reads): shard indexes first when any are needed."""
    idx = [r for i, _ in parts for r in i]
    cells = [r for _, c in parts for r in c]
    out: list[Wave] = []
    if idx:
        out.append(Wave(f"{purpose}: shard indexes", tuple(idx), True))
    if cells:
        out.append(Wave(purpose, tuple(cells), exact))
    return out


async def _plan(rc: ReadContext, ctx: _Ctx) -> QueryPlan:
    lvl = ctx.level
    g = rc.geometry_type
    notes: list[str] = []
    waves: list[Wave] = []
    per_chunk = (lvl.meta.vertex_count or 0) / max(1, len(lvl.nonempty_chunks))
    empty = ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed))
    n_cand = 0
    if empty:
        notes.append("the narrowings exclude everything: no request")
    elif g == "point_cloud" and not needs_chunkset(lvl):
        job = await _point_job(rc, ctx)
        n_cand = len(job.chunks)
        chunks = [tuple(int(x) for x in c) for c in job.chunks.tolist()]
        frag = lvl.array("vertex_fragments")
        if ctx.spec.limit is not None:
            notes.append(f"limit {ctx.spec.limit}: chunks are read one wave at a time and reading stops once "
                         f"enough vertices arrived (the waves below are the most it reads)")
        need = [] if frag is None else [chunks[i] for i in job.first_fi
                                        if _fi_key(frag, chunks[i]) not in frag.executor.cache("fragment_index")]
        if len(job.first_fi) and not job.owner_fi_only:
            frag = lvl.need("vertex_fragments")
            why = "the id set's fragments" if job.obj_frags is not None else "the bins the box touches"
            waves += _wave(f"fragment indexes (row spans of {why})", [_cell_reads(frag, need, "vertex_fragments")])
            notes.append(f"{len(job.first_fi)} chunk(s) read by row span ({why})")
        ranged_note = "row spans" if len(job.first_fi) and job.ranged else "whole cells"
        if job.where:
            parts = [_cell_reads(a, chunks, n, est_rows=per_chunk) for n, a in job.where.items()]
            if job.owner_fi_only:  # owners' fragment indexes ride along
                parts.append(_cell_reads(lvl.need("vertex_fragments"), need, "vertex_fragments"))
            waves += _wave(f"where attributes ({ranged_note})", parts)
            notes.append("vertex where: attribute cells first, then only chunks with passing rows, by row range "
                         "when the cost model favours it (the last wave lists the most it reads)")
        waves += _wave("vertices and attributes" + (" of chunks with passing rows (at most)" if job.where else ""),
                       [_cell_reads(a, chunks, n, est_rows=per_chunk) for n, a in job.final.items()],
                       exact=not job.where and not len(job.first_fi))
    elif g in SEQUENTIAL:
        waves, n_cand, note = await _plan_sequential(rc, ctx, per_chunk)
        notes.append(note)
    else:
        cand = await _linked_chunks(rc, ctx)
        n_cand = len(cand)
        if rc.has_objects(lvl.index):
            await rc.fragment_owners(lvl.index)  # metadata read() needs too
        chunks = [tuple(int(x) for x in c) for c in cand.tolist()]
        parts = _chunkset_parts(lvl, chunks, _with_where(ctx), per_chunk)
        if g in LINKED:
            lk = await level_links(rc, lvl.index)
            for i, src in lk.plan(chunks, chunks, g == "skeleton"):  # the link cells ChunkSet.load reads
                la = lk.arrays[i]
                parts.append(_cell_reads(la.arr, src, "links"))
                parts += [_cell_reads(a, src, f"link_attributes/{n}") for n, a in la.attributes.items()]
        waves += _wave("vertices, fragments, attributes and links of candidate chunks", parts)
    plan = QueryPlan(level=lvl.index, level_note=ctx.level_note, geometry=g, query=ctx.spec.describe(),
                     candidate_chunks=n_cand, waves=tuple(waves), notes=tuple(notes),
                     coalesce_gap=rc.ex.handle.coalesce_gap, coalesce_max=rc.ex.handle.coalesce_max,
                     concurrency=rc.ex.concurrency)
    return plan


def _chunkset_parts(lvl: load.Level, chunks: Sequence[tuple[int, ...]], names: list[str], per_chunk: float,
                    attributes: bool = True) -> list[Reads]:
    parts = [_cell_reads(lvl.need("vertices"), chunks, "vertices", est_rows=per_chunk)]
    if lvl.array("vertex_fragments") is not None and not is_draco(lvl):
        parts.append(_cell_reads(lvl.need("vertex_fragments"), chunks, "vertex_fragments"))
    if attributes:
        parts += [_cell_reads(lvl.need(f"vertex_attributes/{n}"), chunks, f"vertex_attributes/{n}",
                              est_rows=per_chunk) for n in names]
    return parts


async def _plan_sequential(rc: ReadContext, ctx: _Ctx, per_chunk: float) -> tuple[list[Wave], int, str]:
    lvl = ctx.level
    names = _with_where(ctx)
    if not ctx.vertex_predicates:
        ids = ctx.allowed if ctx.allowed is not None else np.unique(await rc.object_ids(lvl.index))
        got_ids, sub = await object_table(rc, lvl, ids)
        if ctx.spec.limit is not None:
            rows = np.flatnonzero(np.bincount(sub.object_row, minlength=len(got_ids)) > 0)[: ctx.spec.limit]
            sub = sub.take_objects(rows)
        chunks = [tuple(c) for c in np.unique(sub.coords, axis=0).tolist()] if len(sub) else []
        return (_wave("the objects' chunks", _chunkset_parts(lvl, chunks, names, per_chunk)), len(chunks),
                "objects read through their manifests only")
    oids, table = await rc.manifests(lvl.index)
    sub_coords = None
    if ctx.allowed is not None:
        sub_coords = table.coords[np.isin(oids[table.object_row], ctx.allowed)]
    cand = _candidates(ctx, sub_coords)
    chunks = [tuple(int(x) for x in c) for c in cand.tolist()]
    waves = _wave("scan of candidate chunks", _chunkset_parts(lvl, chunks, names, per_chunk, bool(ctx.vterms)))
    # at most: every chunk of an object with a fragment in a candidate chunk
    in_cand = match_rows(cand, table.coords) >= 0 if len(cand) else np.zeros(len(table), bool)
    objs = np.unique(table.object_row[in_cand])
    if ctx.allowed is not None:
        objs = objs[np.isin(oids[objs], ctx.allowed)]
    more = table.coords[np.isin(table.object_row, objs)]
    more = np.unique(more, axis=0) if len(more) else more.reshape(0, rc.ndim)
    extra = [tuple(c) for c in more.tolist() if tuple(c) not in set(chunks)]
    again = [tuple(c) for c in more.tolist() if tuple(c) in set(chunks)] if not ctx.vterms else []
    parts = _chunkset_parts(lvl, extra, names, per_chunk)
    parts += [_cell_reads(lvl.need(f"vertex_attributes/{n}"), again, f"vertex_attributes/{n}", est_rows=per_chunk)
              for n in names]
    waves += _wave("the matching objects' other chunks (at most)", parts, exact=False)
    return waves, len(chunks), "objects with a matching vertex are found by a scan, then read whole" + (
        " and clipped" if ctx.spec.clip else "")
