"""Vertex reads by chunk: the bbox query and the full read.

A query resolves to the stored chunks the closed box touches; their
vertex, fragment and attribute cells are fetched together, and rows are
kept by an exact closed-box test.  Object ids, when the store has them,
come from the fragment each row belongs to (one fragment per object and
chunk) and the inverted object index.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

import numpy as np

from ..config import tuning
from ..errors import FormatError, InvalidArgumentError
from ..format.fragments import FragmentIndex, decode_fragment_index, tiling_counts
from ..format.grid import inside
from ..format.seekable import frame_bounds_size, seek_table_size
from ..io.plan import choose_fetch
from .cells import CellArray, ChunkCoords, ChunkList, SeekGuess, group_by_shard, rows_from_payload
from .selection import Selection

if TYPE_CHECKING:
    import numpy.typing as npt
    from numpy.typing import NDArray

    from ..io.executor import Executor
    from .context import Owners, ReadContext
    from .load import Level

T = TypeVar("T")
#: Payloads of the cells read, per array name: one per chunk (None where the chunk has no cell).
Payloads: TypeAlias = dict[str, list[bytes | memoryview | None]]
#: A closed box (lo, hi).
Box: TypeAlias = tuple[np.ndarray, np.ndarray]
#: What :func:`chunk_owners` needs of a chunk's fragment index (see :func:`labelling_index`).
Labelling: TypeAlias = np.ndarray | FragmentIndex
#: The rows of a chunk an answer takes: None (every row), a bool mask over them, or their int64 indexes.
Pick: TypeAlias = "np.ndarray | None"
#: A box edge must clear a chunk's nominal edge by this share of its magnitude for the chunk to count as
#: inside without a test of its rows: far above the rounding of either placement rule's division, and the
#: 1e-9 a level's chunk/bin ratio may be off a whole number by.
EDGE_SLACK = 1e-6


def attribute_layout(arr: CellArray) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, row_shape) of a vertex attribute array from its attributes.

    0.9.2 writes a one-channel ``(N, 1)`` attribute as ``row_shape: []`` with a
    single channel name (a scalar one has none): it reads back as ``(N, 1)``.
    """
    attrs = arr.meta.attributes
    row_shape = tuple(int(x) for x in attrs.get("row_shape") or ())
    names = attrs.get("channel_names")
    if not row_shape and isinstance(names, list) and len(names) == 1:
        row_shape = (1,)
    return np.dtype(attrs.get("dtype", "float32")), row_shape


def attribute_rows(name: str, arr: CellArray, payload: bytes | memoryview | None, n_vertices: int, key: str,
                   channels: dict[str, int]) -> np.ndarray:
    """Attribute rows of a chunk, aligned with its vertices.

    0.9.2's polyline and graph writers store multi-channel attributes with
    ``row_shape: []``; the channel count is then read off the payload (a
    whole multiple of the vertex count, the same in every chunk: ``channels``
    remembers it across chunks).
    """
    adt, rshape = attribute_layout(arr)
    rows = rows_from_payload(payload, adt, rshape, key=key)
    if len(rows) != n_vertices and not rshape and n_vertices and len(rows) % n_vertices == 0:
        width = len(rows) // n_vertices
        if channels.setdefault(name, width) != width:
            raise FormatError(f"{key}: {width} values per vertex, other chunks hold {channels[name]}")
        rows = rows.reshape(n_vertices, width)
    elif rshape or len(rows):
        channels.setdefault(name, rows.shape[1] if rows.ndim == 2 else 0)
    if len(rows) != n_vertices:
        raise FormatError(f"{key}: {len(rows)} attribute rows for {n_vertices} vertices")
    return rows


def pick_attributes(level: Level, attributes: str | Sequence[str] | None) -> list[str]:
    names = level.named("vertex_attributes")
    if attributes is None:
        return names
    if isinstance(attributes, str):
        attributes = [attributes]
    missing = [a for a in attributes if a not in names]
    if missing:
        raise InvalidArgumentError(f"attributes {missing} not in this store (it has {names})")
    return list(attributes)


