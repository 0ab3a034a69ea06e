"""Implementation of ``zvf.aio``: the async entry points, re-exported with their real signatures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..io.options import StorageOptions
from ..io.store import Target
from ..read.dataset import Refresh
from ..read.query import AsyncQuery
from ..read.selection import Selection
from .dataset import AsyncDataset

if TYPE_CHECKING:  # resolved lazily at run time (see __getattr__); type checkers see the real functions
    from ..converters import convert
    from ..lifecycle.gc import gc
    from ..lifecycle.pyramid import build_pyramid
    from ..lifecycle.rechunk import rechunk
    from ..validation import validate
    from ..write.objects.memory import write_graph, write_lines, write_mesh, write_polylines
    from ..write.points.memory import write_points

# Writers and the validator load on first use: a reader (a serverless cold start) never pays for them.
_LAZY = {"validate": "..validation",
         "write_points": "..write.points.memory", "write_polylines": "..write.objects.memory",
            "write_lines": "..write.objects.memory", "write_graph": "..write.objects.memory",
            "write_mesh": "..write.objects.memory",
            "build_pyramid": "..lifecycle.pyramid", "rechunk": "..lifecycle.rechunk", "convert": "..converters",
            "gc": "..lifecycle.gc"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "AsyncDataset",
    "AsyncQuery",
    "Selection",
    "build_pyramid",
    "convert",
    "gc",
    "open",
    "rechunk",
    "validate",
    "write_graph",
    "write_lines",
    "write_mesh",
    "write_points",
    "write_polylines",
]


async def open(
    target: Target, *, mode: str = "r", storage_options: StorageOptions | None = None, refresh: Refresh = None
) -> AsyncDataset:
    """Open a ZVF store for reading (two round trips: root and level documents, object index).

    Parameters
    ----------
    target:
        Where the store is: a local path or ``file://`` URL, ``memory://name``,
        ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``,
        ``http(s)://host/path`` (read-only), or an obstore store built by the caller.
    mode:
        ``"r"`` (default) to read; ``"a"`` to append objects or points to the store
        (``append_points``, ``append_polylines``, ...).
    storage_options:
        Store and client settings, see :class:`zvf.StorageOptions`: ``endpoint``,
        ``region``, ``access_key_id``/``secret_access_key``, ``skip_signature``,
        ``allow_http``, ``timeout``, retry settings (``max_retries``, ...) and zvf's
        ``concurrency`` (requests in flight).  Whatever is not given comes from the
        environment as obstore reads it (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``).
    refresh:
        The dataset reads the version of the store it opened, also while writers change
        the store; once that version is no longer kept (docs/RELIABILITY.md) a read
        raises ``StaleDatasetError``.  ``"auto"``: it moves to the newest version by
        itself and reads again (``ds.refresh()`` does it on demand).

    Returns a dataset (``zvf.Dataset``, or ``zvf.aio.AsyncDataset`` here) with
    ``query``, ``select``, ``read_object(s)``, ``iter_chunks``, ``info`` ... and
    ``stats`` (requests, bytes); use it as a context manager to close it.
    Raises ``StoreNotFoundError`` when nothing is at ``target`` and
    ``InvalidArgumentError`` for an unknown option.
    """
    return await AsyncDataset.open(target, mode=mode, storage_options=storage_options, refresh=refresh)
