"""``zvf.dask.write_polylines`` / ``write_lines`` / ``write_graph`` / ``write_mesh``: object stores from
many sources.

A source is whatever produces batches of objects: a dask bag partition (its items are batches), a
callable or a ``dask.delayed`` object returning one batch or a list of batch dicts, or a batch
itself.  Loading -- reading and parsing the files users hold, the costly part of most ingests --
runs on the workers.  Object ids continue across sources as they do across batches, and the store
is byte for byte the one ``zvf.write_*`` writes from the concatenated batches.

Every geometry goes route -> cells -> commit (:mod:`zvf.write.objects.tasks`): each worker spills
its sources' rows by chunk under the job prefix of the target store, workers write the cells of
disjoint chunk groups, and the driver -- holding a few integers per fragment, never a vertex --
commits the object index and documents, root last.  Graphs, skeletons and meshes take one more
map between the two: a link cell stores each endpoint's chunk-local row, known once the chunk
holding it is written, so the cell tasks leave a small vertex table per chunk and link tasks,
one per chunk group, read the tables of the chunks their records reach.
"""

from __future__ import annotations

from typing import Any, Unpack

import anyio

from ..config import tuning
from ..errors import InvalidArgumentError
from ..write import inputs
from ..write import jobs as write_jobs
from ..write.fragment_attributes import FragmentAttributes
from ..write.jobs import WriteJob
from ..write.objects import tasks as object_tasks
from ..write.types import ObjectWriteOptions, WriteSummary
from .run import Progress, compute, need_dask, spec_of


def _load(source: Any, partition: bool) -> list[Any]:
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
        return [(d, True) for d in sources.to_delayed()]  # type: ignore[no-untyped-call]  # dask.bag's
    if isinstance(sources, (list, tuple)):
        return [(s, False) for s in sources]
    raise InvalidArgumentError(f"sources must be a dask bag of batches or a list of sources (callables, delayed "
                               f"objects or batches), got {type(sources).__name__}")


def _route(job: WriteJob, index: int, source: Any, partition: bool) -> dict[str, Any]:
    """Load one source and route its rows (on a worker)."""
    return object_tasks.route_objects(job, index, _load(source, partition))


def _in_batches(**per_row: Any) -> None:
    """The serial writers' per-row keywords (attributes, object_ids, link_attributes) belong to each
    source's batches here: the sources are the input, not one array to align them with."""
    given = [k for k, v in per_row.items() if v is not None]
    if given:
        raise InvalidArgumentError(f"{', '.join(given)}: on Dask they go in each source's batches "
                                   f"({{'polylines' | 'positions': ..., {given[0]!r}: ...}}), row-aligned with them")


def _write_objects(target: Any, sources: Any, *, geometry: str, kinds: tuple[str, ...], chunk_shape: Any,
                   client: Any, job: str | None, rows_per_task: int | None, progress: Progress | None,
                   options: ObjectWriteOptions) -> WriteSummary:
    """Route -> cells (-> links) -> commit over :mod:`zvf.write.objects.tasks`: workers write every cell.
    ``geometry`` is the writer's ``geometry_type``, one of ``kinds``."""
    if geometry not in kinds:
        raise InvalidArgumentError(f"geometry_type must be {' or '.join(map(repr, kinds))}, got {geometry!r}")
    dask = need_dask()
    rows_per_task = tuning().rows_per_task if rows_per_task is None else rows_per_task
    if not isinstance(rows_per_task, int) or isinstance(rows_per_task, bool) or rows_per_task < 1:
        raise InvalidArgumentError(f"rows_per_task must be an integer >= 1, got {rows_per_task!r}")
    given_fragments = options.pop("fragment_attributes", None)
    cfg = inputs.streamed_config(chunk_shape, options, 1)
    url, opts = spec_of(target, cfg.storage_options)
    wj = write_jobs.new_job(url, opts, job=job, chunk_shape=chunk_shape, bin_shape=cfg.bin_shape,
                            bounds=cfg.bounds, dtype=cfg.dtype, compression=cfg.compression,
                            shard_shape=cfg.shard_shape, geometry=geometry)
    frag_attrs = FragmentAttributes(given_fragments, len(wj.chunk_shape))
    items = _sources(sources)
    if not items:
        raise InvalidArgumentError("sources: nothing to write (an empty list)")
    routed, written = anyio.run(lambda: write_jobs.start(wj, overwrite=cfg.overwrite, n_sources=len(items)),
                                backend="asyncio")
    todo = [i for i in range(len(items)) if i not in routed]
    route = dask.delayed(_route, pure=False)
    for i, s in zip(todo, compute([route(wj, i, *items[i]) for i in todo], client=client, progress=progress,
                                  stage="route")):
        routed[i] = s
    summaries = [routed[i] for i in range(len(items))]
    plan = object_tasks.plan_objects(wj, cfg, summaries, rows_per_task=rows_per_task)
    record_chunks = plan.record_chunks or []  # link records: graphs, skeletons and meshes only
    frag_attrs.written_elsewhere(plan.chunks)
    frag_attrs.refuse_unused()
    todo = [g for g in range(len(plan.groups)) if g not in written]
    anyio.run(lambda: object_tasks.put_runs(wj, plan, todo), backend="asyncio")
    cells = dask.delayed(object_tasks.object_cells, pure=False)
    jobs = [cells(wj, g, object_tasks.cell_task(plan, g, frag_attrs.tables),
                  write_jobs.source_slices(plan.groups[g], plan.source_chunks, summaries)) for g in todo]
    for g, s in zip(todo, compute(jobs, client=client, progress=progress, stage="cells")):
        written[g] = s
    done = [written[g] for g in range(len(plan.groups))]
    if object_tasks.connected(wj):  # the link cells, once every chunk's vertex table is there
        linked = anyio.run(lambda: write_jobs.load_summaries(wj.executor(), f"{wj.prefix}links/"), backend="asyncio")
        todo = [g for g in range(len(plan.groups)) if g not in linked]
        links = dask.delayed(object_tasks.link_cells, pure=False)
        jobs = [links(wj, g, object_tasks.link_task(plan, g),
                      write_jobs.source_slices(plan.groups[g], record_chunks, summaries, counts="rec_counts",
                                          columns="rec_columns")) for g in todo]
        for g, s in zip(todo, compute(jobs, client=client, progress=progress, stage="links")):
            linked[g] = s
        done += [linked[g] for g in range(len(plan.groups))]
    summary: WriteSummary = anyio.run(lambda: object_tasks.commit_objects(wj, cfg, plan, done, frag_attrs),
                                      backend="asyncio")
    return summary