def level_attributes(lvl: Level, attributes: str | Sequence[str] | None) -> tuple[list[str], bool]:
    """(stored vertex attribute names to read, whether to add the chunking attribute's values).

    An attribute-chunked level keeps its chunking attribute only as the
    category axis; it is read back as a per-row attribute like the others.
    Draco chunks reorder vertices, so their stored attributes (kept in the
    input order) cannot be aligned: none by default, an error when asked for.
    """
    cat = lvl.category_name
    asked = [attributes] if isinstance(attributes, str) else attributes
    with_cat = cat is not None and (asked is None or cat in asked)
    rest = None if asked is None else [a for a in asked if a != cat]
    if lvl.is_draco():
        if rest:
            raise FormatError(f"{lvl.index}/vertex_attributes/{rest[0]}: attributes of Draco-encoded vertices "
                              "were stored in the pre-Draco vertex order and cannot be aligned with them")
        return [], with_cat
    return pick_attributes(lvl, rest), with_cat


async def off_loop(nbytes: int, fn: Callable[[], T], limit: int | None = None) -> T:
    """``fn()``, in a worker thread when it decodes more than ``limit`` bytes (default: the ``offload_bytes``
    setting): the event loop keeps issuing requests meanwhile (zstd and numpy's copies run without the GIL)."""
    if nbytes > (tuning().offload_bytes if limit is None else limit):
        import anyio

        return await anyio.to_thread.run_sync(fn)
    return fn()


async def read_chunks(rc: ReadContext, level: Level, chunks: np.ndarray, names: list[str], box: Box | None = None,
                      sweep: bool = False) -> Selection:
    """Rows of the given chunks (optionally only those inside ``box``); ``sweep``: the caller reads the whole
    level this way, batch by batch, so sharded fragment indexes (small beside their rows) come a shard at a
    time and stay cached for the next batches."""
    labelled = rc.has_objects(level.index)
    found = {"vertices": level.array("vertices")}
    found.update({f"vertex_attributes/{n}": level.array(f"vertex_attributes/{n}") for n in names})
    if labelled:
        found["vertex_fragments"] = level.array("vertex_fragments")
    missing = [name for name, arr in found.items() if arr is None]
    if missing:
        raise FormatError(f"{level.index}/{missing[0]}/zarr.json: missing or not an array")
    arrays = {name: arr for name, arr in found.items() if arr is not None}
    vert = arrays["vertices"]
    chunk_list = list(map(tuple, chunks.tolist()))
    if box is None and len(chunks) == len(level.nonempty_chunks) and np.array_equal(chunks, level.nonempty_chunks):
        return await read_level(rc, level, arrays, chunk_list, names, labelled)
    owners: Owners | None = None
    if labelled:  # the cells download while the object index is decoded to label their rows
        got = await vert.executor.gather([fetch(vert.executor, arrays, chunk_list, None, sweep),
                                          rc.fragment_owners(level.index)])
        # one gather of two differently typed awaitables: its result type joins them to object
        payloads, owners = cast("Payloads", got[0]), cast("Owners", got[1])
    else:
        spans = None if box is None else await narrow(level, chunks, arrays, box)
        payloads = await fetch(vert.executor, arrays, chunk_list, spans)
    nbytes = sum(len(p) for ps in payloads.values() for p in ps if p is not None)
    args = (level, arrays, chunk_list, names, payloads, owners, box)
    if nbytes > tuning().offload_bytes:
        import anyio

        return await anyio.to_thread.run_sync(assemble, *args)
    return assemble(*args)


