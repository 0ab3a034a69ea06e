"""Draco-encoded vertex cells (``vertices`` with ``encoding: "draco"``).

zarr-vectors 0.9.2 (``write_mesh(..., encoding="draco")``) stores each chunk
of a 3-D mesh as one Draco bitstream inside the usual vlen-bytes frame: a
mesh of the chunk's vertices and its intra-chunk faces (chunk-local
indices), or a point cloud when the chunk has no intra-chunk face.  The
chunk's fragment index is a single range.  The store records no
quantization: the bitstream carries it (default 11 bits over the chunk's
largest extent).

What Draco does to the data, and so what a reader can recover:

* vertices come back reordered (and, in mesh mode, those no face uses are
  dropped); positions are within half a quantization step of the input;
* intra-chunk faces come back with the decoded vertex order, winding kept;
* cross-chunk faces and vertex attributes were stored in the pre-Draco
  vertex order and cannot be matched to decoded vertices.

DracoPy is an optional dependency (``pip install 'zvf[draco]'``), imported
on the first Draco cell only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..errors import FormatError, MissingDependencyError

if TYPE_CHECKING:
    from .types import BytesLike

ENCODING = "draco"
EXTRA = "pip install 'zvf[draco]'"


def _dracopy() -> Any:
    try:
        import DracoPy
    except ImportError:
        raise MissingDependencyError(
            f"this store holds Draco-encoded vertices (encoding 'draco'); reading them needs DracoPy: {EXTRA}"
        ) from None
    return DracoPy


def decode_cell(payload: BytesLike, *, key: str) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """(positions (n, 3) float32, faces (k, 3) int64 chunk-local) of one Draco cell payload."""
    dracopy = _dracopy()
    try:
        obj = dracopy.decode(bytes(payload))
    except Exception as exc:
        raise FormatError(f"{key}: not a valid Draco bitstream ({exc})") from None
    points = np.asarray(obj.points, dtype=np.float32).reshape(-1, 3)
    faces = np.asarray(getattr(obj, "faces", np.zeros(0)), dtype=np.int64).reshape(-1, 3)
    if faces.size and (faces.min() < 0 or faces.max() >= len(points)):
        raise FormatError(f"{key}: Draco faces index past the chunk's {len(points)} vertices")
    return points, faces
