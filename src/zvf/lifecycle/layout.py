"""Choosing a chunk grid from the data: ``chunk_shape="auto"`` and the too-many-cells guard.

Every cell of a spatial array is one object in the store, so the chunk size
sets both the request count of a full read and the bytes a box query drags
in.  The target (see docs/LIFECYCLE.md) is ``TARGET_POINTS`` vertices per
occupied chunk: ~0.8 MB of float32 xyz, large enough that a cell's transfer
time dominates its request latency on S3-class storage (~20-50 ms first
byte, ~50-100 MB/s per stream) and small enough that a box query reads
little outside its box.  Bins aim at ``TARGET_BIN_POINTS`` vertices, the
granularity at which a ranged read beats fetching the whole cell.

Pure numpy, no I/O.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..errors import InvalidArgumentError

TARGET_POINTS = 65536
TARGET_BIN_POINTS = 2048
# A layout is "absurd" past this many occupied cells when they hold fewer than
# SPARSE_POINTS vertices on average: every cell costs one PUT per array.
SPARSE_CELLS = 4096
SPARSE_POINTS = 16


class LayoutWarning(UserWarning):
    """A given chunk_shape makes far more (and far smaller) cells than the data needs."""


def _nice(x: float) -> float:
    """The 1-2-5 series value closest to ``x`` on a log scale (readable, and stable across runs)."""
    e = math.floor(math.log10(x))
    cands = [m * 10.0 ** k for k in (e - 1, e, e + 1) for m in (1.0, 2.0, 5.0)]
    return min(cands, key=lambda c: abs(math.log(c / x)))


def choose_chunk_shape(lo, hi, n: int, *, target: int = TARGET_POINTS) -> list[float]:
    """A cubic chunk edge for ``n`` vertices spread over the box ``[lo, hi]``.

    Assumes a uniform spread: the chunk count is ``n / target`` and the edge
    is ``(volume / count) ** (1 / d)`` over the axes wider than one chunk (a
    flat or degenerate axis gets one chunk and is left out of the volume),
    rounded to the 1-2-5 series.  Clustered data fills fewer chunks, each
    fuller; the guard in :func:`check_cells` catches the opposite extreme.
    """
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
    # 1-2-5 candidate really makes over [lo, hi] and keep the one closest to the target.
    lo64, hi64 = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    def misfit(c: float) -> float:
        made = np.prod(np.floor(hi64 / c) - np.floor(lo64 / c) + 1)
        return abs(math.log(made / count))

    nice = min((_nice(edge * f) for f in (0.3, 0.5, 1.0, 2.0, 3.0)), key=lambda c: (misfit(c), -c))
    return [float(nice)] * extent.size


def choose_bin_shape(chunk_shape, points_per_chunk: float, *, target: int = TARGET_BIN_POINTS) -> list[float] | None:
    """Bins that tile ``chunk_shape`` with about ``target`` vertices each (None: one bin per chunk).

    The same whole number of bins per axis, a power of two, so bins nest
    when a pyramid doubles the chunk.
    """
    cs = [float(c) for c in chunk_shape]
    per_axis = (max(points_per_chunk, 1.0) / target) ** (1.0 / len(cs))
    k = 2 ** max(0, round(math.log2(per_axis))) if per_axis >= 1 else 1
    return None if k == 1 else [c / k for c in cs]


def resolve(chunk_shape, bin_shape, lo, hi, n: int):
    """Concrete (chunk_shape, bin_shape) for a writer: ``"auto"`` replaced from the data's extent and count.

    Shapes given explicitly come back unchanged (ints stay ints, as 0.9.2 records them).
    """
    if isinstance(chunk_shape, str):
        if chunk_shape != "auto":
            raise InvalidArgumentError(f"chunk_shape must be numbers or 'auto', got {chunk_shape!r}")
        chunk_shape = choose_chunk_shape(lo, hi, n)
    if isinstance(bin_shape, str):
        if bin_shape != "auto":
            raise InvalidArgumentError(f"bin_shape must be numbers, None or 'auto', got {bin_shape!r}")
        grid = np.floor(np.asarray(hi, float) / np.asarray(chunk_shape, float)) - np.floor(
            np.asarray(lo, float) / np.asarray(chunk_shape, float)) + 1
        bin_shape = choose_bin_shape(chunk_shape, n / float(np.prod(grid)))
    return chunk_shape, bin_shape


def check_cells(n: int, occupied: int, chunk_shape, lo, hi) -> None:
    """Warn (``LayoutWarning``) when ``n`` vertices fill ``occupied`` chunks that are many and nearly empty.

    Silence it with ``warnings.filterwarnings("ignore", category=LayoutWarning)``
    when such a layout is intended.
    """
    if occupied > SPARSE_CELLS and n < occupied * SPARSE_POINTS:
        warnings.warn(
            f"chunk_shape={chunk_shape!r} puts {n} vertices in {occupied} chunks ({n / occupied:.1f} per chunk), "
            f"one stored object per chunk and array; chunk_shape='auto' would choose "
            f"{choose_chunk_shape(lo, hi, n)}", LayoutWarning, stacklevel=4)
