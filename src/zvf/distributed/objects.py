"""``zvf.dask.write_polylines`` / ``write_lines`` / ``write_graph`` / ``write_mesh``: object stores from
many sources, each source loaded on a Dask worker.

A source is whatever produces batches of objects: a dask bag partition (its items are batches), a
callable or a ``dask.delayed`` object returning one batch or a list of batch dicts, or a batch
itself.  Loading -- reading and parsing the files users hold, the costly part of most ingests --
runs on the workers, ``window`` sources at a time; meanwhile the driver streams the batches
already loaded, in source order, into the streaming object writer
(:mod:`zvf.write.stream_objects`).  So the store is byte for byte the one ``zvf.write_*`` of the
concatenated batches writes, and object ids continue across sources as they do across batches.
Memory on the driver: two windows of loaded sources plus the writer's spill buffers.

Unlike ``zvf.dask.write_points``, the cells are written by the driver: spreading them over the
workers needs the route -> cells -> commit split of the point engine over the object writer's
fragments, links and manifests (docs/DISTRIBUTED.md, "Not yet").
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from ..errors import InvalidArgumentError
from ..write.types import WriteSummary
from .run import compute, need_dask


def _load(source: Any, partition: bool) -> list:
    """The batches of one source, on a worker."""
    out = source() if callable(source) else source
    if partition:  # a bag partition: a list of batches
        return list(out)
    if isinstance(out, (list, tuple)) and out and all(isinstance(b, dict) for b in out):
        return list(out)
    return [out]


def _sources(sources: Any) -> list[tuple[Any, bool]]:
    """(source, is a bag partition) per source, in input order."""
    import dask.bag as db

    if isinstance(sources, db.Bag):
        return [(d, True) for d in sources.to_delayed()]
    if isinstance(sources, (list, tuple)):
        return [(s, False) for s in sources]
    raise InvalidArgumentError(f"sources must be a dask bag of batches or a list of sources (callables, delayed "
                               f"objects or batches), got {type(sources).__name__}")


def _write(writer: str, target: Any, sources: Any, *, client: Any, window: int,
           progress: Callable[[dict], None] | None, options: dict) -> WriteSummary:
    dask = need_dask()
    from ..api import aio

    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidArgumentError(f"window must be an integer >= 1, got {window!r}")
    items = _sources(sources)
    if not items:
        raise InvalidArgumentError("sources: nothing to write (an empty list)")
    load = dask.delayed(_load, pure=False)
    windows = [items[i:i + window] for i in range(0, len(items), window)]
    done = 0

    def run(k: int) -> list:
        return compute([load(s, part) for s, part in windows[k]], client=client)

    async def batches() -> AsyncIterator[Any]:
        nonlocal done
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zvf-dask-load") as pool:
            pending = pool.submit(run, 0)
            try:
                for k in range(len(windows)):
                    loaded = await anyio.to_thread.run_sync(pending.result)
                    if k + 1 < len(windows):  # the workers load the next window while this one is written
                        pending = pool.submit(run, k + 1)
                    for source_batches in loaded:
                        for batch in source_batches:
                            yield batch
                        done += 1
                        if progress is not None:
                            progress({"stage": "load", "done": done, "total": len(items)})
            finally:
                pending.cancel()

    return anyio.run(lambda: getattr(aio, writer)(target, batches(), **options), backend="asyncio")


def _writer(name: str, doc: str) -> Callable[..., WriteSummary]:
    """The Dask twin of ``zvf.<name>``: the same keywords, plus ``client``, ``window`` and ``progress``."""

    def write(target: Any, sources: Any, *, client: Any = None, window: int = 8,
              progress: Callable[[dict], None] | None = None, **options: Any) -> WriteSummary:
        return _write(name, target, sources, client=client, window=window, progress=progress, options=options)

    write.__name__ = write.__qualname__ = name
    write.__doc__ = doc
    return write


write_polylines = _writer("write_polylines", """Polylines or streamlines from ``sources`` (see the module
docstring) loaded on Dask; the same store as ``zvf.write_polylines`` of their batches, one after another.
``options``: its keywords.""")
write_lines = _writer("write_lines", """Line segments from ``sources`` loaded on Dask; the same store as
``zvf.write_lines`` of their batches.""")
write_graph = _writer("write_graph", """Graphs or skeletons from ``sources`` loaded on Dask; the same store as
``zvf.write_graph`` of their batches (``{"positions", "edges", "object_ids", ...}``, edges indexing the
batch's own positions).""")
write_mesh = _writer("write_mesh", """Meshes from ``sources`` loaded on Dask; the same store as
``zvf.write_mesh`` of their batches.""")
