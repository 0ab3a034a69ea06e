"""``build_pyramid``: coarser levels built chunk block by chunk block, published at one instant.

Each step (level ``s`` -> ``s + 1``) is planned (:mod:`.plan`), mapped over its blocks (:mod:`.tasks`,
which coarsen them with :mod:`.coarsen`) and committed from the blocks' summaries (:mod:`.commit`); the
root listing every new level is published last (:mod:`.writer`).  See docs/LIFECYCLE.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

import numpy as np

from ...config import tuning
from ...errors import InvalidArgumentError
from ...format import builders, parse
from ...format import metadata as md
from ...format.manifest import ManifestTable
from ...io.executor import Executor
from ...io.options import StorageOptions
from ...io.store import StoreHandle, Target, open_store
from ...read import load
from ...read.dataset import DatasetReader
from ...write.lock import LEASE, StoreLock
from ...write.object_index import (
    put_object_index,
)
from ...write.publish import Publication
from ...write.store_writer import empty_group
from .commit import assemble_manifests, carry_object_data, declare_arrays, link_families, root_with_levels
from .plan import (
    RECORD,
    STORAGES,
    STRATEGIES,
    ChunkScales,
    Factors,
    LevelGrid,
    LevelPlan,
    build_record,
    deep_steps,
    kept_rows,
    parse_factors,
    plan_level,
)
from .tasks import BlockMapper, StepJob, assign_deep, plan_blocks, run_blocks
from .writer import PyramidWriter, seed_section


class BuildProgress(TypedDict):
    """What ``build_pyramid(progress=...)`` is called with as each block's cells are queued."""

    level: int
    blocks: int
    total_blocks: int
    vertices: int


class LevelSummary(TypedDict):
    """One built level: its vertices and blocks; links of finer levels (``cross_level_depth >= 2``) per N,
    and for object geometries the objects of the source and those kept."""

    level: int
    vertex_count: int
    blocks: int
    deep_links: NotRequired[dict[int, int]]
    objects: NotRequired[int]
    objects_kept: NotRequired[int]


class PyramidSummary(TypedDict):
    """What ``build_pyramid`` returns: a summary per level, the link settings, the requests it made and
    the root's ``zarr_vectors`` attributes as published."""

    levels: list[LevelSummary]
    cross_level_storage: str
    cross_level_depth: int
    requests: dict[str, int]
    root: dict[str, object]  # JSON values


