"""Object-geometry writers: the bytes zarr-vectors 0.9.2's ``write_polylines``,
``write_lines``, ``write_graph`` and ``write_mesh`` produce.

Shared shape of every writer: each vertex gets its chunk (``floor(p / c)``),
one stable sort groups rows by chunk and then by fragment key, fragments
are cut where the key changes, and manifests name (chunk, local fragment)
per block.  The fragment key is what differs:

* polylines / lines: a *run* -- consecutive vertices of one object in one
  chunk (an object re-entering a chunk gets a second fragment there), so
  rows stay in input order and manifests list runs in path order;
* graphs / skeletons / meshes: the object id, so a chunk holds one
  fragment per object (ascending id) and manifests list chunks in order.

Connectivity goes to ``links/0/`` through :mod:`zvf.write.links`: polylines and
lines store only the bridges between consecutive runs, graphs every edge,
skeletons the edges the reader cannot imply, meshes every face.

Three things 0.9.2 gets wrong are *not* reproduced unless inside
:func:`zvf.write.quirks.reference_quirks` (the compatibility tests use it to
show that every other byte matches):

* ``write_lines`` stores the chunk-local *fragment* index instead of the
  vertex index in its bridge links;
* ``write_polylines`` / ``write_graph`` / ``write_mesh`` label multi-channel
  vertex attributes ``row_shape: []`` without ``channel_names``;
* skeleton forests: only the first tree is stored depth-first, so another
  tree's root can land mid-fragment and read back with an invented parent
  (see :func:`_skeleton_order`).

The manifests layout follows ``object_index_layout`` (see :mod:`zvf.write.object_index`;
``"reference"`` is 0.9.2's single zstd chunk), and so do the fragment indexes:
sharded in zvf's layout (:func:`zvf.write.level.fragment_shard`), one cell per chunk in 0.9.2's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack, cast

import numpy as np

from ...errors import InvalidArgumentError
from ...format.codecs import CellCodec
from ...format.layout import LevelLayout
from ...io.executor import Executor
from ...io.store import open_store
from .. import inputs, layout, quirks
from ..fragment_attributes import FragmentAttributes
from ..level import Layout, LevelWriter, fragment_shard, level0, put_rows, resolve_shards, run_starts
from ..links import place_records, put_links
from ..object_index import (
    put_groups,
    put_object_attributes,
    put_object_index,
)
from ..partition import Partition
from ..store_writer import (
    StoreWriter,
    add_level0_documents,
)
from ..types import WriteConfig, WriteSummary
from .inputs import (
    as_given,
    graph_input,
    layout_and_codec,
    lines_input,
    mesh_input,
    named_bounds,
    object_tables,
    polyline_input,
)
from .stream import is_object_stream, write_connected_stream, write_paths_stream

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ...io.store import Target
    from ..types import Columns, FragmentColumns, ObjectBatches, ObjectWriteOptions, Shape

__all__ = ["write_graph", "write_lines", "write_mesh", "write_polylines"]



# ---------------------------------------------------------------------------
# shared by every geometry

def _attribute_docs(attrs: dict[str, np.ndarray], quirk_row_shape: bool) -> dict[str, dict[str, Any]] | None:
    """0.9.2's object writers label multi-channel attributes ``row_shape: []`` (reproduced on request only)."""
    if not quirk_row_shape:
        return None
    return {n: {"zv_array": "attribute", "name": n, "dtype": np.dtype(a.dtype).name, "row_shape": []}
            for n, a in attrs.items()}


