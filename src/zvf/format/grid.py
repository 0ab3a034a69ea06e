"""The spatial grid: chunk coordinates, bins and closed-box selection.

Arithmetic mirrors what zarr-vectors 0.9.2 writes, so a point lands in the
same chunk and bin whether zvf or the reference placed it.  Two placements
exist, and everything that maps coordinates to chunks goes through
:meth:`Grid.chunk_of` so writer, planner and validator agree:

* by chunk: ``floor(p / chunk_shape)`` -- objects, and points with ids;
* by bin: ``floor(p / bin_shape) // bins_per_chunk`` -- point clouds whose
  fragments tile bins.  On a seam the two can differ by one chunk (with
  chunk 3.3 and bin 1.1, z = 3.3 is bin 2, chunk 0, but ``3.3 / 3.3`` = 1).

Both divide the *stored* value (float32 stays float32 until the division)
by the float64 shape, in float64, as 0.9.2 does.  A chunk's cells live at
``coords - origin`` where ``origin`` is the chunk of ``bounds_lo`` under the
same placement; a bin's flat index is C-order over the chunk's bins.  Pure
numpy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InvalidArgumentError


def _vec(values: ArrayLike, name: str, ndim: int | None = None) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{name} must be a sequence of numbers, got {values!r}") from exc
    if ndim is not None and arr.shape[0] != ndim:
        raise InvalidArgumentError(f"{name} has {arr.shape[0]} values, expected {ndim}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgumentError(f"{name} must be finite, got {values!r}")
    return arr


#: Rows placed per block: the float64 temporaries of one block stay in cache.
_BLOCK = 1 << 16


def _floor_div(points: ArrayLike, shape: ArrayLike) -> NDArray[np.int64]:
    """``floor(p / shape)`` as int64, the stored values widened to float64 (exact) one block at a time,
    so the division rounds like 0.9.2's without a float64 copy of the whole input."""
    p = np.asarray(points)
    sh = np.asarray(shape, dtype=np.float64)
    out = np.empty(p.shape, np.int64)
    for s in range(0, p.shape[0], _BLOCK):
        blk = p[s:s + _BLOCK].astype(np.float64)
        np.divide(blk, sh, out=blk)
        np.floor(blk, out=blk)
        out[s:s + _BLOCK] = blk
    return out


#: Integers below this are exact in float64: floor, products and sums of them stay exact.
_EXACT = 1 << 52


