"""Closed-box queries of object geometries, and vertex reads through a ``ChunkSet``.

Polylines/streamlines answer with whole (or clipped) objects that have a
vertex inside; graphs, skeletons and meshes with the vertices inside and the
edges/faces among them.  Attribute-chunked and Draco levels read their rows
through a ``ChunkSet`` (see ``Level.needs_chunkset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..format.grid import inside
from .objects import category_blocks, combined_selection, prepare, read_grouped
from .rowops import map_rows, match_rows, segments
from .selection import Selection

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .chunkset import ChunkSet
    from .context import ReadContext
    from .dataset import AttributeNames, Categories


async def query_sequential(rc: ReadContext, lo: NDArray[np.float64], hi: NDArray[np.float64], *, level: int,
                           attributes: AttributeNames, clip: bool, categories: Categories = None) -> Selection:
    """Polylines/streamlines with at least one vertex in the closed box, whole or clipped
    (only their parts in the chosen ``categories`` on an attribute-chunked level)."""
    lvl, _, (oids, table), cs = await prepare(rc, level, attributes, links=False)
    table = category_blocks(lvl, table, categories)
    box_chunks = lvl.chunks_in(lo, hi, categories)
    await cs.load(box_chunks, attributes=False)
    hit_coords, hit_frags = [], []
    for c in map(tuple, box_chunks.tolist()):  # per chunk
        s = cs.slot[c]
        if not cs.counts[s] or cs.fis[s].num_fragments == 0:
            continue
        ins = inside(cs.pos[s], lo, hi)
        if not ins.any():
            continue
        rows, seg = cs.all_fragment_rows(s)
        f = np.unique(seg[ins[rows]])
        hit_frags.append(f)
        hit_coords.append(np.broadcast_to(np.asarray(c, dtype=np.int64), (len(f), cs.kdim)))
    if hit_frags:
        hc = np.concatenate(hit_coords)
        hf = np.concatenate(hit_frags)
        cand = np.flatnonzero(lvl.layout.in_box(table.coords, lo, hi))
        keys = np.concatenate((hc, hf[:, None]), axis=1)
        qkeys = np.concatenate((table.coords[cand], table.fragment[cand, None]), axis=1)
        hit = match_rows(np.unique(keys, axis=0), qkeys) >= 0
        rows = np.unique(table.object_row[cand[hit]])
    else:
        rows = np.zeros(0, np.int64)
    rows = rows[np.argsort(oids[rows], kind="stable")]
    g = await read_grouped(rc, cs, oids[rows], table.take_objects(rows))
    sel = combined_selection(g)
    if not clip:
        return sel
    return clip_objects(sel, inside(sel.positions, lo, hi))


def clip_objects(sel: Selection, keep: np.ndarray) -> Selection:
    """Only the kept vertices of each object, and the edges between kept vertices."""
    new_index = np.cumsum(keep) - 1
    e, offsets, objects, owners = sel.edges, sel.offsets, sel.objects, sel.object_ids
    assert e is not None and offsets is not None and objects is not None and owners is not None  # polylines
    e = e[keep[e[:, 0]] & keep[e[:, 1]]] if len(e) else e
    per = np.bincount(segments(offsets)[keep], minlength=len(objects)).astype(np.int64)
    return Selection(sel.positions[keep], {n: v[keep] for n, v in sel.attributes.items()}, owners[keep],
                     edges=new_index[e] if len(e) else np.zeros((0, 2), np.int64),
                     offsets=np.concatenate(([0], np.cumsum(per))).astype(np.int64), objects=sel.objects)


async def query_linked(rc: ReadContext, lo: NDArray[np.float64], hi: NDArray[np.float64], *, level: int,
                       attributes: AttributeNames, categories: Categories = None) -> Selection:
    """Graph/skeleton/mesh vertices in the closed box plus the edges/faces among them.

    Rows are grouped by object (ascending id, then chunk and row order) with
    ``offsets``/``objects``; rows no manifest names get object id -1.
    """
    geometry = rc.geometry_type
    lvl, _, _, cs = await prepare(rc, level, attributes, links=True, incoming=geometry == "skeleton",
                                       table=False)
    box_chunks = lvl.chunks_in(lo, hi, categories)
    owners = await rc.fragment_owners(level)
    await cs.load(box_chunks)
    _, _, pos_all, _ = cs.concat()
    ins = inside(pos_all, lo, hi) if len(pos_all) else np.zeros(0, bool)
    owner = cs.row_owners(owners)
    sel = np.flatnonzero(ins)
    sel = sel[np.argsort(owner[sel], kind="stable")]
    return linked_rows_by_object(cs, sel, owner, geometry)


def linked_rows_by_object(cs: ChunkSet, sel: np.ndarray, owner: np.ndarray, geometry: str | None) -> Selection:
    """Rows ``sel`` of the loaded chunks (already grouped by ``owner[sel]``) as a Selection with
    per-object offsets and the edges/faces among them (a skeleton's implied parent edges included)."""
    positions, attrs = cs.rows(sel)
    width = 3 if geometry == "mesh" else 2
    pos_of_global = np.full(cs.total, -1, dtype=np.int64)
    pos_of_global[sel] = np.arange(len(sel), dtype=np.int64)
    assert geometry is not None, "only graph, skeleton and mesh levels have linked rows"
    rows, link_attrs = cs.connectivity(geometry)
    conn, kept = map_rows(rows, pos_of_global)
    link_attrs = {n: v[kept] for n, v in link_attrs.items()}
    if conn.shape[1] != width:
        conn, link_attrs = np.zeros((0, width), np.int64), {n: v[:0] for n, v in link_attrs.items()}
    obj = owner[sel]
    objects, first = np.unique(obj, return_index=True)
    offsets = np.concatenate((first, [len(sel)])).astype(np.int64) if len(sel) else np.zeros(1, np.int64)
    return Selection(
        positions, attrs, obj,
        edges=None if geometry == "mesh" else conn,
        faces=conn if geometry == "mesh" else None,
        offsets=offsets, objects=objects, link_attributes=link_attrs,
    )


async def read_rows(rc: ReadContext, level: int, attributes: AttributeNames, *,
                    box: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
                    categories: Categories = None, chunks: np.ndarray | None = None) -> Selection:
    """Every vertex of the chosen chunks (``chunks``, or those of ``categories`` and a closed ``box``
    when given), with its attributes (the chunking attribute included) and object id, in chunk order."""
    lvl, _, _, cs = await prepare(rc, level, attributes, links=False, table=False)
    lo, hi = box if box is not None else (None, None)
    if chunks is None:
        chunks = lvl.chunks_in(lo, hi, categories)
    owners = await rc.fragment_owners(level) if rc.has_objects(level) else None
    await cs.load(chunks)
    _, _, pos, _ = cs.concat()
    sel = np.flatnonzero(inside(pos, *box)) if box is not None and len(pos) else np.arange(len(pos))
    positions, attrs = cs.rows(sel)
    return Selection(positions, attrs, None if owners is None else cs.row_owners(owners)[sel])
