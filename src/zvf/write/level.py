"""The shared level writer: cells of one level's spatial arrays, for every geometry.

Every writer (points in memory, streamed or distributed; polylines, lines,
graphs, skeletons, meshes; pyramids) partitions rows into chunks and
fragments, then hands them here: ``put_rows`` gathers and encodes each
chunk's vertices, fragment index and attributes in worker threads while
earlier chunks upload, through one ``LevelWriter`` per level.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..format import builders
from ..format.codecs import CellCodec
from ..format.fragments import FragmentIndex, encode_fragment_index
from ..format.grid import CellCodes
from ..format.layout import LevelLayout
from ..format.seekable import bin_pieces, encode_seekable, frame_bounds_bytes, frame_cuts, seekable_codec
from ..format.vlen import encode_vlen_rows
from .partition import Partition, partition_codes
from .store_writer import SpatialArrayOut, StoreWriter, empty_group, ordered_map

ShardShape: TypeAlias = "int | Sequence[int] | Literal['auto'] | None"
"""Cells per shard as a caller gives them: one int for every axis, one per axis, ``"auto"`` (see
:func:`auto_shard_shape`), or None (unsharded)."""


def shard_tuple(shard_shape: ShardShape, ndim: int) -> tuple[int, ...] | None:
    """The shard shape a caller gave, checked; ``"auto"`` gives None until :func:`resolve_shards` sees the grid."""
    if shard_shape is None or (isinstance(shard_shape, str) and shard_shape == "auto"):
        return None
    if isinstance(shard_shape, str):
        raise InvalidArgumentError(f"shard_shape must be an int, {ndim} ints, 'auto' or None, got {shard_shape!r}")
    if isinstance(shard_shape, (int, np.integer)):
        if shard_shape < 1:
            raise InvalidArgumentError(f"shard_shape must be >= 1, got {shard_shape}")
        return (int(shard_shape),) * ndim
    shard = tuple(int(s) for s in shard_shape)
    if len(shard) != ndim or any(s < 1 for s in shard):
        raise InvalidArgumentError(f"shard_shape must be an int or {ndim} ints >= 1, got {shard_shape!r}")
    return shard


def auto_shard_shape(grid_shape: Sequence[int], level_bytes: int) -> tuple[int, ...] | None:
    """Cells per shard for ``shard_shape="auto"`` (None: one cell, no shard worth having).

    A whole-level read then fetches one object per shard and array instead of
    one per chunk, and a box reads the shard index (16 bytes a cell) and its
    cells by range.  The whole grid while the level's raw vertex bytes
    (``level_bytes``) stay within ``shard_auto_bytes`` -- a writer holds a
    shard until it is complete -- else a block of about the grid's share of
    that, never more than ``shard_auto_cells`` cells (the index a box reads).
    """
    settings = tuning()
    grid = [max(1, int(g)) for g in grid_shape]
    cells = math.prod(grid)
    shards = max(1, math.ceil(level_bytes / settings.shard_auto_bytes))
    budget = min(settings.shard_auto_cells, max(1, cells // shards))
    block = list(grid)
    while math.prod(block) > budget:  # halve the longest side until the block fits the budget
        longest = max(range(len(block)), key=lambda a: block[a])
        block[longest] = (block[longest] + 1) // 2
    return None if math.prod(block) == 1 else tuple(block)


def resolve_shards(codec: CellCodec, shard_shape: ShardShape, grid_shape: Sequence[int], level_bytes: int) -> CellCodec:
    """``codec`` with ``shard_shape="auto"`` replaced by :func:`auto_shard_shape` of the level's grid."""
    if not (isinstance(shard_shape, str) and shard_shape == "auto"):
        return codec
    return dataclasses.replace(codec, shard=auto_shard_shape(grid_shape, level_bytes))


