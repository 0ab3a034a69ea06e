"""``zvf.dask.write_points``: a point cloud from many sources, written by Dask workers.

Plan -> map -> commit over :mod:`zvf.write.points.tasks`: one routing task per
source spills its rows by chunk under the job prefix of the target store,
one task per chunk group merges the spills and writes the cells, and the
driver commits (documents, object index, root last).  The store equals
``zvf.write_points`` of the concatenated sources, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..write import inputs
from ..write import jobs as write_jobs
from ..write.points import tasks
from ..write.types import Bounds, Columns, FragmentColumns, Groups, Shape, WriteSummary
from .run import Progress, compute, need_dask, spec_of

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

    from ..io.options import StorageOptions


def _route(job: write_jobs.WriteJob, index: int, source: Any) -> dict[str, Any]:
    return tasks.route_source(job, index, tasks.batches_of_source(source, index))


def _sources(sources: Any) -> list[Any]:
    """One item per source, in input order: dask array blocks, bag partitions, or the items of a list."""
    import dask.array as da
    import dask.bag as db

    if isinstance(sources, da.Array):
        if sources.ndim != 2:
            raise InvalidArgumentError(f"sources: a dask array of positions must be (N, ndim), got shape "
                                       f"{sources.shape}")
        return list(sources.rechunk({1: -1}).to_delayed().ravel())  # type: ignore[no-untyped-call]  # dask's
    if isinstance(sources, db.Bag):
        return list(sources.to_delayed())  # type: ignore[no-untyped-call]  # dask.bag is unannotated
    if isinstance(sources, (list, tuple)):
        return list(sources)
    raise InvalidArgumentError(f"sources must be a dask array, a dask bag of batches or a list of sources, "
                               f"got {type(sources).__name__}")


def _batch(positions: Any, attributes: dict[str, Any], object_ids: Any) -> dict[str, Any]:
    """One source's batch from its blocks (on a worker)."""
    batch: dict[str, Any] = {"positions": positions}
    if attributes:
        batch["attributes"] = attributes
    if object_ids is not None:
        batch["object_ids"] = object_ids
    return batch


def _aligned(sources: Any, attributes: Columns | None, object_ids: Any) -> list[Any]:
    """One batch per row block of a dask array of positions, with the same rows of ``attributes`` and
    ``object_ids`` (dask or numpy arrays: rechunked to the positions' row blocks)."""
    import dask
    import dask.array as da

    if not isinstance(sources, da.Array):
        raise InvalidArgumentError("attributes= and object_ids= go with a dask array of positions (row-aligned); "
                                   "with file, bag or list sources put them in each source's batches "
                                   "(.npz keys attr_<name>, object_ids)")
    positions = sources.rechunk({1: -1})  # type: ignore[no-untyped-call]  # dask.array is unannotated
    rows = positions.chunks[0]

    def blocks(name: str, values: Any) -> list[Any]:
        arr = values if isinstance(values, da.Array) else \
            da.from_array(np.asarray(values))  # type: ignore[no-untyped-call]  # dask.array is unannotated
        if arr.ndim == 0 or arr.shape[0] != positions.shape[0]:
            raise InvalidArgumentError(f"{name}: {arr.shape[0] if arr.ndim else 0} rows, positions have "
                                       f"{positions.shape[0]}")
        return list(arr.rechunk((rows, *((n,) for n in arr.shape[1:]))).to_delayed().ravel())

    cols = {k: blocks(f"attributes[{k!r}]", v) for k, v in (attributes or {}).items()}
    ids = blocks("object_ids", object_ids) if object_ids is not None else None
    batch = dask.delayed(_batch, pure=True)  # type: ignore[attr-defined]  # dask's lazy module attribute
    return [batch(p, {k: c[i] for k, c in cols.items()}, None if ids is None else ids[i])
            for i, p in enumerate(positions.to_delayed().ravel())]