async def build_pyramid(
    target: Target,
    factors: Factors,
    *,
    chunk_scale_factors: ChunkScales | None = None,
    cross_level_depth: int = 1,
    cross_level_storage: str = "explicit",
    sparsity_strategy: str = "random",
    seed: int = 0,
    storage_options: StorageOptions | None = None,
    progress: Callable[[BuildProgress], object] | None = None,
    max_inflight_bytes: int | None = None,
    lock_timeout: float = 60.0,
    stale_after: float = LEASE,
    map_blocks: BlockMapper | None = None,
    retention: float | None = None,
) -> PyramidSummary:
    """Add coarser levels 1..len(factors) to a store that has only level 0.

    ``factors[i] = (coarsen, sparsity)`` makes level ``i + 1`` from level
    ``i``: bins ``coarsen`` times the source level's (whole numbers, per
    axis or one for all), keeping ``1 / sparsity`` of the objects (point
    clouds: of the points of each bin, with ``coarsen ** ndim``).
    ``chunk_scale_factors[i]`` multiplies the source level's chunk shape.
    ``cross_level_storage``: "explicit" writes ``+N`` links at the finer
    and ``-N`` at the coarser level, "implicit" only ``+N``, "none" none;
    ``cross_level_depth`` is the largest ``N`` (0: none, -1: every pair
    of levels; ``±N`` for N >= 2 compose the ``±1`` parents, as 0.9.2's).  ``progress`` is
    called with a :class:`BuildProgress` (level, blocks, total_blocks, vertices).  The build
    holds the store's lock (waits up to ``lock_timeout`` s for an append or
    another build; a holder without a heartbeat for ``stale_after`` s is taken
    over) and publishes the levels at one instant (:mod:`zvf.write.publish`;
    ``retention``: seconds the store as it was stays readable for readers that
    opened it, default the store's).
    ``map_blocks(job, tasks)`` runs a step's block tasks elsewhere and
    returns their summaries in task order (``zvf.dask.build_pyramid``);
    by default they run in this process.  ``max_inflight_bytes``: coarse cells queued for upload at once
    (default ``zvf.config.tuning().pyramid_upload_bytes``).  Returns a :class:`PyramidSummary` (a summary per level).
    """
    if cross_level_storage not in STORAGES:
        raise InvalidArgumentError(f"cross_level_storage must be one of {STORAGES}, got {cross_level_storage!r}")
    if isinstance(cross_level_depth, bool) or not isinstance(cross_level_depth, (int, np.integer)) \
            or cross_level_depth < -1:
        raise InvalidArgumentError(
            f"cross_level_depth must be an integer >= -1 (-1: every pair of levels), got {cross_level_depth!r}")
    if sparsity_strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"sparsity_strategy must be one of {STRATEGIES}, got {sparsity_strategy!r}: zarr-vectors 0.9.2 "
            "itself implements only 'random'; its other names are plug-ins of the separate zarr-vectors-tools "
            "package, which zvf does not implement")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgumentError(f"seed must be an integer >= 0, got {seed!r}")

    handle = open_store(target, mode="a", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreLock(ex, handle.url, purpose="pyramid build", timeout=lock_timeout, lease=stale_after) as lock:
        return await _locked_build(handle, ex, lock, factors, chunk_scale_factors, cross_level_depth,
                                   cross_level_storage, seed, progress, max_inflight_bytes, map_blocks, retention)


async def build_locked(handle: StoreHandle, ex: Executor, lock: StoreLock, *, factors: Factors,
                       chunk_scale_factors: ChunkScales | None, cross_level_depth: int, cross_level_storage: str,
                       seed: int = 0, retention: float | None = None) -> PyramidSummary:
    """:func:`build_pyramid` on a store whose lock the caller holds (an append rebuilding the levels it
    replaced, in the same lock, so no other writer comes between)."""
    return await _locked_build(handle, ex, lock, factors, chunk_scale_factors, cross_level_depth,
                               cross_level_storage, seed, None, None, None, retention)


async def _locked_build(handle: StoreHandle, ex: Executor, lock: StoreLock, factors: Factors,
                        chunk_scale_factors: ChunkScales | None, cross_level_depth: int, cross_level_storage: str,
                        seed: int, progress: Callable[[BuildProgress], object] | None, max_inflight_bytes: int | None,
                        map_blocks: BlockMapper | None, retention: float | None) -> PyramidSummary:
    """The build under the store's lock: everything it reads is what it replaces."""
    pub = await Publication(ex, lock, retention=retention).begin()
    seed_section(ex, pub.base_docs)  # the version being extended: never the documents on disk (they may lag)
    root, level0 = await load.load_root(ex, handle.url)
    base = DatasetReader(handle, ex, root, level0)
    if base.levels != [0]:
        raise InvalidArgumentError(f"{handle.url}: the store already has levels {base.levels}; "
                                   "a pyramid is built on a store with level 0 only")
    steps = parse_factors(factors, chunk_scale_factors, root.ndim)
    if level0.meta.chunk_dims is not None:
        raise InvalidArgumentError(f"{handle.url}: pyramids of attribute-chunked stores are not supported")
    objects = "object_index" in level0.meta.arrays_present
    links = cross_level_storage != "none" and cross_level_depth != 0
    levels: list[LevelSummary] = []
    doc = await _build(handle, ex, root, pub, level0, steps, levels, objects=objects, links=links,
                       depth=int(cross_level_depth), storage=cross_level_storage, seed=int(seed), progress=progress,
                       max_inflight_bytes=max_inflight_bytes, map_blocks=map_blocks)
    return {"levels": levels, "cross_level_storage": cross_level_storage, "cross_level_depth": cross_level_depth,
            "requests": ex.stats.snapshot(), "root": doc["attributes"]["zarr_vectors"]}


async def _build(handle: StoreHandle, ex: Executor, root: md.RootMeta, pub: Publication, level0: load.Level,
                 steps: list[tuple[tuple[int, ...], float, tuple[int, ...]]], levels: list[LevelSummary], *,
                 objects: bool, links: bool, depth: int, storage: str, seed: int,
                 progress: Callable[[BuildProgress], object] | None, max_inflight_bytes: int | None,
                 map_blocks: BlockMapper | None) -> dict[str, Any]:
    """Build every level, publish the root; returns the new root document.  A failure takes the cells
    written so far away (no version uses their families); a kill leaves them to the next change or gc."""
    upload_bytes = tuning().pyramid_upload_bytes if max_inflight_bytes is None else max_inflight_bytes
    writer = PyramidWriter(ex, pub, max_inflight_bytes=upload_bytes)
    async with writer:  # (StoreWriter's __aenter__ is typed as returning a StoreWriter)
        plans: list[LevelPlan] = []
        ds, src = DatasetReader(handle, ex, root, level0), level0
        src_chunk, src_bin = root.chunk_shape, root.bin_shape
        grids: dict[int, LevelGrid] = {}  # level -> (scale, chunk units, grid origin, grid shape)
        for coarsen, sparsity, scale in steps:
            plan = plan_level(root, src.index, src_chunk, src_bin, coarsen, sparsity, scale)
            for prefix in [f"{plan.target}/"] + [f"{lv}/links/" for lv in range(plan.target)]:
                await pub.clear_garbage(prefix)  # a dead build's cells there: block tasks write clean families
            info = await _build_level(ds, src, plan, writer, objects=objects, links=links,
                                      explicit=storage == "explicit", seed=seed, progress=progress,
                                      map_blocks=map_blocks, depth=depth if links else 0, grids=grids)
            await writer.flush()
            writer.level_doc(plan.target)["attributes"][RECORD] = build_record(
                plan, seed=seed, depth=depth, storage=storage)
            plans.append(plan)
            levels.append(info)
            # the next step reads the level just written (not yet listed by the published root)
            doc = root_with_levels(root.raw, root, plans, objects=objects, depth=depth, storage=storage)
            ds = DatasetReader(handle, ex, parse.parse_root(doc), level0)
            _, parts = await load.open_level(ex, None, plan.target)
            src = ds.context.levels[plan.target] = await load.finish_level(ex, ds.root, plan.target,
                                                                     writer.level_doc(plan.target), *parts[1:])
            src_chunk, src_bin = plan.chunk, plan.bin
        writer.new_root = doc
    return doc


async def _build_level(ds: DatasetReader, src: load.Level, plan: LevelPlan, writer: PyramidWriter, *,
                       objects: bool, links: bool, explicit: bool, seed: int,
                       progress: Callable[[BuildProgress], object] | None,
                       map_blocks: BlockMapper | None, depth: int = 1,
                       grids: dict[int, LevelGrid] | None = None) -> LevelSummary:
    """Plan one step's blocks, map them, then its small commit (array documents, object index, level)."""
    nd = plan.ndim
    vert = src.arrays["vertices"]
    codec = vert.codec
    if codec.shard is not None:  # coarse cells go up as they are made: never buffered in shards
        codec = dataclasses.replace(codec, shard=None)
    src_origin = tuple(int(o) for o in vert.meta.grid_origin)
    coarse_origin, coarse_shape = plan.target_grid(src_origin, vert.meta.shape)
    names = src.named("vertex_attributes")
    paths = ["vertices", "vertex_fragments"] + [f"vertex_attributes/{n}" for n in names]
    src_shape = tuple(int(s) for s in vert.meta.shape)
    grids = {} if grids is None else grids
    grids[plan.source] = (plan.src_scale, plan.src_chunk_units, src_origin, src_shape)
    deep = deep_steps(writer.nodes(), plan, grids, depth)
    job = StepJob(plan, {p: src.arrays[p].meta for p in paths}, tuple(names),
                  np.dtype(vert.meta.attributes.get("dtype", "float32")), codec, src_origin,
                  src_shape, coarse_origin, coarse_shape, objects, links, explicit, seed, deep,
                  writer.committing().taken() if map_blocks is not None else {})

    manifests: tuple[np.ndarray, ManifestTable, np.ndarray] | None = None  # ids, table, kept rows
    table = kept = None
    if objects:
        oids, table = await ds.manifests(src.index)
        kept = kept_rows(table.num_objects, plan.sparsity, seed)
        manifests = (oids, table, kept)
    tasks = plan_blocks(plan, src.nonempty_chunks, table, kept,
                        rows_per_chunk=src.meta.vertex_count / max(1, len(src.nonempty_chunks)))
    assign_deep(plan, tasks, deep)
    n_blocks = len(tasks)
    if map_blocks is None:
        arrays = {p: src.arrays[p] for p in paths}
        summaries = await run_blocks(job, arrays, tasks, writer, on_block=None if progress is None else (
            lambda done, vertices: progress({"level": plan.target, "blocks": done, "total_blocks": n_blocks,
                                             "vertices": vertices})))
    else:
        summaries = await map_blocks(job, tasks)
    del tasks  # per-block chunk lists and manifest references: not needed by the commit

    n_mv = sum(s.vertex_count for s in summaries)
    n_links = sum(s.links for s in summaries)
    await declare_arrays(writer, job, src, summaries)
    arrays_present = ["vertices"]
    if names:
        empty_group(writer, f"{plan.target}/vertex_attributes")
        arrays_present.append("vertex_attributes")
    if links and n_links:
        await link_families(writer, plan, plan.source, 1, n_links, explicit)
    info: LevelSummary = {"level": plan.target, "vertex_count": int(n_mv), "blocks": n_blocks}
    for d in deep:
        n_deep = sum(s.deep_links.get(d.delta, 0) for s in summaries)
        if n_deep:
            await link_families(writer, plan, d.level, d.delta, n_deep, explicit)
            info.setdefault("deep_links", {})[d.delta] = n_deep
    if manifests is not None:
        oids, table, kept = manifests
        arrays_present.append("object_index")
        obj, cc, ci = assemble_manifests(table, kept, summaries, nd)
        await put_object_index(writer, plan.target, obj, cc, ci, oids, nd, compression=None)
        await carry_object_data(ds, src, writer, plan, kept, table.num_objects)
        info["objects"], info["objects_kept"] = int(table.num_objects), len(kept)
    doc = builders.level_document(
        level=plan.target, vertex_count=int(n_mv), arrays_present=arrays_present,
        object_sparsity=1.0 / plan.sparsity, coarsening_method="per_object" if objects else "random_subsample",
        parent_level=plan.source, chunk_shape=plan.chunk_override, preserves_object_ids=objects,
        inherited_num_objects=int(manifests[1].num_objects) if manifests is not None else 0, shared_fragments=objects,
        fragments_tile=not objects and n_mv > 0)
    writer.add_document(f"{plan.target}/zarr.json", doc, stage=1)
    return info