async def read_level(rc: ReadContext, level: Level, arrays: dict[str, CellArray], chunk_list: list[tuple[int, ...]],
                     names: list[str], labelled: bool) -> Selection:
    """Every stored chunk of a level, each chunk's rows placed as its cells arrive.

    The vertex count in the level's metadata sizes the outputs up front (at most the ``prealloc_rows``
    setting: a vertex count that lies costs no more memory than that; more rows are made room for as they
    arrive, by doubling; the read ends in an error if the cells hold another number of rows), so
    decoding, copying and labelling rows with their object overlap the
    download of the chunks still to come (chunks are placed in order, each
    once every earlier one is in), and no end-of-read concatenation copies
    them again.  Labels wait for the object index, decoded alongside.
    """
    vert = arrays["vertices"]
    ex = vert.executor
    rows = LevelRows(level, arrays, chunk_list, names, labelled,
                     min(level.meta.vertex_count, tuning().prealloc_rows))
    size_concurrency(level, len(chunk_list) * len(arrays), len(names))
    sharded = any(arr.codec.shard is not None for arr in arrays.values())
    if sharded or ex.batch_gets:
        # a shard's chunks together, so the shard comes in one request; else (local files, memory: get_many
        # fetches a run of cells per worker-thread call) runs of consecutive chunks
        groups = shard_groups(arrays, chunk_list) if sharded else batch_groups(len(chunk_list), ex.concurrency)
        todo = iter(groups)

        async def worker(_: int) -> None:
            for group in todo:
                payloads = await fetch(ex, arrays, [chunk_list[i] for i in group], None)
                for j, i in enumerate(group):
                    rows.arrived(i, {name: ps[j] for name, ps in payloads.items()})
        n_jobs = len(groups)
    else:  # one request per cell, in chunk order; a chunk is decoded when its last cell lands
        landed: dict[int, dict[str, bytes | memoryview | None]] = {}
        todo_cells = iter([(i, name) for i in range(len(chunk_list)) for name in arrays])

        async def worker(_: int) -> None:
            for i, name in todo_cells:
                got = landed.setdefault(i, {})
                got[name] = await arrays[name].payload(chunk_list[i])
                if len(got) == len(arrays):
                    rows.arrived(i, landed.pop(i))
        n_jobs = len(chunk_list) * len(arrays)

    async def fetch_all() -> None:
        await ex.map(worker, range(min(n_jobs, ex.concurrency)))  # as many as the limit: map widens no further

    async def label() -> None:
        rows.label_with(await rc.fragment_owners(level.index))

    async def allocate() -> None:
        rows.take(await off_loop(rows.cap * rows.ndim * rows.dtype.itemsize, rows.allocate))

    # the object index's requests queue first: its decoding is the longest job besides the download
    await ex.gather([label(), allocate(), fetch_all()] if labelled else [allocate(), fetch_all()])
    return rows.finish()


def size_concurrency(level: Level, n_requests: int, n_attributes: int) -> None:
    """Let the store-wide limit fit a read of every cell of a level (bytes estimated from the vertex count)."""
    vert = level.array("vertices")
    if vert is None or not n_requests:
        return
    row = np.dtype(vert.meta.attributes.get("dtype", "float32")).itemsize * level.layout.ndim
    vert.executor.widen(n_requests, max(1, level.meta.vertex_count) * row * (1 + n_attributes))


