"""The terminals besides ``read()``: ``count()`` (from metadata and fragment indexes where they tell),
``object_ids()`` and ``iter()`` (the result in batches)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np

from ...errors import InvalidArgumentError
from ..batches import Batches, BatchStream
from ..context import ReadContext
from ..load import LINKED, SEQUENTIAL
from ..points import fragment_indexes
from ..selection import Selection
from .points import point_job, read_points, take
from .resolve import Resolved, resolve
from .run import run
from .spec import Spec


async def count_without_vertices(rc: ReadContext, ctx: Resolved) -> int | None:
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
        got_ids, sub = await rc.object_table(lvl, ctx.allowed)
        if g in SEQUENTIAL and limit is not None:
            nonempty = np.flatnonzero(np.bincount(sub.object_row, minlength=len(got_ids)) > 0)[:limit]
            sub = sub.take_objects(nonempty)
        coords = [tuple(c) for c in np.unique(sub.coords, axis=0).tolist()]
        by_chunk = dict(zip(coords, await fragment_indexes(lvl.need("vertex_fragments"), coords)))
        counts = [int(by_chunk[tuple(c)].counts[f]) if f < by_chunk[tuple(c)].num_fragments else 0
                  for c, f in zip(sub.coords.tolist(), sub.fragment.tolist())]
        return cap(int(sum(counts)))
    layout = lvl.layout
    if g != "point_cloud" or ctx.allowed is not None or not layout.fragments_are_bins or lvl.needs_chunkset():
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


async def count(rc: ReadContext, spec: Spec) -> int:
    """Vertices ``read()`` returns: from metadata and fragment indexes when they tell, else by reading."""
    ctx = await resolve(rc, spec)
    n = await count_without_vertices(rc, ctx)
    if n is not None:
        return n
    return len(await run(rc, replace(ctx, names=[])))


async def matching_object_ids(rc: ReadContext, ctx: Resolved) -> np.ndarray:
    """Sorted ids of the objects the result holds; from the manifests when no vertex test narrows it."""
    if not rc.has_objects(ctx.level.index):
        return np.zeros(0, np.int64)
    if ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed)):
        return np.zeros(0, np.int64)
    if not ctx.vertex_predicates and ctx.spec.limit is None:
        oids, table = await rc.manifests(ctx.level.index)
        ids = np.unique(oids[table.object_row])
        return ids if ctx.allowed is None else np.intersect1d(ids, ctx.allowed)
    sel = await run(rc, replace(ctx, names=[]))
    owned = sel.objects if sel.objects is not None else sel.object_ids
    found = np.unique(owned if owned is not None else np.zeros(0, np.int64))
    return found[found >= 0]


def iterate(rc: ReadContext, spec: Spec, batch: int | None, prefetch: int) -> Batches[Selection]:
    """The result of ``spec`` in batches of ``batch`` chunks (point clouds) or objects, ``prefetch`` ahead."""
    state: dict[str, Resolved] = {}
    points = rc.geometry_type == "point_cloud"
    size = batch if batch is not None else (16 if points else 256)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidArgumentError(f"batch must be an integer >= 1, got {batch!r}")

    async def setup() -> list[np.ndarray]:
        ctx = await resolve(rc, spec)
        state["ctx"] = ctx
        if points:
            if ctx.spec.is_empty():
                return []
            job = await point_job(rc, ctx)
            return [job.chunks[a:a + size] for a in range(0, len(job.chunks), size)]
        ids = await matching_object_ids(rc, ctx)
        return [ids[a:a + size] for a in range(0, len(ids), size)]

    async def fetch(part: np.ndarray) -> Selection:
        ctx = state["ctx"]
        if points:
            return await read_points(rc, replace(ctx, spec=replace(ctx.spec, limit=None)), part)
        narrowed = replace(ctx, allowed=part, spec=replace(ctx.spec, limit=None))
        return await run(rc, narrowed)

    stream: BatchStream[Selection] = BatchStream(setup, fetch, prefetch=prefetch)
    limit = spec.limit
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
                    sel = take(sel, np.arange(left))
                left -= len(sel)
                yield sel
        finally:
            await self.stream.aclose()

