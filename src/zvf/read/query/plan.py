"""A query's plan as data: waves of cell requests with estimates, and the same in words.

A wave is a set of requests issued together; each wave waits for the one
before (its keys or ranges depend on what that one returned), so the
waves, each split into batches of the dataset's concurrency, are the round
trips the read needs.  A wave marked not
``exact`` lists the most it may request: ``read()`` drops the chunks the
earlier waves rule out.

``build_plan`` runs the planning code ``read()`` runs and stops before the first cell request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...format.shard import index_nbytes
from ...format.vlen import VLEN_HEADER
from ...io.plan import ByteRange, coalesce
from .. import load
from ..context import ReadContext
from ..links import level_links
from ..load import LINKED, SEQUENTIAL
from ..points import Seek, row_nbytes
from ..rowops import match_rows
from .objects import linked_chunks
from .points import PointJob, fi_key, point_job
from .resolve import Resolved

if TYPE_CHECKING:
    from ..cells import CellArray


@dataclass(frozen=True)
class PlannedRead:
    """One read of ``key``: ``[start, end)`` (``end=None``: to the end; negative start: suffix)."""

    key: str
    start: int | None
    end: int | None
    what: str
    nbytes: int | None  # estimated bytes (None: unknown before reading)

    @property
    def whole(self) -> bool:
        return self.start is None


@dataclass(frozen=True)
class Wave:
    purpose: str
    reads: tuple[PlannedRead, ...]
    exact: bool = True

    @property
    def keys(self) -> set[str]:
        return {r.key for r in self.reads}


@dataclass(frozen=True)
class QueryPlan:
    """What ``select(...).read()`` would request, wave by wave, with its estimates (``explain()`` in words)."""

    level: int  # the pyramid level read
    level_note: str  # why that level (asked for, or chosen by ``level="auto"``)
    geometry: str | None
    query: str  # the selection, as the user wrote it
    candidate_chunks: int  # chunks the box, categories and id set leave
    waves: tuple[Wave, ...]  # dependent rounds of requests, first to last
    notes: tuple[str, ...]  # decisions of the planner (push-downs, row ranges, limits)
    coalesce_gap: int  # ranges of one key closer than this many bytes merge into one GET
    coalesce_max: int  # ... up to this many bytes per GET
    concurrency: int = 32  # requests in flight at once: a wave of more takes several round trips

    def requests_of(self, wave: Wave) -> int:
        """GETs a wave costs: whole reads one each, ranges coalesced per key as the executor does."""
        whole = {r.key for r in wave.reads if r.start is None or r.start < 0 or r.end is None}
        ranges = [ByteRange(r.key, r.start, r.end) for r in wave.reads
                  if r.start is not None and r.start >= 0 and r.end is not None]
        return len(whole) + len(coalesce(ranges, max_gap=self.coalesce_gap, max_size=self.coalesce_max))

    @property
    def requests(self) -> int:
        """Estimated GETs (the most, when a wave is not exact)."""
        return sum(self.requests_of(w) for w in self.waves)

    @property
    def bytes(self) -> int:
        """Estimated bytes (raw row sizes for cells of unknown size; compressed cells read fewer)."""
        return sum(r.nbytes or 0 for w in self.waves for r in w.reads)

    @property
    def round_trips(self) -> int:
        """Sequential round trips: each wave's requests go ``concurrency`` at a time."""
        return sum(max(1, -(-self.requests_of(w) // self.concurrency)) for w in self.waves)

    @property
    def keys(self) -> list[set[str]]:
        """The keys of each wave, in order."""
        return [w.keys for w in self.waves]

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "level_note": self.level_note, "geometry": self.geometry, "query": self.query,
            "candidate_chunks": self.candidate_chunks, "requests": self.requests, "bytes": self.bytes,
            "round_trips": self.round_trips, "notes": list(self.notes),
            "waves": [{"purpose": w.purpose, "exact": w.exact, "requests": self.requests_of(w),
                       "reads": [[r.key, r.start, r.end] for r in w.reads]} for w in self.waves],
        }

    def explain(self) -> str:
        lines = [f"{self.geometry} query on {self.level_note}: {self.query}",
                 (f"  {self.candidate_chunks} candidate chunk(s); about {self.requests} request(s), "
                  f"{self.bytes:,} bytes, {self.round_trips} round trip(s)")]
        for i, w in enumerate(self.waves, 1):
            kinds: dict[str, int] = {}
            for r in w.reads:
                kinds[r.what] = kinds.get(r.what, 0) + 1
            what = ", ".join(f"{n} {k}" for k, n in kinds.items())
            lines.append(f"  wave {i}{'' if w.exact else ' (at most)'}: {w.purpose} -- "
                         f"{self.requests_of(w)} request(s): {what}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


Reads = tuple[list[PlannedRead], list[PlannedRead]]
"""What reading some cells of one array asks: (shard-index reads, cell reads)."""


def _cell_reads(arr: CellArray, chunks: Sequence[tuple[int, ...]], what: str,
                spans: dict[int, np.ndarray] | None = None, est_rows: float = 0.0) -> Reads:
    """(shard-index reads, cell reads) ``arr.payloads`` / ``row_spans`` would issue for ``chunks``."""
    spans = spans or {}
    ex = arr.executor
    est = int(est_rows * row_nbytes(arr)) if arr.meta.attributes.get("zv_array") in ("vertices", None) or \
        "vertex_attributes" in arr.path else None
    reads: list[PlannedRead] = []
    if arr.codec.shard is None:
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


async def build_plan(rc: ReadContext, ctx: Resolved) -> QueryPlan:
    """The cell requests ``read()`` would make on a cold cache (it may read the metadata the query needs)."""
    lvl = ctx.level
    g = rc.geometry_type
    notes: list[str] = []
    waves: list[Wave] = []
    per_chunk = (lvl.meta.vertex_count or 0) / max(1, len(lvl.nonempty_chunks))
    empty = ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed))
    n_cand = 0
    if empty:
        notes.append("the narrowings exclude everything: no request")
    elif g == "point_cloud" and not lvl.needs_chunkset():
        job = await point_job(rc, ctx)
        n_cand = len(job.chunks)
        chunks = [tuple(int(x) for x in c) for c in job.chunks.tolist()]
        frag = lvl.array("vertex_fragments")
        if ctx.spec.limit is not None:
            notes.append(f"limit {ctx.spec.limit}: chunks are read one wave at a time and reading stops once "
                         f"enough vertices arrived (the waves below are the most it reads)")
        need = [] if frag is None else [chunks[i] for i in job.first_fi
                                        if fi_key(frag, chunks[i]) not in frag.executor.cache("fragment_index")]
        if len(job.first_fi) and not job.owner_fi_only and job.seek:
            waves += _seek_waves(lvl, job, chunks, need, per_chunk)
            notes.append(f"{len(job.first_fi)} chunk(s) read by the zstd frames of the bins the box touches "
                         "(seekable cells; a cell without a seek table comes whole)")
        elif len(job.first_fi) and not job.owner_fi_only:
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
        if not job.seek:
            waves += _wave("vertices and attributes" + (" of chunks with passing rows (at most)" if job.where else ""),
                           [_cell_reads(a, chunks, n, est_rows=per_chunk) for n, a in job.final.items()],
                           exact=not job.where and not len(job.first_fi))
    elif g in SEQUENTIAL:
        waves, n_cand, note = await _plan_sequential(rc, ctx, per_chunk)
        notes.append(note)
    else:
        cand = await linked_chunks(rc, ctx)
        n_cand = len(cand)
        if rc.has_objects(lvl.index):
            await rc.fragment_owners(lvl.index)  # metadata read() needs too
        chunks = [tuple(int(x) for x in c) for c in cand.tolist()]
        parts = _chunkset_parts(lvl, chunks, ctx.names_with_where(), per_chunk)
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


def _seek_waves(lvl: load.Level, job: PointJob, chunks: list[tuple[int, ...]], need: list[tuple[int, ...]],
                per_chunk: float) -> list[Wave]:
    """Waves of a box read from seekable cells: [shard indexes,] the fragment indexes beside each array's seek
    tables (a cell's last bytes, the vertices' with their frames' bounds) of the chunks the box cuts, then the
    frames of the bins it touches that it meets in those chunks and the whole cells of the chunks it holds."""
    arrays = {**job.where, **job.final}
    seek = Seek.of(lvl)
    cut = set(job.first_fi.tolist())
    partial = [chunks[i] for i in job.first_fi]
    inside = [c for i, c in enumerate(chunks) if i not in cut]
    share = float(job.bins[job.first_fi].mean()) if job.bins is not None and len(job.first_fi) else 1.0
    parts = [_cell_reads(lvl.need("vertex_fragments"), need, "vertex_fragments")]
    frames: list[PlannedRead] = []
    for name, arr in arrays.items():
        tables = [c for c in partial if not arr.seek_cached(c)]
        sharded = arr.codec.shard is not None
        guess = seek.guess(arr)(1.0 if sharded else None)  # a typical cell's
        parts.append((_cell_reads(arr, tables, name)[0] if sharded else [],
                      [PlannedRead(arr.object_key(arr.cell_coords(c)), 0 if sharded else -guess, None,
                                   f"{name} seek table" + (" (range)" if sharded else ""), guess)
                       for c in tables]))
        est = int(per_chunk * share * row_nbytes(arr))
        frames += [PlannedRead(arr.object_key(arr.cell_coords(c)), 0, None, f"{name} frames (ranges)", est)
                   for c in partial]
        frames += _cell_reads(arr, inside, name, est_rows=per_chunk)[1]
    return [*_wave("fragment indexes and seek tables of the chunks the box cuts", parts),
            Wave("frames of the bins the box touches, whole cells of the chunks it holds", tuple(frames), False)]


def _chunkset_parts(lvl: load.Level, chunks: Sequence[tuple[int, ...]], names: list[str], per_chunk: float,
                    attributes: bool = True) -> list[Reads]:
    parts = [_cell_reads(lvl.need("vertices"), chunks, "vertices", est_rows=per_chunk)]
    if lvl.array("vertex_fragments") is not None and not lvl.is_draco():
        parts.append(_cell_reads(lvl.need("vertex_fragments"), chunks, "vertex_fragments"))
    if attributes:
        parts += [_cell_reads(lvl.need(f"vertex_attributes/{n}"), chunks, f"vertex_attributes/{n}",
                              est_rows=per_chunk) for n in names]
    return parts


async def _plan_sequential(rc: ReadContext, ctx: Resolved, per_chunk: float) -> tuple[list[Wave], int, str]:
    lvl = ctx.level
    names = ctx.names_with_where()
    if not ctx.vertex_predicates:
        ids = ctx.allowed if ctx.allowed is not None else np.unique(await rc.object_ids(lvl.index))
        got_ids, sub = await rc.object_table(lvl, ids)
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
    cand = ctx.candidates(sub_coords)
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
