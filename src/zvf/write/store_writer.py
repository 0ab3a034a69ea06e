"""Publishing a store: claim it, stream the cells up, write the metadata last.

A new store: every data cell first (concurrently, bounded in bytes in
flight), then array and group documents, then level documents, and the root
``zarr.json`` last -- a reader that finds no root reports an unfinished write
instead of reading half a store.  Two writers racing for one new store: each
first creates the store's lock (:mod:`.lock`, its creation claim) with a
conditional put, so exactly one proceeds and the other fails before writing
anything.  The lock is released after the root is published.

Over an existing store (``overwrite=True``, or a writer handed a
:class:`~zvf.write.publish.Publication`): cells go under chunk-key families no
kept version uses and the root is swapped in one compare-and-swap
(:mod:`.publish`): readers of the old store keep reading it.  Overwrite
replaces ZVF stores only; a location holding anything else is refused.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.abc
import numpy as np

from ..config import tuning
from ..errors import (
    ForeignDataError,
    FormatError,
    InvalidArgumentError,
    NotZvfStoreError,
    RemoteError,
    StoreExistsError,
)
from ..format import builders
from ..format.codecs import CellCodec
from ..format.keys import DEFAULT_ENCODING, ChunkKeyEncoding
from ..format.metadata import CLAIM_KEY
from ..format.shard import encode_shard, inner_index, shard_coords
from ..io.executor import Executor
from .lock import LEASE, StoreLock
from .publish import Publication, clear_unfinished, family_from, held_lock, shaped_root

if TYPE_CHECKING:
    from ..format.types import BytesLike
    from .types import WriteConfig


class ByteBudget:
    """Caps the bytes of queued-but-unfinished uploads (a blob larger than the cap runs alone).

    Used from one event loop only, so the common case -- room left and nobody
    waiting -- just counts, with no lock and no task switch; the condition is
    taken only when a caller has to wait (waiters are served before newcomers)
    or the budget drains (:meth:`drained` waits for that).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiting = 0
        self._cond = anyio.Condition()

    def _full(self, n: int) -> bool:
        return bool(self.used) and self.used + n > self.limit

    async def acquire(self, n: int) -> None:
        if not self._waiting and not self._full(n):
            self.used += n
            return
        async with self._cond:
            self._waiting += 1
            try:
                while self._full(n):
                    await self._cond.wait()
            finally:
                self._waiting -= 1
            self.used += n

    async def release(self, n: int) -> None:
        self.used -= n
        if self._waiting or not self.used:  # drained: wakes whoever waits in ``drained`` too
            async with self._cond:
                self._cond.notify_all()

    async def drained(self, stop: Callable[[], bool]) -> None:
        """Wait until nothing is queued, or until ``stop()`` says waiting is over (an upload failed)."""
        async with self._cond:
            while self.used and not stop():
                await self._cond.wait()


#: A cell's stored bytes: ``bytes``, or a 1-D uint8 array where it was framed in place (``level.put_rows``).
Blob = bytes | np.ndarray


