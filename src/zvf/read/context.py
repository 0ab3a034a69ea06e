"""``ReadContext``: the state every read of one opened store shares.

The read modules (points, objects, query, ...) take this context rather
than a dataset: it holds the executor (one limiter, one set of
byte caches), the root metadata, the levels loaded so far and the decoded
tables cached per level.  ``DatasetReader`` (``zvf.aio.AsyncDataset``) is the shell around one.
A dataset's context is pinned to the version of the store it opened
(:mod:`.pin`); :meth:`ReadContext.refresh` moves it to the newest.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

import numpy as np

from ..config import tuning
from ..errors import DatasetClosedError, FormatError, InvalidArgumentError, StaleDatasetError
from ..format.grid import dense_ids
from . import load
from .pin import Pin
from .points import off_loop

if TYPE_CHECKING:
    from ..format.manifest import ManifestTable
    from ..format.metadata import RootMeta
    from ..io.executor import Executor
    from ..io.store import StoreHandle

T = TypeVar("T")
Owners = dict[tuple[int, ...], np.ndarray]
"""chunk -> object id of each fragment of that chunk (-1 where no manifest names it)."""
Manifests: TypeAlias = "tuple[np.ndarray, ManifestTable]"
"""A level's object ids and their manifests (row k of the table's ``object_row`` is ``ids[k]``)."""


class _HasRoot(Protocol):
    @property
    def root(self) -> RootMeta: ...


class RootFacts:
    """Store-wide facts read off the root document, defined once for the read context and both
    dataset shells; each class says only where its ``root`` comes from."""

    @property
    def ndim(self: _HasRoot) -> int:
        return self.root.ndim

    @property
    def geometry_type(self: _HasRoot) -> str | None:
        return self.root.geometry_type

    @property
    def bounds(self: _HasRoot) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) corners of the store's declared extent."""
        lo, hi = self.root.bounds
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    @property
    def chunk_shape(self: _HasRoot) -> tuple[float, ...]:
        return tuple(float(c) for c in self.root.chunk_shape)


