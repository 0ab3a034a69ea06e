"""zvf on Dask: ingest, export and pyramids as plan -> map -> commit (``pip install 'zvf[dask]'``).

The public entry point is :mod:`zvf.dask`.  Tasks receive a store *spec*
(URL + storage options), never a live store object, so they run in any
worker process (spawn, forkserver) or on any machine that reaches the store.
Importing ``zvf`` never imports this package, dask or distributed.
"""

from __future__ import annotations

from .export import export, to_dask
from .ingest import write_points
from .objects import write_graph, write_lines, write_mesh, write_polylines
from .pyramid import build_pyramid

__all__ = ["build_pyramid", "export", "to_dask", "write_graph", "write_lines", "write_mesh", "write_points",
           "write_polylines"]