class StoreWriter:
    """Uploads one store through an executor; use as ``async with StoreWriter(...) as w``."""

    def __init__(self, executor: Executor, *, overwrite: bool = False, max_inflight_bytes: int = 256 << 20,
                 consolidate: bool = True, publication: Publication | None = None,
                 taken: Mapping[str, Iterable[str]] | None = None, lease: float | None = LEASE,
                 claim: bool = True, publish: bool = True) -> None:
        self.ex = executor
        self.claims = claim  # False: the caller holds the store's lock or a job's claim
        self.publishes = publish  # False: cells only (a task's; the job's driver publishes the documents)
        self.overwrite = overwrite
        self.consolidate = consolidate  # root carries every document (False: 0.9.2's bytes, the compat switch)
        self.publication = publication  # set: a change to a published store (see .publish)
        self.taken = taken  # a cells-only writer's families: those kept versions use (Publication.taken)
        self.lease = lease  # of the store's lock this writer takes (None: held across processes)
        self.lock: StoreLock | None = None
        self._own_lock = False  # the lock is this writer's to release (not a caller's)
        self._budget = ByteBudget(max_inflight_bytes)
        self._docs: list[tuple[int, str, dict[str, Any]]] = []  # (stage, key, document)
        self._tg: anyio.abc.TaskGroup | None = None
        self._queue: collections.deque[tuple[str, Blob]] = collections.deque()  # blobs waiting for an uploader
        self._uploaders = 0
        self._error: Exception | None = None  # first failed upload; stops the write
        self.cells_written = 0
        self.bytes_written = 0

    @classmethod
    def for_config(cls, ex: Executor, cfg: WriteConfig, upload_bytes: int | None = None) -> StoreWriter:
        """The writer of one store as ``cfg`` asks (overwrite, layout); ``upload_bytes``: its upload budget."""
        if upload_bytes is None:
            return cls(ex, overwrite=cfg.overwrite, consolidate=cfg.consolidate)
        return cls(ex, overwrite=cfg.overwrite, consolidate=cfg.consolidate, max_inflight_bytes=upload_bytes)

    async def __aenter__(self) -> StoreWriter:
        if self.claims:
            await self.claim()
        if (lock := self._owned_lock()) is not None:
            await lock.start_heartbeat()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    def _owned_lock(self) -> StoreLock | None:
        """The lock when it is this writer's to keep fresh and release (not a caller's)."""
        return self.lock if self._own_lock else None

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            try:
                assert self._tg is not None, "entered in __aenter__"
                await self._tg.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:  # anyio wraps the body's own error: hand it back bare
                if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                    raise group.exceptions[0] from None
                raise
            if exc_type is None:
                if self._error is not None:  # the zvf error itself, not an ExceptionGroup around it
                    raise self._error
                if self.publishes:
                    await self._publish()
        except BaseException:
            await self._failed()
            raise
        if exc_type is not None:
            await self._failed()
        elif (lock := self._owned_lock()) is not None:
            await lock.stop_heartbeat()
            await lock.release()

    async def _failed(self) -> None:
        """After an error: a change to a published store takes its unreferenced cells away and releases
        the lock (the store reads as before); a new store's lock stays, marked abandoned (the location
        holds an unfinished store, which the next writer with overwrite=True replaces at once)."""
        lock = self._owned_lock()
        if lock is not None:
            await lock.stop_heartbeat()
        with anyio.CancelScope(shield=True):
            if self.publication is not None:
                with contextlib.suppress(Exception):  # best effort: the next change or gc finds what is left
                    await self.publication.abort()
            if lock is not None:
                if self.publication is not None:
                    await lock.release()
                else:
                    await lock.abandon()

    async def claim(self) -> None:
        """Take the store's lock before writing anything; only then look at what is there.

        Locking first closes the window in which a writer that checked early
        could start writing over a store another writer just finished.  A
        root there: refused, or with ``overwrite`` replaced by a publication
        (readers of the old store keep it).  No root: a new store, after the
        objects of an unfinished one are cleared (``overwrite``).
        """
        url = self.ex.handle.url
        held = held_lock(url)
        if held is not None:  # the caller holds the lock (a rechunk in place)
            self.lock = held[0]
            self.publication = await Publication(self.ex, self.lock, expect=held[1], retention=held[2]).begin()
            return
        self.lock = StoreLock(self.ex, url, purpose="write", lease=self.lease)
        try:
            await self.lock.acquire(create_only=True)
        except StoreExistsError:
            if not self.overwrite:
                raise StoreExistsError(
                    f"{url}: another writer is creating or changing this store (or one died: see `zvf validate`); "
                    "pass overwrite=True to replace it") from None
            await self.lock.acquire()  # waits for a live holder, takes a dead one's over
        self._own_lock = True
        try:
            if await self.ex.head("zarr.json") is None:
                await clear_unfinished(self.ex, self.overwrite)
                return
            if not self.overwrite:
                raise StoreExistsError(f"{url}: a store exists here; pass overwrite=True to replace it")
            try:
                self.publication = await Publication(self.ex, self.lock).begin()
            except (NotZvfStoreError, FormatError) as e:
                raise ForeignDataError(f"{url}: its zarr.json is not the root of a ZVF store ({e}); overwrite=True "
                                       "replaces a ZVF store only and deleted nothing") from None
        except BaseException:
            self._own_lock = False
            with anyio.CancelScope(shield=True):
                await self.lock.release()
            raise

    async def cell_keys(self, path: str, ndim: int) -> ChunkKeyEncoding:
        """The key encoding of array ``path``'s cells: a new store's default, a publication's family for it
        (cleared of leftovers), or a cells-only writer's from the families kept versions use."""
        if self.publication is not None:
            return await self.publication.keys(path, ndim)
        if self.taken is not None:
            return family_from(self.taken, path, ndim)
        return DEFAULT_ENCODING

    async def _create(self, key: str, data: bytes) -> None:
        """Conditional create that survives an ambiguous failure: if the object now holds
        exactly our bytes, the failed attempt had in fact succeeded."""
        try:
            await self.ex.put(key, data, mode="create")
        except RemoteError:
            if await self.ex.get(key) != data:
                raise

    async def put_cell(self, key: str, data: Blob) -> None:
        """Queue one data blob; waits while too many bytes are in flight; raises once an upload failed.

        Blobs go up in queue order through at most as many uploader tasks as the executor runs
        requests at once; an uploader takes blobs until the queue is empty (one task per burst,
        not one per blob: a write of thousands of small cells spends its loop on uploads).
        """
        if self._error is not None:
            raise self._error
        await self._budget.acquire(len(data))
        self._queue.append((key, data))
        if self._uploaders < max(1, self.ex.concurrency):
            self._uploaders += 1
            assert self._tg is not None, "put_cell is called inside ``async with``"
            self._tg.start_soon(self._uploader)

    async def _uploader(self) -> None:
        batch = self.ex.batch_puts  # local files / memory: blobs go up in batches, one worker-thread call each
        try:
            while self._queue:
                # two or more at once (a thread hop costs about one async put), at most an even share of
                # what waits, so the other uploaders get blobs too
                share = -(-len(self._queue) // max(1, self.ex.concurrency))
                n = min(len(self._queue), tuning().put_batch, max(2, share))
                if batch and n > 1:
                    await self._upload_batch([self._queue.popleft() for _ in range(n)])
                else:
                    await self._upload(*self._queue.popleft())
        finally:
            self._uploaders -= 1

    async def _upload_batch(self, items: list[tuple[str, Blob]]) -> None:
        nbytes = sum(len(d) for _, d in items)
        try:
            await self.ex.put_batch(items)
            self.cells_written += len(items)
            self.bytes_written += nbytes
        except Exception as exc:  # as in _upload
            if self._error is None:
                self._error = exc
        finally:
            await self._budget.release(nbytes)

    async def _upload(self, key: str, data: Blob) -> None:
        try:
            await self.ex.put(key, data)
            self.cells_written += 1
            self.bytes_written += len(data)
        except Exception as exc:  # recorded, re-raised by the writer (no ExceptionGroup)
            if self._error is None:
                self._error = exc
        finally:
            await self._budget.release(len(data))

    def add_document(self, key: str, doc: dict[str, Any], *, stage: int) -> None:
        """A metadata document to publish after the cells: stage 0 arrays/groups, 1 levels, 2 root."""
        self._docs.append((stage, key, doc))

    def queued_documents(self) -> dict[str, dict[str, Any]]:
        """Node path -> document of every node queued so far (the root excluded)."""
        return {k[:-len("/zarr.json")]: d for s, k, d in self._docs if s < 2}

    async def drain(self) -> None:
        """Wait until every queued cell is uploaded; raises the first failed upload's error."""
        await self._budget.drained(lambda: self._error is not None)
        if self._error is not None:
            raise self._error

    async def _publish(self) -> None:
        root = next((d for s, k, d in self._docs if k == "zarr.json"), None)
        if root is not None:
            root = shaped_root(self.ex.handle.url, root)
        if self.publication is not None:
            if root is None:
                raise InvalidArgumentError(f"{self.ex.handle.url}: a publication needs a root document")
            await self.publication.commit(self.queued_documents(), root)
            return
        for stage in (0, 1):
            docs = [(k, d) for s, k, d in self._docs if s == stage]
            await self.ex.gather([self.ex.put(k, builders.dumps(d)) for k, d in docs])
        if root is not None:
            if self.consolidate:  # readers open the store from this one document
                root = {**root, "consolidated_metadata": builders.consolidated_metadata(self.queued_documents())}
            await self._create("zarr.json", builders.dumps(root))
        if self.lock is None:
            await self.ex.delete([CLAIM_KEY])  # a commit of cells others wrote under a claim it inherits


#: Worker threads encoding cells (numpy gathers, joins and compressors release the GIL).
ENCODE_WORKERS = min(4, os.cpu_count() or 1)


Item = TypeVar("Item")
Result = TypeVar("Result")


async def ordered_map(items: Sequence[Item], work: Callable[[Item], Result],
                      consume: Callable[[Item, Result], Awaitable[None]], *, workers: int = ENCODE_WORKERS) -> None:
    """Run ``work(item)`` in worker threads, ``await consume(item, result)`` on the loop in item order.

    At most ``2 * workers`` results wait at once, so memory stays bounded
    while encoding overlaps the uploads ``consume`` starts.  The first
    error is raised as itself (no ExceptionGroup).
    """
    n = len(items)
    if n == 0:
        return
    window = anyio.Semaphore(2 * workers)
    limiter = anyio.CapacityLimiter(workers)
    done = [anyio.Event() for _ in range(n)]
    results: dict[int, tuple[bool, Any]] = {}

    async def one(i: int) -> None:
        try:
            results[i] = (True, await anyio.to_thread.run_sync(work, items[i], limiter=limiter))
        except Exception as exc:  # handed to the consumer, which raises it in order
            results[i] = (False, exc)
        done[i].set()

    async def produce(tg: anyio.abc.TaskGroup) -> None:
        for i in range(n):
            await window.acquire()
            tg.start_soon(one, i)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, tg)
            for i in range(n):
                await done[i].wait()
                ok, value = results.pop(i)
                if not ok:
                    raise value
                await consume(items[i], value)
                window.release()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise


