"""What every distributed write shares: the job (its state under ``.zvf-jobs/<job>/`` in the store), the
routing tasks' spill objects, the cut of chunks into cell tasks and the task summaries.

The point tasks (:mod:`.points.tasks`) and the object tasks (:mod:`.objects.tasks`) are both plan -> map
-> commit over these: :func:`start` claims the store (or resumes the job that holds it), routing tasks
upload their rows with :func:`upload_spill`, cell tasks read theirs back with :func:`read_spilled`, and
the commit ends with :func:`discard`.  Every key a task writes is a function of the job and the task's
index, so a retried task rewrites the same objects with the same bytes.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..errors import FormatError, InvalidArgumentError, StoreExistsError
from ..format.codecs import CellCodec
from ..format.layout import LevelLayout
from ..format.metadata import CLAIM_KEY
from ..format.shard import shard_coords
from ..io.executor import Executor
from ..io.plan import ByteRange
from ..io.store import open_store
from . import inputs
from .level import ShardShape, shard_tuple
from .spill import RunSpill
from .store_writer import StoreWriter

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

    from ..io.options import StorageOptions
    from .types import Bounds, Shape


BatchT = TypeVar("BatchT")
BatchT_contra = TypeVar("BatchT_contra", contravariant=True)

JOBS_PREFIX = ".zvf-jobs/"


@dataclass(frozen=True)
class WriteJob:
    """Everything a task needs, picklable: where the store is and how it is laid out."""

    url: str
    storage_options: dict[str, Any] | None
    job: str
    chunk_shape: tuple[float, ...]
    bin_shape: tuple[float, ...] | None
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None
    dtype: str | None
    compression: str | None
    shard_shape: tuple[int, ...] | None
    implicit_ids: bool  # groups without object ids: every row is an object, numbered in input order
    geometry: str = "point_cloud"

    @property
    def prefix(self) -> str:
        return f"{JOBS_PREFIX}{self.job}/"

    def layout(self, *, with_ids: bool) -> LevelLayout:
        """Level 0's layout, under the placement rule of rows with (or without) object ids."""
        return LevelLayout.for_writing(list(self.chunk_shape), None if self.bin_shape is None else list(self.bin_shape),
                                       with_ids=with_ids)

    def codec(self) -> CellCodec:
        return CellCodec.for_writing(self.compression, shard_tuple(self.shard_shape, len(self.chunk_shape)))

    def executor(self) -> Executor:
        return Executor(open_store(self.url, mode="w", storage_options=self.storage_options))

    def params(self) -> dict[str, Any]:
        """What a resumed job must agree on (JSON)."""
        return {k: v for k, v in asdict(self).items() if k not in ("storage_options",)}


def new_job(url: str, storage_options: StorageOptions | Mapping[str, Any] | None, *, job: str | None,
            chunk_shape: Shape, bin_shape: Shape | None, bounds: Bounds | None, dtype: DTypeLike | None,
            compression: str | None, shard_shape: ShardShape, implicit_ids: bool = False,
            geometry: str = "point_cloud") -> WriteJob:
    """Check the layout arguments once, on the driver (the same checks ``write_points`` makes)."""
    if isinstance(chunk_shape, str):
        raise InvalidArgumentError("chunk_shape: a distributed write needs numbers per axis ('auto' looks at "
                                   "all the data first)")
    if isinstance(shard_shape, str) and shard_shape == "auto":
        raise InvalidArgumentError("shard_shape: a distributed write needs cells per shard ('auto' is sized from "
                                   "the whole level's grid, which the tasks only learn together)")
    ndim = LevelLayout.for_writing(chunk_shape, bin_shape, with_ids=False).ndim
    shard = shard_tuple(shard_shape, ndim)
    CellCodec.for_writing(compression, shard)
    box = None
    if bounds is not None:
        lo, hi = inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
        box = (tuple(lo), tuple(hi))
    dtype_str = None if dtype is None else np.dtype(dtype).str
    if job is not None and (not isinstance(job, str) or not job or "/" in job):
        raise InvalidArgumentError(f"job must be a non-empty name without '/', got {job!r}")

    def plain(v: ArrayLike) -> tuple[float, ...]:  # as the caller gave it (0.9.2 records ints as ints)
        return tuple(x.item() if hasattr(x, "item") else x for x in np.ravel(v).tolist())

    return WriteJob(url, None if storage_options is None else dict(storage_options), job or uuid.uuid4().hex,
                    plain(chunk_shape), None if bin_shape is None else plain(bin_shape), box, dtype_str, compression,
                    shard, implicit_ids, geometry)


