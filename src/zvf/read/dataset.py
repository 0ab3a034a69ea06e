"""``DatasetReader``: an opened store and every read it answers.

``zvf.aio.AsyncDataset`` (api/dataset.py) is this reader with the appends of ``zvf.lifecycle``;
the lifecycle operations open stores through the reader itself (lower layers never import api/).
A point query loads the point readers only: the object readers, box reads through a ``ChunkSet`` and the
bulk reads are imported by the methods that use them (serverless cold starts pay for every import).

All requests of one dataset run through its ``Executor`` -- one
concurrency limit, one set of caches -- so concurrent queries from one
service share connections, in-flight requests and decoded indexes.
"""

from __future__ import annotations

import functools
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Self, TypeVar, Unpack, overload

import numpy as np

from ..errors import InvalidArgumentError
from ..format.grid import check_bbox
from ..io.executor import Executor
from ..io.options import StorageOptions
from ..io.stats import Stats
from ..io.store import Target, open_store
from . import load
from .context import Owners, ReadContext, RootFacts
from .points import attribute_layout, pick_attributes, read_chunks
from .query import AsyncQuery, BBox, SelectArgs
from .selection import FragmentRows, Selection

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ..format.manifest import ManifestTable
    from ..format.metadata import RootMeta
    from ..io.store import StoreHandle
    from .batches import BatchStream