@dataclass(frozen=True)
class _Setup:
    """What an object write derives from its options and vertices before any upload."""

    cfg: WriteConfig
    level_layout: LevelLayout
    codec: CellCodec
    bounds: tuple[list[float], list[float]]
    chunk_shape: list[float]  # as given: 0.9.2 records ints as ints
    bin_shape: list[float] | None

    @classmethod
    def of(cls, cfg: WriteConfig, pos: np.ndarray, name: str, *, lengths: np.ndarray | None = None,
           object_ids: np.ndarray | None = None) -> _Setup:
        """``pos``: the vertices the bounds are checked on (as given, as 0.9.2 does); ``name``: their argument;
        ``lengths`` (rows of each object in turn) or ``object_ids`` (each row's): the objects an "auto" layout
        sizes its chunks and bins for (:mod:`zvf.write.layout`)."""
        ndim = pos.shape[1]
        lo, hi = bounds = named_bounds(pos, cfg.bounds, ndim, name)
        sample = None
        if isinstance(cfg.chunk_shape, str) or isinstance(cfg.bin_shape, str):
            if lengths is not None:
                sample = layout.ObjectSample.of(pos, lengths)
            else:
                assert object_ids is not None  # every caller gives lengths or object_ids
                sample = layout.ObjectSample.of_ids(pos, object_ids)
        chunk_shape, bin_shape = layout.resolve(cfg.chunk_shape, cfg.bin_shape, lo, hi, len(pos), objects=sample)
        level_layout, codec = layout_and_codec(cfg.compression, cfg.shard_shape, ndim, chunk_shape, bin_shape)
        codec = resolve_shards(codec, cfg.shard_shape, level_layout.extent(lo, hi)[1], pos.nbytes)
        return cls(cfg, level_layout, codec, bounds, as_given(chunk_shape, "chunk_shape"),
                   None if bin_shape is None else as_given(bin_shape, "bin_shape"))

    def writer(self, target: Target) -> tuple[str, StoreWriter]:
        """(url, writer) of the store to publish."""
        handle = open_store(target, mode="w", storage_options=self.cfg.storage_options)
        return handle.url, StoreWriter.for_config(Executor(handle), self.cfg)

    async def put_vertices(self, writer: StoreWriter, lay: Layout, attrs: dict[str, np.ndarray],
                           quirk_row_shape: bool) -> LevelWriter:
        """Level 0's writer with every vertex row (and vertex attribute) of ``lay`` uploaded."""
        origin, grid_shape = self.level_layout.extent(self.bounds[0], self.bounds[1])
        level = level0(writer, origin, grid_shape, self.codec, bool(attrs),
                       fragment_shard(self.codec, self.cfg.object_index_layout, grid_shape))
        await put_rows(level, lay.part, lay.pos, attrs, lay.fragments_of, _attribute_docs(attrs, quirk_row_shape))
        return level


@dataclass(frozen=True)
class _Tables:
    """Checked object attributes, groups and fragment attributes of a write."""

    obj_attrs: dict[str, np.ndarray]
    group_rows: list[np.ndarray]
    grp_attrs: dict[str, np.ndarray]
    frag_attrs: FragmentAttributes

    @classmethod
    def of(cls, oids: np.ndarray, cfg: WriteConfig, fragment_attributes: FragmentColumns | None, ndim: int) -> _Tables:
        obj_attrs, group_rows, grp_attrs = object_tables(oids, cfg.object_attributes, cfg.groups, cfg.group_attributes)
        return cls(obj_attrs, group_rows, grp_attrs, FragmentAttributes(fragment_attributes, ndim))


async def _put_object_data(writer: StoreWriter, lay: Layout, frag_object: np.ndarray, frag_order: np.ndarray,
                           object_ids: np.ndarray, ndim: int, tables: _Tables, cfg: WriteConfig) -> None:
    """Object index (each object's fragments sorted by ``frag_order``), object attributes, groups."""
    part = lay.part
    order = np.lexsort((frag_order, frag_object))
    await put_object_index(writer, 0, frag_object[order], part.chunks[part.frag_chunk[order]], lay.frag_local[order],
                           object_ids, ndim, compression=cfg.compression, layout=cfg.object_index_layout)
    codec = CellCodec.for_writing(cfg.compression)  # unlike write_points, these writers follow the compressor
    await put_object_attributes(writer, 0, tables.obj_attrs, codec)
    await put_groups(writer, tables.group_rows, tables.grp_attrs, codec)


async def _put_fragment_attributes(level: LevelWriter, part: Partition, frag_attrs: FragmentAttributes,
                                   arrays_present: list[str]) -> None:
    """Fragment attribute cells of every chunk of ``part`` (see :mod:`zvf.write.fragment_attributes`)."""
    await frag_attrs.put_partition(level, part)
    frag_attrs.finish(level.writer, arrays_present)


# ---------------------------------------------------------------------------
# polylines and lines


