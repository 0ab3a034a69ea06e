"""Choosing a chunk grid from the data: ``chunk_shape="auto"`` and the too-many-cells guard.

Every cell of a spatial array is one object in the store, so the chunk size
sets both the request count of a full read and the bytes a box query drags
in.  The target (see docs/LIFECYCLE.md) is ``layout_target_points`` vertices per
occupied chunk: ~0.8 MB of float32 xyz, large enough that a cell's transfer
time dominates its request latency on S3-class storage (~20-50 ms first
byte, ~50-100 MB/s per stream) and small enough that a box query reads
little outside its box.  Bins aim at ``layout_target_bin_points`` vertices, the
granularity at which a ranged read beats fetching the whole cell.

Objects are read whole chunk by chunk: an object read fetches every chunk
the object passes through, whole, other objects' rows included.  Given a
sample of the objects (:class:`ObjectSample`), the chooser makes chunks
smaller until reading a typical object fetches at most ``layout_object_read_bytes``
beyond its own rows (never below ``layout_min_chunk_points`` vertices a chunk), and
``bin_shape="auto"`` gives objects bins about ``1 / layout_object_bins`` of their
size, which is what a pyramid coarsens them by.  Those targets are :mod:`zvf.config` settings (an
object read's chunks are fetched whole: 1 MiB is ~15 ms at 75 MB/s, about one request's latency).

Pure numpy, no I/O.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ..config import tuning
from ..errors import InvalidArgumentError, LayoutWarning


@dataclass(frozen=True)
class ObjectSample:
    """Some objects' vertices, ``positions[offsets[k]:offsets[k + 1]]`` for object k: what the
    chooser measures object reads and sizes on (objects spread evenly over the input)."""

    positions: np.ndarray  # (m, ndim) float64
    offsets: np.ndarray  # (k + 1,) int64

    @classmethod
    def of(cls, positions: ArrayLike, lengths: ArrayLike, limit: int | None = None) -> ObjectSample:
        """Up to ``limit`` objects (default: the ``layout_sample_objects`` setting) evenly spaced among those of
        ``lengths`` rows each (in order) in ``positions``."""
        limit = tuning().layout_sample_objects if limit is None else limit
        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        keep = np.unique(np.linspace(0, len(lengths) - 1, min(limit, len(lengths))).round().astype(np.int64)) \
            if len(lengths) else np.zeros(0, np.int64)
        keep = keep[lengths[keep] > 0]
        rows = np.concatenate([np.arange(starts[k], starts[k + 1]) for k in keep]) if len(keep) else \
            np.zeros(0, np.int64)
        pos = np.asarray(positions)
        return cls(pos[rows].astype(np.float64).reshape(len(rows), pos.shape[-1]),
                   np.concatenate([[0], np.cumsum(lengths[keep])]).astype(np.int64))

    @classmethod
    def of_ids(cls, positions: ArrayLike, object_ids: ArrayLike, limit: int | None = None) -> ObjectSample:
        """:meth:`of` for vertices owned by ``object_ids`` (one per row, in any order)."""
        order = np.argsort(np.asarray(object_ids), kind="stable")
        _, lengths = np.unique(np.asarray(object_ids)[order], return_counts=True)
        return cls.of(np.asarray(positions)[order], lengths, limit)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self)), np.diff(self.offsets))

    def read_overhead(self, edge: float, n: int) -> float:
        """Mean rows of *other* objects that reading one object fetches with chunks of ``edge``, when
        ``n`` vertices in all are spread like the sample's (its rows scaled up by ``n / rows``)."""
        m = len(self.positions)
        if not len(self):
            return 0.0
        cells = np.floor(self.positions / edge)
        cells -= cells.min(axis=0)
        spans = cells.max(axis=0) + 1
        if np.prod(spans) < 2**52:  # each row's chunk as one number, exact in float64: a 1-D unique
            key = np.zeros(m)
            for axis in range(cells.shape[1]):
                key = key * spans[axis] + cells[:, axis]
            _, cell, count = np.unique(key, return_inverse=True, return_counts=True)
        else:
            _, cell, count = np.unique(cells, axis=0, return_inverse=True, return_counts=True)
        span = len(count)
        pairs, own = np.unique(self._owner() * span + cell.reshape(-1), return_counts=True)
        others = count[pairs % span] - own
        return float(others.sum()) * (n / m) / len(self)

    def typical_size(self) -> float:
        """The median object's largest extent along an axis (0 when every object is a point)."""
        if not len(self):
            return 0.0
        lo = np.minimum.reduceat(self.positions, self.offsets[:-1], axis=0)
        hi = np.maximum.reduceat(self.positions, self.offsets[:-1], axis=0)
        return float(np.median((hi - lo).max(axis=1)))


