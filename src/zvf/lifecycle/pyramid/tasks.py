"""The map step of a pyramid build: one coarsening step cut into block tasks any engine can run.

:func:`plan_blocks` cuts a step into picklable :class:`BlockTask` s sharing one :class:`StepJob`;
:func:`run_blocks` fetches, coarsens (:func:`~.coarsen.coarsen_block`) and uploads blocks and returns small
:class:`BlockSummary` s, from which alone the driver commits.  The serial build runs it in process;
:func:`run_block_task` runs it from a store *spec* (URL + storage options) on any worker, which is what
``zvf.dask.build_pyramid`` maps over Dask workers (a :data:`BlockMapper`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import numpy as np

from ...config import tuning
from ...errors import FormatError
from ...format import metadata as md
from ...format.codecs import CellCodec
from ...format.fragments import (
    FragmentIndex,
    decode_fragment_index,
)
from ...format.grid import row_positions
from ...format.links import decode_ragged_links
from ...format.manifest import ManifestTable
from ...io.executor import Executor
from ...io.options import StorageOptions
from ...io.store import open_store
from ...read.cells import CellArray, rows_from_payload
from ...read.points import attribute_layout, attribute_rows
from ...write.level import LevelWriter
from ...write.store_writer import ByteBudget, StoreWriter
from .coarsen import COARSEN_ROW_BYTES, BlockInput, BlockOutput, Cells, coarsen_block, runs
from .plan import DeepStep, LevelPlan
from .writer import PyramidWriter


@dataclass(frozen=True)
class StepJob:
    """What every block task of one step shares; picklable (an engine ships it once per worker)."""

    plan: LevelPlan
    arrays: dict[str, md.ArrayMeta]  # source arrays the blocks read, path under the level -> ArrayMeta
    names: tuple[str, ...]  # vertex attributes
    dtype: np.dtype  # source positions
    codec: CellCodec  # of the new cells (never sharded)
    src_origin: tuple[int, ...]
    src_shape: tuple[int, ...]
    coarse_origin: tuple[int, ...]
    coarse_shape: tuple[int, ...]
    objects: bool
    links: bool
    explicit: bool
    seed: int
    deep: tuple[DeepStep, ...] = ()  # links of the finer levels to the target (cross_level_depth >= 2)
    taken: dict[str, list[str]] = field(default_factory=dict)  # array path -> families kept versions use



@dataclass
class BlockTask:
    """One block: its source chunks and (object levels) the surviving objects' references into them."""

    block: tuple[int, ...]
    chunks: np.ndarray  # (K, ndim)
    rows: int = 0  # estimated source rows (the memory budget of run_blocks)
    ref_chunk: np.ndarray | None = None  # (R,) row of ``chunks``
    ref_fragment: np.ndarray | None = None  # (R,)
    ref_count: np.ndarray | None = None  # (R,)
    deep: list[dict[str, np.ndarray]] = field(default_factory=list)  # per DeepStep: link array -> its chunks here


@dataclass
class BlockSummary:
    """What a block hands back to the commit: where its cells went, counts, and its fragment paths."""

    block: tuple[int, ...]
    cells: dict[str, np.ndarray]  # array path under the target level -> (k, ndim) chunks written
    up_cells: dict[str, np.ndarray]  # ``links/+1/...`` arrays under the source level -> chunks written
    vertex_count: int = 0
    links: int = 0
    seq_chunk: np.ndarray | None = None  # as in BlockOutput
    seq_fragment: np.ndarray | None = None
    seq_offsets: np.ndarray | None = None
    seq_coarse_chunk: np.ndarray | None = None
    seq_coarse_index: np.ndarray | None = None
    low_cells: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # ``+N`` arrays per finer level
    deep_links: dict[int, int] = field(default_factory=dict)  # N -> ``+N`` links


#: ``map_blocks(job, tasks)``: an engine's way of running block tasks; summaries in task order.
BlockMapper = Callable[[StepJob, list[BlockTask]], Awaitable[list[BlockSummary]]]