@inputs.keywords_first(inputs.OBJECT_OPTIONS)
def write_polylines(target: Any, sources: Any, *, chunk_shape: Any, geometry_type: str = "polyline",
                    attributes: Any = None, client: Any = None, job: str | None = None,
                    rows_per_task: int | None = None, progress: Progress | None = None,
                    **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """Polylines or streamlines from ``sources`` (see the module docstring), written by Dask workers; the
    same store as ``zvf.write_polylines`` of their batches, one after another.

    ``job`` names the job: running again with the same name after a crash
    resumes it, skipping the tasks that finished.  ``rows_per_task``: vertex
    rows a cell task gathers at once (bounds a worker's memory; default: the ``rows_per_task`` setting).
    ``progress(dict)`` gets ``stage`` ("route", "cells"), ``done``, ``total``.
    ``options``: the other keywords of ``zvf.write_polylines`` (``ObjectWriteOptions``); its per-row
    ``attributes`` go in the sources' batches (the keyword is refused with a message saying so).
    """
    _in_batches(attributes=attributes)
    return _write_objects(target, sources, geometry=geometry_type, kinds=("polyline", "streamline"),
                          chunk_shape=chunk_shape, client=client, job=job, rows_per_task=rows_per_task,
                          progress=progress, options=options)


@inputs.keywords_first(inputs.OBJECT_OPTIONS)
def write_lines(target: Any, sources: Any, *, chunk_shape: Any, attributes: Any = None, client: Any = None,
                job: str | None = None, rows_per_task: int | None = None,
                progress: Progress | None = None, **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """Line segments from ``sources``, written by Dask workers; the same store as ``zvf.write_lines`` of
    their batches.  The other arguments as for :func:`write_polylines`."""
    _in_batches(attributes=attributes)
    return _write_objects(target, sources, geometry="line", kinds=("line",), chunk_shape=chunk_shape, client=client,
                          job=job, rows_per_task=rows_per_task, progress=progress, options=options)


@inputs.keywords_first(inputs.OBJECT_OPTIONS)
def write_graph(target: Any, sources: Any, *, chunk_shape: Any, geometry_type: str = "graph",
                object_ids: Any = None, attributes: Any = None, link_attributes: Any = None, client: Any = None,
                job: str | None = None, rows_per_task: int | None = None,
                progress: Progress | None = None, **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """Graphs or skeletons from ``sources``, written by Dask workers; the same store as ``zvf.write_graph`` of
    their batches (``{"positions", "edges", "object_ids", ...}``, edges indexing the batch's own positions).
    The other arguments as for :func:`write_polylines`; progress stages "route", "cells", "links"."""
    _in_batches(object_ids=object_ids, attributes=attributes, link_attributes=link_attributes)
    return _write_objects(target, sources, geometry=geometry_type, kinds=("graph", "skeleton"),
                          chunk_shape=chunk_shape, client=client, job=job, rows_per_task=rows_per_task,
                          progress=progress, options=options)


@inputs.keywords_first(inputs.OBJECT_OPTIONS)
def write_mesh(target: Any, sources: Any, *, chunk_shape: Any, object_ids: Any = None, attributes: Any = None,
               client: Any = None, job: str | None = None, rows_per_task: int | None = None,
               progress: Progress | None = None, **options: Unpack[ObjectWriteOptions]) -> WriteSummary:
    """Meshes from ``sources``, written by Dask workers; the same store as ``zvf.write_mesh`` of their
    batches.  The other arguments as for :func:`write_graph`."""
    _in_batches(object_ids=object_ids, attributes=attributes)
    return _write_objects(target, sources, geometry="mesh", kinds=("mesh",), chunk_shape=chunk_shape, client=client,
                          job=job, rows_per_task=rows_per_task, progress=progress, options=options)
