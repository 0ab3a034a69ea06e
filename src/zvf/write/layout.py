"""Choosing a chunk grid from the data: ``chunk_shape="auto"`` and the too-many-cells guard.

Every cell of a spatial array is one object in the store, so the chunk size
sets both the request count of a full read and the bytes a box query drags
in.  The target (see docs/LIFECYCLE.md) is ``layout_target_points`` vertices per
occupied chunk: ~0.8 MB of float32 xyz, large enough that a cell's transfer
time dominates its request latency on S3-class storage (~20-50 ms first
byte, ~50-100 MB/s per stream) and small enough that a box query reads
little outside its box.  Bins aim at ``layout_target_bin_points`` vertices, the
granularity at which a ranged read beats fetching the whole cell.

Points are rarely spread evenly over their bounding box.  Given a sample of
them (:class:`PointSample`), the chooser sizes chunks by where the points
are: the chunk a typical vertex lies in should hold about the target, as
long as each smaller edge at least halves that chunk and the occupied
chunks keep ``layout_min_chunk_points`` vertices on average (clustered data
in a mostly empty box would otherwise buy small query reads with a full
read of many thousand near-empty chunks).

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
        keys = _chunk_keys(self.positions, edge)
        _, cell, count = np.unique(keys, axis=_unique_axis(keys), return_inverse=True, return_counts=True)
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


def _chunk_keys(positions: np.ndarray, shape: float | np.ndarray,
                bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Each row's chunk of ``shape`` (grid anchored at 0) as one number (exact in float64) or, on grids too
    large for that, as a row of cell coordinates: for ``np.unique`` (:func:`_unique_axis`).  ``bounds``:
    the rows' (min, max) per axis when known."""
    lo, hi = (positions.min(axis=0), positions.max(axis=0)) if bounds is None else bounds
    first = np.floor(lo / shape)
    spans = np.floor(hi / shape) - first + 1
    cells = np.floor(positions / shape) - first
    if np.prod(spans) >= 2**52:
        return cells
    key = cells[:, 0].copy()
    for axis in range(1, cells.shape[1]):
        key = key * spans[axis] + cells[:, axis]
    return key


def _unique_axis(keys: np.ndarray) -> int | None:
    return None if keys.ndim == 1 else 0


@dataclass(frozen=True)
class PointSample:
    """Vertices drawn at random from ``n``: where the chooser measures chunk populations (a fixed seed, so
    the same input gets the same layout)."""

    positions: np.ndarray  # (m, ndim) float64
    n: int
    bounds: tuple[np.ndarray, np.ndarray]  # the sample's min and max per axis

    @classmethod
    def of(cls, positions: ArrayLike, n: int | None = None, limit: int | None = None) -> PointSample:
        """Up to ``limit`` rows (default: the ``layout_sample_points`` setting) drawn without replacement from
        ``positions``: every vertex, or an even sample of ``n`` of them."""
        limit = tuning().layout_sample_points if limit is None else limit
        pos = np.asarray(positions)
        if pos.ndim != 2:
            raise InvalidArgumentError(f"a point sample needs (rows, ndim) positions, got shape {pos.shape}")
        n = len(pos) if n is None else n
        if len(pos) > limit:
            pos = pos[np.sort(np.random.default_rng(0).choice(len(pos), limit, replace=False, shuffle=False))]
        pos = pos.astype(np.float64)
        bounds = (pos.min(axis=0), pos.max(axis=0)) if len(pos) else (np.zeros(pos.shape[1]),) * 2
        return cls(pos, max(n, len(pos)), bounds)

    def __len__(self) -> int:
        return len(self.positions)

    def census(self, shape: float | np.ndarray) -> tuple[float, float]:
        """(vertices in the chunk of ``shape`` the median vertex lies in, occupied chunks), for all ``n`` vertices.

        A sampled row whose chunk holds ``c`` sampled rows stands for ``1 + (c - 1) (n - 1) / (m - 1)``
        vertices there (itself and the others, scaled up: unbiased).  Chunks the sample missed are
        estimated from those it saw once and twice (Chao1, with the term for sampling without
        replacement that makes it exact when the sample is everything)."""
        m = len(self)
        if m == 0:
            return 0.0, 0.0
        keys = _chunk_keys(self.positions, shape, self.bounds)
        count = np.sort(np.unique(keys, axis=_unique_axis(keys), return_counts=True)[1])
        rows = np.cumsum(count)  # sampled rows in chunks at most as full as each
        c = float(count[np.searchsorted(rows, m / 2)])
        typical = 1 + (c - 1) * ((self.n - 1) / (m - 1) if m > 1 else 0.0)
        once, twice = int((count == 1).sum()), int((count == 2).sum())
        fraction = m / self.n
        unseen = 0.0
        if once and fraction < 1:
            unseen = once * (once - 1 if twice == 0 else once) / (
                2 * max(twice, 1) * m / max(m - 1, 1) + fraction / (1 - fraction) * once)
        return typical, min(float(len(count)) + unseen, float(self.n))