def plan_blocks(plan: LevelPlan, chunks: np.ndarray, table: ManifestTable | None = None,
                kept: np.ndarray | None = None, *,
                rows_per_chunk: float = 0.0) -> list[BlockTask]:
    """The blocks of one step, in block C-order; with a manifest ``table``, the references of ``kept`` objects.

    ``rows_per_chunk``: the source level's mean, which estimates each block's rows (``BlockTask.rows``).

    A reference (source chunk, fragment) is listed once per block with its
    count over the kept objects: the weight of its rows in the metavertices.
    """
    nd = plan.ndim
    if not len(chunks):
        return []
    blocks = plan.block_of(chunks)
    border = np.lexsort(blocks.T[::-1])
    bstarts, bcounts = runs(blocks[border])
    tasks = [BlockTask(tuple(int(v) for v in blocks[border[s]]), chunks[border[s:s + c]], round(c * rows_per_chunk))
             for s, c in zip(bstarts.tolist(), bcounts.tolist())]
    if table is None:
        return tasks
    empty = np.zeros(0, np.int64)
    for t in tasks:
        t.ref_chunk, t.ref_fragment, t.ref_count = empty, empty, empty
    is_kept = np.zeros(table.num_objects, bool)
    is_kept[kept] = True
    sel = is_kept[table.object_row]
    rkeys = np.concatenate([table.coords[sel], table.fragment[sel][:, None]], axis=1)
    if not len(rkeys):
        return tasks
    rkeys, rcount = np.unique(rkeys, axis=0, return_counts=True)
    rblock = plan.block_of(rkeys[:, :nd])
    rorder = np.lexsort(rblock.T[::-1])  # stable: references stay sorted inside a block
    rstarts, rcounts = runs(rblock[rorder])
    block_arr = np.asarray([t.block for t in tasks], np.int64)
    firsts = rblock[rorder[rstarts]]
    which = row_positions(block_arr, firsts) if len(block_arr) else empty
    if not len(block_arr) or np.any(block_arr[np.minimum(which, len(block_arr) - 1)] != firsts):
        raise FormatError(f"{plan.source}/object_index: a manifest names a chunk that "
                          f"{plan.source}/vertices does not list as non-empty")
    for j, (s, c) in enumerate(zip(rstarts.tolist(), rcounts.tolist())):
        t = tasks[int(which[j])]
        idx = rorder[s:s + c]
        t.ref_chunk = row_positions(t.chunks, rkeys[idx, :nd])
        t.ref_fragment, t.ref_count = rkeys[idx, nd], rcount[idx]
    return tasks


async def run_blocks(job: StepJob, arrays: dict[str, CellArray], tasks: list[BlockTask], writer: StoreWriter, *,
                     on_block: Callable[[int, int], object] | None = None) -> list[BlockSummary]:

    """Fetch, coarsen and upload ``tasks`` through ``writer``, ``tuning().pyramid_blocks_in_flight`` at a time
    and as many as ``tuning().pyramid_block_bytes`` holds by their estimate (:func:`block_bytes`); freed
    memory goes back to the OS after each block (:func:`release_freed_memory`).

    The one block loop of every engine; ``on_block(blocks_done, vertices)``
    is called as each block's cells are queued.
    """
    plan = job.plan
    out_level, up_level, low_levels = level_writers(writer, job)
    ex = arrays["vertices"].executor
    deep_arrays = [{name: CellArray(ex, f"{d.level}/{name}", meta) for name, meta in d.arrays.items()}
                   for d in job.deep]
    summaries: list[BlockSummary | None] = [None] * len(tasks)
    done = {"blocks": 0, "vertices": 0}
    channels: dict[str, int] = {}
    limiter = anyio.Semaphore(tuning().pyramid_blocks_in_flight)
    memory, row_bytes = ByteBudget(tuning().pyramid_block_bytes), block_bytes(job, arrays)

    async def run(i: int) -> None:
        async with limiter, _reserved(memory, tasks[i].rows * row_bytes):
            task = tasks[i]
            payloads, attr_payloads, frag_payloads = await _fetch_block(arrays, task.chunks, job.names)
            data = _decode_block(plan, arrays, task.block, task.chunks, payloads, attr_payloads, frag_payloads,
                                 job.dtype, channels)
            del payloads, attr_payloads, frag_payloads
            data.ref_chunk, data.ref_fragment, data.ref_count = task.ref_chunk, task.ref_fragment, task.ref_count
            data.deep = [await _fetch_deep(plan, d, deep_arrays[j], task.deep[j] if task.deep else {})
                         for j, d in enumerate(job.deep)]
            out = await anyio.to_thread.run_sync(functools.partial(coarsen_block, plan, data, seed=job.seed,
                                                                   objects=job.objects, deep=job.deep))
            del data
            cells, up_cells, low = await _upload(out, out_level, up_level, low_levels, links=job.links,
                                                 explicit=job.explicit)
            summaries[i] = BlockSummary(task.block, cells, up_cells, out.vertex_count, out.links, out.seq_chunk,
                                        out.seq_fragment, out.seq_offsets, out.seq_coarse_chunk,
                                        out.seq_coarse_index, low, out.deep_links)
            done["blocks"] += 1
            done["vertices"] += out.vertex_count
            if on_block is not None:
                on_block(done["blocks"], done["vertices"])

    async with anyio.create_task_group() as tg:
        for i in range(len(tasks)):
            tg.start_soon(run, i)
    return [s for s in summaries if s is not None]  # every task filled its slot (or the group raised)