def pack_summary(summary: Mapping[str, Any]) -> bytes:
    """A task summary as one .npz: arrays as themselves, the rest as JSON (never pickled)."""
    arrays = {k: v for k, v in summary.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in summary.items() if not isinstance(v, np.ndarray)}
    buf = io.BytesIO()
    # mypy matches the ``**arrays`` names against savez's ``allow_pickle``: they are summary keys, never that one
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack_summary(blob: bytes, key: str) -> dict[str, Any]:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            out: dict[str, Any] = json.loads(bytes(z["__meta__"]).decode())
            out.update((k, z[k]) for k in z.files if k != "__meta__")
    except (ValueError, KeyError, OSError) as exc:
        raise FormatError(f"{key}: not a zvf job summary ({exc})") from None
    return out


async def load_summaries(ex: Executor, prefix: str) -> dict[int, dict[str, Any]]:
    """Summaries stored under ``prefix`` (``NNNNNN.npz``), by task index."""
    keys = [k for k, _ in await ex.list(prefix) if k.endswith(".npz")]
    blobs = await ex.gather([ex.get(k) for k in keys])
    return {int(k.rsplit("/", 1)[1][:-4]): unpack_summary(b, k) for k, b in zip(keys, blobs) if b is not None}


class BatchSink(Protocol[BatchT_contra]):
    """A routing task's spill: takes one batch at a time (InvalidArgumentError for a bad one)."""

    def add(self, batch: BatchT_contra) -> None: ...


def add_source(spill: BatchSink[BatchT], batches: Iterable[BatchT], index: int) -> None:

    """Feed one source's batches to a routing task's spill; its errors name the source."""
    try:
        for batch in batches:
            spill.add(batch)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"sources[{index}]: {exc}") from None


async def upload_spill(ex: Executor, key: str, rows: RunSpill, coords: np.ndarray,
                       convert: Callable[[str, np.ndarray], np.ndarray] | None = None
                       ) -> tuple[list[list[Any]], np.ndarray, np.ndarray]:
    """Upload every row of a finished ``rows`` spill as one object at ``key``: chunks in C order, input order
    within a chunk, each column a contiguous block.  ``coords``: chunk coords by id; ``convert(name, col)``
    rewrites a column on the way (e.g. chunk ids, local to this spill, to coordinates).  Returns the column
    layout (name, dtype, row shape, byte offset) and the (C order) chunks with their row counts."""
    order = np.lexsort(coords.T[::-1]) if len(coords) else np.zeros(0, np.int64)  # C order of chunks
    parts: dict[str, list[np.ndarray]] = {}
    counts = np.zeros(len(order), np.int64)
    for i, gid in enumerate(order.tolist()):
        cols = rows.read(gid)
        counts[i] = len(next(iter(cols.values()))) if cols else 0
        for name, col in cols.items():
            parts.setdefault(name, []).append(col if convert is None else convert(name, col))
    layout, blobs, offset = [], [], 0
    for name, (dtype, row_shape) in (rows.schema or {}).items():
        if name in parts:
            col = np.concatenate(parts.pop(name))
        else:
            col = np.zeros((0, *row_shape), dtype)
            if convert is not None:
                col = convert(name, col)
        data = np.ascontiguousarray(col).tobytes()
        layout.append([name, col.dtype.str, list(col.shape[1:]), offset])
        blobs.append(data)
        offset += len(data)
    await ex.put(key, b"".join(blobs))
    return layout, coords[order].astype(np.int64).reshape(-1, coords.shape[1]), counts


