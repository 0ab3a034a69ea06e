"""``zvf.dask.build_pyramid``: the pyramid builder's block tasks on Dask workers, the commit on the driver.

The driver takes the store's lock and, per step, plans the blocks exactly as
the serial build does (:func:`zvf.lifecycle.pyramid.tasks.plan_blocks`); workers
run :func:`zvf.lifecycle.pyramid.tasks.run_block_task` on groups of blocks from
the store spec and upload the coarse cells; the driver writes the array
documents, object index and level from their summaries, the root last.  The
store equals the serial ``zvf.build_pyramid``'s, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ..config import tuning
from ..errors import InvalidArgumentError
from .run import Progress, compute, need_dask, spec_of

if TYPE_CHECKING:
    from ..io.options import StorageOptions
    from ..lifecycle.pyramid import BlockSummary, BlockTask, ChunkScales, Factors, PyramidSummary, StepJob



def _run(url: str, opts: StorageOptions | None, job: StepJob, group: list[BlockTask], max_inflight_bytes: int,
         before: Callable[[], None] | None) -> list[BlockSummary]:
    """One task on a worker: its blocks, from the store spec (``before``: a test's hook, run first)."""
    from ..lifecycle import pyramid

    if before is not None:
        before()
    return pyramid.run_block_task(url, opts, job, group, max_inflight_bytes=max_inflight_bytes)


def build_pyramid(target: Any, factors: Factors, *, chunk_scale_factors: ChunkScales | None = None,
                  cross_level_depth: int = 1, cross_level_storage: str = "explicit", sparsity_strategy: str = "random",
                  seed: int = 0, storage_options: StorageOptions | None = None, progress: Progress | None = None,
                  max_inflight_bytes: int | None = None, lock_timeout: float = 60.0, stale_after: float = 30.0,
                  blocks_per_task: int = 4, client: Any = None,
                  _before_task: Callable[[], None] | None = None) -> PyramidSummary:
    """``zvf.build_pyramid`` with the blocks of every step coarsened on Dask workers.

    Arguments are the serial builder's (``max_inflight_bytes`` bounds each
    task's uploads); ``blocks_per_task`` blocks make one task (a block is a
    few source chunks).  ``client``: a ``distributed`` client (default: the
    current one, else Dask's local scheduler).  ``progress(dict)`` gets the
    serial keys (``level``, ``blocks``, ``total_blocks``, ``vertices``) and
    the engine's (``stage`` "level N", ``done``, ``total`` tasks).  A worker
    lost mid-task is rerun (its cell keys are the block's, so no duplicates);
    a build that died leaves no visible level and the next build removes
    its cells.
    """
    dask = need_dask()
    from ..lifecycle import pyramid

    if isinstance(blocks_per_task, bool) or not isinstance(blocks_per_task, int) or blocks_per_task < 1:
        raise InvalidArgumentError(f"blocks_per_task must be an integer >= 1, got {blocks_per_task!r}")
    url, opts = spec_of(target, storage_options)
    # the driver's setting, shipped to the workers (they would read their own defaults)
    upload_bytes = tuning().pyramid_upload_bytes if max_inflight_bytes is None else max_inflight_bytes
    run = dask.delayed(_run, pure=False)

    async def map_blocks(job: StepJob, tasks: list[BlockTask]) -> list[BlockSummary]:
        shared = dask.delayed(job, traverse=False)  # one graph node: shipped once per worker, not per task
        groups = [tasks[i:i + blocks_per_task] for i in range(0, len(tasks), blocks_per_task)]
        graph = [run(url, opts, shared, group, upload_bytes, _before_task) for group in groups]
        level = job.plan.target
        seen = {"blocks": 0, "vertices": 0}

        def note(summaries: list[BlockSummary]) -> dict[str, Any]:
            seen["blocks"] += len(summaries)
            seen["vertices"] += sum(x.vertex_count for x in summaries)
            return {"level": level, "total_blocks": len(tasks), **seen}

        done = await anyio.to_thread.run_sync(lambda: compute(graph, client=client, progress=progress,
                                                              stage=f"level {level}", note=note))
        return [x for group in done for x in group]

    return anyio.run(lambda: pyramid.build_pyramid(
        url, factors, chunk_scale_factors=chunk_scale_factors, cross_level_depth=cross_level_depth,
        cross_level_storage=cross_level_storage, sparsity_strategy=sparsity_strategy, seed=seed,
        storage_options=opts, max_inflight_bytes=upload_bytes, lock_timeout=lock_timeout,
        stale_after=stale_after, map_blocks=map_blocks), backend="asyncio")
