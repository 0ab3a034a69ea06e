"""The async API: ``await zvf.aio.open(...)``, ``await zvf.aio.write_points(...)``, ...

Everything zvf does is defined here first; ``zvf`` itself is the blocking
facade over these functions.
"""

from .api.aio import (  # noqa: F401 - re-exported public API
    AsyncDataset,
    Selection,
    open,
    validate,
    write_graph,
    write_lines,
    write_mesh,
    write_points,
    write_polylines,
)