def fragment_shard(codec: CellCodec, object_index_layout: str, grid_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Shard shape of an object level's ``vertex_fragments`` in zvf's layout (None: as the other arrays).

    Labelling rows with their objects needs every chunk's fragment index, a
    few KiB each: one request per chunk doubles the requests of a whole-level
    read.  Sharded about ``fragment_shard_chunks`` (a :mod:`zvf.config` setting) chunks to a
    shard, a whole-level read fetches them in one request per shard; box queries read
    only their inner chunks (a shard index, cached, then ranges).  The
    vertices and attributes stay one object per chunk, as the caller asked.
    """
    if codec.shard is not None or object_index_layout == "reference" or not len(grid_shape):
        return None
    side = max(1, round(tuning().fragment_shard_chunks ** (1 / len(grid_shape))))
    shard = tuple(min(side, max(1, int(g))) for g in grid_shape)
    return None if int(np.prod(shard)) == 1 else shard


class LevelWriter:
    """Spatial arrays of one level sharing a grid layout and codec (``vertex_fragments``: sharded by
    ``fragments``, when given)."""

    def __init__(self, writer: StoreWriter, level: int, origin: tuple[int, ...], grid_shape: tuple[int, ...],
                 codec: CellCodec,
                 fragments: tuple[int, ...] | None = None):
        self.writer = writer
        self.level = level
        self.origin = origin
        self.grid_shape = grid_shape
        self.codec = codec
        self.fragment_codec = codec if fragments is None else dataclasses.replace(codec, shard=fragments)
        self.arrays: dict[str, SpatialArrayOut] = {}

    def array(self, name: str, attributes: dict[str, Any]) -> SpatialArrayOut:
        if name not in self.arrays:
            codec = self.fragment_codec if name == "vertex_fragments" else self.codec
            self.arrays[name] = SpatialArrayOut(f"{self.level}/{name}", codec, self.origin, self.grid_shape,
                                                attributes)
        return self.arrays[name]

    async def finish(self) -> None:
        for arr in self.arrays.values():
            await arr.finish(self.writer)


def row_view(a: np.ndarray) -> np.ndarray:
    """(N,) view of ``a``'s rows as single little-endian items, so a row gather is one ``np.take``."""
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    m = int(np.prod(a.shape[1:], dtype=np.int64))
    flat = np.ascontiguousarray(a).reshape(len(a), m)
    return flat.view(np.dtype((np.void, a.itemsize * m))).reshape(len(a)) if m else flat


async def put_rows(level: LevelWriter, part: Partition, positions: np.ndarray, attributes: dict[str, np.ndarray],
                   fragments_of: Callable[[int], FragmentIndex] | None,
                   attribute_docs: dict[str, dict[str, Any]] | None = None, *, seekable: bool = False) -> None:
    """Upload vertices, fragment indexes and attributes of every chunk of a partition.

    Each chunk's rows are gathered and its cells encoded in worker threads
    while earlier chunks upload (no sorted copy of the whole input);
    ``attribute_docs`` overrides the document attributes of named vertex attributes.
    ``seekable``: the fragments are the chunks' bins (points without ids) and zvf's layout is wanted (not
    the reference's bytes): zstd cells of a chunk of several bins are written seekable
    (:mod:`zvf.format.seekable`) -- each bin's rows in compact pieces, frames of at least
    ``seek_frame_bytes`` (a :mod:`zvf.config` setting), the vertices' frames with their bounds -- so a box
    reads only the frames of its bins that it meets.
    """
    verts = level.array("vertices", builders.vertices_attributes(positions.dtype))
    frags = level.array("vertex_fragments", builders.vertex_fragments_attributes())
    docs = attribute_docs or {}
    columns = [(verts, row_view(positions))] + [
        (level.array(f"vertex_attributes/{n}",
                     docs.get(n) or builders.vertex_attribute_attributes(n, a.dtype, a.shape[1:])),
         row_view(a))
        for n, a in attributes.items()
    ]
    outs = [frags] + [out for out, _ in columns]

    frame_bytes = tuning().seek_frame_bytes

    def cell(codec: CellCodec, col: np.ndarray, rows: np.ndarray, places: np.ndarray | None,
             pos: np.ndarray | None) -> bytes | np.ndarray:
        if codec.serializer == "vlen-bytes" and not codec.compressors and col.ndim == 1:
            frame = encode_vlen_rows(col, rows)  # gathered straight into its frame
            if frame is not None:
                return frame
        payload = np.take(col, rows, axis=0).view(np.uint8)
        if places is not None and col.ndim == 1 and seekable_codec(codec):
            cuts = frame_cuts(places, col.itemsize, frame_bytes)
            return encode_seekable(codec, payload, cuts, col.itemsize,
                                   None if pos is None else frame_bounds_bytes(pos, cuts))
        return codec.encode(payload)

    def encode(k: int) -> list[bytes | np.ndarray]:
        assert fragments_of is not None  # None only for a partition without chunks
        rows = part.order[part.chunk_starts[k]:part.chunk_starts[k + 1]]
        fi = fragments_of(k)
        bins = fi.counts if seekable and fi.num_fragments > 1 and fi.tiles(len(rows)) else None
        pos = places = None
        if bins is not None:  # frames end where bins do, or pieces of them (vertices' frames: a piece each)
            places = np.cumsum(bins)
            if seekable_codec(verts.codec):
                pos = positions[rows]
                order, places = bin_pieces(pos, bins, -(-frame_bytes // columns[0][1].itemsize))
                rows, pos = rows[order], pos[order]
        blobs: list[bytes | np.ndarray] = [frags.codec.encode(encode_fragment_index(fi))]
        return blobs + [cell(out.codec, col, rows, places, pos if out is verts else None) for out, col in columns]

    async def store(k: int, blobs: list[bytes | np.ndarray]) -> None:
        chunk = part.chunks[k]
        for out, blob in zip(outs, blobs):
            await out.put(level.writer, chunk, blob)

    await ordered_map(range(len(part.chunks)), encode, store)


def index_dtype(n: int) -> np.dtype:
    """int32 row indices while they fit: half the memory of int64 for the per-row arrays of a layout."""
    return np.dtype(np.int32 if n < 1 << 31 else np.int64)


class Layout:
    """Rows partitioned into chunks and fragments: where each fragment starts (see :meth:`by_key`, :meth:`by_runs`)."""

    def __init__(self, pos: np.ndarray, part: Partition):
        self.pos = pos
        self.part = part
        # first sorted row of each fragment, chunk-local fragment index
        self.frag_first = part.chunk_starts[part.frag_chunk] + part.frag_starts
        first_of_chunk = np.searchsorted(part.frag_chunk, part.frag_chunk)
        self.frag_local = np.arange(len(self.frag_first), dtype=np.int64) - first_of_chunk

    @classmethod
    def by_key(cls, level_layout: LevelLayout, pos: np.ndarray, keys: np.ndarray) -> KeyLayout:
        """One fragment per (chunk, key), keys ascending inside a chunk (graphs, meshes).

        Rows are placed by their chunk numbers (one int64 each), not (N, ndim) chunk coordinates.
        """
        cells = level_layout.cell_codes(pos)
        # with keys, partition_codes sorts a combined copy: ``cells.codes`` stays each row's chunk number
        return KeyLayout(pos, cells, partition_codes(cells, np.asarray(keys)))

    @classmethod
    def by_runs(cls, pos: np.ndarray, run_start: np.ndarray, run_code: np.ndarray,
                coords: Callable[[np.ndarray], np.ndarray]) -> RunLayout:
        """Fragments are contiguous input runs (``run_start`` ascending, first = 0; ``run_code`` the C-order
        chunk number of each run, ``coords`` maps numbers to chunk coords); a chunk lists its runs in input
        order.  Sorts runs, not rows: the same result as ``partition(chunks, run_id)`` at a fraction of the
        cost, and the only per-row array is the gather order."""
        return RunLayout(pos, run_start, run_code, coords)

    def fragments_of(self, k: int) -> FragmentIndex:
        s = self.part.chunk_fragments(k)
        return FragmentIndex.from_ranges(self.part.frag_starts[s], self.part.frag_counts[s])


class KeyLayout(Layout):
    """:meth:`Layout.by_key`, plus each input row's chunk and chunk-local sorted row (explicit links)."""

    def __init__(self, pos: np.ndarray, cells: CellCodes, part: Partition):
        super().__init__(pos, part)
        self.cells = cells
        n = len(pos)
        idx = index_dtype(n)
        self.read_idx = np.empty(n, dtype=idx)  # sorted (read-order) row of each input row
        self.read_idx[part.order] = np.arange(n, dtype=idx)
        chunk_first = np.repeat(part.chunk_starts[:-1].astype(idx), np.diff(part.chunk_starts))
        self.local = np.empty(n, dtype=idx)
        self.local[part.order] = np.arange(n, dtype=idx) - chunk_first

    def chunks_of(self, rows: np.ndarray) -> np.ndarray:
        """Absolute chunk coords of input ``rows`` (any shape) -> ``rows.shape + (ndim,)``."""
        rows = np.asarray(rows)
        ndim = self.pos.shape[1]
        return self.cells.chunk_coords(self.cells.codes[rows].reshape(-1)).reshape(*rows.shape, ndim)


class RunLayout(Layout):
    """:meth:`Layout.by_runs`: input rows are located through their run, not through per-row tables."""

    def __init__(self, pos: np.ndarray, run_start: np.ndarray, run_code: np.ndarray,
                 coords: Callable[[np.ndarray], np.ndarray]):
        n, ndim = pos.shape
        run_start = np.asarray(run_start, dtype=np.int64)
        counts = np.diff(np.append(run_start, n))
        ro = np.argsort(run_code, kind="stable")  # run order kept per chunk
        sc = run_code[ro]
        new = np.ones(len(ro), dtype=bool)
        new[1:] = sc[1:] != sc[:-1]
        frag_chunk = np.cumsum(new) - 1
        cnt = counts[ro]
        first = np.cumsum(cnt) - cnt  # sorted row of each run's first vertex
        order = _run_order(n, run_start[ro] - first, first, index_dtype(n))
        chunk_starts = np.append(first[new], n).astype(np.int64)
        chunks = coords(sc[new]).astype(np.int64) if len(ro) else np.zeros((0, ndim), np.int64)
        super().__init__(pos, Partition(order, chunks, chunk_starts, frag_chunk.astype(np.int64),
                                        first - chunk_starts[frag_chunk], cnt.astype(np.int64), ro.astype(np.int64)))
        self.run_start = run_start
        self.run_frag = np.empty(len(ro), dtype=np.int64)  # fragment (sorted position) of each run
        self.run_frag[ro] = np.arange(len(ro), dtype=np.int64)

    def frag_objects(self, obj_start: np.ndarray) -> np.ndarray:
        """Object of each fragment, from each object's first input row (ascending; an empty object
        shares the next one's start, and the last start with a row wins): no per-row object table.
        Runs are looked up in input order (ascending starts: a cache-friendly search), then permuted."""
        objects: np.ndarray = (np.searchsorted(obj_start, self.run_start, side="right") - 1)[self.part.frag_keys]
        return objects

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fragment, chunk-local sorted row) of input ``rows`` (any shape)."""
        run = np.searchsorted(self.run_start, rows, side="right") - 1
        frag = self.run_frag[run]
        part = self.part
        return frag, part.frag_starts[frag] + (rows - self.run_start[run])


def _run_order(n: int, shift: np.ndarray, first: np.ndarray, idx: np.dtype) -> np.ndarray:
    """``arange(n) + repeat(shift, counts)`` (sorted row -> input row) as one cumulative sum over one array:
    each run's first row carries the step from the previous run's shift, every other row a 1."""
    order = np.ones(n, dtype=idx)
    if n:
        nonempty = np.diff(first, append=n) > 0
        shift, first = shift[nonempty], first[nonempty]
        step = np.diff(shift, prepend=0) + 1
        step[0] -= 1
        order[first] = step
        np.cumsum(order, dtype=idx, out=order)
    return order


def run_starts(chunks: np.ndarray, obj_start: np.ndarray) -> np.ndarray:
    """First vertex of every run: a new run starts at each object start or chunk change.

    ``chunks``: each row's chunk, as (N, ndim) coords or (N,) chunk numbers.
    """
    n = len(chunks)
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
        change = chunks[1:] != chunks[:-1]
        new[1:] = change if change.ndim == 1 else np.any(change, axis=1)
        new[obj_start[obj_start < n]] = True
    return np.flatnonzero(new)


def level0(writer: StoreWriter, origin: tuple[int, ...], grid_shape: tuple[int, ...], codec: CellCodec,
           attributes: bool,
           fragments: tuple[int, ...] | None = None) -> LevelWriter:
    """Level 0's writer, with the vertex attributes group declared when there are any (``fragments``: see
    :func:`fragment_shard`)."""
    level = LevelWriter(writer, 0, origin, grid_shape, codec, fragments)
    if attributes:
        empty_group(writer, "0/vertex_attributes")
    return level
