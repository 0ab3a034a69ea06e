"""zvf: read and write Zarr Vectors (ZVF) stores directly on object storage.

Reading::

    import zvf
    with zvf.open("s3://bucket/cells.zarrvectors", storage_options={"region": "eu-west-1"}) as ds:
        sel = ds.query(([0, 0, 0], [100, 100, 100]))   # closed box -> Selection
        obj = ds.read_object(42)                       # one object, connectivity included
        few = ds.select(near=([50, 50, 50], 10), where={"label": 3}).read()
        ds.info(); ds.stats.snapshot()                 # summary; requests and bytes so far

API (each documented: ``help(zvf.<name>)``):

* ``open(target, *, mode, storage_options)`` -> :class:`Dataset`: ``query``, ``select``,
  ``read_all``, ``read_object(s)``, ``iter_chunks``, ``iter_objects``, ``object_attribute``,
  ``groups``, ``info``, ``stats``, ``append_*`` (``mode="a"``).
* writers: ``write_points``, ``write_polylines`` (streamlines), ``write_lines``,
  ``write_graph`` (graphs, skeletons), ``write_mesh`` -> :class:`WriteSummary`; their common
  keywords (``bin_shape``, ``compression``, ``dtype``, ``overwrite``...) are :class:`WriteOptions`.
* store operations: ``validate``, ``build_pyramid``, ``rechunk``, ``convert`` (LAS, PLY,
  OBJ/STL, SWC, TRK/TCK/TRX, CSV, Parquet, GraphML) -> :class:`ConvertSummary`; the formats' own
  options are :class:`ConvertOptions`, its ``progress`` is told a :class:`ConvertProgress`.
* ``timeout(seconds)``: a ``with`` block whose blocking calls are cancelled past the deadline
  (``zvf.errors.CallTimeoutError``, a ``TimeoutError``).
* :class:`Selection` (what reads return), :class:`Query` (what ``select`` returns; its keywords are
  :class:`SelectArgs`), :class:`StorageOptions` (``storage_options`` keys),
  ``zvf.errors`` (exception types), ``zvf.aio`` (the same API as coroutines), ``zvf.config`` (tuning
  settings: ``with zvf.config.tuned(name=value):`` changes them for the calls in the block).

Logging: ``logging.getLogger("zvf")``; at DEBUG every store request is one line
(key, byte range, status, bytes, milliseconds).  The ``zvf`` command
(``zvf --help``) wraps the same calls.

``import zvf`` stays cheap (serverless cold starts pay for every import):
the public names resolve lazily on first use.  Type checkers see them
through the ``TYPE_CHECKING`` imports below (the package ships ``py.typed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # "X as X": explicit re-exports for strict type checkers; keep in step with _LAZY
    from . import aio as aio
    from . import config as config
    from . import errors as errors
    from .api.sync import Dataset as Dataset
    from .api.sync import Query as Query
    from .api.sync import build_pyramid as build_pyramid
    from .api.sync import convert as convert
    from .api.sync import gc as gc
    from .api.sync import open as open
    from .api.sync import rechunk as rechunk
    from .api.sync import timeout as timeout
    from .api.sync import validate as validate
    from .api.sync import write_graph as write_graph
    from .api.sync import write_lines as write_lines
    from .api.sync import write_mesh as write_mesh
    from .api.sync import write_points as write_points
    from .api.sync import write_polylines as write_polylines
    from .converters import ConvertOptions as ConvertOptions
    from .converters import ConvertProgress as ConvertProgress
    from .converters import ConvertSummary as ConvertSummary
    from .io.options import StorageOptions as StorageOptions
    from .read.query import SelectArgs as SelectArgs
    from .read.selection import Selection as Selection
    from .write.types import WriteOptions as WriteOptions
    from .write.types import WriteSummary as WriteSummary

# public name -> module that defines it
_LAZY = {
    **dict.fromkeys(("open", "write_points", "write_polylines", "write_lines", "write_graph", "write_mesh",
                     "validate", "Dataset", "Query", "build_pyramid", "rechunk", "convert", "gc", "timeout"),
                    ".api.sync"),
    "Selection": ".read.selection",
    "SelectArgs": ".read.query",
    "StorageOptions": ".io.options",
    "ConvertSummary": ".converters",
    "ConvertOptions": ".converters",
    "ConvertProgress": ".converters",
    "WriteSummary": ".write.types",
    "WriteOptions": ".write.types",
}

__all__ = ["__version__", "aio", "config", "errors", *_LAZY]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    if name in ("aio", "config", "errors"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'zvf' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (resolved lazily, so the module dict alone would not show it)."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
