"""The spill every streamed writer shares: rows checked batch by batch, buffered, sorted by chunk and
appended to local files in runs, then read back chunk by chunk in input order.

Points (:mod:`.points.stream`), objects (:mod:`.objects.stream`) and their routing tasks
(:mod:`.points.tasks`, :mod:`.objects.tasks`) spill through :class:`RunSpill`, so memory is bounded by
``spill_bytes`` whatever the input's size.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from io import BufferedRandom
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError, StoreExistsError
from ..format.grid import dense_ids
from ..format.rows import RowLayout
from ..format.shard import shard_coords
from ..io.executor import Executor
from ..io.store import open_store
from .types import WriteConfig

if TYPE_CHECKING:
    from ..io.store import StoreHandle, Target

T = TypeVar("T")



@dataclass
class _Column(RowLayout):
    """One spill file: fixed-size rows of one array."""

    name: str
    fh: BufferedRandom

    def read(self, row0: int, n: int) -> np.ndarray:
        """Rows ``row0 .. row0 + n`` (one reader at a time: the upload pass is sequential)."""
        buf = bytearray(n * self.row_nbytes)
        self.fh.seek(row0 * self.row_nbytes)
        if self.fh.readinto(buf) != len(buf):
            raise OSError(f"spill file for {self.name!r} ended early")
        return self.rows_from(buf, n)


class ChunkIds:
    """A dense id per distinct chunk, stable across batches (one dict lookup per distinct chunk per batch)."""

    def __init__(self, ndim: int):
        self.ndim = ndim
        self.ids: dict[tuple[int, ...], int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def of(self, chunks: np.ndarray) -> np.ndarray:
        """Ids of (N, ndim) chunk coordinates (int32 while they fit)."""
        if not len(chunks):
            return np.zeros(0, np.int32)
        found = dense_ids(chunks, max(1 << 20, len(chunks)))  # the table: at most a word per row
        if found is None:  # chunks spread too far for a dense table: sort them
            rows, inverse = np.unique(chunks, axis=0, return_inverse=True)
        else:
            rows, inverse = found
        local = np.empty(len(rows), dtype=np.int64)
        for i, row in enumerate(rows.tolist()):
            local[i] = self.ids.setdefault(tuple(row), len(self.ids))
        gids = local[inverse.reshape(-1)]
        return gids.astype(np.int32) if len(self.ids) < 2**31 else gids

    def coords(self) -> np.ndarray:
        """(G, ndim) chunk coordinates indexed by id."""
        return np.asarray(list(self.ids), dtype=np.int64).reshape(-1, self.ndim)

    def visit_order(self, origin: Sequence[int], shard: tuple[int, ...] | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(visit, rank, shard_of): ids in the C order of their coordinates (the in-memory
        partition's order), grouped by shard when ``shard`` is set so each shard completes
        before the next starts; ``rank`` is each id's position in C order."""
        coords = self.coords()
        c_order = np.lexsort(coords.T[::-1]) if len(coords) else np.zeros(0, np.int64)
        rank = np.empty(len(coords), dtype=np.int64)
        rank[c_order] = np.arange(len(coords))
        visit, shard_of = c_order, None
        if shard is not None and len(coords):
            shard_of = shard_coords(coords - np.asarray(origin), shard).reshape(len(coords), -1)
            visit = np.lexsort((rank, *shard_of.T[::-1]))
        return visit, rank, shard_of


def shard_done(visit: np.ndarray, shard_of: np.ndarray | None, i: int) -> tuple[int, ...] | None:
    """The shard that visiting ``visit[i]`` completes (None: unsharded, or the shard goes on)."""
    if shard_of is None:
        return None
    gid = visit[i]
    if i + 1 == len(visit) or np.any(shard_of[visit[i + 1]] != shard_of[gid]):
        return tuple(int(s) for s in shard_of[gid])
    return None


