"""Object reads: manifest -> fragments -> rows, with connectivity.

Every geometry reads the same way: an object's manifest names (chunk,
fragment) blocks; the union of chunks a call needs is fetched once (all
cells of all arrays in flight together) and fragment rows are gathered in
manifest order, which is traversal order for polylines and streamlines.

Connectivity comes back as local row indices into the returned positions:

* polylines / streamlines / lines: consecutive pairs (implicit sequential);
* graphs: the stored rows (intra-chunk ``links/0/0.0.0`` and cross-chunk
  ``links/0/<offsets>``), endpoints in their input order (``perm`` undone);
* skeletons: ``(child, parent)`` rows -- the implicit sequential ones inside
  each fragment plus the stored branch / cross-chunk rows.  A vertex that
  has a stored parent gets no implicit one (a tree vertex has one parent);
* meshes: faces, intra- and cross-chunk, with their input winding.

Cross-chunk rows reference a local vertex index in the source chunk and in
the neighbour chunk(s) at the array's offsets; every endpoint is mapped
``(chunk, local row) -> global row`` over the fetched chunks and then to a
position in the result.  Rows with an endpoint outside the result (another
object, a chunk outside a query box) are dropped.

Seed-layout variants are read too: ``object_index/data`` (back-to-back
manifests) and ``cross_chunk_links/0/data`` records (:mod:`zvf.read.seed`),
``links/0`` as a plain intra-chunk array (:mod:`zvf.read.links`), any chunk
key encoding.  The fetched chunks live in a :class:`zvf.read.chunkset.ChunkSet`;
box queries of object geometries are in :mod:`zvf.read.box`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InvalidArgumentError
from ..format.manifest import ManifestTable
from .cells import rows_from_payload
from .chunkset import ChunkSet
from .links import Links, level_links
from .load import LINKED, SEQUENTIAL
from .points import attribute_layout, level_attributes
from .rowops import expand_ranges, map_rows, segments, sequential_edges, unique_rows
from .selection import FragmentRows, Selection

if TYPE_CHECKING:
    from .context import Manifests, ReadContext
    from .load import Level


# --------------------------------------------------------------------------
# reads
# --------------------------------------------------------------------------


@dataclass
class Grouped:
    """Objects read together: rows grouped by object, connectivity in global result indices."""

    ids: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray
    attributes: dict[str, np.ndarray]
    edges: np.ndarray | None
    faces: np.ndarray | None
    grows: np.ndarray  # global chunk-set row of each result row
    link_attributes: dict[str, np.ndarray] = field(default_factory=dict)  # aligned with edges / faces


def category_blocks(lvl: Level, table: ManifestTable, categories: Sequence[Any] | None) -> ManifestTable:
    """Manifest rows whose chunk lies in the chosen categories (all when None)."""
    if categories is None:
        return table
    keep = np.isin(table.coords[:, 0], lvl.category_index(categories))
    return ManifestTable(table.object_row[keep], table.block[keep], table.coords[keep], table.fragment[keep],
                         table.num_objects)


@overload
async def prepare(rc: ReadContext, level: int, attributes: str | Sequence[str] | None, *,
                  links: bool, incoming: bool = False,
                  table: Literal[True] = True) -> tuple[Level, list[str], Manifests, ChunkSet]: ...


@overload
async def prepare(rc: ReadContext, level: int, attributes: str | Sequence[str] | None, *,
                  links: bool, incoming: bool = False,
                  table: Literal[False]) -> tuple[Level, list[str], tuple[None, None], ChunkSet]: ...


async def prepare(rc: ReadContext, level: int, attributes: str | Sequence[str] | None, *,
                  links: bool, incoming: bool = False,
                  table: bool = True) -> tuple[Level, list[str], Manifests | tuple[None, None], ChunkSet]:
    """Level, attribute names, (ids, full ManifestTable) when ``table``, and a ChunkSet."""
    lvl = await rc.level(level)
    names, with_cat = level_attributes(lvl, attributes)
    want_links = links and rc.geometry_type in LINKED
    jobs: list[Awaitable[Manifests | Links]] = []
    if table:
        jobs.append(rc.manifests(level))
    if want_links:
        jobs.append(level_links(rc, level))
    got = await rc.ex.gather(jobs)
    # one gather of the manifests and the links: which is which follows from the jobs appended above
    manifests: Manifests | tuple[None, None] = cast("Manifests", got[0]) if table else (None, None)
    lk = cast("Links", got[-1]) if want_links else None
    return lvl, names, manifests, ChunkSet(rc, lvl, names, lk, incoming, category=with_cat)


async def read_grouped(rc: ReadContext, cs: ChunkSet, ids: np.ndarray, sub: ManifestTable, *,
                       loaded: bool = False, links: bool = True) -> Grouped:
    """Objects ``ids`` whose manifests are ``sub`` (``object_row`` k = ``ids[k]``), chunks through ``cs``
    (``loaded``: the caller knows ``cs`` holds every chunk ``sub`` names; ``links=False``: no edges or
    faces, for a caller that does not use them)."""
    geometry = rc.geometry_type
    if len(sub) and not loaded:
        await cs.load(unique_rows(sub.coords))
    await cs.learn_widths()
    grows, lens = cs.gather(sub.coords, sub.fragment, ids[sub.object_row])
    per_obj = np.bincount(sub.object_row, weights=lens, minlength=len(ids)).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(per_obj))).astype(np.int64)
    positions, attrs = cs.rows(grows)
    edges: np.ndarray | None = None
    faces: np.ndarray | None = None
    link_attrs: dict[str, np.ndarray] = {}
    if links and geometry in SEQUENTIAL:
        edges = sequential_edges(offsets)
    elif links and geometry in LINKED and cs.links is not None:
        pos_of_global = np.full(cs.total, -1, dtype=np.int64)
        pos_of_global[grows] = np.arange(len(grows), dtype=np.int64)
        rows, link_attrs = cs.connectivity(geometry)
        conn, kept = map_rows(rows, pos_of_global)
        if len(conn):
            seg = segments(offsets)
            same = np.all(seg[conn] == seg[conn[:, :1]], axis=1)
            conn, kept = conn[same], kept[same]
        link_attrs = {n: v[kept] for n, v in link_attrs.items()}
        if geometry == "mesh":
            if conn.shape[1] != 3:
                conn, link_attrs = np.zeros((0, 3), np.int64), {n: v[:0] for n, v in link_attrs.items()}
            faces = conn
        else:
            edges = conn
    return Grouped(ids, offsets, positions, attrs, edges, faces, grows, link_attrs)


def _split(g: Grouped) -> list[Selection]:
    """One Selection per object, connectivity local to each."""
    return split_ranges(g, np.arange(len(g.ids) + 1, dtype=np.int64))


def split_ranges(g: Grouped, cuts: np.ndarray) -> list[Selection]:
    """One combined Selection per run of objects ``cuts[k]:cuts[k+1]`` (``cuts`` from 0 to
    ``len(g.ids)``), connectivity local to it.

    Everything a run needs is computed for all runs at once (connectivity
    sorted by owner and made local, owners, offsets); the loop per run (per
    object for ``read_objects``' list) only takes views.
    """
    cuts = np.asarray(cuts, dtype=np.int64)
    runs = np.diff(cuts)
    rows_at = g.offsets[cuts]
    conn = g.edges if g.edges is not None else g.faces
    link_attrs = g.link_attributes
    if conn is not None and len(conn):
        owner = segments(g.offsets)[conn[:, 0]]
        if len(owner) > 1 and np.any(owner[1:] < owner[:-1]):
            order = np.argsort(owner, kind="stable")
            conn, owner = conn[order], owner[order]
            link_attrs = {n: v[order] for n, v in link_attrs.items()}
        link_cuts = np.searchsorted(owner, cuts)
        conn = conn - np.repeat(rows_at[:-1], np.diff(link_cuts))[:, None]  # local to each run
    else:
        conn = None if conn is None else conn.reshape(0, conn.shape[1] if conn.ndim == 2 else 2)
        link_cuts = np.zeros(len(cuts), np.int64)
    row_ids = np.repeat(g.ids, np.diff(g.offsets))
    # offsets of run k: local_off[p[k]:p[k + 1]] (its objects' starts and its end)
    local_off = g.offsets[expand_ranges(cuts[:-1], runs + 1)] - np.repeat(rows_at[:-1], runs + 1)
    p = np.concatenate(([0], np.cumsum(runs + 1))).tolist()
    edges, out = g.edges is not None, []
    c, r, lc = cuts.tolist(), rows_at.tolist(), link_cuts.tolist()
    positions, attributes, ids = g.positions, g.attributes, g.ids
    for k in range(len(c) - 1):  # per run: views only
        a, b, l0, l1 = r[k], r[k + 1], lc[k], lc[k + 1]
        local = None if conn is None else conn[l0:l1]
        out.append(Selection(
            positions[a:b],
            {n: v[a:b] for n, v in attributes.items()} if attributes else {},
            row_ids[a:b],
            edges=local if edges else None,
            faces=None if edges else local,
            offsets=local_off[p[k]:p[k + 1]],
            objects=ids[c[k]:c[k + 1]],
            link_attributes={n: v[l0:l1] for n, v in link_attrs.items()} if link_attrs else {},
        ))
    return out


def combined_selection(g: Grouped) -> Selection:
    return Selection(
        g.positions,
        g.attributes,
        np.repeat(g.ids, np.diff(g.offsets)),
        edges=g.edges,
        faces=g.faces,
        offsets=g.offsets,
        objects=g.ids.copy(),
        link_attributes=g.link_attributes,
    )


async def read_objects(rc: ReadContext, ids: ArrayLike, *, level: int = 0,
                       attributes: str | Sequence[str] | None = None, combined: bool = False,
                       categories: Sequence[Any] | None = None) -> Selection | list[Selection]:
    """Objects by id; see :meth:`zvf.read.dataset.DatasetReader.read_objects`."""
    req = as_ids(ids)
    uniq, inverse = np.unique(req, return_inverse=True)
    lvl, _, _, cs = await prepare(rc, level, attributes, links=True, table=False)
    got_ids, sub = await rc.object_table(lvl, uniq)
    g = await read_grouped(rc, cs, got_ids, category_blocks(lvl, sub, categories))
    inverse = inverse.reshape(-1)
    if combined:
        if not np.array_equal(uniq, req):
            g = _reorder(g, inverse)
        return combined_selection(g)
    parts = _split(g)
    return [parts[int(i)] for i in inverse]


def as_ids(ids: ArrayLike) -> np.ndarray:
    """Requested ids as a 1-D int64 array (InvalidArgumentError for anything else)."""
    if isinstance(ids, (str, bytes)) or ids is None or isinstance(ids, bool):
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}")
    try:
        # neither a scalar nor an array: a sequence of ids, or list() raises the TypeError handled below
        req = np.asarray(list(cast("Iterable[Any]", ids)) if not np.isscalar(ids) and not isinstance(ids, np.ndarray)
                         else ids)
    except TypeError as exc:
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}") from exc
    if req.size == 0:
        return np.zeros(0, np.int64)
    if req.dtype == bool or req.dtype.kind not in "iu":
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}")
    if req.dtype.kind == "u" and req.max() > np.iinfo(np.int64).max:
        raise InvalidArgumentError(f"object ids must fit int64, got {ids!r}")
    return req.astype(np.int64).reshape(-1)


def _reorder(g: Grouped, take: np.ndarray) -> Grouped:
    """Objects of ``g`` in the order ``take`` (repeats allowed), connectivity remapped."""
    lens = np.diff(g.offsets)
    new_lens = lens[take]
    new_off = np.concatenate(([0], np.cumsum(new_lens))).astype(np.int64)
    src = expand_ranges(g.offsets[take], new_lens)
    conn = g.edges if g.edges is not None else g.faces
    new_conn = None
    link_attrs = g.link_attributes
    if conn is not None:
        seg = segments(g.offsets)
        owner = seg[conn[:, 0]] if len(conn) else np.zeros(0, np.int64)
        # each output object k copies the rows of source object take[k]
        by_owner = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[by_owner], np.arange(len(g.ids) + 1))
        counts = cuts[take + 1] - cuts[take]
        pick = by_owner[expand_ranges(cuts[take], counts)]
        shift = np.repeat(new_off[:-1] - g.offsets[take], counts)
        new_conn = conn[pick] + shift[:, None]
        link_attrs = {n: v[pick] for n, v in link_attrs.items()}
    return Grouped(
        g.ids[take], new_off, g.positions[src], {n: v[src] for n, v in g.attributes.items()},
        new_conn if g.edges is not None else None, new_conn if g.faces is not None else None, g.grows[src],
        link_attrs,
    )


# --------------------------------------------------------------------------
# fragment attributes
# --------------------------------------------------------------------------


async def fragment_attribute(rc: ReadContext, name: str, *, level: int = 0,
                             objects: ArrayLike | None = None) -> FragmentRows:
    """Rows of ``fragment_attributes/<name>``: every stored one, or those of the fragments
    the manifests of ``objects`` name (manifest order; fill value where a chunk has none)."""
    lvl = await rc.family(level, "fragment_attributes")
    arr = lvl.array(f"fragment_attributes/{name}")
    if arr is None:
        raise InvalidArgumentError(f"fragment attribute {name!r} not in level {level} "
                                   f"(it has {lvl.named('fragment_attributes')})")
    dtype, rshape = attribute_layout(arr)
    if objects is None:
        chunks = arr.meta.nonempty_chunk_array
        payloads = await arr.payloads(list(map(tuple, chunks.tolist())))
        vals = [rows_from_payload(p, dtype, rshape, key=arr.key_of(arr.cell_coords(c)))
                for c, p in zip(chunks.tolist(), payloads)]
        counts = np.asarray([len(v) for v in vals], dtype=np.int64)
        frags = expand_ranges(np.zeros(len(counts), np.int64), counts)
        return FragmentRows(np.repeat(chunks, counts, axis=0).reshape(-1, lvl.key_ndim), frags,
                            _stack_rows(vals, dtype, rshape), None)
    req = as_ids(objects)
    got_ids, sub = await rc.object_table(lvl, req)
    chunks, which = np.unique(sub.coords, axis=0, return_inverse=True)
    payloads = await arr.payloads(list(map(tuple, chunks.tolist())))
    vals = [rows_from_payload(p, dtype, rshape, key=arr.key_of(arr.cell_coords(c)))
            for c, p in zip(chunks.tolist(), payloads)]
    counts = np.asarray([len(v) for v in vals], dtype=np.int64)
    table = _stack_rows(vals, dtype, rshape)
    which = which.reshape(-1)
    have = sub.fragment < counts[which]
    at = (np.cumsum(counts) - counts)[which] + np.where(have, sub.fragment, 0)
    fill = np.nan if table.dtype.kind in "fc" else 0
    out = np.full((len(sub), *table.shape[1:]), fill, dtype=table.dtype)
    out[have] = table[at[have]]
    return FragmentRows(sub.coords, sub.fragment, out, got_ids[sub.object_row])


def _stack_rows(parts: list[np.ndarray], dtype: np.dtype, rshape: tuple[int, ...]) -> np.ndarray:
    """Per-chunk rows stacked into one array (empty with the declared layout)."""
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts) if parts else np.zeros((0, *rshape), np.dtype(dtype).newbyteorder("="))