@dataclass(eq=False)
class ReadContext(RootFacts):
    """Executor, root, loaded levels and per-level caches of one opened store."""

    handle: StoreHandle
    executor: Executor
    root: RootMeta
    levels: dict[int, load.Level]
    closed: bool = False
    manifest_cache: dict[int, Manifests] = field(default_factory=dict)
    owner_cache: dict[int, Owners] = field(default_factory=dict)
    object_cache: dict[tuple[str, int], Any] = field(default_factory=dict)
    """Per-level tables the object reads derive (parsed link arrays, id order), keyed (kind, level)."""
    refresh_auto: bool = False
    """On StaleDatasetError, move to the newest version and read again once (``open(..., refresh="auto")``)."""
    point_queries: int = 0
    """Point queries running on this dataset now: a lone one may read less than whole cells to save bytes;
    concurrent ones (a service) share whole cells through the single-flight reads and the cell cache."""

    @classmethod
    def create(cls, handle: StoreHandle, executor: Executor, root: RootMeta, level0: load.Level) -> ReadContext:
        return cls(handle, executor, root, {0: level0})

    def reload(self, root: RootMeta, level0: load.Level) -> None:
        """Point at a rewritten store (after an append): new metadata, every derived table dropped."""
        self.root, self.levels = root, {0: level0}
        self.manifest_cache.clear()
        self.owner_cache.clear()
        self.object_cache.clear()

    def pin(self, seen: float) -> Pin:
        """Pin this context to the version its root names (``seen``: ``time.monotonic()`` before that root
        was asked for); from now on every read request of its executor is checked (:mod:`.pin`)."""
        ex = self.executor
        pin = Pin(ex, self.root.raw, seen=seen, authoritative=ex.cache(load.SECTION).get("zarr.json") is not None)
        ex.pin = pin
        return pin

    @property
    def version(self) -> str | None:
        """The id of the version of the store this context reads (None: not pinned)."""
        pin = self.executor.pin
        return pin.version if isinstance(pin, Pin) else None

    async def refresh(self) -> bool:
        """Move to the newest version of the store: metadata reloaded, every cache dropped, pinned anew.
        Returns whether the version changed.  Reads running meanwhile may raise StaleDatasetError."""
        ex = self.ex
        before = self.version
        ex.pin = None
        ex.clear_caches()
        seen = time.monotonic()
        root, level0 = await load.load_root(ex, self.url)
        self.reload(root, level0)
        return self.pin(seen).version != before

    async def retrying(self, read: Callable[[], Awaitable[T]]) -> T:
        """``await read()``; with :attr:`refresh_auto`, a StaleDatasetError refreshes and reads once more."""
        try:
            return await read()
        except StaleDatasetError:
            if not self.refresh_auto:
                raise
        await self.refresh()
        return await read()

    @property
    def ex(self) -> Executor:
        """The executor; every read goes through it, so a closed dataset refuses here."""
        self.check_open()
        return self.executor

    def check_open(self) -> None:
        if self.closed:
            raise DatasetClosedError(f"{self.url}: the dataset is closed; open it again to read")

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def level_ids(self) -> list[int]:
        """Resolution levels in the store (0 is the finest)."""
        return sorted(set(self.root.levels)) or [0]

    # ------------------------------------------------------------- levels
    # Everything below is loaded or decoded once however many readers ask at the same time (the executor's
    # single flight, keyed by the root it belongs to), and kept only while that root is still the context's.
    async def level(self, index: int = 0) -> load.Level:
        self.check_open()
        index = load.check_level(self.level_ids, index)
        level = self.levels.get(index)
        if level is None:
            root, ex = self.root, self.ex
            level = await ex.once(("level", id(self), id(root), index), partial(load.load_level, ex, root, index))
            if self.root is root:
                level = self.levels.setdefault(index, level)
        return level

    async def family(self, index: int, family: str) -> load.Level:
        """The level with one more lazily loaded family of arrays."""
        level = await self.level(index)
        if family not in level.loaded:
            await self.ex.once(("family", id(level), family), partial(load.load_family, self.ex, level, family))
        return level

    def has_objects(self, index: int) -> bool:
        level = self.levels.get(index)
        present = level.meta.arrays_present if level is not None else []
        return "object_index" in present or self.geometry_type != "point_cloud"

    # ------------------------------------------------------------- object index
    def has_manifests(self, index: int) -> bool:
        """Whether the whole manifest table of level ``index`` is decoded already."""
        return index in self.manifest_cache

    async def manifests(self, index: int = 0) -> Manifests:
        """(object ids, ManifestTable) of a level, decoded once and cached."""
        got = self.manifest_cache.get(index)
        if got is None:
            got = await self.ex.once(("manifests", id(self), id(self.root), index), partial(self._manifests, index))
        return got

    async def _manifests(self, index: int) -> Manifests:
        root = self.root
        level = await self.family(index, "object_index")
        arr = level.array("object_index/manifests")
        if arr is None and level.array("object_index/data") is None and level.meta.vertex_count == 0:
            # An empty store: 0.9.2 writes the object_index group and no manifests.
            from ..format.manifest import decode_manifests  # here: a level without objects never decodes manifests

            got = (np.zeros(0, np.int64), decode_manifests([], level.layout.ndim))
        elif arr is None and ("object_index" in level.groups or level.array("object_index/data") is not None):
            from .seed import read_seed_object_index  # here: only the seed layout's object index needs it

            got = await read_seed_object_index(self, level)
        elif arr is None:
            raise FormatError(f"{index}/object_index/manifests: missing although the level has objects")
        else:
            oindex = level.object_index
            if oindex is None:
                raise FormatError(f"{index}/object_index/manifests: no object index reads them")
            got = (await oindex.ids(), await oindex.every_row())
        if self.root is root:
            self.manifest_cache[index] = got
        return got

    async def object_ids(self, index: int = 0) -> np.ndarray:
        """Object id of each manifest row of a level: the ids array alone where the level has zvf's object
        index and its manifests are not decoded yet (no manifest is decoded for it), else the decoded ids."""
        if index not in self.manifest_cache:
            level = await self.family(index, "object_index")
            if level.object_index is not None:
                return await level.object_index.ids()
        return (await self.manifests(index))[0]

    async def object_table(self, lvl: load.Level, ids: np.ndarray) -> Manifests:
        """(ids, their manifests) -- only the manifests asked for when the level's index allows."""
        if not self.has_objects(lvl.index):
            raise InvalidArgumentError(f"level {lvl.index} has no objects (a point cloud without object ids)")
        oindex = lvl.object_index
        if oindex is not None and not self.has_manifests(lvl.index):
            oids = await oindex.ids()
            rows = self._id_rows(lvl.index, oids, ids)
            return oids[rows], await oindex.table(rows)
        oids, table = await self.manifests(lvl.index)
        rows = self._id_rows(lvl.index, oids, ids)
        return oids[rows], table.take_objects(rows)

    def _id_rows(self, level: int, oids: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Manifest row of each requested id; InvalidArgumentError naming an unknown one and the valid ids."""
        hit = self.object_cache.get(("id_order", level))
        if hit is None or hit[0] is not oids:  # sort the level's ids once
            order = (np.arange(len(oids)) if np.all(oids[1:] > oids[:-1])
                     else np.argsort(oids, kind="stable")).astype(np.int64)
            hit = self.object_cache[("id_order", level)] = (oids, order, oids[order])
        _, order, so = hit
        at = np.searchsorted(so, req)
        at_c = np.minimum(at, max(len(so) - 1, 0))
        found = (at < len(so)) & (so[at_c] == req) if len(so) else np.zeros(len(req), bool)
        if not found.all():
            bad = int(req[np.flatnonzero(~found)[0]])
            if len(oids) == 0:
                valid = "the level has no objects"
            elif int(so[-1]) - int(so[0]) + 1 == len(so):
                valid = f"valid ids are {int(so[0])}..{int(so[-1])} ({len(so)} objects)"
            else:
                valid = f"valid ids are {len(so)} ids between {int(so[0])} and {int(so[-1])}"
            raise InvalidArgumentError(f"object id {bad} is not in level {level}: {valid}")
        result: np.ndarray = order[at_c]
        return result

    async def fragment_owners(self, index: int) -> Owners:
        """chunk -> object id of each fragment (-1 for fragments no manifest names)."""
        owners = self.owner_cache.get(index)
        if owners is None:
            owners = await self.ex.once(("owners", id(self), id(self.root), index), partial(self._owners, index))
        return owners

    async def _owners(self, index: int) -> Owners:
        root = self.root
        oids, table = await self.manifests(index)
        owners = await off_loop(32 * len(table), partial(_owners_of, oids, table, f"{index}/object_index/manifests"))
        if self.root is root:
            self.owner_cache[index] = owners
        return owners


def _owners_of(oids: np.ndarray, table: ManifestTable, key: str) -> Owners:
    """chunk -> object id of each of its fragments, from a level's decoded manifests (pure: may run in a thread).
    A fragment id far past what the references account for (the ``max_spare_owner_slots`` setting, or 8 a
    reference) is refused, naming ``key``, before the table sized by it is allocated."""
    owners: Owners = {}
    if len(table.fragment):
        # no per-chunk work: each chunk gets a slice of one flat array sized by its largest fragment id
        coords, frags = table.coords, table.fragment
        found = dense_ids(coords, max(1 << 20, len(frags)))  # the table: at most a word per reference
        if found is None:  # chunks spread too far for a dense table: sort them
            chunks, chunk_of = np.unique(coords, axis=0, return_inverse=True)
            chunk_of = chunk_of.reshape(-1)
        else:
            chunks, chunk_of = found
        sizes = np.zeros(len(chunks), dtype=np.int64)
        # writers' manifests name nearly every fragment of a chunk, so the table stays near their size
        limit = max(tuning().max_spare_owner_slots, 8 * len(frags))
        top = int(frags.max())
        if top < limit:
            np.maximum.at(sizes, chunk_of, frags + 1)
        if top >= limit or int(sizes.sum()) > limit:
            raise FormatError(f"{key}: manifests name fragment {top} of a chunk, far past what their "
                              f"{len(frags)} references account for")
        ends = np.cumsum(sizes)
        flat = np.full(int(ends[-1]), -1, dtype=np.int64)
        flat[ends[chunk_of] - sizes[chunk_of] + frags] = oids[table.object_row]
        owners = {tuple(c): flat[e - n:e] for c, e, n in zip(chunks.tolist(), ends.tolist(), sizes.tolist())}
    return owners