def extremes(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-axis min and max of (N, ndim) rows, one column at a time (much faster than ``min(axis=0)``)."""
    cols = [p[..., a] for a in range(p.shape[-1])]
    return np.array([c.min() for c in cols], dtype=p.dtype), np.array([c.max() for c in cols], dtype=p.dtype)


def box_cells(coords: np.ndarray, lo: np.ndarray, span: np.ndarray) -> np.ndarray:
    """C-order cell number of each (N, ndim) integer row in the box of ``span`` cells from ``lo`` (rows
    outside the box give meaningless numbers: callers mask them)."""
    cell: np.ndarray = (coords[:, 0] - lo[0]).astype(np.int64)
    for d in range(1, coords.shape[1]):
        cell *= span[d]
        cell += coords[:, d] - lo[d]
    return cell


def dense_ids(coords: np.ndarray, max_cells: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct rows of an (N >= 1, ndim) integer table in C order and each row's position among
    them, through a dense table over the rows' bounding box instead of a sort (``np.unique(axis=0)``'s
    answer, several times sooner); None when that box has more than ``max_cells`` cells."""
    lo, hi = extremes(coords)
    n_cells = float(np.prod(hi.astype(np.float64) - lo.astype(np.float64) + 1))  # in floats: no int64 overflow
    if n_cells > max_cells:
        return None
    span = hi.astype(np.int64) - lo + 1
    cell = box_cells(coords, lo, span)
    table = np.zeros(int(n_cells), dtype=np.int64)
    table[cell] = 1
    present = np.flatnonzero(table)
    table[present] = np.arange(len(present))
    rows = np.stack(np.unravel_index(present, tuple(span.tolist())), axis=1) + lo
    return rows.astype(np.int64), table[cell]


def _exact(p: np.ndarray, shape: ArrayLike, ext: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
    """Whether every ``floor(p / shape)`` is below 2**52 in magnitude (so float64 integer arithmetic is exact).

    ``ext``: the per-axis extremes of ``p`` when the caller has them already (one pass over the rows saved).
    """
    if p.size == 0:
        return True
    lo, hi = ext if ext is not None else extremes(p.reshape(-1, p.shape[-1]))
    top = np.maximum(np.abs(lo.astype(np.float64)), np.abs(hi.astype(np.float64))) / np.asarray(shape, np.float64)
    return bool(np.all(top < _EXACT - 1))


def _blocks(
    p: np.ndarray, shape: ArrayLike, bins_per_chunk: ArrayLike
) -> Iterator[tuple[slice, NDArray[np.float64], NDArray[np.float64] | None]]:
    """Per block of rows: (rows, chunk, local bin or None) as float64 integers.

    ``floor(p / shape)`` exactly as :func:`_floor_div`; the chunk and local
    bin derive from it in float64, exact while :func:`_exact` holds.
    """
    sh = np.asarray(shape, dtype=np.float64)
    bpc = np.asarray(bins_per_chunk, dtype=np.float64)
    split = bool(np.any(bpc > 1))
    buf = np.empty((min(p.shape[0], _BLOCK), *p.shape[1:]), np.float64)  # reused: no allocation per block
    for s in range(0, p.shape[0], _BLOCK):
        src = p[s:s + _BLOCK]
        bins = buf[:src.shape[0]]
        np.divide(src, sh, out=bins)  # the stored values widened to float64 (exact), then divided in float64
        np.floor(bins, out=bins)
        rows = slice(s, s + bins.shape[0])
        if not split:
            yield rows, bins, None
            continue
        chunk = bins / bpc
        np.floor(chunk, out=chunk)
        bins -= chunk * bpc
        yield rows, chunk, bins


def _weighted(
    cols: NDArray[np.float64], weights: NDArray[np.float64], out: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """``cols @ weights`` (over the last axis) one column at a time, without BLAS: a float ``@`` wakes
    OpenBLAS's threads, which then spin on the other cores.  Exact on the integer values here (every
    partial sum is below 2**52 and non-negative), so the same as ``@``."""
    if out is None:
        out = np.empty(cols.shape[:-1], np.float64)
    np.multiply(cols[..., 0], weights[0], out=out)
    for j in range(1, cols.shape[-1]):
        out += cols[..., j] * weights[j]
    return out


@dataclass(frozen=True)
class CellCodes:
    """Per-point sort codes from :meth:`Grid.cell_codes`: ``code = chunk number * per_chunk + flat bin``.

    A chunk number is the C-order index in the box ``[first, first + span)``,
    or (``table`` set) a row of ``table``, the occupied chunks in C order.
    """

    codes: NDArray[np.int64]
    per_chunk: int
    first: NDArray[np.int64] | None
    span: NDArray[np.int64] | None
    table: NDArray[np.int64] | None = None

    def chunk_coords(self, numbers: ArrayLike) -> NDArray[np.int64]:
        """(M, ndim) absolute chunk coordinates of chunk numbers."""
        idx = np.asarray(numbers, dtype=np.int64)
        if self.table is not None:
            return self.table[idx]
        assert self.first is not None and self.span is not None  # set whenever table is not
        cols = np.unravel_index(idx, tuple(int(s) for s in self.span))
        out = np.empty((*idx.shape, len(cols)), np.int64)
        for d, col in enumerate(cols):  # offset straight into the output column: no stacked temporary
            np.add(col, self.first[d], out=out[..., d])
        return out


@dataclass(frozen=True)
class Grid:
    """Chunk and bin geometry of one level."""

    chunk_shape: tuple[float, ...]
    bin_shape: tuple[float, ...] | None = None

    @classmethod
    def create(cls, chunk_shape: ArrayLike, bin_shape: ArrayLike | None = None, *, ndim: int | None = None) -> Grid:
        """Validate user-supplied shapes (positive, bins tiling chunks)."""
        cs = _vec(chunk_shape, "chunk_shape", ndim)
        if cs.size == 0 or np.any(cs <= 0):
            raise InvalidArgumentError(f"chunk_shape must be positive, got {tuple(cs)}")
        if bin_shape is None:
            return cls(tuple(float(c) for c in cs), None)
        bs = _vec(bin_shape, "bin_shape", cs.size)
        if np.any(bs <= 0):
            raise InvalidArgumentError(f"bin_shape must be positive, got {tuple(bs)}")
        ratio = cs / bs
        if np.any(np.abs(ratio - np.round(ratio)) > 1e-9 * np.maximum(ratio, 1)):
            raise InvalidArgumentError(
                f"bin_shape {tuple(bs)} must divide chunk_shape {tuple(cs)} a whole number of times per axis"
            )
        return cls(tuple(float(c) for c in cs), tuple(float(b) for b in bs))

    @property
    def ndim(self) -> int:
        return len(self.chunk_shape)

    @property
    def bins_per_chunk(self) -> tuple[int, ...]:
        if self.bin_shape is None:
            return (1,) * self.ndim
        return tuple(round(c / b) for c, b in zip(self.chunk_shape, self.bin_shape))

    @property
    def bins_in_chunk(self) -> int:
        return int(np.prod(self.bins_per_chunk))

    @property
    def effective_bin_shape(self) -> tuple[float, ...]:
        return self.bin_shape if self.bin_shape is not None else self.chunk_shape

    # ------------------------------------------------------------- placement
    def chunk_of(self, points: ArrayLike, *, by_bin: bool = False) -> NDArray[np.int64]:
        """Absolute chunk coordinates (N, ndim) int64 of stored positions.

        ``by_bin``: the chunk of the point's bin (point clouds whose fragments
        tile bins); otherwise ``floor(p / chunk_shape)``.
        """
        if by_bin and self.bin_shape is not None:
            return self.bin_of(points)[0]
        return _floor_div(points, self.chunk_shape)

    def bin_of(self, points: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Chunk coords and flat bin index of each point, derived from absolute bins.

        The chunk is the floor-division of the absolute bin, so a point that
        rounds onto a bin edge lands in the same chunk as its bin.
        """
        p = np.asarray(points)
        shape = self.effective_bin_shape
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        if not _exact(p, shape):  # bins beyond 2**52: integer arithmetic
            bins = _floor_div(p, shape)
            chunks = np.floor_divide(bins, bpc)
            return chunks, self.flat_bin(bins - chunks * bpc)
        chunks = np.empty(p.shape, np.int64)
        flat = np.zeros(p.shape[:-1], np.int64)
        strides = self._bin_strides().astype(np.float64)
        for rows, chunk, local in _blocks(p, shape, bpc):
            chunks[rows] = chunk
            if local is not None:
                flat[rows] = _weighted(local, strides)
        return chunks, flat

    def cell_codes(self, points: ArrayLike, *, by_bin: bool) -> CellCodes:
        """One sortable int64 per point: its chunk's C-order number, then its flat bin.

        Same placement as :meth:`chunk_of` / :meth:`bin_of` (``by_bin`` False:
        one code per chunk), computed a block of rows at a time in float64
        on exact integers, so no temporary of the whole input is made.
        Chunks are numbered in the box between the lowest and highest chunk
        (placement is monotonic, so the per-axis extremes bound it); a box
        too large to number exactly falls back to ranks of the occupied chunks.
        """
        p = np.asarray(points)
        n, ndim = p.shape
        per_chunk = self.bins_in_chunk if by_bin else 1
        if n == 0:
            return CellCodes(np.zeros(0, np.int64), per_chunk, np.zeros(ndim, np.int64), np.ones(ndim, np.int64))
        ext = extremes(p)
        first, last = self.chunk_of(np.stack(ext), by_bin=by_bin)
        span = last - first + 1
        shape = self.effective_bin_shape if by_bin else self.chunk_shape
        if math.prod(int(s) for s in span) * per_chunk >= _EXACT or not _exact(p, shape, ext):
            return self._ranked_codes(p, by_bin)
        cstrides = np.cumprod(np.concatenate(([1], span[::-1][:-1])))[::-1].astype(np.float64)
        bstrides = self._bin_strides().astype(np.float64)
        codes = np.empty(n, np.int64)
        code = np.empty(min(n, _BLOCK), np.float64)  # one block's codes, reused
        bin_code = np.empty_like(code) if by_bin else code
        for rows, chunk, local in _blocks(p, shape, self.bins_per_chunk if by_bin else (1,) * ndim):
            chunk -= first  # small offsets in the box: every product and sum below stays exact
            out = code[:chunk.shape[0]]
            _weighted(chunk, cstrides, out)
            if local is not None:
                out *= per_chunk
                _weighted(local, bstrides, bin_code[:out.shape[0]])
                out += bin_code[:out.shape[0]]
            codes[rows] = out
        return CellCodes(codes, per_chunk, first, span)

    def _ranked_codes(self, p: np.ndarray, by_bin: bool) -> CellCodes:
        """Codes over a sparse, huge chunk box: chunks numbered by rank (C order) among the occupied ones."""
        if by_bin and self.bin_shape is not None:
            chunks, flat = self.bin_of(p)
        else:
            chunks, flat = self.chunk_of(p), np.zeros(len(p), np.int64)
        table, rank = np.unique(chunks, axis=0, return_inverse=True)
        per_chunk = self.bins_in_chunk if by_bin else 1
        return CellCodes(rank.reshape(-1).astype(np.int64) * per_chunk + flat, per_chunk, None, None, table)

    def _bin_strides(self) -> NDArray[np.int64]:
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        return np.cumprod(np.concatenate(([1], bpc[::-1][:-1])))[::-1]

    def flat_bin(self, local: ArrayLike) -> NDArray[np.int64]:
        """C-order flat index of local bin coordinates (..., ndim)."""
        return np.asarray(local, dtype=np.int64) @ self._bin_strides()

    # ------------------------------------------------------------- grid shape
    def layout(self, lo: ArrayLike, hi: ArrayLike, *, by_bin: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(origin, shape) of the chunk array covering bounds [lo, hi] (inclusive).

        Placement is monotonic, so the chunks of the two corners bound every
        stored point's chunk.
        """
        corners = self.chunk_of(np.asarray([lo, hi], dtype=np.float64).reshape(2, self.ndim), by_bin=by_bin)
        origin, top = corners
        shape = np.maximum(1, top - origin + 1)
        return tuple(int(o) for o in origin), tuple(int(s) for s in shape)

    # ------------------------------------------------------------- selection
    def chunk_range(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inclusive absolute chunk range a closed box can touch, under either placement.

        A reader does not always know which placement a writer used (0.9.2
        switches on object ids); the union costs at most one extra chunk
        row, and only when a box edge sits on a seam.
        """
        corners = np.asarray([lo, hi], dtype=np.float64).reshape(2, self.ndim)
        by_chunk = self.chunk_of(corners)
        by_bin = self.chunk_of(corners, by_bin=True)
        return np.minimum(by_chunk[0], by_bin[0]), np.maximum(by_chunk[1], by_bin[1])

    def bins_touching(self, chunks: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.bool_]:
        """(K, bins_in_chunk) mask: which bins of each chunk a closed box can hold points of."""
        bs = np.asarray(self.effective_bin_shape)
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        blo = np.floor(np.asarray(lo, dtype=np.float64) / bs).astype(np.int64)
        bhi = np.floor(np.asarray(hi, dtype=np.float64) / bs).astype(np.int64)
        local = np.indices(self.bins_per_chunk).reshape(self.ndim, -1).T  # (B, ndim), C order
        absolute = np.asarray(chunks, dtype=np.int64)[:, None, :] * bpc + local[None, :, :]
        mask: NDArray[np.bool_] = np.all((absolute >= blo) & (absolute <= bhi), axis=2)
        return mask


def row_positions(haystack: NDArray[np.int64], needles: NDArray[np.int64]) -> NDArray[np.intp]:
    """Position in ``haystack`` (unique rows of chunk coordinates) of each row of ``needles`` (all present)."""
    order = np.lexsort(haystack.T[::-1])
    dt = np.dtype((np.void, 8 * haystack.shape[1]))

    def packed(a: NDArray[np.int64]) -> NDArray[np.void]:
        return np.ascontiguousarray((a + (1 << 62)).astype(">u8")).view(dt).ravel()

    found = np.searchsorted(packed(haystack[order]), packed(needles))
    return order[np.minimum(found, len(order) - 1)]


def check_bbox(bbox: tuple[ArrayLike, ArrayLike], ndim: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validate a ``(lo, hi)`` box against the store's dimension."""
    try:
        raw_lo, raw_hi = bbox
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"bbox must be a pair (lo, hi), got {bbox!r}") from exc
    lo = _vec(raw_lo, "bbox lo", None)
    hi = _vec(raw_hi, "bbox hi", None)
    if lo.size != ndim or hi.size != ndim:
        raise InvalidArgumentError(
            f"bbox has {lo.size}-D lo and {hi.size}-D hi but the store is {ndim}-D"
        )
    if np.any(lo > hi):
        axes = np.nonzero(lo > hi)[0].tolist()
        raise InvalidArgumentError(f"bbox lo > hi on axis {axes}: lo={lo.tolist()} hi={hi.tolist()}")
    return lo, hi


def inside(points: ArrayLike, lo: np.ndarray, hi: np.ndarray) -> NDArray[np.bool_]:
    """Closed-box membership: lo <= p <= hi on every axis."""
    p = np.asarray(points)
    mask: NDArray[np.bool_] = np.all((p >= lo) & (p <= hi), axis=1)
    return mask