def batch_groups(n_chunks: int, width: int) -> list[list[int]]:
    """Runs of consecutive chunks, a few per worker so every worker stays busy to the end."""
    per = max(1, -(-n_chunks // (4 * max(1, width))))
    return [list(range(i, min(i + per, n_chunks))) for i in range(0, n_chunks, per)]


def shard_groups(arrays: Mapping[str, CellArray], chunk_list: list[tuple[int, ...]]) -> list[list[int]]:
    """Chunks fetched together: those of one shard of the vertex cells, or of the first sharded array when
    the vertices are not (zvf shards an object level's fragment indexes alone); one each when none is."""
    vert = arrays["vertices"]
    arr = vert if vert.codec.shard is not None else next((a for a in arrays.values() if a.codec.shard), None)
    shard = None if arr is None else arr.codec.shard
    if arr is None or shard is None or not chunk_list:
        return [[i] for i in range(len(chunk_list))]
    return list(group_by_shard(np.asarray(chunk_list, dtype=np.int64) - arr.origin, shard).values())


class LevelRows:
    """The outputs of a whole-level read, filled chunk by chunk in chunk order."""

    def __init__(self, level: Level, arrays: dict[str, CellArray], chunk_list: list[tuple[int, ...]], names: list[str],
                 labelled: bool, capacity: int) -> None:
        self.arrays, self.chunk_list, self.names = arrays, chunk_list, names
        vert = arrays["vertices"]
        self.dtype = np.dtype(vert.meta.attributes.get("dtype", "float32")).newbyteorder("<")
        self.ndim = level.layout.ndim
        self.cap = max(0, int(capacity))
        self.labelled = labelled
        self.pos: np.ndarray | None = None  # set by take(allocate()): chunks wait in ``pending`` till then
        self.attrs: dict[str, np.ndarray | None] = {n: None for n in names}
        self.oids: np.ndarray | None = None
        self.channels: dict[str, int] = {}
        # chunk index -> decoded rows waiting for earlier chunks: (positions, attributes, labelling)
        self.pending: dict[int, tuple[np.ndarray, dict[str, np.ndarray], Labelling | None]] = {}
        self.next = 0  # first chunk not placed yet
        self.at = 0  # rows placed so far
        self.owners: Owners | None = None
        # (chunk, first row, rows, fragment index) placed before the owners came
        self.unlabelled: list[tuple[int, int, int, Labelling]] = []
        self.keys = {name: arr.keys_of(chunk_list) for name, arr in arrays.items()}  # for error messages
        self.vertex_count, self.level_key = level.meta.vertex_count, f"{level.index}/zarr.json"
        self.decoded = 0  # rows decoded so far, placed or pending

    def arrived(self, i: int, payloads: Mapping[str, bytes | memoryview | None]) -> None:
        """Decode chunk ``i`` from its cells' payloads; place every chunk whose predecessors are all in."""
        keys = self.keys
        pos = rows_from_payload(payloads["vertices"], self.dtype, (self.ndim,), key=keys["vertices"][i])
        self.decoded += len(pos)
        if self.decoded > self.vertex_count:
            raise FormatError(f"{self.level_key}: vertex_count is {self.vertex_count}, but the cells read so far "
                              f"hold {self.decoded} rows (the last: {keys['vertices'][i]})")
        attrs: dict[str, np.ndarray] = {}
        for n in self.names:
            name = f"vertex_attributes/{n}"
            attrs[n] = attribute_rows(n, self.arrays[name], payloads[name], len(pos), keys[name][i], self.channels)
        fi = None
        if self.labelled:
            fi = labelling_index(payloads["vertex_fragments"], len(pos), keys["vertex_fragments"][i])
        self.pending[i] = (pos, attrs, fi)
        self._place_ready()

    def allocate(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The outputs, the pages of their first ``prefault_rows`` rows (a setting) touched once (pure: a worker
        thread pays the kernel's page zeroing while the first cells download, instead of the event loop as it
        copies rows in)."""
        ahead = tuning().prefault_rows
        oids = prefaulted((self.cap,), np.int64, ahead) if self.labelled else None
        return prefaulted((self.cap, self.ndim), self.dtype, ahead), oids

    def take(self, outputs: tuple[np.ndarray, np.ndarray | None]) -> None:
        self.pos, self.oids = outputs
        self._place_ready()

    def _place_ready(self) -> None:
        while self.pos is not None and self.next in self.pending:
            self._place(self.next, *self.pending.pop(self.next))
            self.next += 1

    def _grow(self, need: int) -> None:
        """More room than the metadata's vertex count promised (kept correct, not fast)."""
        cap = max(need, 2 * self.cap)
        assert self.pos is not None
        self.pos = _regrown(self.pos, cap)
        self.attrs = {n: None if a is None else _regrown(a, cap) for n, a in self.attrs.items()}
        self.oids = None if self.oids is None else _regrown(self.oids, cap)
        self.cap = cap

    def _place(self, i: int, pos: np.ndarray, attrs: dict[str, np.ndarray], fi: Labelling | None) -> None:
        at, n = self.at, len(pos)
        if at + n > self.cap:
            self._grow(at + n)
        assert self.pos is not None
        self.pos[at:at + n] = pos
        for name, rows in attrs.items() if n else ():
            out = self.attrs[name]
            if out is None:
                out = self.attrs[name] = np.empty((self.cap, *rows.shape[1:]), rows.dtype)
            out[at:at + n] = rows
        if fi is not None:
            if self.owners is None:
                self.unlabelled.append((i, at, n, fi))
            else:
                self._label(i, at, n, fi)
        self.at = at + n

    def label_with(self, owners: Owners) -> None:
        """The object index is decoded: label the rows placed so far, and every later chunk as it lands."""
        self.owners = owners
        for item in self.unlabelled:
            self._label(*item)
        self.unlabelled = []

    def _label(self, i: int, at: int, n: int, fi: Labelling) -> None:
        assert self.oids is not None and self.owners is not None
        self.oids[at:at + n] = chunk_owners(fi, self.owners.get(self.chunk_list[i]), n)

    def finish(self) -> Selection:
        if self.next != len(self.chunk_list):  # pragma: no cover - every chunk's fetch either lands or raises
            raise FormatError(f"{self.arrays['vertices'].path}: {len(self.chunk_list) - self.next} chunks never placed")
        total = self.at
        if total != self.vertex_count:
            raise FormatError(f"{self.level_key}: vertex_count is {self.vertex_count}, but the level's cells hold "
                              f"{total} rows")
        trim: Callable[[np.ndarray], np.ndarray] = (lambda a: a) if total == self.cap else (lambda a: a[:total].copy())
        attrs: dict[str, np.ndarray] = {}
        for n, out in self.attrs.items():
            if out is None:
                adt, rshape = attribute_layout(self.arrays[f"vertex_attributes/{n}"])
                out = np.zeros((0, *(rshape or ((self.channels[n],) if self.channels.get(n) else ()))), adt)
            attrs[n] = trim(out) if len(out) else out
        oids = None if self.oids is None else trim(self.oids)
        assert self.pos is not None  # allocate() ran: the read gathers it with the fetches
        return Selection(trim(self.pos), attrs, oids)


def prefaulted(shape: tuple[int, ...], dtype: npt.DTypeLike, rows: int) -> np.ndarray:
    """``np.empty(shape, dtype)`` with one byte of every page of its first ``rows`` rows written (numpy drops
    the GIL for it)."""
    out = np.empty(shape, dtype)
    out[:rows].reshape(-1).view(np.uint8)[::4096] = 0
    return out


def _regrown(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty((cap, *a.shape[1:]), a.dtype)
    out[:len(a)] = a
    return out


def labelling_index(payload: bytes | memoryview | None, n_rows: int, key: str) -> Labelling:
    """What :func:`chunk_owners` needs of a chunk's fragment index: its fragments' row counts when they
    tile the chunk (how writers lay out every level-0 chunk), else the whole decoded index."""
    payload = payload or b""
    counts = tiling_counts(payload, n_rows)
    return counts if counts is not None else decode_fragment_index(payload, key=key, n_rows=n_rows)


def chunk_owners(fi: Labelling, per_frag: np.ndarray | None, n_rows: int) -> np.ndarray:
    """Object id of each of a chunk's ``n_rows`` rows from its fragment index, or from its fragments' row
    counts when they tile the chunk (:func:`tiling_counts`); -1 where no object names a row."""
    if isinstance(fi, np.ndarray):
        if per_frag is not None and len(per_frag) >= len(fi):
            return np.repeat(per_frag[: len(fi)], fi)
        fi = FragmentIndex.from_ranges(np.cumsum(fi) - fi, fi)
    if per_frag is not None and len(per_frag) >= fi.num_fragments and fi.tiles(n_rows):
        return np.repeat(per_frag[: fi.num_fragments], fi.counts)
    oids = np.full(n_rows, -1, dtype=np.int64)
    if per_frag is not None and fi.num_fragments:
        rows, lengths = fi.gather(np.arange(fi.num_fragments))
        oids[rows] = np.repeat(per_frag[: fi.num_fragments], lengths)
    return oids


@dataclass(frozen=True)
class Seek:
    """How to read row spans of seekable cells (:meth:`CellArray.frame_rows`): each chunk's rows by its
    fragment index, and the seek-table read sized for a level's cells."""

    rows: Mapping[int, int]  # chunk position -> rows its fragment index lists
    per_chunk: float  # rows of a typical cell
    max_frames: int  # the most entries a cell's seek table may list (a frame holds a row at least; the bounds)

    @classmethod
    def of(cls, level: Level) -> Seek:
        per_chunk = max(1, level.meta.vertex_count or 0) / max(1, len(level.nonempty_chunks))
        return cls({}, per_chunk, max(level.layout.bins_in_chunk, level.meta.vertex_count or 0) + 1)

    def guess(self, arr: CellArray) -> SeekGuess:
        """Bytes of a cell's end read for its seek table (and the vertices' bounds frame): the table of a
        quarter more frames than a cell of ``share`` times a typical cell of ``arr`` holds (``seek_frame_bytes``
        raw each) -- of twice a typical cell's when its size is not known."""
        typical = self.per_chunk * row_nbytes(arr) / tuning().seek_frame_bytes
        axes = len(arr.meta.shape) if arr.meta.attributes.get("zv_array") == "vertices" else 0

        def size(share: float | None) -> int:
            frames = min(self.max_frames, math.ceil((2.0 if share is None else 1.25 * share) * typical) + 2)
            return seek_table_size(frames) + (frame_bounds_size(frames, axes) if axes else 0)

        return size


async def fetch(executor: Executor, arrays: Mapping[str, CellArray], chunk_list: ChunkList,
                spans: Mapping[int, np.ndarray] | None, sweep: bool = False, seek: Seek | None = None) -> Payloads:
    """Payloads per array and chunk: whole cells, or only ``spans[i]`` rows of chunk ``i`` (``sweep``: see
    :func:`read_chunks`; ``seek``: the spans are read from the frames of seekable cells)."""
    spans = spans or {}
    whole = [i for i in range(len(chunk_list)) if i not in spans]
    jobs: list[Awaitable[list[bytes | memoryview | None]]] = []
    slots: list[tuple[str, list[int]]] = []
    for name, arr in arrays.items():
        jobs.append(arr.payloads([chunk_list[i] for i in whole], keep_shards=sweep and name == "vertex_fragments"))
        slots.append((name, whole))
        if seek is not None and spans:  # every chunk's frames in one batch
            at = list(spans)
            jobs.append(arr.frame_rows([chunk_list[i] for i in at], [spans[i] for i in at], row_nbytes(arr),
                                       [seek.rows[i] for i in at], seek.guess(arr), seek.max_frames))
            slots.append((name, at))
            continue
        for i, rows in spans.items():
            jobs.append(_spans(arr, chunk_list[i], rows))
            slots.append((name, [i]))
    results = await executor.gather(jobs)  # raises the first error itself, naming its key
    out: Payloads = {name: [None] * len(chunk_list) for name in arrays}
    for (name, idx), res in zip(slots, results):
        for i, payload in zip(idx, res):
            out[name][i] = payload
    return out


async def _spans(arr: CellArray, chunk: ChunkCoords, rows: np.ndarray) -> list[bytes | memoryview | None]:
    row_bytes = row_nbytes(arr)
    return [await arr.row_spans(chunk, rows, row_bytes)]


def row_nbytes(arr: CellArray) -> int:
    if arr.meta.attributes.get("zv_array") == "vertices":
        return int(np.dtype(arr.meta.attributes.get("dtype", "float32")).itemsize) * len(arr.meta.shape)
    dtype, rshape = attribute_layout(arr)
    return dtype.itemsize * int(np.prod(rshape or (1,)))


async def narrow(level: Level, chunks: np.ndarray, arrays: Mapping[str, CellArray],
                 box: Box) -> dict[int, np.ndarray] | None:
    """Row spans to read of the chunks a box only partly covers, when that pays off.

    Bins tile the chunk (fragment f = bin f), so a chunk's fragment index
    says which rows hold the bins the box touches.  Reading just those rows
    costs a second round trip unless the index is cached; the cost model
    (latency x bandwidth) decides whether fewer bytes are worth it.
    """
    layout = level.layout
    if not layout.fragments_are_bins or layout.bins_in_chunk < 2 or \
            not all(a.partial_rows_ok for a in arrays.values()):
        return None
    mask = layout.bins_touching(chunks, *box)
    partial = np.flatnonzero(~mask.all(axis=1))
    frag_arr = level.array("vertex_fragments")
    if not len(partial) or frag_arr is None:
        return None
    ex = frag_arr.executor
    cache = ex.cache("fragment_index")
    if not all(frag_arr.key_of(frag_arr.cell_coords(chunks[i])) in cache for i in partial):
        handle = ex.handle
        row_bytes = sum(row_nbytes(a) for a in arrays.values())
        per_chunk = row_bytes * max(1, level.meta.vertex_count) / max(1, len(level.nonempty_chunks))
        whole = int(per_chunk * len(partial))
        needed = int(whole * mask[partial].mean())
        if choose_fetch(whole, [(0, needed)], handle.latency_hint, handle.bandwidth_hint,
                        ranged_round_trips=2) == "whole":
            return None
    cached = await fragment_indexes(frag_arr, [tuple(chunks[i]) for i in partial])
    out: dict[int, np.ndarray] = {}
    for i, fi in zip(partial, cached):
        if fi.num_fragments != layout.bins_in_chunk:
            return None  # fragments do not line up with bins: read whole cells
        starts, stops = fi.spans(np.flatnonzero(mask[i]))
        out[int(i)] = np.stack([starts, stops], axis=1)
    return out


async def fragment_indexes(frag_arr: CellArray, chunks: ChunkList) -> list[FragmentIndex]:
    """Decoded fragment index of each chunk (absolute coordinates) of array ``frag_arr``, through the
    executor's "fragment_index" cache: those missing are fetched in one batch and decoded once, however
    many queries ask for them at the same time."""
    by_key = dict(zip(frag_arr.keys_of(chunks), chunks))

    async def fetch(keys: list[str]) -> list[FragmentIndex]:
        payloads = await frag_arr.payloads([by_key[k] for k in keys])
        return [decode_fragment_index(p or b"", key=k) for k, p in zip(keys, payloads)]

    return await frag_arr.executor.cached_many("fragment_index", frag_arr.keys_of(chunks), fetch,
                                               lambda fi: 16 * max(1, fi.num_fragments))


def assemble(level: Level, arrays: Mapping[str, CellArray], chunk_list: list[tuple[int, ...]], names: list[str],
             payloads: Payloads, owners: Owners | None, box: Box | None) -> Selection:
    """Decode fetched payloads into one Selection (pure CPU work): rows of chunks the box holds whole are
    copied without a test, the others' through :func:`box_mask` on the axes the box cuts the chunk along,
    each straight into the preallocated output."""
    vert = arrays["vertices"]
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32"))
    ndim = level.layout.ndim
    channels: dict[str, int] = {}
    keys = {name: arr.keys_of(chunk_list) for name, arr in arrays.items()}  # for error messages
    pos = [rows_from_payload(p, dtype, (ndim,), key=k) for p, k in zip(payloads["vertices"], keys["vertices"])]
    chosen: list[Pick] = [None] * len(pos)
    if box is not None:
        cut = ~axes_inside(level, np.asarray(chunk_list, np.int64).reshape(len(chunk_list), level.key_ndim), *box)
        chosen = [box_mask(p, *box, axes=np.flatnonzero(c)) if c.any() else None for p, c in zip(pos, cut)]
    picks = RowPicks(chosen, [len(p) for p in pos])
    attrs: dict[str, np.ndarray] = {}
    for n in names:
        name = f"vertex_attributes/{n}"
        parts = [attribute_rows(n, arrays[name], payloads[name][i], len(p), keys[name][i], channels)
                 for i, p in enumerate(pos)]
        adt, rshape = attribute_layout(arrays[name])
        if not rshape and channels.get(n):
            rshape = (channels[n],)
        attrs[n] = picks.gather(parts, np.zeros((0, *rshape), adt))
    object_ids = None
    if owners is not None:
        oids = [chunk_owners(labelling_index(payloads["vertex_fragments"][i], len(p), keys["vertex_fragments"][i]),
                             owners.get(chunk), len(p)) for i, (chunk, p) in enumerate(zip(chunk_list, pos))]
        object_ids = picks.gather(oids, np.zeros(0, np.int64))
    return Selection(picks.gather(pos, np.zeros((0, ndim), dtype)), attrs, object_ids)


def axes_inside(level: Level, chunks: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> NDArray[np.bool_]:
    """(K, ndim): whether the closed box holds the whole extent of each of (K, key_ndim) chunks along each
    axis.  Rows need no test along those axes, none at all in a chunk the box holds whole.

    A row is filed under the chunk whose ``[edge, next edge)`` holds it, by the chunk's or its bin's floor
    division (what box queries rely on to pick chunks at all, and validation level 4 checks); the box must
    clear those edges by :data:`EDGE_SLACK` of their magnitude, so no rounding of either rule matters.
    """
    layout = level.layout
    if not len(chunks):
        return np.zeros((0, layout.ndim), dtype=bool)
    size = np.asarray(layout.chunk_shape, dtype=np.float64)
    first = layout.spatial(np.asarray(chunks, dtype=np.int64)).astype(np.float64) * size
    top = first + size
    slack = EDGE_SLACK * (np.abs(first) + np.abs(top) + size)
    lo64, hi64 = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    held: NDArray[np.bool_] = (first - slack >= lo64) & (top + slack <= hi64)
    return held


def box_mask(positions: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             axes: Sequence[int] | np.ndarray | None = None) -> NDArray[np.bool_]:
    """Rows with ``lo <= p <= hi`` on every axis (of ``axes`` only, when given), exactly as float64 compares
    decide (``format.grid.inside``): one column at a time, in the rows' own float dtype against the box edges
    rounded inward to that dtype (``p >= lo`` holds for a float32 ``p`` iff ``p >=`` the least float32
    ``>= lo``), without a float64 copy."""
    p = np.asarray(positions)
    if p.dtype.kind != "f" or p.ndim != 2:
        if axes is None:
            return inside(np.asarray(p, dtype=np.float64), lo, hi)
        cols = np.asarray(axes, dtype=np.int64)
        return inside(np.asarray(p[:, cols], dtype=np.float64), np.asarray(lo)[cols], np.asarray(hi)[cols])
    low, high = inward_edges(p.dtype, np.asarray(lo, np.float64), np.asarray(hi, np.float64))
    mask = np.ones(len(p), dtype=bool)
    scratch = np.empty(len(p), dtype=bool)
    for i, d in enumerate(range(p.shape[1]) if axes is None else [int(a) for a in axes]):
        col = p[:, d]
        if i == 0:
            np.greater_equal(col, low[d], out=mask)
        else:
            np.greater_equal(col, low[d], out=scratch)
            mask &= scratch
        np.less_equal(col, high[d], out=scratch)
        mask &= scratch
    return mask


def inward_edges(dtype: np.dtype, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Box edges in float ``dtype``: ``lo`` rounded up and ``hi`` down to values of the dtype (an edge beyond
    the dtype's range becomes the infinity no finite value passes, or the largest finite one)."""
    dt = np.dtype(dtype).newbyteorder("=")
    with np.errstate(over="ignore"):
        low, high = lo.astype(dt), hi.astype(dt)
    low = np.where(low.astype(np.float64) < lo, np.nextafter(low, np.asarray(np.inf, dt)), low)
    high = np.where(high.astype(np.float64) > hi, np.nextafter(high, np.asarray(-np.inf, dt)), high)
    return low, high


class RowPicks:
    """Which rows of each of a read's chunks its answer takes, and where they go in the output: every column
    (positions, each attribute, object ids) is then one array allocated once, each chunk's rows copied into
    their place with no intermediate copy."""

    def __init__(self, picks: Sequence[Pick], sizes: Sequence[int]) -> None:
        self.picks = list(picks)
        counts = [n if p is None else int(np.count_nonzero(p)) if p.dtype == np.bool_ else len(p)
                  for p, n in zip(self.picks, sizes)]
        self.bounds = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).tolist()
        self.total = int(self.bounds[-1])

    def gather(self, parts: Sequence[np.ndarray], empty: np.ndarray) -> np.ndarray:
        """The picked rows of ``parts`` (one array per chunk, rows aligned with its pick), in chunk order;
        ``empty``: the dtype and row shape when no chunk has a row."""
        template = next((part for part in parts if len(part)), empty)
        out = np.empty((self.total, *template.shape[1:]), template.dtype)
        for part, pick, a, b in zip(parts, self.picks, self.bounds, self.bounds[1:]):
            if a == b:
                continue
            if pick is None:
                out[a:b] = part
            elif pick.dtype == np.bool_:
                np.compress(pick, part, axis=0, out=out[a:b])
            else:
                out[a:b] = part[pick]
        return out
