"""Point clouds read in waves: candidate chunks, fragment indexes first where row spans pay (bins a box
touches, an id set's fragments), vertex ``where`` attributes before the rest, row ranges where the cost
model favours them."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...config import tuning
from ...errors import InvalidArgumentError
from ...format.fragments import FragmentIndex, decode_fragment_index
from ...io.plan import choose_fetch, fetch_cost
from .. import load
from ..cells import rows_from_payload
from ..context import Owners, ReadContext
from ..points import (
    Pick,
    RowPicks,
    Seek,
    attribute_layout,
    attribute_rows,
    axes_inside,
    box_mask,
    fetch,
    fragment_indexes,
    row_nbytes,
)
from ..rowops import expand_ranges, intersect_spans, match_rows
from ..selection import Selection
from .resolve import Resolved, no_rows

if TYPE_CHECKING:
    from ..cells import CellArray


@dataclass
class PointJob:
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
    seek: bool = False  # the bins' rows come from the frames of seekable cells (seek tables beside the indexes)


async def point_job(rc: ReadContext, ctx: Resolved, subset: np.ndarray | None = None) -> PointJob:
    """The candidate chunks and arrays of a point read, and which chunks need their fragment index first."""
    lvl = ctx.level
    box = ctx.box
    cand = ctx.chunks_in(box)
    if subset is not None:
        cand = cand[match_rows(subset, cand) >= 0]
    obj_frags: dict[tuple[int, ...], list[int]] | None = None
    if ctx.allowed is not None:
        _, sub = await rc.object_table(lvl, ctx.allowed)
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
    seek = not ranged and all(a.seekable for a in (*final.values(), *where.values()))
    first = np.zeros(0, dtype=np.int64)
    bins = None
    # with object ids, fragments are per object, not per bin
    by_bins = box is not None and frag is not None and owners is None and lvl.layout.fragments_are_bins \
        and lvl.layout.bins_in_chunk > 1
    mask = lvl.layout.bins_touching(cand, *box) if by_bins and box is not None else None
    partial = np.flatnonzero(~mask.all(axis=1)) if mask is not None else np.zeros(0, np.int64)
    if obj_frags is not None and frag is not None:
        first = np.arange(len(cand))
    elif mask is not None and (ranged or seek) and len(partial) and \
            _narrow_pays(rc, lvl, cand, partial, mask, {**final, **where}, seek):
        first, bins = partial, mask
    else:
        seek = False
    if owners is not None and obj_frags is None:
        if where:  # rows get picked by where: owners come from indexes read beside the where cells
            first = np.arange(len(cand))
        else:
            final["vertex_fragments"] = lvl.need("vertex_fragments")
    return PointJob(cand, final, where, first, bins, obj_frags, owners, ranged,
                    owners is not None and obj_frags is None and bool(where), seek)


def fi_key(frag: CellArray, chunk: Sequence[int] | np.ndarray) -> str:
    """Key of the fragment index cell of ``chunk`` (its cache key too)."""
    key: str = frag.key_of(frag.cell_coords(chunk))
    return key


def _narrow_pays(rc: ReadContext, lvl: load.Level, cand: np.ndarray, partial: np.ndarray, mask: np.ndarray,
                 arrays: dict[str, CellArray], seek: bool) -> bool:
    """Bin spans are worth it when the fragment indexes (and, for seekable cells, the seek tables) are
    cached, when whole cells would fetch more than ``max_overread`` times the bytes of the touched bins (and
    more than ``overread_cell_bytes`` a cell beyond them, for a lone query cutting few chunks), or
    by the cost model: one more round trip against the bytes of untouched bins -- for seekable cells, of
    untouched frames (``seek_frame_bytes`` each at least).  Never when the cells are decoded in the cache
    already."""
    frag = lvl.need("vertex_fragments")
    cache = frag.executor.cache("fragment_index")
    indexed = all(fi_key(frag, cand[i]) in cache for i in partial)
    if seek:
        if all(a.decoded_cached(cand[i]) for a in arrays.values() for i in partial):
            return False
        indexed = indexed and all(a.seek_cached(cand[i]) for a in arrays.values() for i in partial)
        if indexed:
            return True
    elif indexed:
        return True
    handle = frag.executor.handle
    row_bytes = sum(row_nbytes(a) for a in arrays.values())
    per_chunk = row_bytes * max(1, lvl.meta.vertex_count or 0) / max(1, len(lvl.nonempty_chunks))
    whole = int(per_chunk * len(partial))
    needed = int(whole * mask[partial].mean())
    # whole cells fetch too much: past max_overread times the touched bins, and by more than overread_cell_bytes
    # a cell (run.py's 32 KB cells stay whole: a round trip for a few KB each; peers' 300 KB-1 MB ones do not);
    # only for a lone query (concurrent ones share whole cells) cutting at most overread_max_chunks chunks (each
    # costs a request per array more, and the touched bins' share of a chunk's rows is a guess: a box in a dense
    # cluster touches few bins holding most of them)
    settings = tuning()
    overread = rc.point_queries <= 1 and len(partial) <= settings.overread_max_chunks \
        and whole > settings.max_overread * needed and whole - needed > settings.overread_cell_bytes * len(partial)
    if not seek:
        return overread or choose_fetch(whole, [(0, needed)], handle.latency_hint, handle.bandwidth_hint,
                                        ranged_round_trips=2) == "ranges"
    # seekable cells: a request per cell either way, plus one per gap of untouched bins too wide to read
    # through (frames: their seek tables in the wave before, unless cached); every touched run of bins
    # rounds up to whole frames
    touched = mask[partial].astype(np.int8)
    edges = np.diff(touched, axis=1, prepend=0, append=0)
    run_at, stop_at = np.nonzero(edges == 1), np.nonzero(edges == -1)
    gaps = run_at[1][1:] - stop_at[1][:-1]
    gaps = gaps[run_at[0][1:] == stop_at[0][:-1]]  # bins between two runs of one chunk
    rows_per_bin = max(1, lvl.meta.vertex_count or 0) / max(1, len(lvl.nonempty_chunks)) / lvl.layout.bins_in_chunk
    gap_limit = frag.executor.handle.coalesce_gap
    requests = sum(len(partial) + int((gaps * rows_per_bin * row_nbytes(a) > gap_limit).sum()) for a in arrays.values())
    needed = min(whole, needed + len(run_at[0]) * settings.seek_frame_bytes * len(arrays))
    cells = len(partial) * len(arrays)
    def cost(nbytes: int, n: int) -> float:
        return fetch_cost(nbytes, n, latency_s=handle.latency_hint, bandwidth_Bps=handle.bandwidth_hint,
                          concurrency=frag.executor.concurrency)

    narrow = (0.0 if indexed else cost(0, cells)) + cost(needed, requests)
    return overread or narrow < cost(whole, cells)


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


async def read_points(rc: ReadContext, ctx: Resolved, subset: np.ndarray | None = None) -> Selection:
    """Matching vertices of a point cloud in chunk order, one wave of chunks at a time under a ``limit``."""
    rc.point_queries += 1
    try:
        job = await point_job(rc, ctx, subset)
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
    finally:
        rc.point_queries -= 1
    out = concat(parts)
    if limit is not None and len(out) > limit:
        out = take(out, np.arange(limit))
    return out


async def _point_wave(rc: ReadContext, ctx: Resolved, job: PointJob, idx: np.ndarray) -> Selection:
    lvl = ctx.level
    chunks = [tuple(int(x) for x in job.chunks[i]) for i in idx]
    first = set(job.first_fi.tolist())
    need_fi = [k for k, i in enumerate(idx) if int(i) in first]
    fis: dict[int, FragmentIndex] = {}
    seek = None
    if need_fi and not job.owner_fi_only:
        fi_chunks = [chunks[k] for k in need_fi]
        indexes: Awaitable[list[FragmentIndex]] = fragment_indexes(lvl.need("vertex_fragments"), fi_chunks)
        if job.seek:  # the seek tables in the indexes' wave
            seek = Seek.of(lvl)
            got_fi, *_ = await rc.ex.gather([indexes, *(a.seek_tables(fi_chunks, seek.guess(a), seek.max_frames)
                                                         for a in (*job.final.values(), *job.where.values()))])
            fis = dict(zip(need_fi, cast("list[FragmentIndex]", got_fi)))
        else:
            fis = dict(zip(need_fi, await indexes))
    cell_rows: dict[int, int] = {}  # k -> rows of a seekable chunk, by its fragment index
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
            if job.seek:
                n_rows = int(fi.counts.sum())
                if not fi.tiles(n_rows):
                    continue  # not rows sorted by bin: whole cell
                cell_rows[k] = n_rows
        s, e = fi.spans(np.asarray(frags, dtype=np.int64))
        spans[k] = np.stack((s, e), axis=1)
    if seek is not None and cell_rows and ctx.box is not None:  # of those bins, the frames the box meets
        vert = lvl.need("vertices")
        ks = list(cell_rows)
        lo, hi = (np.asarray(b, dtype=np.float64) for b in ctx.box)
        meeting = await vert.rows_meeting([chunks[k] for k in ks], [cell_rows[k] for k in ks], row_nbytes(vert),
                                          seek.guess(vert), seek.max_frames, lo, hi)
        for k, rows in zip(ks, meeting):
            if rows is not None:
                spans[k] = intersect_spans(spans[k], rows)
    if not job.ranged and not job.seek:  # spans still say which rows are wanted; the cells come whole
        wanted = {k: _span_rows(v) for k, v in spans.items()}
        spans = {}
    else:
        wanted = {}
    live = [k for k in range(len(chunks)) if k not in spans or len(spans[k])]
    where_vals: dict[str, dict[int, np.ndarray]] = {}  # array name -> chunk -> passing rows
    fetched: dict[int, np.ndarray | None] = {k: (_span_rows(spans[k]) if k in spans else None) for k in live}
    if job.where:
        if seek is not None:
            seek = replace(seek, rows={j: cell_rows[k] for j, k in enumerate(live) if k in cell_rows})
        jobs: list[Awaitable[object]] = [fetch(lvl.need("vertices").executor, job.where, [chunks[k] for k in live],
                                                {j: spans[k] for j, k in enumerate(live) if k in spans}, seek=seek)]
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
    if seek is not None:
        seek = replace(seek, rows={j: cell_rows[k] for j, k in enumerate(live) if k in cell_rows})
    payloads = await fetch(lvl.need("vertices").executor, job.final, [chunks[k] for k in live],
                           {j: spans[k] for j, k in enumerate(live) if k in spans}, seek=seek)
    return _assemble_points(ctx, job, chunks, live, payloads, fetched, wanted, where_vals, fis)


def _ranges_pay(rc: ReadContext, job: PointJob, passing: np.ndarray, rows_read: np.ndarray | None,
                n_rows: int) -> bool:
    """Row ranges of the passing rows instead of whole cells, by the cost model."""
    row_bytes = sum(row_nbytes(a) for a in job.final.values())
    total = int(rows_read.max()) + 1 if rows_read is not None and len(rows_read) else n_rows
    runs = _runs(passing)
    handle = rc.ex.handle
    return choose_fetch(total * row_bytes, (runs * row_bytes).tolist(), handle.latency_hint,
                        handle.bandwidth_hint) == "ranges"


def _assemble_points(ctx: Resolved, job: PointJob, chunks: list[tuple[int, ...]], live: list[int],
                     payloads: dict[str, list[Any]], fetched: dict[int, np.ndarray | None],
                     wanted: dict[int, np.ndarray], where_vals: dict[str, dict[int, np.ndarray]],
                     fis: dict[int, FragmentIndex]) -> Selection:
    """One wave's Selection: each chunk's rows picked (the wanted ones, then the vertex test -- along the axes
    the box cuts the chunk, none for a chunk it holds whole -- then the id set), every column gathered once
    into its output."""
    lvl, spec = ctx.level, ctx.spec
    vert = job.final["vertices"]
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32"))
    ndim = lvl.layout.ndim
    coords = [chunks[k] for k in live]
    keys = {name: arr.keys_of(coords) for name, arr in job.final.items()}  # for error messages
    pos = [rows_from_payload(payloads["vertices"][j], dtype, (ndim,), key=keys["vertices"][j])
           for j in range(len(live))]
    box = None if spec.bbox is None else (np.asarray(spec.bbox[0], np.float64), np.asarray(spec.bbox[1], np.float64))
    cut = np.full((len(live), ndim), spec.near is not None or box is not None)  # axes a row test must check
    if spec.near is None and box is not None:
        cut = ~axes_inside(lvl, np.asarray(coords, np.int64).reshape(len(coords), lvl.key_ndim), *box)
    picks: list[Pick] = []  # rows of each chunk's cells the answer takes
    kept: list[Pick] = []  # the same, among its wanted rows (``where_vals`` hold those)
    oid_parts: list[np.ndarray] = []  # owners of the wanted rows
    for j, k in enumerate(live):
        rows_read = fetched[k]
        local = None
        if k in wanted:
            local = np.searchsorted(rows_read, wanted[k]) if rows_read is not None else wanted[k]
        sub = pos[j] if local is None else pos[j][local]
        keep: np.ndarray | None = None
        if cut[j].any():
            keep = box_mask(sub, *box, axes=np.flatnonzero(cut[j])) if spec.near is None and box is not None \
                else spec.vertex_mask(sub)
        if job.owners is not None:
            c = chunks[k]
            fi = fis.get(k)
            if fi is None:
                fpay = payloads["vertex_fragments"][j]
                fi = decode_fragment_index(fpay or b"", key=fi_key(job.final["vertex_fragments"], c),
                                           n_rows=len(pos[j]) if rows_read is None else None)
            absrows = rows_read if rows_read is not None else np.arange(len(pos[j]), dtype=np.int64)
            oids = _row_owners(fi, job.owners.get(c), absrows if local is None else absrows[local])
            if ctx.allowed is not None:
                ok = np.isin(oids, ctx.allowed)
                keep = ok if keep is None else keep & ok
            oid_parts.append(oids)
        kept.append(keep)
        picks.append(keep if local is None else local if keep is None else local[keep])
    rows = RowPicks(picks, [len(p) for p in pos])
    among_wanted = RowPicks(kept, [len(p) if k not in wanted else len(wanted[k]) for p, k in zip(pos, live)])
    channels: dict[str, int] = {}
    attrs: dict[str, np.ndarray] = {}
    for n in ctx.names:
        name = f"vertex_attributes/{n}"
        if name in job.where:
            attrs[n] = among_wanted.gather([where_vals[name][k] for k in live], no_rows(lvl.need(name)))
            continue
        arr = job.final[name]
        parts = [attribute_rows(n, arr, payloads[name][j], len(p), keys[name][j], channels) for j, p in enumerate(pos)]
        attrs[n] = rows.gather(parts, no_rows(lvl.need(name)))
    oids_out = None if job.owners is None else among_wanted.gather(oid_parts, np.zeros(0, np.int64))
    return Selection(rows.gather(pos, np.zeros((0, ndim), dtype)), attrs, oids_out)


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
    """Point selections one after the other."""
    if len(parts) == 1:
        return parts[0]
    parts = [p for p in parts if len(p)] or parts[:1]
    oids = None if parts[0].object_ids is None else np.concatenate([p.object_ids for p in parts])
    return Selection(np.concatenate([p.positions for p in parts]),
                     {n: np.concatenate([p.attributes[n] for p in parts]) for n in parts[0].attributes}, oids)


def take(sel: Selection, rows: np.ndarray) -> Selection:
    """The given rows of a point selection."""
    return Selection(sel.positions[rows], {n: v[rows] for n, v in sel.attributes.items()},
                     None if sel.object_ids is None else sel.object_ids[rows])
