"""The async API: ``await zvf.aio.open(...)``, ``await zvf.aio.write_points(...)``, ...

Everything zvf does is defined here first; ``zvf`` itself is the blocking
facade over these functions.  Writers and the validator load on first use.
"""

from typing import TYPE_CHECKING, Any

from .api import aio as _impl
from .api.aio import AsyncDataset, AsyncQuery, Selection, open

if TYPE_CHECKING:  # resolved by __getattr__ at run time
    from .api.aio import build_pyramid as build_pyramid
    from .api.aio import convert as convert
    from .api.aio import rechunk as rechunk
    from .api.aio import validate as validate
    from .api.aio import write_graph as write_graph
    from .api.aio import write_lines as write_lines
    from .api.aio import write_mesh as write_mesh
    from .api.aio import write_points as write_points
    from .api.aio import write_polylines as write_polylines

# the writers and validate resolve lazily below
__all__ = ["AsyncDataset", "AsyncQuery", "Selection", "open", *_impl._LAZY]


def __getattr__(name: str) -> Any:
    return getattr(_impl, name)
