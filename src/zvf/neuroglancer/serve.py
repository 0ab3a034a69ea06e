"""``zvf neuroglancer serve``: the precomputed views of a store, computed per request (aiohttp).

The unsharded layouts, so each viewer request maps to a few zvf reads:

* ``/annotations/info``; ``/annotations/spatial<k>/<i>_<j>_<l>`` -- a
  multi-level spatial index whose cells are blocks of whole store chunks
  (level 0 one block over the store, the finest single chunks).  Each level
  holds a sample of what coarser levels left: points by a uniform draw per
  point id; lines by their object's draw, so an object's edges sit on one
  level -- objects the store's pyramid keeps at coarser levels come first.
  Each level's ``limit`` comes from metadata alone (the fragment indexes count
  each chunk's vertices; object ownership from the manifests): start-up reads
  no vertex cell.  A cell lists its annotations in a random order fixed by
  their ids (the viewer draws a prefix of each cell).
* ``/annotations/by_id/<id>`` (ids as in :mod:`.annotations`: the id says
  which chunk row or object edge it is); ``/annotations/rel_object/<oid>``
  (lines of one object);
* ``/skeletons/info``, ``/skeletons/<oid>`` (skeleton stores);
* ``/mesh/info``, ``/mesh/<oid>:0``, ``/mesh/<oid>.frag`` (mesh stores);
* ``/skeletons/segment_properties/info``, ``/mesh/segment_properties/info``:
  object ids, object attributes, groups as tags.

Who may read is :mod:`.http`'s guard (allowed origins, Host check).  A
malformed id or cell is a 400; an id, cell or path the store does not have a
404; HEAD is answered like GET.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from ..errors import InvalidArgumentError
from ..format.fragments import decode_fragment_index
from ..read.points import attribute_layout, read_chunks
from . import annotations as ann
from .coords import check_precision, resolve_offset, shifted
from .export import LINE_GEOMETRIES, dimensions, skeleton_bytes, store_segment_properties
from .http import Access, guard
from .objects import MESH_INFO, PROPERTIES, encode_mesh, mesh_manifest, nm_per_unit, skeleton_attributes, skeleton_info

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader
    from ..read.selection import Selection

_UINT64 = re.compile(r"[0-9]{1,20}")


class _View:
    """What the handlers need from the store, set up once at start-up from metadata."""

    def __init__(self, ds: DatasetReader, level: int, unit: str, limit: int, offset: str | Sequence[float] | None,
                 label: str | None):
        if not isinstance(limit, (int, np.integer)) or limit < 1:
            raise InvalidArgumentError(f"limit must be an integer >= 1, got {limit!r}")
        self.ds, self.level, self.unit, self.limit, self.offset_spec = ds, level, unit, int(limit), offset
        self.label = label
        self.scale_nm = nm_per_unit(unit)
        self.geometry = ds.geometry_type
        self.warned = False

    async def setup(self) -> None:
        ds = self.ds
        self.lvl = await ds.level(self.level)
        if self.lvl.key_ndim != ds.ndim:
            raise InvalidArgumentError(f"level {self.level} is attribute-chunked; serve reads spatial levels only")
        self.names = self.lvl.named("vertex_attributes")
        chunks = np.asarray(self.lvl.nonempty_chunks, dtype=np.int64).reshape(-1, ds.ndim)
        self.chunks = chunks
        self.chunk_index = {tuple(c): i for i, c in enumerate(chunks.tolist())}
        self.origin = chunks.min(axis=0) if len(chunks) else np.zeros(ds.ndim, np.int64)
        grid = (chunks.max(axis=0) - self.origin + 1) if len(chunks) else np.ones(ds.ndim, np.int64)
        self.cs = np.asarray(self.lvl.layout.chunk_shape, dtype=np.float64)
        lo, hi = ds.bounds
        self.offset = resolve_offset(self.offset_spec, lo, hi, self.cs)
        self.lower = self.origin * self.cs - self.offset  # of the index, in shifted coordinates
        self.factors = ann.chunk_factors(grid, self.cs)
        self.local = chunks - self.origin
        self.oids = np.zeros(0, np.int64)
        if self.geometry != "point_cloud":
            self.oids = np.sort(await ds.object_ids(level=self.level))
        self.layouts = {n: attribute_layout(self.lvl.need(f"vertex_attributes/{n}")) for n in self.names}
        self.schema: ann.Schema | None = None
        if self.geometry == "point_cloud":
            props, _ = ann.properties_for({n: (d, int(np.prod(shape, dtype=np.int64)))
                                           for n, (d, shape) in self.layouts.items()})
            self.schema = ann.Schema("POINT", ds.ndim, props, [])
        elif self.geometry in LINE_GEOMETRIES:
            if len(self.oids) and (self.oids[0] < 0 or self.oids[-1] >= 1 << 32):
                raise InvalidArgumentError(f"serve needs object ids in [0, 2**32) for line annotation ids; level "
                                           f"{self.level} has {self.oids[0]}..{self.oids[-1]}")
            self.schema = ann.Schema("LINE", ds.ndim, [], ["object"])
        if self.schema is not None:
            self.levels = await self._levels()

    # ------------------------------------------------------------- spatial index, from metadata
    def _cells(self, k: int, local: np.ndarray) -> np.ndarray:
        """Flat level-k cell of chunks at ``local`` grid coordinates."""
        grid = self.factors[0] // self.factors[k]
        return ann.flat_cells(local // self.factors[k], grid)

    async def _fragment_counts(self) -> list[np.ndarray]:
        """Row count of each fragment of each non-empty chunk, from the fragment indexes (no vertex cell)."""
        arr = self.lvl.array("vertex_fragments")
        if arr is None or not len(self.chunks):
            n = self.lvl.meta.vertex_count / max(1, len(self.chunks))
            return [np.array([n]) for _ in range(len(self.chunks))]
        payloads = await arr.payloads(self.chunks, keep_shards=True)
        keys = arr.keys_of(self.chunks)
        return [decode_fragment_index(p, key=k).counts if p else np.zeros(0, np.int64)
                for p, k in zip(payloads, keys)]

    async def _levels(self) -> list[tuple[float, float, int]]:
        counts = await self._fragment_counts()
        if self.geometry == "point_cloud":
            per_chunk = np.array([c.sum() for c in counts], dtype=np.float64)
            return ann.point_levels([self._cells(k, self.local) for k in range(len(self.factors))],
                                    per_chunk, self.limit)
        owners = await self.ds.fragment_owners(self.level) if len(self.chunks) else {}
        chunk_of, weight, owner = [], [], []
        for i, (chunk, c) in enumerate(zip(map(tuple, self.chunks.tolist()), counts)):
            own = np.full(len(c), -1, np.int64)
            got = owners.get(chunk, np.zeros(0, np.int64))[:len(c)]
            own[:len(got)] = got
            chunk_of.append(np.full(len(c), i, np.int64))
            weight.append(c + 1.0)
            owner.append(own)
        chunk_of_a = np.concatenate(chunk_of) if chunk_of else np.zeros(0, np.int64)
        owner_a = np.concatenate(owner) if owner else np.zeros(0, np.int64)
        keep = owner_a >= 0
        chunk_of_a, owner_a = chunk_of_a[keep], owner_a[keep]
        weight_a = np.concatenate(weight)[keep] if weight else np.zeros(0)
        self.draw = await self._draw_keys()
        key = self.draw[np.searchsorted(self.oids, owner_a)]
        cells = [self._cells(k, self.local[chunk_of_a]) for k in range(len(self.factors))]
        return ann.object_levels(cells, weight_a, key, self.limit)

    async def _draw_keys(self) -> np.ndarray:
        """Each object's draw key in [0, 1): objects kept by coarser pyramid levels first, then a uniform
        draw fixed by the id."""
        u = ann.uniform(self.oids.astype(np.uint64))
        coarser = [i for i in self.ds.levels if i > self.level]
        if not coarser:
            return u
        kept_to = np.zeros(len(self.oids), np.int64)  # how many coarser levels keep each object
        for depth, index in enumerate(sorted(coarser), start=1):
            if not self.ds.has_objects(index):
                continue
            ids, table = await self.ds.manifests(index)
            kept = np.unique(ids[table.object_row]) if len(table) else np.zeros(0, np.int64)
            at = np.searchsorted(self.oids, kept)
            ok = at < len(self.oids)
            at = at[ok][self.oids[at[ok]] == kept[ok]]
            kept_to[at] = depth
        top = len(coarser)
        keys: np.ndarray = (top - kept_to + u) / (top + 1)
        return keys

    @property
    def records_schema(self) -> ann.Schema:
        """The annotation schema: set up for point clouds and lines, the stores with annotation routes."""
        if self.schema is None:
            raise RuntimeError(f"a {self.geometry} store has no annotations")
        return self.schema

    def spatial_info(self) -> list[dict[str, Any]]:
        out = []
        for k, (_, _, limit) in enumerate(self.levels):
            f = self.factors[k]
            out.append({"key": f"spatial{k}", "grid_shape": [int(g) for g in self.factors[0] // f],
                        "chunk_size": [float(c) for c in f * self.cs], "limit": int(limit)})
        return out

    def info(self) -> dict[str, Any]:
        rel = [{"id": "object", "key": "rel_object"}] if self.records_schema.relationships else []
        return self.records_schema.info(dimensions=dimensions(self.ds, self.unit), lower=self.lower,
                                upper=self.lower + self.factors[0] * self.cs, by_id={"key": "by_id"},
                                relationships=rel, spatial=self.spatial_info())

    # ------------------------------------------------------------- reads
    def _checked(self, positions: np.ndarray) -> np.ndarray:
        """Positions shifted to float32; warns once if float32 loses more than the data resolves."""
        if not self.warned and len(positions):
            self.warned = check_precision(positions, self.offset, f"serve {self.ds.url}")
        return shifted(positions, self.offset)

    async def _chunk(self, i: int) -> Selection:
        return await read_chunks(self.ds.context, self.lvl, self.chunks[i:i + 1], self.names)

    def has_object(self, oid: int) -> bool:
        k = np.searchsorted(self.oids, oid)
        return bool(k < len(self.oids) and self.oids[k] == oid)

    def _lines(self, sel: Selection, oid: int) -> tuple[np.ndarray, np.ndarray]:
        return ann.line_records(self.records_schema, self._checked(sel.positions), sel.edges, oid)

    def _point_records(self, sel: Selection, rows: slice | np.ndarray) -> np.ndarray:
        return self.records_schema.records(self._checked(sel.positions[rows]),
                                           {k: v[rows] for k, v in sel.attributes.items()})

    def in_grid(self, k: int, cell: tuple[int, ...]) -> bool:
        grid = self.factors[0] // self.factors[k]
        return len(cell) == len(grid) and all(0 <= c < g for c, g in zip(cell, grid))

    async def cell(self, k: int, cell: tuple[int, ...]) -> bytes:
        lo_key, hi_key, _ = self.levels[k]
        f = self.factors[k]
        inside = np.flatnonzero(np.all(self.local // f == np.asarray(cell), axis=1))
        recs: list[np.ndarray] = []
        aids: list[np.ndarray] = []
        if self.geometry == "point_cloud":
            sels = await asyncio.gather(*(self._chunk(int(i)) for i in inside))
            for i, sel in zip(inside.tolist(), sels):
                ids = ann.point_ids(i, len(sel))
                u = ann.uniform(ids)
                rows = np.flatnonzero((u >= lo_key) & (u < hi_key))
                recs.append(self._point_records(sel, rows))
                aids.append(ids[rows])
        else:
            owners = await self.ds.fragment_owners(self.level)
            found = [owners.get(c, np.zeros(0, np.int64)) for c in map(tuple, self.chunks[inside].tolist())]
            ids = np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
            ids = ids[ids >= 0]
            key = self.draw[np.searchsorted(self.oids, ids)] if len(ids) else np.zeros(0)
            ids = ids[(key >= lo_key) & (key < hi_key)]
            lo = self.lower + np.asarray(cell) * f * self.cs
            hi = lo + f * self.cs
            for oid, sel in zip(ids.tolist(), await self.ds.read_objects(ids, level=self.level)):
                r, a = self._lines(sel, oid)
                blo, bhi = self.records_schema.bbox(r)
                touch = np.all((blo <= hi) & (bhi >= lo), axis=1)
                recs.append(r[touch])
                aids.append(a[touch])
        records = np.concatenate(recs) if recs else np.zeros(0, self.records_schema.dtype)
        ids = np.concatenate(aids) if aids else np.zeros(0, np.uint64)
        order = np.argsort(ann.uniform(ids), kind="stable")  # random, fixed by the ids
        return ann.encode_multiple(records[order], ids[order])

    async def by_id(self, aid: int) -> bytes | None:
        hi, row = ann.split_id(aid)
        if self.geometry == "point_cloud":
            if hi >= len(self.chunks):
                return None
            sel = await self._chunk(hi)
            if row >= len(sel):
                return None
            return ann.encode_single(self._point_records(sel, slice(row, row + 1))[0], [])
        if not self.has_object(hi):
            return None
        recs, _ = self._lines(await self.ds.read_object(hi, level=self.level), hi)
        return ann.encode_single(recs[row], [[hi]]) if row < len(recs) else None

    async def related(self, oid: int) -> bytes | None:
        if not self.has_object(oid):
            return None
        return ann.encode_multiple(*self._lines(await self.ds.read_object(oid, level=self.level), oid))

    async def skeleton(self, oid: int) -> bytes | None:
        if not self.has_object(oid):
            return None
        sel = await self.ds.read_object(oid, level=self.level)
        return skeleton_bytes(sel, skeleton_attributes(sel.attributes), self._checked(sel.positions))

    def skeleton_info(self) -> dict[str, Any]:
        empty = {n: np.zeros((0, *shape), d) for n, (d, shape) in self.layouts.items()}
        return skeleton_info(skeleton_attributes(empty), self.scale_nm, None)

    async def mesh(self, oid: int) -> bytes | None:
        if not self.has_object(oid):
            return None
        sel = await self.ds.read_object(oid, level=self.level)
        self._checked(sel.positions)  # the precision check only: encode_mesh shifts and scales in float64
        faces = sel.faces if sel.faces is not None else np.zeros((0, 3), np.int64)
        return encode_mesh(sel.positions, faces, self.scale_nm, self.offset)

    async def segment_properties(self) -> dict[str, Any]:
        if not hasattr(self, "_properties"):
            self._properties = await store_segment_properties(self.ds, self.level, self.label)
        return self._properties


#: the layer directories an app serves, for its viewer state.
LAYERS = web.AppKey("layers", list[str])
#: the app's view of the store (bounds, offset, object ids) once started.
VIEW = web.AppKey("view", _View)


def _uint(text: str) -> int:
    """A base-10 uint64 from a path segment: 400 when malformed (not ASCII digits, too long, >= 2**64)."""
    if not _UINT64.fullmatch(text) or int(text) >= 1 << 64:
        raise web.HTTPBadRequest(text=f"not a uint64 id: {text[:40]!r}")
    return int(text)


def _bytes(data: bytes | None) -> web.Response:
    if data is None:
        raise web.HTTPNotFound()
    return web.Response(body=data, content_type="application/octet-stream")


def _json(doc: Any) -> web.Response:
    return web.Response(text=json.dumps(doc), content_type="application/json")


def make_app(ds: DatasetReader, *, level: int = 0, unit: str = "nm", limit: int = 5000,
             offset: str | Sequence[float] | None = "auto", label: str | None = None,
             access: Access | None = None) -> web.Application:
    """An aiohttp app serving ``ds`` (an open AsyncDataset the caller closes) as precomputed sources.

    ``limit``: annotations per spatial cell above the finest level; ``offset``:
    subtracted from positions (see :func:`.coords.resolve_offset`); ``label``:
    the object attribute shown beside each id; ``access``: who may read
    (default: loopback origins, Host 127.0.0.1 / localhost).
    """
    view = _View(ds, level, unit, limit, offset, label)
    geometry = view.geometry
    routes = web.RouteTableDef()

    def by_id_route(path: str, read: Callable[[int], Awaitable[bytes | None]]) -> None:
        """GET ``path`` (ending in ``{id}``, a uint64): what ``read`` answers for the id, 404 for None."""
        async def handler(request: web.Request) -> web.Response:
            return _bytes(await read(_uint(request.match_info["id"])))

        routes.get(path)(handler)

    if geometry in LINE_GEOMETRIES or geometry == "point_cloud":
        @routes.get("/annotations/info")
        async def annotations_info(request: web.Request) -> web.Response:
            return _json(view.info())

        @routes.get(r"/annotations/spatial{level:[0-9]+}/{cell}")
        async def spatial(request: web.Request) -> web.Response:
            k = _uint(request.match_info["level"])
            if k >= len(view.levels):
                raise web.HTTPNotFound()
            cell = tuple(_uint(p) for p in request.match_info["cell"].split("_"))
            if len(cell) != ds.ndim:
                raise web.HTTPBadRequest(text=f"a cell has {ds.ndim} coordinates")
            if not view.in_grid(k, cell):
                raise web.HTTPNotFound()
            return _bytes(await view.cell(k, cell))

        by_id_route("/annotations/by_id/{id}", view.by_id)
        if geometry != "point_cloud":
            by_id_route("/annotations/rel_object/{id}", view.related)

    if geometry in ("skeleton", "mesh"):
        @routes.get(f"/{'skeletons' if geometry == 'skeleton' else 'mesh'}/{PROPERTIES}/info")
        async def properties(request: web.Request) -> web.Response:
            return _json(await view.segment_properties())

    if geometry == "skeleton":
        @routes.get("/skeletons/info")
        async def skel_info(request: web.Request) -> web.Response:
            return _json(view.skeleton_info())

        by_id_route("/skeletons/{id}", view.skeleton)

    if geometry == "mesh":
        @routes.get("/mesh/info")
        async def mesh_info(request: web.Request) -> web.Response:
            return _json(MESH_INFO)

        @routes.get("/mesh/{name}")
        async def mesh(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            if name.endswith(":0"):
                oid = _uint(name[:-2])
                if not view.has_object(oid):
                    raise web.HTTPNotFound()
                return web.Response(body=mesh_manifest(oid)[1], content_type="application/json")
            if name.endswith(".frag"):
                return _bytes(await view.mesh(_uint(name[:-5])))
            raise web.HTTPNotFound()

    app = web.Application(middlewares=[guard(access or Access.create("127.0.0.1"))])
    app.add_routes(routes)

    async def startup(app: web.Application) -> None:
        await view.setup()

    app.on_startup.append(startup)
    app[LAYERS] = [p for p, ok in (("annotations", geometry != "mesh"), ("skeletons", geometry == "skeleton"),
                                     ("mesh", geometry == "mesh")) if ok]
    app[VIEW] = view
    return app