async def _write_paths(target: Target, s: _Setup, pos: np.ndarray, lens: np.ndarray, *, geometry: str,
                       attrs: dict[str, np.ndarray], tables: _Tables, arrays_present: list[str], quirk_row_shape: bool,
                       fragment_index_links: bool) -> WriteSummary:
    """Shared body of polylines and lines: every object is an ordered path of vertices."""
    level_layout, bounds = s.level_layout, s.bounds
    n, ndim = pos.shape
    num = len(lens)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    cc = level_layout.cell_codes(pos)  # each row's C-order chunk number
    codes = cc.codes
    run_start = run_starts(codes, starts)
    lay = Layout.by_runs(pos, run_start, codes[run_start], cc.chunk_coords)
    layout.check_cells(n, len(lay.part.chunks), s.chunk_shape, *bounds)
    # bridges: vertex i-1 -> i where a path crosses into another chunk
    is_start = np.zeros(n, dtype=bool)
    is_start[starts[lens > 0]] = True
    cross = np.flatnonzero(~is_start[1:] & (codes[1:] != codes[:-1])) + 1 if n else np.zeros(0, np.int64)
    ends = np.stack([cross - 1, cross], axis=1)
    frag, local = lay.locate(ends)
    # 0.9.2 write_lines: chunk-local fragment index, not vertex index
    vi = lay.frag_local[frag] if fragment_index_links else local
    cells = place_records(cc.chunk_coords(codes[ends].reshape(-1)).reshape(len(ends), 2, ndim), vi)

    url, out = s.writer(target)
    async with out as writer:
        level = await s.put_vertices(writer, lay, attrs, quirk_row_shape)
        await _put_fragment_attributes(level, lay.part, tables.frag_attrs, arrays_present)
        await put_links(level, cells, ndim=ndim, link_attributes={}, intra_array=False, link_fragments=False)
        await level.finish()
        part = lay.part
        frag_object = lay.frag_objects(starts)
        await _put_object_data(writer, lay, frag_object, part.frag_keys, np.arange(num, dtype=np.int64), ndim,
                               tables, s.cfg)
        add_level0_documents(writer, url, geometry=geometry, n=n, arrays_present=arrays_present,
                             chunk_shape=s.chunk_shape, bounds=bounds, bin_shape=s.bin_shape)
    return WriteSummary.of(
        writer, geometry, object_count=int(num), vertex_count=int(n), chunk_count=len(lay.part.chunks),
        fragment_count=len(lay.part.frag_chunk), cross_chunk_link_count=int(cells.num_links),
        group_count=len(tables.group_rows))


def _streamed(what: str, given: dict[str, object]) -> None:
    """Refuse whole-input arguments next to batches (they belong inside each batch)."""
    bad = [k for k, v in given.items() if v is not None]
    if bad:
        raise InvalidArgumentError(f"with batches of {what}, pass {', '.join(bad)} inside each batch")
    if quirks.active():
        raise InvalidArgumentError(f"reference_quirks() does not apply to batches of {what}")


@inputs.keywords_first(inputs.OBJECT_WRITER_OPTIONS)
async def write_polylines(
    target: Target,
    polylines: Sequence[ArrayLike] | ObjectBatches,
    *,
    chunk_shape: Shape,
    geometry_type: str = "polyline",
    attributes: Columns | None = None,
    **options: Unpack[ObjectWriteOptions],
) -> WriteSummary:
    """Write polylines (or streamlines): one object per polyline, ids 0..P-1.

    ``polylines``: a sequence of (N_k, ndim) arrays (empty ones allowed: they
    get an empty manifest).  ``attributes``: per-vertex, ``{name: [array per
    polyline]}`` or ``{name: (N,) / (N, C) concatenated}``.  ``options``: the
    writers' common keywords (:class:`zvf.WriteOptions`; ``dtype`` None keeps
    the vertices' float dtype) and ``fragment_attributes``: ``{name: {chunk
    coords: (F_c,) / (F_c, C)}}``, one row per fragment of the chunk.
    ``object_attributes``: ``{name: (P,) / (P, C)}``; ``groups``:
    ``{group_id: [polyline indices]}``.

    ``polylines`` may also be an iterable or async iterable of batches (a
    generator, or a list of batches): each batch a sequence of polylines or
    ``{"polylines", "attributes", "object_attributes"}``; ids continue across
    batches.  Streamed through local spill files (see
    :mod:`zvf.write.objects.stream`), same bytes as the concatenation.
    """
    if is_object_stream(polylines, "polylines"):
        _streamed("polylines", {"attributes": attributes})
        return await write_paths_stream(target, polylines, geometry=geometry_type, chunk_shape=chunk_shape, **options)
    if geometry_type not in ("polyline", "streamline"):
        raise InvalidArgumentError(f"geometry_type must be 'polyline' or 'streamline', got {geometry_type!r}")
    frag_columns = options.pop("fragment_attributes", None)
    cfg = inputs.write_config(chunk_shape, options)
    # not batches (is_object_stream said so): the in-memory form of the argument
    raw, pos, lens, attrs = polyline_input(cast("Sequence[ArrayLike] | np.ndarray", polylines), attributes, cfg.dtype)
    s = _Setup.of(cfg, raw, "polylines", lengths=lens)
    del raw
    return await _write_paths(
        target, s, pos, lens, geometry=geometry_type, attrs=attrs,
        tables=_Tables.of(np.arange(len(lens), dtype=np.int64), cfg, frag_columns, pos.shape[1]),
        arrays_present=["vertices", "object_index"], quirk_row_shape=quirks.active(), fragment_index_links=False)