class PointSampler:
    """A :class:`PointSample` of a stream of batches: each row kept with probability ``rate`` (seeded), the rate
    halved and the kept rows thinned alike whenever more than twice ``limit`` are kept; memory: the sample."""

    def __init__(self, limit: int | None = None):
        self.limit = tuning().layout_sample_points if limit is None else limit
        self.rate = 1.0
        self.seen = 0
        self.kept: list[np.ndarray] = []
        self._rng = np.random.default_rng(0)

    def add(self, positions: np.ndarray) -> None:
        self.seen += len(positions)
        self.kept.append(np.asarray(positions, dtype=np.float64)[self._rng.random(len(positions)) < self.rate])
        while sum(map(len, self.kept)) > 2 * self.limit:
            self.rate /= 2
            self.kept = [rows[self._rng.random(len(rows)) < 0.5] for rows in self.kept]

    def sample(self) -> PointSample | None:
        if not self.seen:
            return None
        return PointSample.of(np.concatenate(self.kept), self.seen, self.limit)


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
                       points: PointSample | None = None, objects: ObjectSample | None = None,
                       row_bytes: int | None = None) -> list[float]:
    """A cubic chunk edge for ``n`` vertices spread over the box ``[lo, hi]``.

    From the extent alone it assumes a uniform spread: the chunk count is
    ``n / target`` and the edge is ``(volume / count) ** (1 / d)`` over the
    axes wider than one chunk (a flat or degenerate axis gets one chunk and
    is left out of the volume), rounded to the 1-2-5 series.  Clustered data
    fills fewer chunks, each fuller; the guard in :func:`check_cells` catches
    the opposite extreme.

    With ``points`` (a sample of the vertices), the edge then steps down the
    series to where the chunk the median vertex lies in holds closest to
    ``target`` vertices, where each step kept at least halves that chunk and
    occupied chunks keep ``layout_min_chunk_points`` vertices on average
    (:func:`_for_point_density`).

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
    if points is not None and len(points):
        nice = _for_point_density(nice, points, target)
    if objects is not None and len(objects):
        nice = _for_object_reads(nice, lo64, hi64, n, objects, 4 * extent.size if row_bytes is None else row_bytes)
    return [float(nice)] * extent.size


def _for_point_density(edge: float, points: PointSample, target: int) -> float:
    """The edge of the 1-2-5 series from ``edge`` down at which the chunk the median sampled vertex lies in
    holds closest to ``target`` vertices (log scale), moving only to an edge that divides the vertices of
    that chunk by ``layout_density_gain`` or more.  It goes down while that chunk holds more than
    ``target``, at most ``layout_chooser_steps`` steps, and never to an edge whose occupied chunks average
    under ``layout_min_chunk_points`` vertices.  Why: each step makes up to 15 times as many chunks, each a
    PUT and a request of a full read; a cluster too dense for any grid (a few metres across) would
    otherwise buy a few percent off a small read with that, and a dense cluster in a sparse background
    would ask for thousands of near-empty chunks."""
    settings = tuning()
    best, least, kept = edge, math.inf, math.inf
    for step in range(settings.layout_chooser_steps):
        typical, occupied = points.census(edge)
        if step and points.n / occupied < settings.layout_min_chunk_points:
            break
        misfit = abs(math.log(max(typical, 1.0) / target))
        if misfit < least and typical * settings.layout_density_gain <= kept:
            best, least, kept = edge, misfit, typical
        if typical <= target:
            break
        edge = _below(edge)
    return best


def _for_object_reads(edge: float, lo: np.ndarray, hi: np.ndarray, n: int, objects: ObjectSample,
                      row_bytes: int) -> float:
    """The largest edge of the 1-2-5 series from ``edge`` down (at most ``layout_chooser_steps`` steps,
    chunks of at least ``layout_min_chunk_points`` vertices) at which reading a sampled object fetches at
    most ``layout_object_read_bytes`` of other rows; else the one fetching least (the largest of equals)."""
    best, least = edge, math.inf
    settings = tuning()
    for _ in range(settings.layout_chooser_steps):
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


def point_bin_shape(chunk_shape: Sequence[float], points: PointSample) -> list[float] | None:
    """Bins from where the points are: the power of two per axis at which the bin the median sampled vertex
    lies in holds closest to ``layout_target_bin_points`` (log scale), within ``layout_max_point_bins`` bins a
    chunk (None: one bin per chunk).

    Why not from the chunk's count alone (:func:`choose_bin_shape`): that assumes the vertices fill the
    chunk's volume.  A surface (terrain, a scanned facade) fills a few bins of each column, so bins sized that
    way hold several times the target and a small box reads several times its rows."""
    settings = tuning()
    cs = np.asarray(chunk_shape, dtype=np.float64)
    best, least, k = 1, math.inf, 1
    while k ** len(cs) <= settings.layout_max_point_bins:
        typical = points.census(cs / k)[0]
        misfit = abs(math.log(max(typical, 1.0) / settings.layout_target_bin_points))
        if misfit < least:
            best, least = k, misfit
        if typical <= settings.layout_target_bin_points:
            break
        k *= 2
    return None if best == 1 else [float(c) / best for c in cs]


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
            hi: ArrayLike, n: int, *, points: PointSample | None = None, objects: ObjectSample | None = None,
            row_bytes: int | None = None) -> tuple[Sequence[float], Sequence[float] | None]:
    """Concrete (chunk_shape, bin_shape) for a writer: ``"auto"`` replaced from the data's extent and count,
    and where the points are (``points``) or, for objects, from ``objects`` (see :func:`choose_chunk_shape`;
    bins: :func:`point_bin_shape` from the sample, :func:`choose_bin_shape` from the extent, :func:`object_bin_shape`).

    Shapes given explicitly come back unchanged (ints stay ints, as 0.9.2 records them).
    """
    check_words(chunk_shape, bin_shape)
    if isinstance(chunk_shape, str):
        chunk_shape = choose_chunk_shape(lo, hi, n, points=points, objects=objects, row_bytes=row_bytes)
    if isinstance(bin_shape, str):
        if objects is not None and len(objects):
            bin_shape = object_bin_shape(chunk_shape, objects)
        elif points is not None and len(points):
            bin_shape = point_bin_shape(chunk_shape, points)
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
