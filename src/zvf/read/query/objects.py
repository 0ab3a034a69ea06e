"""Object geometries: sequential ones (polylines, streamlines) found by a scan and read whole through
their manifests, linked ones (graphs, skeletons, meshes) read as the candidate chunks' vertices and the
links among them."""

from __future__ import annotations

import numpy as np

from ..box import clip_objects, linked_rows_by_object
from ..chunkset import ChunkSet
from ..context import ReadContext
from ..links import level_links
from ..objects import combined_selection, read_grouped
from ..rowops import match_rows
from ..selection import Selection
from .resolve import Resolved


async def read_sequential(rc: ReadContext, ctx: Resolved) -> Selection:
    """Polylines/streamlines: whole objects (clipped with ``clip``) in ascending id."""
    lvl = ctx.level
    names = ctx.names_with_where()
    cs = ChunkSet(rc, lvl, names, category=ctx.with_cat)
    limit = ctx.spec.limit
    if not ctx.vertex_predicates:
        ids = ctx.allowed if ctx.allowed is not None else np.unique(await rc.object_ids(lvl.index))
        got_ids, sub = await rc.object_table(lvl, ids)
        nonempty = np.bincount(sub.object_row, minlength=len(got_ids)) > 0
        rows = np.flatnonzero(nonempty)[:limit]
        return ctx.strip(combined_selection(await read_grouped(rc, cs, got_ids[rows], sub.take_objects(rows))))
    oids, table = await rc.manifests(lvl.index)
    sub_coords = None
    if ctx.allowed is not None:
        in_set = np.isin(oids[table.object_row], ctx.allowed)
        sub_coords = table.coords[in_set]
    cand = ctx.candidates(sub_coords)
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
        ok = ctx.vertex_pass(cs.pos[s], attrs)
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
        sel = clip_objects(sel, ctx.vertex_pass(sel.positions, sel.attributes))
    return ctx.strip(sel)



async def linked_chunks(rc: ReadContext, ctx: Resolved) -> np.ndarray:
    """Candidate chunks of a linked geometry: the box's, within the id set's chunks."""
    sub_coords = None
    if ctx.allowed is not None:
        _, sub = await rc.object_table(ctx.level, ctx.allowed)
        sub_coords = sub.coords
    return ctx.candidates(sub_coords)


async def read_linked(rc: ReadContext, ctx: Resolved) -> Selection:
    """Graphs, skeletons, meshes: matching vertices and the edges/faces among them, grouped by object."""
    geometry = rc.geometry_type
    lvl = ctx.level
    links = await level_links(rc, lvl.index)
    cs = ChunkSet(rc, lvl, ctx.names_with_where(), links, geometry == "skeleton", category=ctx.with_cat)
    cand = await linked_chunks(rc, ctx)
    owners = await rc.fragment_owners(lvl.index)
    await cs.load(cand)
    _, _, pos_all, attrs_all = cs.concat()
    owner = cs.row_owners(owners)
    ok = ctx.vertex_pass(pos_all, attrs_all) if len(pos_all) else np.zeros(0, bool)
    if ctx.allowed is not None:
        ok &= np.isin(owner, ctx.allowed)
    sel = np.flatnonzero(ok)
    sel = sel[np.argsort(owner[sel], kind="stable")]
    if ctx.spec.limit is not None:
        first_objects = np.unique(owner[sel])[: ctx.spec.limit]
        sel = sel[np.isin(owner[sel], first_objects)]
    return ctx.strip(linked_rows_by_object(cs, sel, owner, geometry))