class ObjectSampler:
    """An :class:`ObjectSample` of a stream of objects: every ``stride``-th object kept, the stride doubled
    (and the sample halved) whenever it would pass twice ``limit`` objects; memory: the sample."""

    def __init__(self, limit: int | None = None):
        self.limit = tuning().layout_sample_objects if limit is None else limit
        self.stride = 1
        self.seen = 0
        self.numbers: list[int] = []  # the kept objects' numbers in the stream
        self.kept: list[np.ndarray] = []  # and their vertices

    def add(self, objects: Sequence[np.ndarray]) -> None:
        for obj in objects:
            if self.seen % self.stride == 0 and len(obj):
                self.numbers.append(self.seen)
                self.kept.append(np.asarray(obj, dtype=np.float64))
                if len(self.kept) > 2 * self.limit:
                    self.stride *= 2
                    pairs = [(k, o) for k, o in zip(self.numbers, self.kept) if k % self.stride == 0]
                    self.numbers, self.kept = [k for k, _ in pairs], [o for _, o in pairs]
            self.seen += 1

    def sample(self) -> ObjectSample | None:
        if not self.kept:
            return None
        return ObjectSample(np.concatenate(self.kept),
                            np.concatenate([[0], np.cumsum([len(o) for o in self.kept])]).astype(np.int64))


def _nice(x: float) -> float:
    """The 1-2-5 series value closest to ``x`` on a log scale (readable, and stable across runs)."""
    e = math.floor(math.log10(x))
    cands = [m * 10.0 ** k for k in (e - 1, e, e + 1) for m in (1.0, 2.0, 5.0)]
    return min(cands, key=lambda c: abs(math.log(c / x)))


def _below(x: float) -> float:
    """The 1-2-5 series value just below ``x`` (itself one)."""
    e = math.floor(math.log10(x) + 1e-9)
    return max(c for c in (m * 10.0 ** k for k in (e - 1, e) for m in (1.0, 2.0, 5.0)) if c < x * (1 - 1e-9))


def _made(lo: np.ndarray, hi: np.ndarray, edge: float) -> float:
    """Chunks of ``edge`` the grid anchored at 0 spans over ``[lo, hi]``."""
    return float(np.prod(np.floor(hi / edge) - np.floor(lo / edge) + 1))


def choose_chunk_shape(lo: ArrayLike, hi: ArrayLike, n: int, *, target: int | None = None,
                       objects: ObjectSample | None = None, row_bytes: int | None = None) -> list[float]:
    """A cubic chunk edge for ``n`` vertices spread over the box ``[lo, hi]``.

    Assumes a uniform spread: the chunk count is ``n / target`` and the edge
    is ``(volume / count) ** (1 / d)`` over the axes wider than one chunk (a
    flat or degenerate axis gets one chunk and is left out of the volume),
    rounded to the 1-2-5 series.  Clustered data fills fewer chunks, each
    fuller; the guard in :func:`check_cells` catches the opposite extreme.

    With ``objects`` (a sample of the objects), the edge then steps down the
    series while reading a sampled object fetches more than
    ``layout_object_read_bytes`` of other objects' rows (``row_bytes`` a vertex row
    with its attributes; default float32 positions) and chunks keep at least
    ``layout_min_chunk_points`` vertices.  ``target`` default: ``layout_target_points``.
    """
    target = tuning().layout_target_points if target is None else target
    extent = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
    if extent.ndim != 1 or extent.size == 0 or not np.all(np.isfinite(extent)) or np.any(extent < 0):
        raise InvalidArgumentError(f"chunk_shape='auto' needs finite bounds lo <= hi, got {lo!r}, {hi!r}")
    count = max(1.0, n / target)
    active = extent > 0
    edge = 0.0
    while active.any():
        edge = (np.prod(extent[active]) / count) ** (1.0 / active.sum())
        thin = active & (extent < edge)
        if not thin.any():
            break
        active &= ~thin
    if edge <= 0:  # every axis degenerate: one chunk whatever the size
        scale = float(np.max(np.abs(np.concatenate([np.asarray(lo, float), np.asarray(hi, float)]))))
        edge = max(scale, 1.0)
    # The grid is anchored at 0 (chunk = floor(p / edge)), so count the chunks each
    # 1-2-5 candidate really makes over [lo, hi] and keep the one closest to the target
    # (of those making as many, the one nearest the uniform estimate: data around 0 is
    # cut at 0 by every edge, and a larger one only makes emptier chunks and coarser bins).
    lo64, hi64 = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    def misfit(c: float) -> float:
        return abs(math.log(_made(lo64, hi64, c) / count))

    nice = min((_nice(edge * f) for f in (0.3, 0.5, 1.0, 2.0, 3.0)),
               key=lambda c: (misfit(c), abs(math.log(c / edge)), -c))
    if objects is not None and len(objects):
        nice = _for_object_reads(nice, lo64, hi64, n, objects, 4 * extent.size if row_bytes is None else row_bytes)
    return [float(nice)] * extent.size


def _for_object_reads(edge: float, lo: np.ndarray, hi: np.ndarray, n: int, objects: ObjectSample,
                      row_bytes: int) -> float:
    """The largest edge of the 1-2-5 series from ``edge`` down (at most ``layout_object_steps`` steps,
    chunks of at least ``layout_min_chunk_points`` vertices) at which reading a sampled object fetches at
    most ``layout_object_read_bytes`` of other rows; else the one fetching least (the largest of equals)."""
    best, least = edge, math.inf
    settings = tuning()
    for _ in range(settings.layout_object_steps):
        cost = objects.read_overhead(edge, n) * row_bytes
        if cost <= settings.layout_object_read_bytes:
            return edge
        if cost < least:
            best, least = edge, cost
        edge = _below(edge)
        if n / min(_made(lo, hi, edge), n) < settings.layout_min_chunk_points:
            break
    return best


