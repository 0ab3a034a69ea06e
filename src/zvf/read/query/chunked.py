"""Point clouds the plain chunk reader cannot lay out (attribute-chunked or Draco levels): whole cells
through a ``ChunkSet``, the rows tested after decoding."""

from __future__ import annotations

import numpy as np

from ..chunkset import ChunkSet
from ..context import ReadContext
from ..rowops import match_rows
from ..selection import Selection
from .resolve import Resolved


async def read_chunkset_points(rc: ReadContext, ctx: Resolved, subset: np.ndarray | None) -> Selection:
    """Points of attribute-chunked or Draco levels, through a ChunkSet (whole cells)."""
    lvl = ctx.level
    cs = ChunkSet(rc, lvl, ctx.names_with_where(), category=ctx.with_cat)
    sub_coords = None
    if ctx.allowed is not None:
        _, sub = await rc.object_table(lvl, ctx.allowed)
        sub_coords = sub.coords
    cand = ctx.candidates(sub_coords)
    if subset is not None:
        cand = cand[match_rows(subset, cand) >= 0]
    owners = await rc.fragment_owners(lvl.index) if rc.has_objects(lvl.index) else None
    await cs.load(cand)
    _, _, pos, attrs = cs.concat()
    ok = ctx.vertex_pass(pos, attrs)
    oids = None if owners is None else cs.row_owners(owners)
    if ctx.allowed is not None:
        assert oids is not None  # resolve refuses an id narrowing on a level without object ids
        ok &= np.isin(oids, ctx.allowed)
    rows = np.flatnonzero(ok)[: ctx.spec.limit]
    positions, attrs = cs.rows(rows)
    return ctx.strip(Selection(positions, attrs, None if oids is None else oids[rows]))
