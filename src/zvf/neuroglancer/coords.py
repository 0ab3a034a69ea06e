"""Coordinates as Neuroglancer stores them: float32, optionally shifted by an offset (pure numpy).

Every precomputed format holds float32 positions.  Near the origin that is
finer than any real data, but at UTM-sized coordinates (4.1e6) a float32 step
is 0.25-0.5: an ``offset`` subtracted (in float64) before the cast keeps the
precision, and the viewer state adds it back in the layer's transform.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError, PrecisionWarning


def resolve_offset(offset: str | Sequence[float] | None, lower: np.ndarray, upper: np.ndarray,
                   chunk_shape: Sequence[float] | np.ndarray) -> np.ndarray:
    """The offset subtracted from every position: ``None``/"none" -> 0; "auto" -> the bounds' lower corner
    rounded down to the chunk grid when that shrinks the largest coordinate magnitude at least four times
    (so far from the origin relative to the data's size), else 0; or the given numbers."""
    ndim = len(lower)
    if offset is None or (isinstance(offset, str) and offset == "none"):
        return np.zeros(ndim)
    if isinstance(offset, str) and offset == "auto":
        lo, hi = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        cs = np.asarray(chunk_shape, np.float64)
        corner = np.floor(lo / cs) * cs
        far = np.abs(np.r_[lo, hi]).max()
        near = np.abs(np.r_[lo - corner, hi - corner]).max()
        return corner if far >= 4 * max(near, np.finfo(np.float64).tiny) else np.zeros(ndim)
    if isinstance(offset, str):
        try:
            offset = [float(v) for v in offset.split(",")]
        except ValueError:
            raise InvalidArgumentError(f"offset must be 'auto', 'none' or {ndim} numbers x,y,..., "
                                       f"got {offset!r}") from None
    values = np.asarray(offset, dtype=np.float64).reshape(-1)
    if len(values) != ndim or not np.all(np.isfinite(values)):
        raise InvalidArgumentError(f"offset must have {ndim} finite numbers (one per axis), got {list(values)}")
    return values


def shifted(positions: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``positions - offset`` as float32, subtracted in float64 (no shift: a plain cast)."""
    if not offset.any():
        return np.asarray(positions, dtype=np.float32)
    moved: np.ndarray = (np.asarray(positions, dtype=np.float64) - offset).astype(np.float32)
    return moved


def resolution(positions: np.ndarray) -> float:
    """The data's resolution: the smallest gap between distinct values on any axis (of a sample)."""
    gaps = []
    for column in np.asarray(positions, dtype=np.float64).T:
        values = np.unique(column[:: max(1, len(column) // tuning().neuroglancer_resolution_sample)])
        if len(values) > 1:
            gaps.append(float(np.diff(values).min()))
    return min(gaps) if gaps else np.inf


def float32_loss(positions: np.ndarray, offset: np.ndarray) -> float:
    """The largest error storing ``positions`` as float32 after subtracting ``offset`` makes."""
    if not len(positions):
        return 0.0
    exact = np.asarray(positions, dtype=np.float64) - offset
    return float(np.abs(exact.astype(np.float32).astype(np.float64) - exact).max())


def check_precision(positions: np.ndarray, offset: np.ndarray, where: str) -> bool:
    """Warn (once per caller: returns True when it did) if float32 loses more than half the data's resolution."""
    loss = float32_loss(positions, offset)
    if loss == 0.0:
        return False
    res = resolution(positions)
    if loss <= res / 2:
        return False
    warnings.warn(f"{where}: float32 positions are off by up to {loss:.3g} while the data resolves {res:.3g}; "
                  f"pass --offset auto (or offset='auto') to keep the precision", PrecisionWarning, stacklevel=3)
    return True