@inputs.keywords_first(inputs.OBJECT_WRITER_OPTIONS)
async def write_lines(
    target: Target,
    endpoints: ArrayLike | ObjectBatches,
    *,
    chunk_shape: Shape,
    attributes: Columns | None = None,
    **options: Unpack[ObjectWriteOptions],
) -> WriteSummary:
    """Write M line segments ``endpoints`` (M, 2, ndim): one 2-vertex object per line.

    ``attributes``: per endpoint, ``{name: (M, 2) / (M, 2, C)}``;
    ``object_attributes``: per line, ``{name: (M,) / (M, C)}``; the other
    options as for :func:`write_polylines`.

    ``endpoints`` may also be an iterable or async iterable of batches, each
    an (m, 2, ndim) array or ``{"endpoints", "attributes", "object_attributes"}``
    (ids continue across batches): same bytes as the concatenation.
    """
    if is_object_stream(endpoints, "lines"):
        _streamed("lines", {"attributes": attributes})
        return await write_paths_stream(target, endpoints, geometry="line", chunk_shape=chunk_shape, **options)
    frag_columns = options.pop("fragment_attributes", None)
    cfg = inputs.write_config(chunk_shape, options)
    # not batches (is_object_stream said so): the in-memory form of the argument
    pos, m, attrs = lines_input(cast("ArrayLike", endpoints), attributes, cfg.dtype)
    lens = np.full(m, 2, dtype=np.int64)
    return await _write_paths(
        target, _Setup.of(cfg, pos, "endpoints", lengths=lens), pos, lens, geometry="line", attrs=attrs,
        tables=_Tables.of(np.arange(m, dtype=np.int64), cfg, frag_columns, pos.shape[1]),
        arrays_present=["vertices", "object_index"] + (["vertex_attributes"] if attrs else []),
        quirk_row_shape=False, fragment_index_links=quirks.active())


# ---------------------------------------------------------------------------
# graphs, skeletons, meshes


async def _write_connected(target: Target, s: _Setup, pos: np.ndarray, oids: np.ndarray, records: np.ndarray, *,
                           geometry: str, attrs: dict[str, np.ndarray], link_attrs: dict[str, np.ndarray],
                           tables: _Tables, quirk_row_shape: bool,
                           skeleton: bool) -> WriteSummary:
    """Shared body of graphs, skeletons and meshes: one fragment per (object, chunk), explicit links."""
    n, ndim = pos.shape
    level_layout, bounds = s.level_layout, s.bounds
    lay = Layout.by_key(level_layout, pos, oids)
    layout.check_cells(len(pos), len(lay.part.chunks), s.chunk_shape, *bounds)
    part = lay.part
    uniq = np.unique(oids)
    if skeleton and len(records):
        child, par = records[:, 0], records[:, 1]
        frag_start = np.zeros(n, dtype=bool)
        frag_start[lay.frag_first[part.frag_counts > 0]] = True
        implied = (lay.read_idx[child] == lay.read_idx[par] + 1) & ~frag_start[lay.read_idx[child]]
        stored = np.flatnonzero(~implied)
    else:
        stored = np.arange(len(records), dtype=np.int64)
    rec = records[stored]
    cells = place_records(lay.chunks_of(rec), lay.local[rec])
    link_attrs = {k: v[stored] for k, v in link_attrs.items()}

    url, out = s.writer(target)
    async with out as writer:
        level = await s.put_vertices(writer, lay, attrs, quirk_row_shape)
        arrays_present = ["vertices", "links", "object_index"]
        await _put_fragment_attributes(level, part, tables.frag_attrs, arrays_present)
        await put_links(level, cells, ndim=ndim, link_attributes=link_attrs, intra_array=True, link_fragments=True)
        await level.finish()
        frag_object = np.searchsorted(uniq, part.frag_keys)
        await _put_object_data(writer, lay, frag_object, part.frag_chunk, uniq, ndim, tables, s.cfg)
        add_level0_documents(writer, url, geometry=geometry, n=n, arrays_present=arrays_present,
                             chunk_shape=s.chunk_shape, bounds=bounds, bin_shape=s.bin_shape)
    return WriteSummary.of(
        writer, geometry, object_count=len(uniq), vertex_count=int(n), link_count=len(records),
        stored_link_count=int(cells.num_links), chunk_count=len(part.chunks), fragment_count=len(part.frag_chunk),
        group_count=len(tables.group_rows))


