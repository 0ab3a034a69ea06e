"""A level's layout: where its vertices are filed, by chunk and by bin.

One object per level answers every question that maps coordinates to cells:
the level's chunk edge (the root's times its chunk scale), the bins tiling a
chunk, the grid's origin and shape, the chunk and bin of a position, and the
chunks and bins a closed box can hold vertices of.  The planner, the counter,
the whole-level reads and exports, the validator and the pyramid builder ask
it and nothing else, so a level is read the way it was written; it is built
from the level's documents by :meth:`LevelLayout.of_level`.

Placement: a vertex is filed in the chunk whose extent holds it, at every
level (0.9.2 files coarse metavertices so too).  Two rules compute that, as
:class:`~zvf.format.grid.Grid` does: *by bin*, ``floor(p / bin) //
bins_per_chunk``, for point clouds without object ids, whose fragments are
the bins of the chunk (level 0's bins at every level: a coarse point level
keeps them); *by chunk*, ``floor(p / chunk)``, for everything else.  They
differ only on a seam, by one chunk, where two float divisions round apart.
Readers cannot always tell which rule a writer used, so a box's candidate
chunks are the union of both ranges, and the validator accepts a vertex filed
under either rule (exactly the vertices a box query finds).

A coarse level's own bin (``level_bin_shape``: the coarsening bin, kept by
0.9.2 only as the NGFF translation) says how finely the level was thinned,
not where its vertices are filed; it may be larger than the chunk.  Pure
numpy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import FormatError
from . import metadata as md
from .grid import CellCodes, Grid


def _whole_ratio(big: tuple[float, ...], small: tuple[float, ...]) -> tuple[int, ...] | None:
    """``big / small`` per axis when every ratio is a whole number >= 1, else None."""
    out = []
    for b, s in zip(big, small):
        q = b / s
        if not math.isfinite(q) or q > 2**31 or round(q) < 1 or abs(q - round(q)) > 1e-9 * max(1.0, q):
            return None
        out.append(round(q))
    return tuple(out)


@dataclass(frozen=True)
class LevelLayout:
    """Chunk grid, bins and placement rule of one level (see the module docstring)."""

    index: int
    chunk_shape: tuple[float, ...]  # the level's chunk edge
    chunk_scale: tuple[int, ...]  # chunk edge / the root's chunk edge
    bin_shape: tuple[float, ...] | None  # the bins tiling a chunk; None: one bin per chunk
    level_bin_shape: tuple[float, ...]  # the coarsening bin (level 0: the root's bin)
    by_bin: bool  # the writers' rule: by bin (point clouds without ids), else by chunk
    fragments_are_bins: bool  # fragment f of a chunk holds exactly its bin f's rows, every bin listed
    origin: tuple[int, ...] | None = None  # absolute spatial chunk of cell 0 (None: a level being written)
    shape: tuple[int, ...] | None = None  # the spatial grid's extent, in chunks
    category_axis: bool = False  # keys lead with a categorical axis (``chunk_by_attribute``)

    # ------------------------------------------------------------- construction
    @classmethod
    def of_level(cls, root: md.RootMeta, meta: md.LevelMeta, vertices: md.ArrayMeta | None = None, *,
                 key: str | None = None) -> LevelLayout:
        """The layout of level ``meta.level`` from its documents (``vertices``: its array, for the grid).

        The tiling bins are level 0's (its own ``bin_shape``, the root's ``base_bin_shape``, else its
        chunk) at every level of a point cloud without ids; a coarse level's ``bin_shape`` is its
        coarsening bin.
        """
        index = meta.level
        key = key or f"{index}/zarr.json"
        chunk = tuple(float(c) for c in root.level_chunk_shape(meta, key=key))
        scale = _whole_ratio(chunk, root.chunk_shape)
        assert scale is not None  # level_chunk_shape refuses a chunk that does not nest
        points = root.geometry_type == "point_cloud" and "object_index" not in meta.arrays_present
        if index == 0 or meta.parent_level is None:
            tile = meta.bin_shape if meta.bin_shape is not None else root.base_bin_shape
            level_bin = tile if tile is not None else root.bin_shape
        else:
            tile = root.bin_shape if points else None  # level 0's bin (its chunk when it has no bins)
            level_bin = meta.bin_shape if meta.bin_shape is not None else root.level_bin_shape(index)
        if tile is not None:
            tile = tuple(float(b) for b in tile)
            if len(tile) != len(chunk) or _whole_ratio(chunk, tile) is None:
                raise FormatError(f"{key}: bin_shape {list(tile)} does not divide the level's chunk_shape "
                                  f"{list(chunk)} a whole number of times per axis")
        categories = meta.chunk_attribute_name is not None
        origin = shape = None
        if vertices is not None:
            skip = 1 if categories else 0
            origin = tuple(int(o) for o in vertices.grid_origin[skip:])
            shape = tuple(int(s) for s in vertices.shape[skip:])
        return cls(index, chunk, scale, tile, tuple(float(b) for b in level_bin), points,
                   points and meta.fragments_tile, origin, shape, categories)

    @classmethod
    def for_points(cls, index: int, chunk_shape: Sequence[float], root_chunk_shape: Sequence[float],
                   bin_shape: Sequence[float]) -> LevelLayout:
        """A point-cloud level without ids being written: chunks ``chunk_shape``, tiled by ``bin_shape``."""
        chunk = tuple(float(c) for c in chunk_shape)
        scale = _whole_ratio(chunk, tuple(float(c) for c in root_chunk_shape))
        tile = tuple(float(b) for b in bin_shape)
        if scale is None or _whole_ratio(chunk, tile) is None:
            raise FormatError(f"level {index}: chunk_shape {list(chunk)} does not nest in {list(root_chunk_shape)} "
                              f"or is not tiled by bins {list(tile)}")
        return cls(index, chunk, scale, tile, tile, True, True)

    @classmethod
    def for_objects(cls, index: int, chunk_shape: Sequence[float],
                    root_chunk_shape: Sequence[float]) -> LevelLayout:
        """An object level (or points with ids) being written: filed by chunk, one bin per chunk."""
        chunk = tuple(float(c) for c in chunk_shape)
        scale = _whole_ratio(chunk, tuple(float(c) for c in root_chunk_shape))
        if scale is None:
            raise FormatError(f"level {index}: chunk_shape {list(chunk)} does not nest in {list(root_chunk_shape)}")
        return cls(index, chunk, scale, None, chunk, False, False)

    @classmethod
    def for_writing(cls, chunk_shape: ArrayLike, bin_shape: ArrayLike | None, *, with_ids: bool,
                    ndim: int | None = None) -> LevelLayout:
        """Level 0 of a store being written, from the caller's shapes (checked: InvalidArgumentError naming
        them).  Points without ids are filed by bin, everything else by chunk (:meth:`filed`)."""
        grid = Grid.create(chunk_shape, bin_shape, ndim=ndim)
        return cls(0, grid.chunk_shape, (1,) * grid.ndim, grid.bin_shape, grid.effective_bin_shape,
                   not with_ids, not with_ids)

    def filed(self, *, with_ids: bool) -> LevelLayout:
        """This layout under the placement rule of rows with (or without) object ids."""
        return replace(self, by_bin=not with_ids, fragments_are_bins=not with_ids)

    # ------------------------------------------------------------- geometry
    @cached_property
    def grid(self) -> Grid:
        """The chunk/bin arithmetic (shared with the writers)."""
        return Grid(self.chunk_shape, self.bin_shape)

    @property
    def ndim(self) -> int:
        return len(self.chunk_shape)

    @property
    def key_ndim(self) -> int:
        """Rank of chunk coordinates: ndim, plus one for a categorical axis."""
        return self.ndim + self.category_axis

    @property
    def bins_per_chunk(self) -> tuple[int, ...]:
        return self.grid.bins_per_chunk

    @property
    def bins_in_chunk(self) -> int:
        return self.grid.bins_in_chunk

    def spatial(self, coords: np.ndarray) -> np.ndarray:
        """The spatial columns of (K, key_ndim) chunk coordinates (drops a leading category axis)."""
        return coords[:, self.key_ndim - self.ndim:]

    # ------------------------------------------------------------- placement
    def chunk_of(self, points: ArrayLike) -> NDArray[np.int64]:
        """Absolute chunk of each (N, ndim) stored position, by the writers' rule."""
        return self.grid.chunk_of(points, by_bin=self.by_bin)

    def bin_of(self, points: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(chunk by bin, flat bin index in the chunk) of each stored position."""
        return self.grid.bin_of(points)

    def cell_codes(self, points: ArrayLike) -> CellCodes:
        """Sortable chunk (then bin, when filed by bin) codes of positions, as the writers sort rows."""
        return self.grid.cell_codes(points, by_bin=self.by_bin)

    def extent(self, lo: ArrayLike, hi: ArrayLike) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(origin, shape) of the chunk array covering bounds [lo, hi] (inclusive), by the writers' rule."""
        return self.grid.layout(lo, hi, by_bin=self.by_bin)

    def misfiled(self, chunk: ArrayLike, points: ArrayLike) -> NDArray[np.bool_]:
        """Rows of ``points`` (finite ones) that neither rule files under spatial ``chunk``: a box
        query would miss them."""
        p = np.asarray(points)
        c = np.asarray(chunk, dtype=np.int64)
        finite = np.all(np.isfinite(p), axis=1) if p.dtype.kind == "f" else np.ones(len(p), bool)
        q = p[finite]
        bad = np.any(self.grid.chunk_of(q) != c, axis=1) & np.any(self.grid.chunk_of(q, by_bin=True) != c, axis=1)
        out = np.zeros(len(p), dtype=bool)
        out[finite] = bad
        return out

    def settle(self, points: np.ndarray, first: ArrayLike, last: ArrayLike) -> tuple[np.ndarray, NDArray[np.int64]]:
        """Positions moved by the fewest ulps that make this layout file each in a chunk of
        ``[first, last]``, and those chunks.  A centroid of rows in one bin, rounded to float32, can
        land on the bin's far face, which is the next chunk's; the chunk it must go to (the builder's
        block owns it) then holds a position a box query finds there."""
        p = np.array(points, copy=True)
        lo = np.asarray(first, dtype=np.int64)
        hi = np.asarray(last, dtype=np.int64)
        chunks = self.chunk_of(p)
        for _ in range(64):
            low, high = chunks < lo, chunks > hi
            low &= np.isfinite(p)
            high &= np.isfinite(p)
            if not (low.any() or high.any()):
                return p, chunks
            p[low] = np.nextafter(p[low], np.asarray(np.inf, p.dtype))
            p[high] = np.nextafter(p[high], np.asarray(-np.inf, p.dtype))
            chunks = self.chunk_of(p)
        raise FormatError(f"level {self.index}: positions {p[np.any((chunks < lo) | (chunks > hi), axis=1)][:3]} "
                          f"do not lie in chunks {lo.tolist()}..{hi.tolist()} of edge {list(self.chunk_shape)}")

    # ------------------------------------------------------------- closed boxes
    def chunk_range(self, lo: ArrayLike, hi: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Inclusive spatial chunk range a closed box can hold vertices of, under either rule."""
        return self.grid.chunk_range(np.asarray(lo, np.float64), np.asarray(hi, np.float64))

    def in_box(self, chunks: np.ndarray, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.bool_]:
        """Which (K, key_ndim) chunks a closed box can hold vertices of."""
        if not len(chunks):
            return np.zeros(0, dtype=bool)
        clo, chi = self.chunk_range(lo, hi)
        spatial = self.spatial(chunks)
        mask: NDArray[np.bool_] = np.all((spatial >= clo) & (spatial <= chi), axis=1)
        return mask

    def bins_touching(self, chunks: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.bool_]:
        """(K, bins_in_chunk) mask: the bins of each spatial chunk a closed box can hold points of."""
        return self.grid.bins_touching(chunks, lo, hi)

    def bins_covered(self, chunks: ArrayLike, lo: ArrayLike, hi: ArrayLike,
                     dtype: np.typing.DTypeLike) -> NDArray[np.bool_]:
        """(K, bins_in_chunk) mask: the bins of each spatial chunk whose every position of ``dtype`` the
        closed box holds.  A bin holds ``[edge, next edge)`` as ``floor(p / bin)`` places rows: rows
        narrower than float64 sit so far from the float64 rounding of the division that the bin holds
        exactly the values from its edge to the last one below the next; float64 (and integer) rows
        within an ulp of an edge may round either way, so the box must reach two ulps past both."""
        bs = np.asarray(self.grid.effective_bin_shape)
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        local = np.indices(self.bins_per_chunk).reshape(self.ndim, -1).T
        absolute = np.asarray(chunks, dtype=np.int64)[:, None, :] * bpc + local[None, :, :]
        vdt = np.dtype(dtype)
        first, top = absolute * bs, (absolute + 1) * bs
        if vdt.kind == "f" and vdt.itemsize < 8:
            near = top.astype(vdt)  # the dtype's nearest to the next edge: the bin's last value when below it
            last = np.where(near.astype(np.float64) < top, near, np.nextafter(near, np.asarray(-np.inf, vdt)))
            last = last.astype(np.float64)
        else:
            down, up = np.float64(-np.inf), np.float64(np.inf)
            first = np.nextafter(np.nextafter(first, down), down)
            last = np.nextafter(np.nextafter(top, up), up)
        covered: NDArray[np.bool_] = np.all((first >= np.asarray(lo)) & (last <= np.asarray(hi)), axis=2)
        return covered