def block_bytes(job: StepJob, arrays: dict[str, CellArray]) -> int:
    """Estimated bytes a block holds per source row while it is fetched and coarsened: the row's data
    (payload and decoded copies) and :data:`COARSEN_ROW_BYTES`."""
    data = job.dtype.itemsize * job.plan.ndim
    for name in job.names:
        dtype, row_shape = attribute_layout(arrays[f"vertex_attributes/{name}"])
        data += dtype.itemsize * math.prod(row_shape)
    return 2 * data + COARSEN_ROW_BYTES


@contextlib.asynccontextmanager
async def _reserved(budget: ByteBudget, n: int) -> AsyncIterator[None]:
    """Hold ``n`` of ``budget`` for one block; then hand what the block freed back to the OS."""
    await budget.acquire(n)
    try:
        yield
    finally:
        await budget.release(n)
        release_freed_memory()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None where the C library has none: macOS, musl, Windows)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, TypeError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> None:
    """Return the memory a finished block freed to the OS.

    glibc keeps freed memory in the arena of the thread that freed it (blocks are coarsened in worker
    threads), and once a large array has been freed it serves the next ones from those arenas rather
    than from fresh mappings: without this, a build's RSS grew block by block to 3-4x the traced peak
    of its blocks (2 M LAS points: 930 MiB against 275 MiB with it and the budget).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def run_block_task(url: str, storage_options: StorageOptions | None, job: StepJob, tasks: list[BlockTask], *,
                   max_inflight_bytes: int | None = None) -> list[BlockSummary]:
    """A block task on any worker: open the store from its spec, run ``tasks``, return their summaries.

    Every key it writes depends only on the block, and its bytes only on
    the source level, so a task rerun after its worker died rewrites the
    same objects.  The caller (driver) holds the store's lock and commits.
    ``max_inflight_bytes``: queued uploads (default ``tuning().pyramid_upload_bytes``).
    """
    upload_bytes = tuning().pyramid_upload_bytes if max_inflight_bytes is None else max_inflight_bytes

    async def main() -> list[BlockSummary]:
        ex = Executor(open_store(url, mode="a", storage_options=storage_options))
        arrays = {p: CellArray(ex, f"{job.plan.source}/{p}", meta) for p, meta in job.arrays.items()}
        async with PyramidWriter(ex, taken=job.taken, max_inflight_bytes=upload_bytes) as writer:
            return await run_blocks(job, arrays, tasks, writer)

    return anyio.run(main, backend="asyncio")


def assign_deep(plan: LevelPlan, tasks: list[BlockTask], deep: tuple[DeepStep, ...]) -> None:
    """Give each task the ``+(delta-1)`` link cells of every DeepStep's level that lie in its block."""
    if not deep or not tasks:
        return
    block_arr = np.asarray([t.block for t in tasks], np.int64)
    for t in tasks:
        t.deep = [{} for _ in deep]
    for j, d in enumerate(deep):
        for name, meta in sorted(d.arrays.items()):
            chunks = meta.nonempty_chunk_array
            if not len(chunks):
                continue
            blocks = np.floor_divide(chunks * np.asarray(d.chunk_units), np.asarray(plan.block))
            which = row_positions(block_arr, blocks)
            if np.any(block_arr[which] != blocks):
                raise FormatError(f"{d.level}/{name}: links from chunks with no vertex of {plan.source}/vertices "
                                  "in their block")
            order = np.argsort(which, kind="stable")
            starts, counts = runs(which[order][:, None])
            for a, c in zip(starts.tolist(), counts.tolist()):
                tasks[int(which[order[a]])].deep[j][name] = chunks[order[a:a + c]]