@inputs.keywords_first(inputs.OBJECT_WRITER_OPTIONS)
async def write_graph(
    target: Target, positions: ArrayLike | ObjectBatches, edges: ArrayLike | None = None,
    *,
    chunk_shape: Shape,
    geometry_type: str = "graph",
    object_ids: ArrayLike | None = None,
    attributes: Columns | None = None,
    link_attributes: Columns | None = None,
    **options: Unpack[ObjectWriteOptions],
) -> WriteSummary:
    """Write a graph (every edge explicit) or a skeleton (``geometry_type="skeleton"``: edges are
    (child, parent) rows of a forest with one root per object; vertices are stored in
    depth-first order and only the edges the reader cannot imply are kept).

    ``object_ids`` (N,) >= 0 (default: one object 0); object attributes and groups
    refer to the sorted distinct ids.  ``link_attributes``: ``{name: (M,) / (M, C)}``;
    the other options as for :func:`write_polylines`.

    ``positions`` may also be an iterable or async iterable of batches
    ``{"positions", "edges", "object_ids", "attributes", "link_attributes"}``
    (``edges`` index the batch's own positions; without ``object_ids`` in any
    batch every vertex is object 0; an object may span batches, a skeleton's
    tree may not): same bytes as the concatenation.
    """
    if geometry_type not in ("graph", "skeleton"):
        raise InvalidArgumentError(f"geometry_type must be 'graph' or 'skeleton', got {geometry_type!r}")
    if is_object_stream(positions, "graph"):
        _streamed("graphs", {"edges": edges, "object_ids": object_ids, "attributes": attributes,
                             "link_attributes": link_attributes})
        return await write_connected_stream(target, positions, geometry=geometry_type, chunk_shape=chunk_shape,
                                            **options)
    if edges is None:
        raise InvalidArgumentError("edges are required (an (M, 2) integer array), unless positions are batches")
    frag_columns = options.pop("fragment_attributes", None)
    cfg = inputs.write_config(chunk_shape, options)
    skeleton = geometry_type == "skeleton"
    # not batches (is_object_stream said so): the in-memory form of the argument
    pos, oids, e, attrs, link_attrs = graph_input(cast("ArrayLike", positions), edges, object_ids, attributes,
                                                  link_attributes, cfg.dtype, skeleton=skeleton,
                                                  reference=quirks.active())
    return await _write_connected(
        target, _Setup.of(cfg, pos, "positions", object_ids=oids), pos, oids, e, geometry=geometry_type, attrs=attrs,
        link_attrs=link_attrs, tables=_Tables.of(oids, cfg, frag_columns, pos.shape[1]),
        quirk_row_shape=quirks.active(), skeleton=skeleton)


@inputs.keywords_first(inputs.OBJECT_WRITER_OPTIONS)
async def write_mesh(
    target: Target, positions: ArrayLike | ObjectBatches, faces: ArrayLike | None = None,
    *,
    chunk_shape: Shape,
    object_ids: ArrayLike | None = None,
    attributes: Columns | None = None,
    **options: Unpack[ObjectWriteOptions],
) -> WriteSummary:
    """Write a mesh: ``faces`` (F, L) vertex indices, L >= 3 (triangles, quads...).

    Every face is a link record; winding survives the canonical sort through
    the perm column.  ``object_ids`` as for :func:`write_graph`, the other
    options as for :func:`write_polylines`.

    ``positions`` (N, ndim) are the vertices (``vertices=`` is the deprecated
    name).  They may also be an iterable or async iterable of batches
    ``{"positions", "faces", "object_ids", "attributes"}`` (``faces`` index
    the batch's own positions; ``"vertices"`` is accepted for ``"positions"``):
    same bytes as the concatenation.
    """
    if is_object_stream(positions, "mesh"):
        _streamed("meshes", {"faces": faces, "object_ids": object_ids, "attributes": attributes})
        return await write_connected_stream(target, positions, geometry="mesh", chunk_shape=chunk_shape, **options)
    if faces is None:
        raise InvalidArgumentError("faces are required (an (F, L) integer array), unless positions are batches")
    frag_columns = options.pop("fragment_attributes", None)
    cfg = inputs.write_config(chunk_shape, options)
    # not batches (is_object_stream said so): the in-memory form of the argument
    pos, oids, f, attrs = mesh_input(cast("ArrayLike", positions), faces, object_ids, attributes, cfg.dtype)
    return await _write_connected(
        target, _Setup.of(cfg, pos, "positions", object_ids=oids), pos, oids, f, geometry="mesh", attrs=attrs,
        link_attrs={},
        tables=_Tables.of(oids, cfg, frag_columns, pos.shape[1]), quirk_row_shape=quirks.active(), skeleton=False)