class RunSpill:
    """Named fixed-width columns of rows keyed by a chunk id, spilled in chunk-sorted runs.

    ``push`` buffers rows; past ``spill_bytes`` the buffer is stably sorted by
    chunk and appended to one file per column as a *run*.  After ``finish``,
    ``read(gid)`` returns a chunk's rows from every run in run order: input
    order, what a stable sort of everything pushed would give.
    """

    def __init__(self, directory: str, prefix: str, spill_bytes: int | None = None):
        self.dir = directory
        self.prefix = prefix
        # flushing a run briefly holds ~3x its buffer: at 32 MiB 200 k streamlines peak at ~2x their input
        self.spill_bytes = int(tuning().spill_bytes if spill_bytes is None else spill_bytes)
        self.schema: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        self.columns: dict[str, _Column] = {}
        self.rows_on_disk = 0
        self._buf: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self._buf_bytes = 0
        self._runs: list[tuple[int, np.ndarray, np.ndarray]] = []  # (first row, chunk gids, counts)

    def push(self, gids: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        """Buffer rows (``columns`` keep the first push's names, dtypes and row shapes)."""
        if self.schema is None:
            self.schema = {k: (v.dtype, v.shape[1:]) for k, v in columns.items()}
        if not len(gids):
            return
        self._buf.append((gids, dict(columns)))
        self._buf_bytes += gids.nbytes + sum(v.nbytes for v in columns.values())
        if self._buf_bytes >= self.spill_bytes:
            self.flush()

    def _column(self, name: str, dtype: np.dtype, row_shape: tuple[int, ...]) -> _Column:
        col = self.columns.get(name)
        if col is None:
            path = os.path.join(self.dir, f"{self.prefix}{len(self.columns)}.bin")
            fh = open(path, "w+b")  # noqa: SIM115 - closed in close()
            col = self.columns[name] = _Column(np.dtype(dtype), tuple(row_shape), name, fh)
        return col

    def flush(self) -> None:
        """Write the buffered rows as one run, sorted by chunk (stable: input order kept)."""
        if not self._buf:
            return
        buf, self._buf, self._buf_bytes = self._buf, [], 0
        gids = np.concatenate([b[0] for b in buf])
        order = np.argsort(gids, kind="stable")
        sg = gids[order]
        del gids
        cut = np.flatnonzero(sg[1:] != sg[:-1]) + 1
        run_gids = sg[np.r_[0, cut]].astype(np.int64)
        counts = np.diff(np.r_[0, cut, len(sg)]).astype(np.int64)
        del sg, cut
        cols = [b[1] for b in buf]
        del buf
        assert self.schema is not None  # set by the push that buffered these rows
        for name in self.schema:
            parts = [c.pop(name) for c in cols]  # hand each batch's column over, so it is freed once joined
            arr = np.concatenate(parts)
            del parts
            col = self._column(name, arr.dtype, arr.shape[1:])
            col.fh.write(np.take(arr, order, axis=0).data)
            del arr
        self._runs.append((self.rows_on_disk, run_gids, counts))
        self.rows_on_disk += len(order)

    def finish(self, n_gids: int) -> None:
        """Flush the last run and index every chunk's segments (gid -> [(row, count) per run])."""
        self.flush()
        for col in self.columns.values():
            col.fh.flush()
        self._seg_bounds = np.zeros(n_gids + 1, np.int64)
        self._seg_row = self._seg_count = np.zeros(0, np.int64)
        if self._runs:
            seg_gid = np.concatenate([g for _, g, _ in self._runs])
            seg_count = np.concatenate([c for *_, c in self._runs])
            seg_row = np.concatenate([r + np.cumsum(c) - c for r, _, c in self._runs])
            order = np.argsort(seg_gid, kind="stable")  # run order kept within a chunk
            self._seg_row, self._seg_count = seg_row[order], seg_count[order]
            self._seg_bounds = np.searchsorted(seg_gid[order], np.arange(n_gids + 1))
        self._runs.clear()

    def read(self, gid: int) -> dict[str, np.ndarray]:
        """Every row of one chunk, in input order (empty columns for a chunk without rows)."""
        a, b = int(self._seg_bounds[gid]), int(self._seg_bounds[gid + 1])
        segs = list(zip(self._seg_row[a:b].tolist(), self._seg_count[a:b].tolist()))
        out = {}
        for name, (dtype, row_shape) in (self.schema or {}).items():
            col = self.columns.get(name)
            if col is None or not segs:
                out[name] = np.zeros((0, *row_shape), dtype)
                continue
            parts = [col.read(r, c) for r, c in segs]
            out[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return out

    def close(self) -> None:
        for col in self.columns.values():
            col.fh.close()


def describe(schema: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> str:
    return "{" + ", ".join(f"{k}: {dt}{list(rs) if rs else ''}" for k, (dt, rs) in sorted(schema.items())) + "}"


async def batches_of(source: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
    """Yield the batches of a sync or async iterable."""
    if isinstance(source, AsyncIterable):
        async for batch in source:
            yield batch
    elif isinstance(source, Iterable):
        for batch in source:
            yield batch
    else:
        raise InvalidArgumentError(f"batches must be an iterable or async iterable, got {type(source).__name__}")


async def open_new(target: Target, cfg: WriteConfig) -> tuple[StoreHandle, Executor]:
    """(handle, executor) of the store to write, refused at once if one exists: before spilling, not after."""
    handle = open_store(target, mode="w", storage_options=cfg.storage_options)
    ex = Executor(handle)
    if not cfg.overwrite and await ex.head("zarr.json") is not None:
        raise StoreExistsError(f"{handle.url}: a store exists here; pass overwrite=True to replace it")
    return handle, ex


class DistinctIds:
    """Sorted distinct ids of many batches, merged as they grow (memory: the distinct ids)."""

    def __init__(self) -> None:
        self._sets: list[np.ndarray] = []

    def add(self, ids: np.ndarray) -> None:
        self._sets.append(np.unique(ids))
        if len(self._sets) >= 16:
            self._sets = [np.unique(np.concatenate(self._sets))]

    def result(self) -> np.ndarray:
        return np.unique(np.concatenate(self._sets)) if self._sets else np.zeros(0, np.int64)
