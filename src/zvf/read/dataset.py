"""``AsyncDataset``: an opened store and every read it answers.

All requests of one dataset run through its ``Executor`` -- one
concurrency limit, one set of caches -- so concurrent queries from one
service share connections, in-flight requests and decoded indexes.
"""

from __future__ import annotations

import anyio
import numpy as np

from ..errors import FormatError, InvalidArgumentError
from ..format.grid import check_bbox
from ..io.executor import Executor
from ..io.store import open_store
from . import load, objects
from .dense import read_dense
from .points import chunks_in_box, pick_attributes, read_chunks
from .selection import Selection


class AsyncDataset:
    """A ZVF store opened for reading (``await zvf.aio.open(target)``)."""

    def __init__(self, handle, executor: Executor, root, level0: load.Level):
        self._handle = handle
        self._ex = executor
        self.root = root
        self._levels: dict[int, load.Level] = {0: level0}
        self._level_ids = sorted(set(root.levels)) or [0]
        self._lock = anyio.Lock()
        self._owners: dict[int, dict] = {}
        self._manifests: dict[int, tuple] = {}
        self._object_cache: dict = {}  # zvf.read.objects: parsed link arrays per level

    @classmethod
    async def open(cls, target, *, mode: str = "r", storage_options=None) -> AsyncDataset:
        handle = open_store(target, mode=mode, storage_options=storage_options)
        ex = Executor(handle)
        root, level0 = await load.load_root(ex, handle.url)
        return cls(handle, ex, root, level0)

    def __repr__(self) -> str:
        return (f"AsyncDataset({self._handle.url!r}, geometry={self.geometry_type!r}, ndim={self.ndim}, "
                f"levels={self.levels})")

    # ------------------------------------------------------------- properties
    @property
    def url(self) -> str:
        return self._handle.url

    @property
    def levels(self) -> list[int]:
        """Resolution levels in the store (0 is the finest)."""
        return list(self._level_ids)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) corners of the store's declared extent."""
        lo, hi = self.root.bounds
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    @property
    def ndim(self) -> int:
        return self.root.ndim

    @property
    def geometry_type(self) -> str:
        return self.root.geometry_type

    @property
    def chunk_shape(self) -> tuple[float, ...]:
        return tuple(float(c) for c in self.root.chunk_shape)

    @property
    def stats(self):
        """Requests, bytes, retries and cache hits of this dataset so far."""
        return self._ex.stats

    # ------------------------------------------------------------- levels
    async def level(self, index: int = 0) -> load.Level:
        index = load.check_level(self._level_ids, index)
        if index not in self._levels:
            async with self._lock:
                if index not in self._levels:
                    self._levels[index] = await load.load_level(self._ex, self.root, index)
        return self._levels[index]

    async def family(self, index: int, family: str) -> load.Level:
        """The level with one more lazily loaded family of arrays."""
        level = await self.level(index)
        if family not in level.loaded:
            await load.load_family(self._ex, level, family)
        return level

    def has_objects(self, index: int) -> bool:
        level = self._levels.get(index)
        present = level.meta.arrays_present if level is not None else []
        return "object_index" in present or self.geometry_type != "point_cloud"

    # ------------------------------------------------------------- object index
    async def manifests(self, index: int = 0):
        """(object ids, ManifestTable) of a level, decoded once and cached."""
        if index in self._manifests:
            return self._manifests[index]
        level = await self.family(index, "object_index")
        arr = level.array("object_index/manifests")
        if arr is None and ("object_index" in level.groups or level.array("object_index/data") is not None):
            self._manifests[index] = await objects.read_seed_object_index(self, level)  # seed layout
            return self._manifests[index]
        if arr is None:
            raise FormatError(f"{index}/object_index/manifests: missing although the level has objects")
        oindex = level.object_index
        oids = await oindex.ids()
        table = await oindex.table(np.arange(oindex.count, dtype=np.int64))
        self._manifests[index] = (oids, table)
        return self._manifests[index]

    async def fragment_owners(self, index: int) -> dict[tuple, np.ndarray]:
        """chunk -> object id of each fragment (-1 for fragments no manifest names)."""
        if index in self._owners:
            return self._owners[index]
        oids, table = await self.manifests(index)
        owners: dict[tuple, np.ndarray] = {}
        if len(table.fragment):
            order = np.lexsort((table.fragment, *table.coords.T[::-1]))
            coords = table.coords[order]
            frags = table.fragment[order]
            owner = oids[table.object_row[order]]
            cut = np.flatnonzero(np.any(np.diff(coords, axis=0) != 0, axis=1)) + 1
            for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(frags)]):
                f = frags[lo:hi]
                per = np.full(int(f.max()) + 1, -1, dtype=np.int64)
                per[f] = owner[lo:hi]
                owners[tuple(int(x) for x in coords[lo])] = per
        self._owners[index] = owners
        return owners

    async def object_ids(self, *, level: int = 0) -> np.ndarray:
        """Ids of the objects the level's index lists (none for a cloud without object ids)."""
        lvl = await self.level(level)
        if not self.has_objects(lvl.index):
            return np.zeros(0, dtype=np.int64)
        oids, _ = await self.manifests(level)
        return oids.copy()

    # ------------------------------------------------------------- queries
    async def query(self, bbox, *, level: int = 0, attributes=None, clip: bool = False) -> Selection:
        """What lies in the closed box ``lo <= p <= hi``, by geometry.

        Point clouds: the vertices inside, with attributes and owners.
        Polylines/streamlines: every object with at least one vertex inside
        (decided per vertex), whole, grouped by ``offsets``/``objects`` in
        ascending id, ``edges`` consecutive pairs; ``clip=True`` keeps only the
        vertices inside and the edges between them.  Graphs, skeletons, meshes:
        the vertices inside plus the edges/faces whose endpoints are all inside,
        grouped by object.
        """
        lo, hi = check_bbox(bbox, self.ndim)
        if self.geometry_type in objects.SEQUENTIAL:
            return await objects.query_sequential(self, lo, hi, level=level, attributes=attributes, clip=clip)
        if self.geometry_type in objects.LINKED:
            return await objects.query_linked(self, lo, hi, level=level, attributes=attributes)
        lvl = await self.level(level)
        names = pick_attributes(lvl, attributes)
        chunks = chunks_in_box(lvl, lo, hi)
        return await read_chunks(self, lvl, chunks, names, box=(lo, hi))

    async def read_all(self, *, level: int = 0, attributes=None) -> Selection:
        """Every vertex of a level."""
        lvl = await self.level(level)
        names = pick_attributes(lvl, attributes)
        return await read_chunks(self, lvl, lvl.nonempty_chunks, names)

    def iter_chunks(self, *, level: int = 0, attributes=None, prefetch: int = 4, batch_chunks: int = 16):
        """Every stored chunk as Selections of ``batch_chunks`` chunks, at most ``prefetch`` batches
        fetched ahead (``async for``; ``async with`` to stop early); see ``zvf.read.export``."""
        from .export import iter_chunks

        return iter_chunks(self, level=level, attributes=attributes, prefetch=prefetch, batch_chunks=batch_chunks)

    def iter_objects(self, ids=None, *, level: int = 0, attributes=None, batch: int = 256, prefetch: int = 4):
        """One Selection per object (``ids`` order; default every object), read ``batch`` at a time
        with ``read_objects``, at most ``prefetch`` batches ahead; see ``zvf.read.export``."""
        from .export import iter_objects

        return iter_objects(self, ids, level=level, attributes=attributes, batch=batch, prefetch=prefetch)

    # ------------------------------------------------------------- per-object data
    async def read_object(self, oid, *, level: int = 0, attributes=None) -> Selection:
        """One object: positions (traversal order for polylines/streamlines),
        attributes row-aligned, ``object_ids``, and connectivity as local row
        indices -- ``edges`` (polylines: consecutive pairs; graphs; skeletons as
        (child, parent)) or ``faces`` (meshes), cross-chunk ones included.
        An object absent at this level (empty manifest) gives an empty Selection.
        """
        return (await objects.read_objects(self, [oid], level=level, attributes=attributes))[0]

    async def read_objects(self, ids, *, level: int = 0, attributes=None, combined: bool = False):
        """Several objects, each needed chunk fetched once for all of them.

        Returns a list of Selection in the order of ``ids`` (repeats allowed),
        or with ``combined=True`` one Selection whose ``offsets``/``objects``
        delimit the objects and whose connectivity indexes the combined rows.
        """
        return await objects.read_objects(self, ids, level=level, attributes=attributes, combined=combined)

    async def _dense(self, family: str, name: str, level: int) -> np.ndarray:
        lvl = await self.family(level, family)
        arr = lvl.array(f"{family}/{name}")
        if arr is None:
            raise InvalidArgumentError(f"{family[:-1].replace('_', ' ')} {name!r} not in level {level} "
                                       f"(it has {lvl.named(family)})")
        return await read_dense(self._ex, arr)

    async def object_attribute(self, name: str, *, level: int = 0) -> np.ndarray:
        """Dense per-object attribute, row i = the i-th object id (absent = the dtype's sentinel)."""
        return await self._dense("object_attributes", name, level)

    async def groups(self, *, level: int = 0) -> list[np.ndarray]:
        """Every group's member object ids, by group id."""
        lvl = await self.family(level, "groups")
        arr = lvl.array("groups")
        if arr is None:
            return []
        n = int(arr.meta.shape[0])
        per_cell = int(arr.meta.chunk_shape[0])
        cells = await self._ex.gather([arr.items((c,)) for c in range(-(-n // per_cell) if n else 0)])
        out: list[np.ndarray] = []
        for c, items in enumerate(cells):
            want = min(per_cell, n - c * per_cell)
            rows = list(items)[:want] if items is not None else [b""] * want
            for i, row in enumerate(rows):
                if len(row) % 8:
                    raise FormatError(f"{arr.path}: group {c * per_cell + i} is {len(row)} bytes, not int64 ids")
                out.append(np.frombuffer(row, dtype="<i8").astype(np.int64))
        return out

    async def group(self, gid: int, *, level: int = 0) -> np.ndarray:
        """Object ids in group ``gid``."""
        groups = await self.groups(level=level)
        if not isinstance(gid, (int, np.integer)) or not 0 <= int(gid) < len(groups):
            raise InvalidArgumentError(f"group id {gid!r} out of range: the store has {len(groups)} groups")
        return groups[int(gid)]

    async def group_attribute(self, name: str, *, level: int = 0) -> np.ndarray:
        """Dense per-group attribute, row g = group g."""
        return await self._dense("group_attributes", name, level)

    async def info(self) -> dict:
        """A summary of the store for ``zvf info``."""
        lvl = await self.level(0)
        lo, hi = self.bounds
        return {
            "url": self.url,
            "geometry_type": self.geometry_type,
            "ndim": self.ndim,
            "bounds": [lo.tolist(), hi.tolist()],
            "chunk_shape": list(self.chunk_shape),
            "bin_shape": None if lvl.grid.bin_shape is None else list(lvl.grid.bin_shape),
            "levels": self.levels,
            "vertex_count": lvl.meta.vertex_count,
            "nonempty_chunks": int(len(lvl.nonempty_chunks)),
            "vertex_attributes": lvl.named("vertex_attributes"),
            "zv_version": self.root.zv_version,
        }

    async def close(self) -> None:
        """Release cached metadata and blobs (connections close with the store)."""
        self._ex.clear_caches()