@dataclass
class SpatialArrayOut:
    """One per-chunk array being written: cells go up as they are added, sharded ones at ``finish``."""

    path: str  # e.g. "0/vertices"
    codec: CellCodec
    origin: tuple[int, ...]
    grid_shape: tuple[int, ...]
    attributes: dict[str, Any]
    nonempty: list[tuple[int, ...]] = field(default_factory=list)
    _shards: dict[tuple[int, ...], dict[int, Blob]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._keys: ChunkKeyEncoding | None = None

    async def keys(self, writer: StoreWriter) -> ChunkKeyEncoding:
        if self._keys is None:
            self._keys = await writer.cell_keys(self.path, len(self.grid_shape))
        return self._keys

    async def add(self, writer: StoreWriter, chunk: Iterable[int], payload: BytesLike) -> None:
        """Store the payload of absolute chunk ``chunk``."""
        await self.put(writer, chunk, self.codec.encode(payload))

    async def put(self, writer: StoreWriter, chunk: Iterable[int], blob: Blob) -> None:
        """Store a cell already encoded with ``self.codec`` (e.g. in a worker thread)."""
        chunk = tuple(int(c) for c in chunk)
        self.nonempty.append(chunk)
        grid = np.asarray(chunk, dtype=np.int64) - np.asarray(self.origin, dtype=np.int64)
        if self.codec.shard is None:
            await writer.put_cell((await self.keys(writer)).key(self.path, grid.tolist()), blob)
            return
        shard = tuple(int(s) for s in shard_coords(grid, self.codec.shard))
        self._shards.setdefault(shard, {})[int(inner_index(grid, self.codec.shard))] = blob

    def take_buffered(self) -> dict[str, np.ndarray]:
        """The cells buffered for shards not yet put, as arrays (``shard``, ``inner``, ``lengths``, ``bytes``),
        and none left: a distributed task hands them to the commit, which :meth:`adopt` s them."""
        cells = [(s, i, np.frombuffer(b, np.uint8) if not isinstance(b, np.ndarray) else b.view(np.uint8).reshape(-1))
                 for s, inner in self._shards.items() for i, b in inner.items()]
        self._shards.clear()
        ndim = len(self.grid_shape)
        return {"shard": np.asarray([c[0] for c in cells], np.int64).reshape(len(cells), ndim),
                "inner": np.asarray([c[1] for c in cells], np.int64),
                "lengths": np.asarray([len(c[2]) for c in cells], np.int64),
                "bytes": np.concatenate([c[2] for c in cells]) if cells else np.zeros(0, np.uint8)}

    def adopt(self, taken: dict[str, np.ndarray], key: str) -> None:
        """Buffer cells another writer took with :meth:`take_buffered` (``key``: where they were stored)."""
        lengths = taken["lengths"]
        if (lengths < 0).any() or int(lengths.sum()) != len(taken["bytes"]) or len(taken["shard"]) != len(lengths) \
                or len(taken["inner"]) != len(lengths):
            raise FormatError(f"{key}: its {self.path} cells do not add up (damaged job summary)")
        ends = np.cumsum(lengths)
        for shard, inner, end, n in zip(taken["shard"].tolist(), taken["inner"].tolist(), ends.tolist(),
                                        lengths.tolist()):
            self._shards.setdefault(tuple(shard), {})[int(inner)] = taken["bytes"][end - n:end].tobytes()

    async def flush_shard(self, writer: StoreWriter, shard: tuple[int, ...]) -> None:
        """Upload one complete shard now (its bytes depend only on its own cells)."""
        inner = self._shards.pop(shard, None)
        if inner:
            assert self.codec.shard is not None, "only sharded cells are buffered"
            # a uint8 array blob is joined as its bytes (numpy's stubs do not declare arrays buffers)
            blob = encode_shard(cast("Mapping[int, bytes | None]", inner), int(np.prod(self.codec.shard)),
                                inner_shape=self.codec.shard)
            if blob is not None:
                await writer.put_cell((await self.keys(writer)).key(self.path, shard), blob)

    async def finish(self, writer: StoreWriter) -> None:
        """Upload buffered shards and queue the array document."""
        for shard in list(self._shards):
            await self.flush_shard(writer, shard)
        doc = builders.spatial_array_document(
            self.grid_shape, self.codec.codecs_json(), self.attributes,
            nonempty_chunks=self.nonempty or np.zeros((0, len(self.grid_shape)), np.int64),
            grid_origin=self.origin, shard_shape=self.codec.shard,
        )
        writer.add_document(f"{self.path}/zarr.json", doc, stage=0)


def is_fill(block: np.ndarray, fill: float | str) -> bool:
    """Whether a chunk equals the fill value (NaN equal to NaN, float 0 compared bitwise), as zarr decides."""
    if isinstance(fill, str) or (isinstance(fill, float) and np.isnan(fill)):
        return bool(np.all(np.isnan(block)))
    if block.dtype.kind == "f" and fill == 0:
        return not np.any(block.view(f"u{block.dtype.itemsize}"))
    return bool(np.all(block == fill))


async def write_dense(writer: StoreWriter, path: str, values: np.ndarray, chunk_rows: int, fill: float | str,
                      codec: CellCodec, doc: dict[str, Any]) -> None:
    """A dense numeric array in chunks of ``chunk_rows`` rows, as zarr-python stores it.

    The edge chunk is padded with ``fill``; a chunk that is all fill is not stored.
    """
    values = np.ascontiguousarray(values)
    n = values.shape[0]
    keys = await writer.cell_keys(path, values.ndim)
    pad_fill = np.nan if isinstance(fill, str) else fill
    for c in range(-(-n // chunk_rows) if n else 0):
        part = values[c * chunk_rows:(c + 1) * chunk_rows]
        if part.shape[0] < chunk_rows:
            pad = np.full((chunk_rows - part.shape[0], *values.shape[1:]), pad_fill, dtype=values.dtype)
            part = np.concatenate([part, pad])
        if is_fill(part, fill):
            continue
        data = part.astype(part.dtype.newbyteorder("<")).tobytes()
        await writer.put_cell(keys.key(path, (c,) + (0,) * (values.ndim - 1)), codec.encode(data))
    writer.add_document(f"{path}/zarr.json", doc, stage=0)


def add_level0_documents(writer: StoreWriter, url: str, *, geometry: str, n: int, arrays_present: Sequence[str],
                         chunk_shape: Sequence[float], bounds: Sequence[Sequence[float]],
                         bin_shape: Sequence[float] | None) -> None:
    """Level 0's and the root's documents (published after everything else)."""
    writer.add_document("0/zarr.json", builders.level_document(
        level=0, vertex_count=n, arrays_present=arrays_present, coarsening_method="none",
        fragments_tile=n > 0), stage=1)
    writer.add_document("zarr.json", builders.root_document(
        chunk_shape=chunk_shape, bounds=bounds, geometry_types=[geometry], name=builders.store_name(url),
        base_bin_shape=bin_shape), stage=2)


async def write_vlen_1d(writer: StoreWriter, path: str, items: Any, chunk: int, codec: CellCodec,
                        doc: dict[str, Any]) -> None:
    """A 1-D vlen-bytes array (manifests, groups): ``chunk`` items per stored object.

    Sharded (``codec.shard``), each stored object is a shard of ``chunk`` rows
    in inner chunks of ``codec.inner_rows`` rows, readable one inner chunk at a time.
    ``items``: a list of bytes-like, or a sequence with ``packed(lo, hi)`` returning
    rows ``lo:hi`` as (uint8 buffer, byte offsets): then every frame of a stored
    object is laid out in one vectorized pass (no per-item Python work).
    """
    keys = await writer.cell_keys(path, 1)
    n = len(items)
    per = chunk if codec.shard is None else codec.inner_rows or 1  # items per vlen frame, padded with b""
    packed = getattr(items, "packed", None)
    compress = dense_codec(codec)  # the compressors alone, for frames built here
    # work pieces (stored object, first row, end row): a shard's inner chunks are framed and compressed
    # the piece_rows setting at a time, so a level with a few big shards still keeps every encode worker busy
    step = chunk if codec.shard is None or packed is None else max(per, tuning().piece_rows // per * per)
    pieces = [(c, a, min(a + step, (c + 1) * chunk, n))
              for c in range(-(-n // chunk) if n else 0) for a in range(c * chunk, min((c + 1) * chunk, n), step)]

    def encode(piece: tuple[int, int, int]) -> list[bytes]:  # in a worker thread: framing and compression
        _, lo, hi = piece
        groups = -(-(hi - lo) // per)
        if packed is not None:
            data, offsets = packed(lo, hi)
            buf, bounds = vlen_frames(data, offsets, per, groups)
            return [compress.encode(buf[x:y]) for x, y in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        rows = list(items[lo:hi]) + [b""] * (groups * per - (hi - lo))
        return [codec.encode_items(rows[j * per:(j + 1) * per]) for j in range(groups)]

    inner: list[bytes] = []  # the encoded inner chunks of the stored object being assembled

    async def store(piece: tuple[int, int, int], blobs: list[bytes]) -> None:
        c, _, hi = piece
        inner.extend(blobs)
        if hi < min((c + 1) * chunk, n):  # more pieces of this stored object to come (pieces arrive in order)
            return
        blob = inner[0] if codec.shard is None else encode_shard(dict(enumerate(inner)), chunk // per)
        inner.clear()
        if blob is not None:
            await writer.put_cell(keys.key(path, (c,)), blob)

    await ordered_map(pieces, encode, store)
    writer.add_document(f"{path}/zarr.json", doc, stage=0)


def vlen_frames(data: np.ndarray, offsets: np.ndarray, per: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Items ``data[offsets[i]:offsets[i+1]]`` framed as ``groups`` vlen-bytes frames of ``per`` items each
    (the last padded with empty items) -> (uint8 buffer of the frames back to back, ``groups + 1`` bounds)."""
    off = np.asarray(offsets, dtype=np.int64)
    lens = np.zeros(groups * per, dtype=np.int64)
    lens[:off.size - 1] = np.diff(off)
    if lens.size and int(lens.max()) >= 1 << 32:
        raise InvalidArgumentError(f"vlen item of {int(lens.max())} bytes exceeds the u32 length prefix")
    table = lens.reshape(groups, per)
    bounds = np.zeros(groups + 1, dtype=np.int64)
    np.cumsum(4 + 4 * per + table.sum(axis=1), out=bounds[1:])
    out = np.empty(int(bounds[-1]), dtype=np.uint8)
    heads = bounds[:-1, None] + np.arange(4)  # u32 item count of each frame
    prefix = (bounds[:-1, None] + 4 + 4 * np.arange(per) + (np.cumsum(table, axis=1) - table)).reshape(-1, 1)
    prefix = prefix + np.arange(4)  # u32 length of each item
    body = np.ones(out.size, dtype=bool)
    body[heads.reshape(-1)] = False
    body[prefix.reshape(-1)] = False
    out[heads.reshape(-1)] = np.full(groups, per, dtype="<u4").view(np.uint8)
    out[prefix.reshape(-1)] = lens.astype("<u4").view(np.uint8)
    out[body] = np.asarray(data, dtype=np.uint8)[int(off[0]):int(off[-1])]
    return out, bounds


def dense_codec(codec: CellCodec) -> CellCodec:
    """The codec of a dense numeric array written with a spatial array's compressor (never sharded)."""
    return dataclasses.replace(codec, serializer="bytes", shard=None)


def dense_codecs_json(codec: CellCodec, dtype: Any) -> list[dict[str, Any]]:
    """``codecs`` of a dense array as zarr-python writes it (1-byte types carry no endian)."""
    return [builders.bytes_codec(dtype), *codec.codecs_json()[1:]]


def empty_group(writer: StoreWriter, path: str) -> None:
    writer.add_document(f"{path}/zarr.json", builders.group_document({}), stage=0)
