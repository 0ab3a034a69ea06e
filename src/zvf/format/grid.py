"""The spatial grid: chunk coordinates, bins and closed-box selection.

Arithmetic mirrors what zarr-vectors 0.9.2 writes, so a point lands in the
same chunk and bin whether zvf or the reference placed it: coordinates are
``floor(p / shape)`` in float64 on absolute positions, a chunk's cells live at
``coords - origin`` where ``origin = floor(bounds_lo / chunk_shape)``, and a
bin's flat index is C-order over the chunk's bins.  Pure numpy, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError


def _vec(values, name: str, ndim: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{name} must be a sequence of numbers, got {values!r}") from exc
    if ndim is not None and arr.shape[0] != ndim:
        raise InvalidArgumentError(f"{name} has {arr.shape[0]} values, expected {ndim}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgumentError(f"{name} must be finite, got {values!r}")
    return arr


@dataclass(frozen=True)
class Grid:
    """Chunk and bin geometry of one level."""

    chunk_shape: tuple[float, ...]
    bin_shape: tuple[float, ...] | None = None

    @classmethod
    def create(cls, chunk_shape, bin_shape=None, *, ndim: int | None = None) -> Grid:
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
        return tuple(int(round(c / b)) for c, b in zip(self.chunk_shape, self.bin_shape))

    @property
    def bins_in_chunk(self) -> int:
        return int(np.prod(self.bins_per_chunk))

    @property
    def effective_bin_shape(self) -> tuple[float, ...]:
        return self.bin_shape if self.bin_shape is not None else self.chunk_shape

    # ------------------------------------------------------------- placement
    def chunk_of(self, points: np.ndarray) -> np.ndarray:
        """Absolute chunk coordinates ``floor(p / chunk_shape)`` (N, ndim) int64."""
        return np.floor(np.asarray(points, dtype=np.float64) / np.asarray(self.chunk_shape)).astype(np.int64)

    def bin_of(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chunk coords and flat bin index of each point, derived from absolute bins.

        The chunk is the floor-division of the absolute bin, so a point that
        rounds onto a bin edge lands in the same chunk as its bin.
        """
        bins = np.floor(np.asarray(points, dtype=np.float64) / np.asarray(self.effective_bin_shape)).astype(np.int64)
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        chunks = np.floor_divide(bins, bpc)
        local = bins - chunks * bpc
        return chunks, self.flat_bin(local)

    def flat_bin(self, local: np.ndarray) -> np.ndarray:
        """C-order flat index of local bin coordinates (..., ndim)."""
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        strides = np.cumprod(np.concatenate(([1], bpc[::-1][:-1])))[::-1]
        return np.asarray(local, dtype=np.int64) @ strides

    # ------------------------------------------------------------- grid shape
    def layout(self, lo, hi) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(origin, shape) of the chunk array covering bounds [lo, hi]."""
        cs = np.asarray(self.chunk_shape)
        origin = np.floor(np.asarray(lo, dtype=np.float64) / cs).astype(np.int64)
        top = np.floor(np.asarray(hi, dtype=np.float64) / cs).astype(np.int64)
        shape = np.maximum(1, top - origin + 1)
        return tuple(int(o) for o in origin), tuple(int(s) for s in shape)

    # ------------------------------------------------------------- selection
    def chunk_range(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inclusive absolute chunk range a closed box can touch."""
        cs = np.asarray(self.chunk_shape)
        return np.floor(lo / cs).astype(np.int64), np.floor(hi / cs).astype(np.int64)

    def bins_touching(self, chunks: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """(K, bins_in_chunk) mask: which bins of each chunk a closed box can hold points of."""
        bs = np.asarray(self.effective_bin_shape)
        bpc = np.asarray(self.bins_per_chunk, dtype=np.int64)
        blo = np.floor(lo / bs).astype(np.int64)
        bhi = np.floor(hi / bs).astype(np.int64)
        local = np.indices(self.bins_per_chunk).reshape(self.ndim, -1).T  # (B, ndim), C order
        absolute = np.asarray(chunks, dtype=np.int64)[:, None, :] * bpc + local[None, :, :]
        return np.all((absolute >= blo) & (absolute <= bhi), axis=2)


def check_bbox(bbox, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a ``(lo, hi)`` box against the store's dimension."""
    try:
        lo, hi = bbox
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"bbox must be a pair (lo, hi), got {bbox!r}") from exc
    lo = _vec(lo, "bbox lo", None)
    hi = _vec(hi, "bbox hi", None)
    if lo.size != ndim or hi.size != ndim:
        raise InvalidArgumentError(
            f"bbox has {lo.size}-D lo and {hi.size}-D hi but the store is {ndim}-D"
        )
    if np.any(lo > hi):
        axes = np.nonzero(lo > hi)[0].tolist()
        raise InvalidArgumentError(f"bbox lo > hi on axis {axes}: lo={lo.tolist()} hi={hi.tolist()}")
    return lo, hi


def inside(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Closed-box membership: lo <= p <= hi on every axis."""
    p = np.asarray(points)
    return np.all((p >= lo) & (p <= hi), axis=1)