@inputs.keywords_first(())
def write_points(target: Any, sources: Any, *, chunk_shape: Shape, attributes: Columns | None = None,
                 object_ids: ArrayLike | None = None, chunk_by_attribute: str | None = None,
                 fragment_attributes: FragmentColumns | None = None, bin_shape: Shape | None = None,
                 bounds: Bounds | None = None, object_attributes: Columns | None = None, groups: Groups | None = None,
                 group_attributes: Columns | None = None, compression: str | None = None,
                 shard_shape: int | Sequence[int] | None = None, dtype: DTypeLike | None = None,
                 overwrite: bool = False, object_index_layout: str = "sharded",
                 storage_options: StorageOptions | None = None,
                 job: str | None = None, rows_per_task: int | None = None,
                 client: Any = None, progress: Progress | None = None) -> WriteSummary:
    """Write a point cloud from ``sources`` on Dask; the same store as ``zvf.write_points`` of their concatenation.

    ``sources``: a dask array (N, ndim) of positions, a dask bag whose items
    are batches (as ``zvf.write_points`` takes them), or a list whose items are
    ``.npy``/``.npz`` paths (keys ``positions``, ``object_ids``, ``attr_<name>``;
    any other key is an error), callables returning a batch or a list of
    batches, or batches.  The keywords are ``zvf.write_points``'s: with a dask
    array of positions, ``attributes`` ({name: array}) and ``object_ids`` are
    dask (or numpy) arrays row-aligned with it; ``chunk_by_attribute`` and
    ``fragment_attributes`` are refused (write, then ``zvf.rechunk``).  ``job``
    names the job: running again with the same name (after a crash) resumes
    it, skipping the tasks that finished.  ``client``: a ``distributed``
    client (default: the current one, else Dask's local scheduler).
    ``progress(dict)`` gets ``stage``, ``done``, ``total`` as tasks finish.
    """
    dask = need_dask()
    rows_per_task = tuning().rows_per_task if rows_per_task is None else rows_per_task
    if not isinstance(rows_per_task, int) or rows_per_task < 1:
        raise InvalidArgumentError(f"rows_per_task must be an integer >= 1, got {rows_per_task!r}")
    for name, value in (("chunk_by_attribute", chunk_by_attribute), ("fragment_attributes", fragment_attributes)):
        if value is not None:
            raise InvalidArgumentError(f"{name}: not on Dask; write the cloud, then zvf.rechunk(..., "
                                       f"by_attribute=) or the serial zvf.write_points")
    url, opts = spec_of(target, storage_options)
    items = _sources(sources) if attributes is None and object_ids is None else \
        _aligned(sources, attributes, object_ids)
    pj = write_jobs.new_job(url, opts, job=job, chunk_shape=chunk_shape, bin_shape=bin_shape, bounds=bounds,
                            dtype=dtype, compression=compression, shard_shape=shard_shape,
                            implicit_ids=groups is not None)
    if not items:
        raise InvalidArgumentError("sources: nothing to write (an empty list)")
    routed, written = anyio.run(lambda: write_jobs.start(pj, overwrite=overwrite, n_sources=len(items)),
                                backend="asyncio")
    todo = [i for i in range(len(items)) if i not in routed]
    route = dask.delayed(_route, pure=False)
    for i, s in zip(todo, compute([route(pj, i, items[i]) for i in todo], client=client, progress=progress,
                                  stage="route")):
        routed[i] = s
    summaries = [routed[i] for i in range(len(items))]
    plan = tasks.plan_cells(pj, summaries, rows_per_task=rows_per_task)
    todo = [g for g in range(len(plan.groups)) if g not in written]
    shared = dask.delayed(plan, traverse=False)  # one graph node: shipped once per worker, not per task
    cells = dask.delayed(tasks.write_cells, pure=False)
    jobs = [cells(pj, g, shared, write_jobs.source_slices(plan.groups[g], plan.source_chunks, summaries)) for g in todo]
    for g, s in zip(todo, compute(jobs, client=client, progress=progress, stage="cells")):
        written[g] = s
    return anyio.run(lambda: tasks.commit(
        pj, plan, [written[g] for g in range(len(plan.groups))], overwrite=overwrite,
        object_attributes=object_attributes, groups=groups, group_attributes=group_attributes,
        object_index_layout=object_index_layout), backend="asyncio")
