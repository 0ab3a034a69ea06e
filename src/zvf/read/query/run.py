"""Reading a resolved query: the reader its geometry needs, or nothing when nothing can match.

The readers of object geometries and of levels read through a ``ChunkSet`` are imported by the query that
needs them: a point query never loads them (serverless cold starts pay for every import)."""

from __future__ import annotations

import numpy as np

from ..context import ReadContext
from ..load import LINKED, SEQUENTIAL
from ..selection import Selection
from .points import read_points
from .resolve import Resolved, no_rows


def empty_result(rc: ReadContext, ctx: Resolved) -> Selection:
    """The result of a query nothing can match, with the columns and dtypes a match would have."""
    lvl = ctx.level
    vert = lvl.array("vertices")
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32")) if vert is not None else np.float32
    attrs = {n: no_rows(lvl.need(f"vertex_attributes/{n}")) for n in ctx.names}
    pos = np.zeros((0, rc.ndim), dtype)
    g = rc.geometry_type
    if g == "point_cloud":
        return Selection(pos, attrs, np.zeros(0, np.int64) if rc.has_objects(lvl.index) else None)
    width = 3 if g == "mesh" else 2
    conn = np.zeros((0, width), np.int64)
    return Selection(pos, attrs, np.zeros(0, np.int64), edges=None if g == "mesh" else conn,
                     faces=conn if g == "mesh" else None, offsets=np.zeros(1, np.int64), objects=np.zeros(0, np.int64))


async def run(rc: ReadContext, ctx: Resolved, subset: np.ndarray | None = None) -> Selection:
    """The rows a resolved query selects (point clouds: of the chunks ``subset`` names, when given)."""
    if ctx.spec.is_empty() or (ctx.allowed is not None and not len(ctx.allowed)):
        return empty_result(rc, ctx)
    g = rc.geometry_type
    if g in SEQUENTIAL:
        from .objects import read_sequential

        return await read_sequential(rc, ctx)
    if g in LINKED:
        from .objects import read_linked

        return await read_linked(rc, ctx)
    if ctx.level.needs_chunkset():
        from .chunked import read_chunkset_points

        return await read_chunkset_points(rc, ctx, subset)
    return await read_points(rc, ctx, subset)