@dataclass
class GridPlan:
    """What routed sources add up to and how their chunks are cut into cell tasks: the part of a
    plan every distributed writer (points here, objects in ``objects.tasks``) shares."""

    n: int
    dtype: np.dtype
    attributes: dict[str, tuple[np.dtype, tuple[int, ...]]]
    lo: list[float]
    hi: list[float]
    origin: tuple[int, ...]
    grid_shape: tuple[int, ...]
    chunks: np.ndarray  # (C, ndim) every chunk, C order
    groups: list[np.ndarray]  # rows of ``chunks``, one array per cell task
    source_chunks: list[np.ndarray]  # per source: row in ``chunks`` of each chunk of its spill


def extent(job: WriteJob, summaries: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """The store's bounds: the job's, else the union of the sources' extents."""
    if job.bounds is not None:
        lo, hi = (list(c) for c in job.bounds)
        return lo, hi
    full = [s for s in summaries if s["n"]]
    if not full:
        raise InvalidArgumentError("bounds are required when there are no positions")
    return (np.min([s["lo"] for s in full], axis=0).astype(np.float64).tolist(),
            np.max([s["hi"] for s in full], axis=0).astype(np.float64).tolist())


def chunk_groups(chunks: np.ndarray, rows: np.ndarray, origin: Sequence[int], shard: tuple[int, ...] | None,
                 rows_per_task: int) -> list[np.ndarray]:
    """Chunks cut into runs of about ``rows_per_task`` rows; a shard never spans two groups."""
    if not len(chunks):
        return []
    if shard is None:
        unit = np.arange(len(chunks))
        order = unit
    else:
        sc = shard_coords(chunks - np.asarray(origin), shard).reshape(len(chunks), -1)
        order = np.lexsort((np.arange(len(chunks)), *sc.T[::-1]))
        sorted_sc = sc[order]
        unit = np.concatenate(([0], np.cumsum(np.any(sorted_sc[1:] != sorted_sc[:-1], axis=1))))
    unit_rows = np.bincount(unit, weights=rows[order]).astype(np.int64)
    group_of_unit = np.zeros(len(unit_rows), np.int64)
    acc, g = 0, 0
    for u, r in enumerate(unit_rows.tolist()):  # one step per shard/chunk, not per row
        if acc and acc + r > rows_per_task:
            g, acc = g + 1, 0
        group_of_unit[u] = g
        acc += r
    gid = group_of_unit[unit]
    cut = np.flatnonzero(gid[1:] != gid[:-1]) + 1
    return [np.sort(part) for part in np.split(order, cut)]


def cell_writer(ex: Executor) -> StoreWriter:
    """A task's writer: uploads cells only (the driver claimed the store and publishes its documents)."""
    return StoreWriter(ex, claim=False, publish=False)


def source_slices(group: np.ndarray, source_chunks: list[np.ndarray], sources: list[dict[str, Any]], *,
                  counts: str = "counts", columns: str = "columns") -> list[dict[str, Any]]:
    """Only what a task writing ``group`` (sorted rows of the plan's chunks) needs of each source summary
    (small task arguments): ``source_chunks[i]`` locates source ``i``'s spilled chunks in the plan's,
    ``sources[i][counts]`` their row counts and ``sources[i][columns]`` the spill's column layout."""
    out = []
    for s, idx in zip(sources, source_chunks):
        starts = np.concatenate(([0], np.cumsum(s[counts])[:-1])).astype(np.int64)
        k = np.minimum(np.searchsorted(group, idx), max(len(group) - 1, 0))
        hit = np.flatnonzero(group[k] == idx) if len(group) else np.zeros(0, np.int64)
        out.append({"chunk": k[hit], "row": starts[hit], "count": s[counts][hit], "columns": s[columns]})
    return out


async def read_spilled(ex: Executor, folder: str, sources: list[dict[str, Any]]
                       ) -> dict[str, list[tuple[int, int, np.ndarray]]]:
    """The rows of a task's chunks from every source's spill ``<folder><source>.bin`` (one coalesced read).

    ``sources``: :func:`source_slices` of the task.  Returns, per column,
    ``(chunk in group, source, rows)`` sorted chunk by chunk, sources in input
    order -- the order the concatenated input has them.
    """
    ranges, where = [], []
    for si, s in enumerate(sources):
        if not len(s["count"]) or not int(s["count"].sum()):
            continue
        for name, d, r, off in s["columns"]:
            dtype, row_shape = np.dtype(d), tuple(r)
            rb = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
            for k, row, c in zip(s["chunk"].tolist(), s["row"].tolist(), s["count"].tolist()):
                ranges.append(ByteRange(f"{folder}{si:06d}.bin", off + row * rb, off + (row + c) * rb))
                where.append((k, si, name, dtype, row_shape, c, rb))
    payloads = await ex.read_ranges(ranges)
    pieces: dict[str, list[tuple[int, int, np.ndarray]]] = {}
    for (k, si, name, dtype, row_shape, c, rb), blob in zip(where, payloads):
        if blob is None or len(blob) != c * rb:
            raise FormatError(f"{folder}{si:06d}.bin: missing or shorter than its summary says")
        pieces.setdefault(name, []).append((k, si, np.frombuffer(blob, dtype).reshape(c, *row_shape)))
    for got in pieces.values():
        got.sort(key=lambda p: (p[0], p[1]))
    return pieces


async def start(job: WriteJob, *, overwrite: bool, n_sources: int
                ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """Claim the store (or resume the job that claimed it); returns the finished (route, cells) summaries."""
    ex = job.executor()
    manifest_key = f"{job.prefix}job.json"
    saved = await ex.get(manifest_key)
    if saved is not None:
        state = json.loads(saved)
        params = json.loads(json.dumps({**job.params(), "sources": n_sources}))
        if state.get("params") != params:
            raise InvalidArgumentError(f"{ex.handle.url}: job {job.job!r} was started with other arguments "
                                       f"({state.get('params')}); start a new job or pass the same ones")
        if await ex.get(CLAIM_KEY) != state["claim"].encode():
            raise StoreExistsError(f"{ex.handle.url}: job {job.job!r} no longer holds the store's claim")
        return await load_summaries(ex, f"{job.prefix}map/"), await load_summaries(ex, f"{job.prefix}cells/")
    claimer = StoreWriter(ex, overwrite=overwrite, lease=None)  # held across processes: never presumed dead
    await claimer.claim()  # the serial writers' claim: one writer per new store
    if claimer.publication is not None:  # workers write cells in the default key family: not over a store
        assert claimer.lock is not None  # claim() took it before it began a publication
        await claimer.lock.release()
        raise StoreExistsError(f"{ex.handle.url}: a distributed write makes a new store; to replace the store "
                               "there, write it elsewhere (or with the in-process writer, which keeps it readable "
                               "until the new one is published)")
    claim = (await ex.get(CLAIM_KEY) or b"").decode()
    state = {"params": {**job.params(), "sources": n_sources}, "claim": claim}
    await ex.put(manifest_key, json.dumps(state).encode())
    return {}, {}


def commit_writer(ex: Executor, *, overwrite: bool, consolidate: bool) -> StoreWriter:
    """The job's commit: publishes documents and the root over cells already uploaded (the claim is the job's)."""
    return StoreWriter(ex, overwrite=overwrite, consolidate=consolidate, claim=False)


async def discard(job: WriteJob) -> None:
    """Remove the job's spills and summaries (after its commit, or to abandon it)."""
    ex = job.executor()
    keys = [k for k, _ in await ex.list(job.prefix)]
    if keys:
        await ex.delete(keys)
