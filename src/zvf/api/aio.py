"""Implementation of ``zvf.aio``: the async entry points, re-exported with their real signatures."""

from __future__ import annotations

from ..read.dataset import AsyncDataset
from ..read.selection import Selection
from ..validation import validate
from ..write.objects import write_graph, write_lines, write_mesh, write_polylines
from ..write.points import write_points

__all__ = [
    "AsyncDataset",
    "Selection",
    "open",
    "validate",
    "write_graph",
    "write_lines",
    "write_mesh",
    "write_points",
    "write_polylines",
]


async def open(target, *, mode: str = "r", storage_options=None) -> AsyncDataset:  # noqa: A001
    """Open a ZVF store (local path, file://, memory://, s3://, gs://, az://, http(s)://)."""
    return await AsyncDataset.open(target, mode=mode, storage_options=storage_options)