async def _fetch_deep(plan: LevelPlan, step: DeepStep, arrays: dict[str, CellArray],
                      chunks_of: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A block's ``+(delta-1)`` rows of ``step.level``: (fine chunk, fine row, source-level chunk, row there)."""
    nd = plan.ndim
    names = sorted(chunks_of)
    if not names:
        z = np.zeros((0, nd), np.int64)
        return z, z[:, 0], z, z[:, 0]
    got = await arrays[names[0]].executor.gather(
        [arrays[n].payloads([tuple(c) for c in chunks_of[n].tolist()]) for n in names])
    fc, fl, mc, ml = [], [], [], []
    s, t = np.asarray(step.scale), np.asarray(plan.src_scale)
    for n, payloads in zip(names, got):
        arr = arrays[n]
        off = np.asarray(arr.meta.attributes.get("offsets"), np.int64).reshape(-1, nd)[0]
        for ch, payload in zip(chunks_of[n], payloads):
            key = arr.key_of(arr.cell_coords(ch))
            if payload is None:
                raise FormatError(f"{key}: listed in nonempty_chunks but absent")
            rows, _ = decode_ragged_links(payload, 2, False, key=key)
            fc.append(np.repeat(ch[None, :], len(rows), axis=0))
            fl.append(rows[:, 0])
            mc.append(np.repeat((np.floor_divide(ch * s, t) + off)[None, :], len(rows), axis=0))
            ml.append(rows[:, 1])
    return np.concatenate(fc), np.concatenate(fl), np.concatenate(mc), np.concatenate(ml)


async def _upload(out: BlockOutput, level: LevelWriter, up: LevelWriter, low: dict[int, LevelWriter], *,
                  links: bool, explicit: bool
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """Queue a block's cells; returns the chunks written per array (target level, ``+1`` at the source,
    ``+N`` per finer level).

    Array documents come at the commit (:func:`declare_arrays`), from these lists.
    """
    async def put(lw: LevelWriter, cells_of: Cells, keep: Callable[[str], bool]) -> dict[str, np.ndarray]:
        written = {}
        for name, cells in cells_of.items():
            if keep(name):
                arr = lw.array(name, {})
                for ch, payload in cells:
                    await arr.add(lw.writer, ch, payload)
                written[name] = np.asarray([ch for ch, _ in cells], np.int64).reshape(len(cells), -1)
        cells_of.clear()
        return written

    return (await put(level, out.cells, lambda name: not name.startswith("links/") or (links and explicit)),
            await put(up, out.up_cells, lambda name: links),
            {lv: await put(low[lv], cells, lambda name: links) for lv, cells in out.low_cells.items()})


Payloads = list[bytes | memoryview | None]
"""One array's payload per chunk of a block (None: the cell is absent)."""


async def _fetch_block(arrays: dict[str, CellArray], chunks: np.ndarray,
                       names: Sequence[str]) -> tuple[Payloads, dict[str, Payloads], Payloads]:
    vert = arrays["vertices"]
    wanted = [vert, arrays["vertex_fragments"]] + [arrays[f"vertex_attributes/{n}"] for n in names]
    chunk_list = [tuple(c) for c in chunks.tolist()]
    got = await vert.executor.gather([a.payloads(chunk_list) for a in wanted])
    return got[0], dict(zip(names, got[2:])), got[1]


def _decode_block(plan: LevelPlan, arrays: dict[str, CellArray], block: tuple[int, ...], chunks: np.ndarray,
                  payloads: Payloads, attr_payloads: dict[str, Payloads], frag_payloads: Payloads, dtype: np.dtype,
                  channels: dict[str, int]) -> BlockInput:
    nd, src = plan.ndim, plan.source
    pos, fis, starts = [], [], [0]
    attrs: dict[str, list[np.ndarray]] = {n: [] for n in attr_payloads}
    for k, ch in enumerate(chunks.tolist()):
        key = f"{src}/vertices/{ch}"
        rows = rows_from_payload(payloads[k], dtype, (nd,), key=key)
        pos.append(rows)
        starts.append(starts[-1] + len(rows))
        fp = frag_payloads[k]
        fis.append(decode_fragment_index(fp, key=f"{src}/vertex_fragments/{ch}", n_rows=len(rows))
                   if fp is not None else FragmentIndex.from_ranges([0], [len(rows)]))
        for n, pl in attr_payloads.items():
            arr = arrays[f"vertex_attributes/{n}"]
            attrs[n].append(attribute_rows(n, arr, pl[k], len(rows), f"{src}/vertex_attributes/{n}", channels))
    positions = np.concatenate(pos) if pos else np.zeros((0, nd), dtype)
    return BlockInput(tuple(int(b) for b in block), chunks, np.asarray(starts, np.int64), positions,
                      {n: np.concatenate(v) for n, v in attrs.items()}, fis)


def level_writers(writer: StoreWriter, job: StepJob) -> tuple[LevelWriter, LevelWriter, dict[int, LevelWriter]]:
    """Writers of the target level, the source level (``+1``) and the finer levels (``+N``, N >= 2)."""
    plan = job.plan
    return (LevelWriter(writer, plan.target, job.coarse_origin, job.coarse_shape, job.codec),
            LevelWriter(writer, plan.source, job.src_origin, job.src_shape, job.codec),
            {d.level: LevelWriter(writer, d.level, d.origin, d.shape, job.codec) for d in job.deep})
