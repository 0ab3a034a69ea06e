"""zvf: read and write Zarr Vectors (ZVF) stores directly on object storage.

``import zvf`` stays cheap (serverless cold starts pay for every import):
the sync facade's functions are resolved lazily on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_SYNC_NAMES = (
    "open",
    "write_points",
    "write_polylines",
    "write_lines",
    "write_graph",
    "write_mesh",
    "validate",
    "Dataset",
)

__all__ = ["__version__", "aio", "errors", *_SYNC_NAMES]


def __getattr__(name: str):
    if name in _SYNC_NAMES:
        from .api import sync

        return getattr(sync, name)
    if name in ("aio", "errors"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'zvf' has no attribute {name!r}")
