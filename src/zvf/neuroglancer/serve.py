"""``zvf neuroglancer serve``: the precomputed views of a store, computed per request (aiohttp).

The unsharded layouts, so each viewer request maps to one zvf read:

* ``/annotations/info``; ``/annotations/spatial0/<i>_<j>_<k>`` -- one spatial
  level whose cells are the store's chunks (a chunk's points, or the edges of
  the objects with a fragment in it that touch the chunk's box);
  ``/annotations/by_id/<id>`` (ids as in :mod:`.annotations`: the id says
  which chunk row or object edge it is); ``/annotations/rel_object/<oid>``
  (lines of one object);
* ``/skeletons/info``, ``/skeletons/<oid>`` (skeleton stores);
* ``/mesh/info``, ``/mesh/<oid>:0``, ``/mesh/<oid>.frag`` (mesh stores).

Every response carries ``Access-Control-Allow-Origin: *`` (a viewer on
another origin fetches these); HEAD is answered like GET; an id, cell or path
the store does not have is a 404.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiohttp import web

from ..errors import InvalidArgumentError
from ..read.points import read_chunks
from . import annotations as ann
from .export import LINE_GEOMETRIES, dimensions, point_schema, skeleton_bytes
from .objects import MESH_INFO, encode_mesh, mesh_manifest, nm_per_unit, skeleton_attributes, skeleton_info

#: the layer names (URL paths) an app serves, for printing its sources.
LAYERS = web.AppKey("layers", list)
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
        "Access-Control-Allow-Headers": "Range, Content-Type", "Access-Control-Expose-Headers": "Content-Length"}


class _View:
    """What the handlers need from the store, set up once at startup."""

    def __init__(self, ds, level: int, unit: str):
        self.ds, self.level, self.unit = ds, level, unit
        self.scale_nm = nm_per_unit(unit)
        self.geometry = ds.geometry_type

    async def setup(self) -> None:
        self.lvl = await self.ds.level(self.level)
        if self.lvl.key_ndim != self.lvl.grid.ndim:
            raise InvalidArgumentError(f"level {self.level} is attribute-chunked; serve reads spatial levels only")
        self.names = self.lvl.named("vertex_attributes")
        chunks = np.asarray(self.lvl.nonempty_chunks, dtype=np.int64).reshape(-1, self.ds.ndim)
        self.chunks = chunks
        self.chunk_index = {tuple(c): i for i, c in enumerate(chunks.tolist())}
        self.origin = chunks.min(axis=0) if len(chunks) else np.zeros(self.ds.ndim, np.int64)
        self.grid = (chunks.max(axis=0) - self.origin + 1) if len(chunks) else np.ones(self.ds.ndim, np.int64)
        self.cs = np.asarray(self.ds.chunk_shape, dtype=np.float64)
        self.oids = np.sort(await self.ds.object_ids(level=self.level))
        self.schema = None
        if self.geometry == "point_cloud":
            first = await self._chunk(0) if len(chunks) else None
            self.schema, _ = point_schema(self.ds.ndim, {} if first is None else first.attributes, [])
        elif self.geometry in LINE_GEOMETRIES:
            self.schema = ann.Schema("LINE", self.ds.ndim, [], ["object"])

    # ----------------------------------------------------------------- reads
    async def _chunk(self, i: int):
        return await read_chunks(self.ds.context, self.lvl, self.chunks[i:i + 1], self.names)

    def has_object(self, oid: int) -> bool:
        k = np.searchsorted(self.oids, oid)
        return bool(k < len(self.oids) and self.oids[k] == oid)

    def _lines(self, sel, oid: int) -> tuple[np.ndarray, np.ndarray]:
        return ann.line_records(self.schema, sel.positions, sel.edges, oid)

    def info(self) -> dict:
        lower = self.origin * self.cs
        rel = [{"id": "object", "key": "rel_object"}] if self.schema.relationships else []
        return self.schema.info(dimensions=dimensions(self.ds, self.unit), lower=lower,
                                upper=lower + self.grid * self.cs,
                                by_id={"key": "by_id"}, relationships=rel,
                                spatial=[{"key": "spatial0", "grid_shape": [int(g) for g in self.grid],
                                          "chunk_size": [float(c) for c in self.cs],
                                          "limit": int(max(1, self.lvl.meta.vertex_count or 1))}])

    async def cell(self, cell: tuple[int, ...]) -> bytes:
        chunk = tuple(int(c) for c in np.asarray(cell) + self.origin)
        i = self.chunk_index.get(chunk)
        if i is None:
            return ann.encode_multiple(np.zeros(0, self.schema.dtype), np.zeros(0, np.uint64))
        if self.geometry == "point_cloud":
            sel = await self._chunk(i)
            return ann.encode_multiple(self.schema.records(sel.positions, sel.attributes), ann.point_ids(i, len(sel)))
        owners = (await self.ds.fragment_owners(self.level)).get(chunk, np.zeros(0, np.int64))
        ids = np.unique(owners[owners >= 0])
        lo = np.asarray(chunk) * self.cs
        hi = lo + self.cs
        recs, aids = [], []
        for oid, sel in zip(ids.tolist(), await self.ds.read_objects(ids, level=self.level)):
            r, a = self._lines(sel, oid)
            blo, bhi = self.schema.bbox(r)
            touch = np.all((blo <= hi) & (bhi >= lo), axis=1)
            recs.append(r[touch])
            aids.append(a[touch])
        if not recs:
            return ann.encode_multiple(np.zeros(0, self.schema.dtype), np.zeros(0, np.uint64))
        return ann.encode_multiple(np.concatenate(recs), np.concatenate(aids))

    async def by_id(self, aid: int) -> bytes | None:
        hi, row = ann.split_id(aid)
        if self.geometry == "point_cloud":
            if hi >= len(self.chunks):
                return None
            sel = await self._chunk(hi)
            if row >= len(sel):
                return None
            return ann.encode_single(self.schema.records(sel.positions[row:row + 1],
                                                         {k: v[row:row + 1] for k, v in sel.attributes.items()})[0], [])
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
        return skeleton_bytes(sel, skeleton_attributes(sel.attributes))

    async def skeleton_info(self) -> dict:
        attrs = []
        if len(self.oids):
            attrs = skeleton_attributes((await self.ds.read_object(int(self.oids[0]), level=self.level)).attributes)
        return skeleton_info(attrs, self.scale_nm, None)

    async def mesh(self, oid: int) -> bytes | None:
        if not self.has_object(oid):
            return None
        sel = await self.ds.read_object(oid, level=self.level)
        return encode_mesh(sel.positions, sel.faces, self.scale_nm)


def _uint(text: str) -> int:
    """A base-10 uint64 from a path segment, else 404."""
    if not text.isdigit() or int(text) >= 1 << 64:
        raise web.HTTPNotFound(headers=CORS)
    return int(text)


def _bytes(data: bytes | None) -> web.Response:
    if data is None:
        raise web.HTTPNotFound(headers=CORS)
    return web.Response(body=data, content_type="application/octet-stream", headers=CORS)


def _json(doc: Any) -> web.Response:
    return web.Response(text=json.dumps(doc), content_type="application/json", headers=CORS)


def make_app(ds, *, level: int = 0, unit: str = "nm") -> web.Application:
    """An aiohttp app serving ``ds`` (an open AsyncDataset the caller closes) as precomputed sources."""
    view = _View(ds, level, unit)
    geometry = view.geometry
    routes = web.RouteTableDef()

    def by_id_route(path: str, read: Callable[[int], Awaitable[bytes | None]]) -> None:
        """GET ``path`` (ending in ``{id}``, a uint64): what ``read`` answers for the id, 404 for None."""
        async def handler(request: web.Request) -> web.Response:
            return _bytes(await read(_uint(request.match_info["id"])))

        routes.get(path)(handler)

    @web.middleware
    async def cors(request: web.Request, handler):
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=CORS)
        try:
            return await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(CORS)
            raise

    if geometry in LINE_GEOMETRIES or geometry == "point_cloud":
        @routes.get("/annotations/info")
        async def annotations_info(request):
            return _json(view.info())

        @routes.get("/annotations/spatial0/{cell}")
        async def spatial(request):
            parts = request.match_info["cell"].split("_")
            if len(parts) != ds.ndim or not all(p.isdigit() for p in parts):
                raise web.HTTPNotFound(headers=CORS)
            cell = tuple(int(p) for p in parts)
            if any(c >= g for c, g in zip(cell, view.grid)):
                raise web.HTTPNotFound(headers=CORS)
            return _bytes(await view.cell(cell))

        by_id_route("/annotations/by_id/{id}", view.by_id)
        if geometry != "point_cloud":
            by_id_route("/annotations/rel_object/{id}", view.related)

    if geometry == "skeleton":
        @routes.get("/skeletons/info")
        async def skel_info(request):
            return _json(await view.skeleton_info())

        by_id_route("/skeletons/{id}", view.skeleton)

    if geometry == "mesh":
        @routes.get("/mesh/info")
        async def mesh_info(request):
            return _json(MESH_INFO)

        @routes.get("/mesh/{name}")
        async def mesh(request):
            name = request.match_info["name"]
            if name.endswith(":0"):
                oid = _uint(name[:-2])
                if not view.has_object(oid):
                    raise web.HTTPNotFound(headers=CORS)
                return web.Response(body=mesh_manifest(oid)[1], content_type="application/json", headers=CORS)
            if name.endswith(".frag"):
                return _bytes(await view.mesh(_uint(name[:-5])))
            raise web.HTTPNotFound(headers=CORS)

    app = web.Application(middlewares=[cors])
    app.add_routes(routes)

    async def startup(app: web.Application) -> None:
        await view.setup()

    app.on_startup.append(startup)
    app[LAYERS] = [p for p, ok in (("annotations", geometry != "mesh"), ("skeletons", geometry == "skeleton"),
                                     ("mesh", geometry == "mesh")) if ok]
    return app
