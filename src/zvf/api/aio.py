"""Implementation of ``zvf.aio``: the async entry points, re-exported with their real signatures."""

from __future__ import annotations

from ..read.dataset import AsyncDataset
from ..read.selection import Selection
from ..validation import validate

# Writers load on first use: a reader (a serverless cold start) never pays for them.
_WRITERS = {"write_points": "points", "write_polylines": "objects", "write_lines": "objects",
            "write_graph": "objects", "write_mesh": "objects"}


def __getattr__(name: str):
    if name in _WRITERS:
        import importlib

        return getattr(importlib.import_module(f"..write.{_WRITERS[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
