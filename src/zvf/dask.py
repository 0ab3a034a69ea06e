"""``zvf.dask``: Dask engine for bulk ingest, export and pyramids (see docs/DISTRIBUTED.md).

Needs the ``dask`` extra (``pip install 'zvf[dask]'``); ``import zvf`` never imports it.
"""

from __future__ import annotations

from .distributed import (
    build_pyramid,
    export,
    to_dask,
    write_graph,
    write_lines,
    write_mesh,
    write_points,
    write_polylines,
)

__all__ = ["build_pyramid", "export", "to_dask", "write_graph", "write_lines", "write_mesh", "write_points",
           "write_polylines"]