AttributeNames = str | Sequence[str] | None
"""Vertex attributes to read: None for all, a name, or names."""
Categories = Sequence[Any] | None
"""Values of the chunking attribute to read on an attribute-chunked level (None for all)."""
Refresh = Literal["auto"] | None
"""What a dataset does when the store changed and its version is gone: None raises StaleDatasetError,
``"auto"`` moves to the newest version and reads again once."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _refreshing(read: Callable[Concatenate[DatasetReader, _P], Awaitable[_R]]
                ) -> Callable[Concatenate[DatasetReader, _P], Awaitable[_R]]:
    """A read that, on a dataset opened with ``refresh="auto"``, survives its version being reclaimed: it
    moves to the newest version and runs once more (``ReadContext.retrying``)."""
    @functools.wraps(read)
    async def run(self: DatasetReader, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await self._ctx.retrying(lambda: read(self, *args, **kwargs))
    return run


class DatasetReader(RootFacts):
    """A ZVF store opened for reading; ``zvf.aio.AsyncDataset`` adds the appends."""

    def __init__(self, handle: StoreHandle, executor: Executor, root: RootMeta, level0: load.Level):
        self._ctx = ReadContext.create(handle, executor, root, level0)
        # set by open(): a dataset built on an executor someone else owns (a writer's view of the store it
        # changes) never lets go of that executor
        self._unclosed: weakref.finalize[..., ReadContext] | None = None

    @classmethod
    async def open(cls, target: Target, *, mode: str = "r", storage_options: StorageOptions | None = None,
                   refresh: Refresh = None) -> Self:
        if mode not in ("r", "a"):  # a store is made by a writer (zvf.write_*, convert), not by open
            raise InvalidArgumentError(f"mode must be 'r' (read) or 'a' (append), got {mode!r}; "
                                       f"stores are created by zvf.write_points/... or zvf.convert")
        if refresh not in (None, "auto"):
            raise InvalidArgumentError(f"refresh must be None or 'auto', got {refresh!r}")
        handle = open_store(target, mode=mode, storage_options=storage_options)
        seen = time.monotonic()
        first = await load.FirstWave.start(handle)
        ex = Executor(handle)
        root, level0 = await load.load_root(ex, handle.url, first)
        ds = cls(handle, ex, root, level0)
        # tied to the context, not to this shell: a query made from the dataset keeps the context in use
        ds._unclosed = weakref.finalize(ds._ctx, _collected_unclosed, handle.url, ex)
        ds._unclosed.atexit = False  # at exit the process's connections go anyway
        ds._ctx.refresh_auto = refresh == "auto"
        ds._ctx.pin(seen)
        return ds

    async def refresh(self) -> bool:
        """Move to the newest version of the store (after appends, pyramid builds, rechunks elsewhere):
        metadata reloaded, caches dropped.  Returns whether the version changed.  A dataset reads the
        version it opened until then -- or, once that version is no longer kept, raises
        StaleDatasetError (``open(..., refresh="auto")`` refreshes by itself and reads again)."""
        return await self._ctx.refresh()

    @property
    def version(self) -> str | None:
        """The id of the version of the store this dataset reads (the root's ``zvf_publication`` record)."""
        return self._ctx.version

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, {', '.join(f'{k}={v!r}' for k, v in self._summary().items())})"

    def _summary(self) -> dict[str, Any]:
        """What ``repr`` shows, from what opening loaded (level 0): no request."""
        lvl = self._ctx.levels.get(0)
        out: dict[str, Any] = {"geometry": self.geometry_type, "ndim": self.ndim, "levels": self.levels}
        if lvl is not None:
            out["vertices"] = lvl.meta.vertex_count
            out["chunks"] = len(lvl.nonempty_chunks)
            objects = (lvl.groups.get("object_index") or {}).get("num_objects")
            if isinstance(objects, int):
                out["objects"] = objects
            out["vertex_attributes"] = lvl.named("vertex_attributes")
        return out

    def _repr_html_(self) -> str:
        """The notebook view: the ``repr`` facts as a table."""
        from html import escape  # here: html's entity table is import cost a query never needs

        rows = "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td>{escape(str(v))}</td></tr>"
                       for k, v in self._summary().items())
        return f"<b>zvf dataset</b> <code>{escape(self.url)}</code><table>{rows}</table>"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------- properties
    @property
    def context(self) -> ReadContext:
        """The read context (executor, root, loaded levels, caches) the ``zvf.read`` modules take."""
        return self._ctx

    @property
    def root(self) -> RootMeta:
        return self._ctx.root

    @property
    def url(self) -> str:
        return self._ctx.url

    @property
    def levels(self) -> list[int]:
        """Resolution levels in the store (0 is the finest)."""
        return self._ctx.level_ids

    @property
    def stats(self) -> Stats:
        """Requests, bytes, retries and cache hits of this dataset so far."""
        return self._ctx.executor.stats

    # ------------------------------------------------------------- levels
    async def level(self, index: int = 0) -> load.Level:
        return await self._ctx.level(index)

    async def family(self, index: int, family: str) -> load.Level:
        """The level with one more lazily loaded family of arrays."""
        return await self._ctx.family(index, family)

    def has_objects(self, index: int) -> bool:
        return self._ctx.has_objects(index)

    # ------------------------------------------------------------- object index
    @_refreshing
    async def manifests(self, index: int = 0) -> tuple[np.ndarray, ManifestTable]:
        """(object ids, ManifestTable) of a level, decoded once and cached."""
        return await self._ctx.manifests(index)

    @_refreshing
    async def fragment_owners(self, index: int) -> Owners:
        """chunk -> object id of each fragment (-1 for fragments no manifest names)."""
        return await self._ctx.fragment_owners(index)

    @_refreshing
    async def object_ids(self, *, level: int = 0) -> NDArray[np.int64]:
        """Ids of the objects the level's index lists (none for a cloud without object ids)."""
        lvl = await self.level(level)
        if not self.has_objects(lvl.index):
            return np.zeros(0, dtype=np.int64)
        return (await self._ctx.object_ids(lvl.index)).astype(np.int64)

    # ------------------------------------------------------------- queries
    def select(self, **narrowing: Unpack[SelectArgs]) -> AsyncQuery:
        """A lazy, immutable query (nothing is read until a terminal runs); see ``zvf.read.query``.

        ``near=(center, radius)`` closed ball; ``objects``/``groups`` id sets;
        ``where={name: value | (lo, hi) | [values]}`` on vertex or object
        attributes (``"rgb[1]"`` picks a channel); ``level="auto"`` with
        ``max_vertices`` picks the finest level that fits.  Terminals:
        ``read()``, ``count()``, ``object_ids()``, ``iter()``, ``plan()``, ``explain()``.
        """
        self._ctx.check_open()
        return AsyncQuery.build(self._ctx, **narrowing)

    @_refreshing
    async def query(self, bbox: BBox, *, level: int = 0, attributes: AttributeNames = None,
                    clip: bool = False, categories: Categories = None) -> Selection:
        """What lies in the closed box ``lo <= p <= hi``, by geometry.

        Point clouds: the vertices inside, with attributes and owners.
        Polylines/streamlines: every object with at least one vertex inside
        (decided per vertex), whole, grouped by ``offsets``/``objects`` in
        ascending id, ``edges`` consecutive pairs; ``clip=True`` keeps only the
        vertices inside and the edges between them.  Graphs, skeletons, meshes:
        the vertices inside plus the edges/faces whose endpoints are all inside,
        grouped by object.  On a level chunked by an attribute (``chunk_by_attribute``),
        ``categories`` (values of that attribute) limits the read to those categories.
        """
        lo, hi = check_bbox(bbox, self.ndim)
        if categories is None:
            return await self.select(bbox=(lo, hi), level=level, attributes=attributes, clip=clip).read()
        from . import box  # here: only a read by category goes through a ChunkSet

        if self.geometry_type in load.SEQUENTIAL:
            return await box.query_sequential(self._ctx, lo, hi, level=level, attributes=attributes, clip=clip,
                                              categories=categories)
        if self.geometry_type in load.LINKED:
            return await box.query_linked(self._ctx, lo, hi, level=level, attributes=attributes,
                                          categories=categories)
        return await box.read_rows(self._ctx, level, attributes, box=(lo, hi), categories=categories)

    @_refreshing
    async def read_all(self, *, level: int = 0, attributes: AttributeNames = None,
                       categories: Categories = None) -> Selection:
        """Every vertex of a level (of the chosen ``categories`` on an attribute-chunked level), labelled
        with its object.  On a level whose polylines share vertices (a pyramid's coarse levels), each
        object's vertices, a shared one once per object through it: what ``select(level=).read()`` returns."""
        lvl = await self.level(level)
        if categories is None and lvl.meta.shared_fragments and self.geometry_type in load.SEQUENTIAL:
            return await self.select(level=level, attributes=attributes).read()
        if categories is not None or lvl.needs_chunkset():
            from .box import read_rows

            return await read_rows(self._ctx, level, attributes, categories=categories)
        names = pick_attributes(lvl, attributes)
        return await read_chunks(self._ctx, lvl, lvl.nonempty_chunks, names)

    def iter_chunks(self, *, level: int = 0, attributes: AttributeNames = None, prefetch: int = 4,
                    batch_chunks: int = 16) -> BatchStream[Selection]:
        """Every stored chunk as Selections of ``batch_chunks`` chunks, at most ``prefetch`` batches
        fetched ahead (``async for``; ``async with`` to stop early); see ``zvf.read.bulk``."""
        from .bulk import iter_chunks

        self._ctx.check_open()
        return iter_chunks(self, level=level, attributes=attributes, prefetch=prefetch,
                                  batch_chunks=batch_chunks)

    def iter_objects(self, ids: ArrayLike | None = None, *, level: int = 0, attributes: AttributeNames = None,
                     batch: int = 256, prefetch: int = 4) -> BatchStream[Selection]:
        """One Selection per object (``ids`` order; default every object), at most ``prefetch``
        batches ahead: every cell read about once where the level fits the sweep's cache, else
        ``batch`` objects at a time with ``read_objects``; see ``zvf.read.sweep.iter_objects``."""
        from .sweep import iter_objects

        self._ctx.check_open()
        return iter_objects(self, ids, level=level, attributes=attributes, batch=batch, prefetch=prefetch)

    # ------------------------------------------------------------- per-object data
    @_refreshing
    async def read_object(self, oid: int, *, level: int = 0, attributes: AttributeNames = None,
                          categories: Categories = None) -> Selection:
        """One object: positions (traversal order for polylines/streamlines),
        attributes row-aligned, ``object_ids``, and connectivity as local row
        indices -- ``edges`` (polylines: consecutive pairs; graphs; skeletons as
        (child, parent)) or ``faces`` (meshes), cross-chunk ones included.
        An object absent at this level (empty manifest) gives an empty Selection.
        ``link_attributes`` holds the link attributes of its edges/faces, and
        ``categories`` keeps only its parts in those categories (attribute-chunked levels).
        """
        from .objects import read_objects

        found = await read_objects(self._ctx, [oid], level=level, attributes=attributes, categories=categories)
        assert isinstance(found, list)  # not combined: one Selection per id asked
        return found[0]

    @overload
    async def read_objects(self, ids: ArrayLike, *, level: int = 0, attributes: AttributeNames = None,
                           combined: Literal[False] = False, categories: Categories = None) -> list[Selection]: ...

    @overload
    async def read_objects(self, ids: ArrayLike, *, level: int = 0, attributes: AttributeNames = None,
                           combined: Literal[True], categories: Categories = None) -> Selection: ...

    async def read_objects(self, ids: ArrayLike, *, level: int = 0, attributes: AttributeNames = None,
                           combined: bool = False, categories: Categories = None) -> list[Selection] | Selection:
        """Several objects, each needed chunk fetched once for all of them.

        Returns a list of Selection in the order of ``ids`` (repeats allowed),
        or with ``combined=True`` one Selection whose ``offsets``/``objects``
        delimit the objects and whose connectivity indexes the combined rows.
        """
        from .objects import read_objects

        return await self._ctx.retrying(lambda: read_objects(
            self._ctx, ids, level=level, attributes=attributes, combined=combined, categories=categories))

    @_refreshing
    async def object_attribute(self, name: str, *, level: int = 0) -> np.ndarray:
        """Dense per-object attribute, row i = the i-th object id (absent = the dtype's sentinel)."""
        from .dense import dense_attribute

        return await dense_attribute(self._ctx, "object_attributes", name, level)

    @_refreshing
    async def fragment_attribute(self, name: str, *, level: int = 0, objects: ArrayLike | None = None) -> FragmentRows:
        """A per-fragment attribute as ``FragmentRows`` (chunks, fragments, values[, object_ids]):
        every stored row, or with ``objects`` one row per fragment their manifests name."""
        from .objects import fragment_attribute

        return await fragment_attribute(self._ctx, name, level=level, objects=objects)

    @_refreshing
    async def groups(self, *, level: int = 0) -> list[np.ndarray]:
        """Every group's member object ids, by group id."""
        from .dense import read_groups

        return await read_groups(self._ctx, level)

    @_refreshing
    async def group(self, gid: int, *, level: int = 0) -> np.ndarray:
        """Object ids in group ``gid``."""
        groups = await self.groups(level=level)
        if not isinstance(gid, (int, np.integer)) or not 0 <= int(gid) < len(groups):
            raise InvalidArgumentError(f"group id {gid!r} out of range: the store has {len(groups)} groups")
        return groups[int(gid)]

    @_refreshing
    async def group_attribute(self, name: str, *, level: int = 0) -> np.ndarray:
        """Dense per-group attribute, row g = group g."""
        from .dense import dense_attribute

        return await dense_attribute(self._ctx, "group_attributes", name, level)

    @_refreshing
    async def info(self) -> dict[str, Any]:
        """A summary of the store for ``zvf info``: layout (chunk, bin and shard shapes, compression),
        counts, and every vertex, object and group attribute with its dtype (``float32[3]``: 3 channels)."""
        lvl = await self.level(0)
        lo, hi = self.bounds
        vertices = lvl.array("vertices")
        codec = vertices.codec if vertices is not None else None
        info: dict[str, Any] = {
            "url": self.url,
            "geometry_type": self.geometry_type,
            "ndim": self.ndim,
            "dtype": None if vertices is None else str(np.dtype(vertices.meta.attributes.get("dtype", "float32"))),
            "bounds": [lo.tolist(), hi.tolist()],
            "chunk_shape": list(self.chunk_shape),
            "bin_shape": None if lvl.layout.bin_shape is None else list(lvl.layout.bin_shape),
            "shard_shape": None if codec is None or codec.shard is None else list(codec.shard),
            "compression": None if codec is None else ("+".join(name for name, _ in codec.compressors) or None),
            "levels": self.levels,
            "vertex_count": lvl.meta.vertex_count,
            "nonempty_chunks": len(lvl.nonempty_chunks),
            "vertex_attributes": lvl.named("vertex_attributes"),
            "vertex_attribute_dtypes": {n: _vlen_dtype(lvl.array(f"vertex_attributes/{n}"))
                                        for n in lvl.named("vertex_attributes")},
        }
        if self.has_objects(0):
            objects = await self.family(0, "object_attributes")
            await self.family(0, "groups")
            await self.family(0, "group_attributes")
            info["object_count"] = len(await self.object_ids(level=0))
            info["object_attributes"] = {n: _dense_dtype(objects.array(f"object_attributes/{n}"))
                                         for n in objects.named("object_attributes")}
            groups = objects.array("groups")
            info["group_count"] = 0 if groups is None else int(groups.meta.shape[0])
            info["group_attributes"] = {n: _dense_dtype(objects.array(f"group_attributes/{n}"))
                                        for n in objects.named("group_attributes")}
        info["zv_version"] = self.root.zv_version
        return info

    async def close(self) -> None:
        """Release cached metadata and blobs and let go of the store: its connections close with the last
        dataset using it (datasets opened on the same target with the same options share one).  Later reads
        raise DatasetClosedError; closing twice is harmless.  A dataset nothing refers to any more is closed
        when it is collected, with a ResourceWarning."""
        self._ctx.closed = True
        if self._unclosed is None:  # a view on an executor someone else owns: only its caches go
            self._ctx.executor.clear_caches()
            return
        self._unclosed.detach()
        self._ctx.executor.close()


def _collected_unclosed(url: str, executor: Executor) -> None:
    """A dataset collected without ``close()``: let go of its store, and say so as unclosed files do."""
    executor.close()
    warnings.warn(f"unclosed dataset {url!r}: close it (ds.close() or 'with zvf.open(...) as ds:') to release "
                  f"its connections at once", ResourceWarning, stacklevel=1)


def _vlen_dtype(arr: Any) -> str:
    """A vertex attribute's dtype as ``float32`` or ``uint8[3]`` (channels per row)."""
    dtype, row_shape = attribute_layout(arr)
    return str(dtype) + (f"[{','.join(map(str, row_shape))}]" if row_shape else "")


def _dense_dtype(arr: Any) -> str:
    """An object or group attribute's dtype as ``float32`` or ``float32[3]``."""
    rest = tuple(arr.meta.shape[1:])
    return str(np.dtype(arr.meta.data_type)) + (f"[{','.join(map(str, rest))}]" if rest else "")
