"""The async API: ``await zvf.aio.open(...)``, ``await zvf.aio.write_points(...)``, ...

Everything zvf does is defined here first; ``zvf`` itself is the blocking
facade over these functions.  Writers load on first use.
"""

from .api import aio as _impl
from .api.aio import AsyncDataset, Selection, open, validate  # noqa: F401 - re-exported public API

__all__ = ["AsyncDataset", "Selection", "open", "validate", *_impl._WRITERS]  # writers resolve lazily below


def __getattr__(name: str):
    return getattr(_impl, name)