def choose_bin_shape(chunk_shape: Sequence[float], points_per_chunk: float, *,
                     target: int | None = None) -> list[float] | None:
    """Bins that tile ``chunk_shape`` with about ``target`` vertices each (default: the
    ``layout_target_bin_points`` setting; None: one bin per chunk).

    The same whole number of bins per axis, a power of two, so bins nest
    when a pyramid doubles the chunk.
    """
    target = tuning().layout_target_bin_points if target is None else target
    cs = [float(c) for c in chunk_shape]
    per_axis = (max(points_per_chunk, 1.0) / target) ** (1.0 / len(cs))
    k = 2 ** max(0, round(math.log2(per_axis))) if per_axis >= 1 else 1
    return None if k == 1 else [c / k for c in cs]


def object_bin_shape(chunk_shape: Sequence[float], objects: ObjectSample) -> list[float] | None:
    """Bins about ``1 / layout_object_bins`` of a typical object's size (None: one bin per chunk).

    A pyramid level keeps one vertex per object and bin of the level below's
    bin times its factor, so these bins keep a typical object ``layout_object_bins /
    factor`` vertices a level up.  A power of two per axis (bins nest), at most
    ``layout_max_object_bins`` a chunk.
    """
    cs = [float(c) for c in chunk_shape]
    size = objects.typical_size()
    if size <= 0:
        return None
    k = 2 ** max(0, round(math.log2(min(cs) * tuning().layout_object_bins / size)))
    k = min(k, 2 ** (int(math.log2(tuning().layout_max_object_bins)) // len(cs)))
    return None if k == 1 else [c / k for c in cs]


def check_words(chunk_shape: object, bin_shape: object) -> None:
    """The only word a shape may be is ``"auto"``."""
    if isinstance(chunk_shape, str) and chunk_shape != "auto":
        raise InvalidArgumentError(f"chunk_shape must be numbers or 'auto', got {chunk_shape!r}")
    if isinstance(bin_shape, str) and bin_shape != "auto":
        raise InvalidArgumentError(f"bin_shape must be numbers, None or 'auto', got {bin_shape!r}")


def resolve(chunk_shape: Sequence[float] | str, bin_shape: Sequence[float] | str | None, lo: ArrayLike,
            hi: ArrayLike, n: int, *, objects: ObjectSample | None = None,
            row_bytes: int | None = None) -> tuple[Sequence[float], Sequence[float] | None]:
    """Concrete (chunk_shape, bin_shape) for a writer: ``"auto"`` replaced from the data's extent and count
    (and, for objects, from ``objects``: see :func:`choose_chunk_shape`, :func:`object_bin_shape`).

    Shapes given explicitly come back unchanged (ints stay ints, as 0.9.2 records them).
    """
    check_words(chunk_shape, bin_shape)
    if isinstance(chunk_shape, str):
        chunk_shape = choose_chunk_shape(lo, hi, n, objects=objects, row_bytes=row_bytes)
    if isinstance(bin_shape, str):
        if objects is not None and len(objects):
            bin_shape = object_bin_shape(chunk_shape, objects)
        else:
            grid = np.floor(np.asarray(hi, float) / np.asarray(chunk_shape, float)) - np.floor(
                np.asarray(lo, float) / np.asarray(chunk_shape, float)) + 1
            bin_shape = choose_bin_shape(chunk_shape, n / float(np.prod(grid)))
    return chunk_shape, bin_shape


def check_cells(n: int, occupied: int, chunk_shape: object, lo: ArrayLike, hi: ArrayLike) -> None:
    """Warn (``LayoutWarning``) when ``n`` vertices fill ``occupied`` chunks that are many and nearly empty;
    refuse (InvalidArgumentError) past ``layout_max_sparse_cells`` of them (settings: a layout is "absurd" past
    ``layout_sparse_cells`` cells holding under ``layout_sparse_points`` vertices on average, every cell one
    PUT per array).  Writers call it before any upload.

    Silence the warning with ``warnings.filterwarnings("ignore", category=LayoutWarning)``
    when such a layout is intended.
    """
    settings = tuning()
    if occupied <= settings.layout_sparse_cells or n >= occupied * settings.layout_sparse_points:
        return
    what = (f"chunk_shape={chunk_shape!r} puts {n:,} vertices in {occupied:,} chunks ({n / occupied:.1f} per chunk), "
            f"one stored object per chunk and array; chunk_shape='auto' would choose {choose_chunk_shape(lo, hi, n)}")
    if occupied > settings.layout_max_sparse_cells:
        raise InvalidArgumentError(f"{what}: refused (more than {settings.layout_max_sparse_cells:,} chunks "
                                   f"averaging under {settings.layout_sparse_points} vertices)")
    warnings.warn(what, LayoutWarning, stacklevel=4)
