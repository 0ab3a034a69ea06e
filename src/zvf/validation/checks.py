"""The validator: walks a store through zvf's executor and reports what is wrong.

One listing of the whole store drives everything: it says which documents
exist (all fetched at once), which cells are really stored (compared with
each array's ``nonempty_chunks``), and which objects belong to no node at
all (leftovers of an interrupted write).  Cells are then read chunk by
chunk, concurrently and bounded by the executor's limiter; only per-chunk
counts (rows, fragments, link rows) are kept, so memory stays flat however
large the store is.

Levels (each includes the ones below it):

1. structure     documents exist and parse as Zarr v3 ZVF nodes; the
                 arrays each geometry needs; claim objects and orphans
2. metadata      field values, dtypes, codecs, chunk grids vs bounds
3. consistency   every cell decodes; fragments, attributes, links,
                 manifests, counts agree with each other and the listing
4. conventions   per-geometry rules (links convention, widths, bins)
5. multi-res     levels nest, counts shrink, ids are preserved,
                 cross-level links land on existing vertices

A store is never "raised": every problem becomes an :class:`Issue`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FormatError, NotZvfStoreError, RemoteError, ZvfError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.fragments import FragmentIndex, decode_fragment_index
from ..format.keys import ChunkKeyEncoding, format_chunk_id, parse_delta
from ..format.links import decode_intra_links, decode_ragged_links_groups, unpermute
from ..format.manifest import decode_manifests
from ..format.shard import decode_shard_index, index_nbytes
from ..io.executor import Executor
from .report import ERROR, WARNING, Issue, Report

CLAIM_KEY = ".zvf-writing"  # the writer's claim object (zvf.write.engine.CLAIM_KEY)
DENSE_LIMIT = 1 << 26  # bytes of a dense array (ids, attributes) the validator reads whole
MAX_DOC_BYTES = 64 << 20  # a zarr.json larger than this is reported, not parsed
MAX_SIMILAR = 10  # issues of one kind per array before the rest are only counted

SPATIAL_ZV = {
    "vertices", "vertex_fragments", "link_fragments", "attribute", "fragment_attribute", "links",
    "link_attribute",
}
DENSE_ZV = {"object_attribute", "groupings_attribute"}
OBJECT_GEOMETRIES = {"line", "polyline", "streamline", "graph", "skeleton", "mesh"}
SEQUENTIAL = {"line", "polyline", "streamline"}
# Geometry -> links conventions it may declare (0.9.2 writes the first; the
# reference also accepts "explicit" for skeletons).
CONVENTIONS = {
    "point_cloud": {"implicit_sequential", "explicit", "implicit_sequential_with_branches"},
    "line": {"implicit_sequential"},
    "polyline": {"implicit_sequential"},
    "streamline": {"implicit_sequential"},
    "graph": {"explicit"},
    "skeleton": {"implicit_sequential_with_branches", "explicit"},
    "mesh": {"explicit"},
}


class _Failed:
    """Marker for a cell whose read or decode already produced an issue."""


FAILED = _Failed()


@dataclass
class ArrayInfo:
    """One parsed array node and what the listing says it stores."""

    path: str
    meta: md.ArrayMeta
    codec: CellCodec | None = None
    keys: ChunkKeyEncoding | None = None
    origin: np.ndarray | None = None
    stored: list[str] = field(default_factory=list)  # object keys under the array (no zarr.json)
    grid_cells: dict[tuple[int, ...], str] = field(default_factory=dict)  # stored grid coords -> key
    present: set[tuple[int, ...]] | None = None  # absolute coords of stored cells (after shard indexes)
    listed: set[tuple[int, ...]] = field(default_factory=set)  # absolute coords from nonempty_chunks
    usable: bool = True  # False when its metadata is too broken to read cells

    @property
    def zv(self) -> str | None:
        return self.meta.zv_array

    @property
    def attrs(self) -> dict:
        return self.meta.attributes

    def cell_key(self, chunk: tuple[int, ...]) -> str:
        grid = tuple(int(c) - int(o) for c, o in zip(chunk, self.origin))
        if self.codec is not None and self.codec.shard is not None:
            shard = tuple(g // s for g, s in zip(grid, self.codec.shard))
            return self.keys.key(self.path, shard) + f"[{format_chunk_id(grid)}]"
        return self.keys.key(self.path, grid)


@dataclass
class LevelInfo:
    index: int
    doc_key: str
    meta: md.LevelMeta | None = None
    chunk_shape: tuple[float, ...] | None = None
    arrays: dict[str, ArrayInfo] = field(default_factory=dict)  # path relative to the level
    groups: dict[str, dict] = field(default_factory=dict)  # group path relative to the level -> attrs
    n_rows: dict[tuple[int, ...], int] = field(default_factory=dict)  # chunk -> vertex rows (decoded ok)
    bad_chunks: set[tuple[int, ...]] = field(default_factory=set)  # vertices cell failed to decode
    n_frags: dict[tuple[int, ...], int] = field(default_factory=dict)
    intra_rows: dict[tuple[int, ...], int] = field(default_factory=dict)  # link rows of the intra array
    num_objects: int | None = None
    object_ids: np.ndarray | None = None
    vertex_total: int = 0
    vertex_total_known: bool = True

    def array(self, rel: str) -> ArrayInfo | None:
        return self.arrays.get(rel)

    def named(self, family: str) -> list[str]:
        p = family + "/"
        return sorted(k[len(p):] for k in self.arrays if k.startswith(p) and "/" not in k[len(p):])

    @property
    def spatial(self) -> list[ArrayInfo]:
        return [a for a in self.arrays.values() if a.zv in SPATIAL_ZV or (a.meta.is_vlen and a.zv is None
                                                                           and a.meta.ndim > 1)]


class Validator:
    """Collects issues about one store; :meth:`run` never raises for store problems."""

    def __init__(self, ex: Executor, url: str, level: int) -> None:
        self.ex = ex
        self.url = url
        self.max_level = level
        self.report = Report(url, level)
        self.sizes: dict[str, int] = {}
        self.keys: list[str] = []
        self.docs: dict[str, dict] = {}  # node path ("" = root) -> decoded zarr.json
        self.root: md.RootMeta | None = None
        self.geometry: str | None = None
        self.ndim = 0
        self.levels: dict[int, LevelInfo] = {}
        self._similar: Counter = Counter()
        self._suppressed: Counter = Counter()
        self._shard_cache: dict[str, Any] = {}
        self.counts: Counter = Counter()
        # level 4 material gathered during the link pass
        self._skeleton_edges: list[np.ndarray] = []
        self._chunk_ids: dict[tuple[int, ...], int] = {}

    # ------------------------------------------------------------------ issues

    def issue(self, severity: str, level: int, key: str, text: str, *, kind: str | None = None) -> None:
        """Record an issue, keeping at most MAX_SIMILAR of one ``kind`` per array."""
        if level > self.max_level:
            return
        if kind is not None:
            group = (kind, _array_of(key))
            self._similar[group] += 1
            if self._similar[group] > MAX_SIMILAR:
                self._suppressed[(group, severity, level)] += 1
                return
        self.report.issues.append(Issue(severity, level, key, f"{key}: {text}"))

    def error(self, level: int, key: str, text: str, **kw: Any) -> None:
        self.issue(ERROR, level, key, text, **kw)

    def warn(self, level: int, key: str, text: str, **kw: Any) -> None:
        self.issue(WARNING, level, key, text, **kw)

    def _flush_suppressed(self) -> None:
        for ((kind, array), severity, level), n in sorted(self._suppressed.items()):
            key = array or "."
            self.report.issues.append(
                Issue(severity, level, key, f"{key}: {n} more issue(s) like the above ({kind}) not listed")
            )

    # ------------------------------------------------------------------ driver

    async def run(self) -> Report:
        try:
            if await self._structure():
                if self.max_level >= 2:
                    self._metadata()
                if self.max_level >= 3:
                    await self._consistency()
                if self.max_level >= 4:
                    self._conventions()
                if self.max_level >= 5:
                    self._multires()
        except RemoteError as e:
            self.error(1, getattr(e, "key", "") or ".", f"the store could not be read: {e}")
        except Exception as e:  # noqa: BLE001 - a validator bug must not hide the report
            self.error(1, ".", f"validation stopped by an internal error: {type(e).__name__}: {e}")
        self._flush_suppressed()
        self.report.checked = dict(self.counts)
        return self.report

    # ================================================================== level 1

    async def _structure(self) -> bool:
        """Listing, documents, root, levels, nodes.  False when nothing more can be checked."""
        try:
            listing = await self.ex.list("")
        except RemoteError as e:
            self.error(1, "zarr.json", f"cannot list the store: {e}")
            return False
        self.sizes = dict(listing)
        self.keys = sorted(self.sizes)
        self.counts["objects_listed"] = len(self.keys)
        if not self.keys:
            self.error(1, "zarr.json", f"no store at {self.url} (the location is empty)")
            return False

        if CLAIM_KEY in self.sizes:
            self.error(
                1, CLAIM_KEY,
                "a zvf write claim is present: a write is in progress or was interrupted; "
                "rewrite the store with overwrite=True (or delete it) once no writer is running",
            )
        doc_keys = [k for k in self.keys if k == "zarr.json" or k.endswith("/zarr.json")]
        big = [k for k in doc_keys if self.sizes[k] > MAX_DOC_BYTES]
        for k in big:
            self.error(1, k, f"metadata document of {self.sizes[k]} bytes (over {MAX_DOC_BYTES}): not read")
        doc_keys = [k for k in doc_keys if self.sizes[k] <= MAX_DOC_BYTES]
        raws = await self.ex.gather([self._get_or_issue(k) for k in doc_keys])
        for k, raw in zip(doc_keys, raws):
            if raw is None or raw is FAILED:
                continue
            path = k[: -len("zarr.json")].rstrip("/")
            try:
                doc = json.loads(bytes(raw))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                self.error(1, k, f"not valid JSON ({type(e).__name__}: {str(e)[:120]})")
                continue
            if not isinstance(doc, dict):
                self.error(1, k, f"not a JSON object but {type(doc).__name__}")
                continue
            fmt = doc.get("zarr_format")
            if fmt != 3 or isinstance(fmt, bool):
                self.error(1, k, f"zarr_format must be 3 (Zarr v3), got {fmt!r}")
                continue
            if doc.get("node_type") not in ("group", "array"):
                self.error(1, k, f"node_type must be 'group' or 'array', got {doc.get('node_type')!r}")
                continue
            self.docs[path] = doc
        self.counts["documents"] = len(self.docs)

        for v2 in (".zgroup", ".zarray", ".zattrs"):
            hits = [k for k in self.keys if k == v2 or k.endswith("/" + v2)]
            if hits:
                self.error(1, hits[0], f"Zarr v2 metadata ({len(hits)} {v2} file(s)); ZVF stores are Zarr v3")

        root_doc = self.docs.get("")
        if root_doc is None:
            if "zarr.json" in self.sizes:  # present but unreadable: already reported
                return False
            self._report_rootless()
            return False
        if root_doc.get("node_type") != "group":
            self.error(1, "zarr.json", "the root is a Zarr array, not a Zarr Vectors store")
            return False
        attrs = root_doc.get("attributes")
        if not isinstance(attrs, dict) or "zarr_vectors" not in attrs:
            self.error(1, "zarr.json", "a Zarr group without the 'zarr_vectors' attributes: not a ZVF store")
            return False
        try:
            self.root = md.parse_root(root_doc, key="zarr.json")
        except (NotZvfStoreError, FormatError) as e:
            self.error(1, "zarr.json", _strip_key(str(e), "zarr.json"))
            return False
        self.ndim = self.root.ndim
        geoms = self.root.geometry_types
        self.geometry = geoms[0] if geoms else None

        self._index_nodes()
        self._find_orphans()
        self._check_required()
        return bool(self.levels)

    def _report_rootless(self) -> None:
        """No root document: describe what is there instead."""
        data = [k for k in self.keys if k != CLAIM_KEY]
        dirs = Counter(_array_of(k) or "." for k in data if not k.endswith("zarr.json"))
        docs = sum(1 for k in data if k.endswith("zarr.json"))
        what = ", ".join(f"{n} under {d}/" for d, n in sorted(dirs.items())[:8])
        more = "" if len(dirs) <= 8 else f" and {len(dirs) - 8} more directories"
        self.error(
            1, "zarr.json",
            f"missing, but the location holds {len(data)} object(s) ({docs} metadata documents; cells: "
            f"{what or 'none'}{more}): an unfinished or interrupted write, not a readable store",
        )
        for d, n in sorted(dirs.items())[:MAX_SIMILAR]:
            self.error(1, d, f"{n} orphan object(s) left by an interrupted write (no root zarr.json)",
                       kind="orphan-dir")

    def _index_nodes(self) -> None:
        """Sort every document into levels; parse level and array documents."""
        root = self.root
        listed = {t.level for t in root.transforms}
        found: set[int] = set()
        for path in self.docs:
            head = path.split("/", 1)[0]
            if head.isdigit() and head.isascii():
                found.add(int(head))
        data_levels = {int(k.split("/", 1)[0]) for k in self.keys
                       if "/" in k and k.split("/", 1)[0].isdigit() and k.split("/", 1)[0].isascii()}
        for n in sorted(listed | found | data_levels):
            key = f"{n}/zarr.json"
            lv = LevelInfo(n, key)
            doc = self.docs.get(str(n))
            if doc is None:
                if key not in self.sizes:  # unreadable ones were reported already
                    why = "listed by the root's multiscales" if n in listed else "holding data"
                    self.error(1, key, f"level {n} group document is missing (the level is {why})")
            elif n not in listed and root.transforms:
                self.warn(1, key, f"level {n} is not listed in the root's multiscales datasets")
            if doc is not None:
                try:
                    lv.meta = md.parse_level(doc, key=key)
                except FormatError as e:
                    self.error(1, key, _strip_key(str(e), key))
            self.levels[n] = lv
        if 0 not in self.levels:
            self.error(1, "0/zarr.json", "level 0 is missing")

        for path, doc in self.docs.items():
            if not path:
                continue
            head, _, rel = path.partition("/")
            if not (head.isdigit() and head.isascii()) or int(head) not in self.levels:
                self.warn(1, f"{path}/zarr.json", "a node outside any resolution level")
                continue
            if not rel:
                continue
            lv = self.levels[int(head)]
            key = f"{path}/zarr.json"
            if doc.get("node_type") == "group":
                a = doc.get("attributes", {})
                lv.groups[rel] = a if isinstance(a, dict) else {}
                continue
            try:
                meta = md.parse_array(doc, key=key)
            except FormatError as e:
                self.error(1, key, _strip_key(str(e), key))
                continue
            info = ArrayInfo(path, meta)
            try:
                info.keys = ChunkKeyEncoding.from_metadata(doc, key=key)
                info.origin = np.asarray(meta.grid_origin, dtype=np.int64)
            except (FormatError, ValueError) as e:
                self.error(1, key, _strip_key(str(e), key))
                info.usable = False
            lv.arrays[rel] = info
        self.counts["levels"] = len(self.levels)
        self.counts["arrays"] = sum(len(lv.arrays) for lv in self.levels.values())

    def _find_orphans(self) -> None:
        """Objects no array owns, and which stored keys belong to which array."""
        keys = self.keys
        covered = np.zeros(len(keys) + 1, dtype=np.int64)
        for lv in self.levels.values():
            for info in lv.arrays.values():
                p = info.path + "/"
                lo = bisect.bisect_left(keys, p)
                hi = bisect.bisect_left(keys, info.path + "0")  # "0" sorts right after "/"
                covered[lo] += 1
                covered[hi] -= 1
                info.stored = [k for k in keys[lo:hi] if k != p + "zarr.json"]
        owned = np.cumsum(covered[:-1]) > 0
        orphans: dict[str, list[str]] = defaultdict(list)
        for i in np.flatnonzero(~owned).tolist():
            k = keys[i]
            if k == CLAIM_KEY or k == "zarr.json" or k.endswith("/zarr.json"):
                continue
            if k.rsplit("/", 1)[-1] in (".zgroup", ".zarray", ".zattrs"):
                continue
            orphans[_array_of(k) or "."].append(k)
        for d, ks in sorted(orphans.items()):
            doc = f"{d}/zarr.json"
            why = (f"its array document {doc} is missing" if doc not in self.sizes
                   else f"{doc} is not a readable array document")
            self.error(1, ks[0], f"{len(ks)} stored object(s) under {d}/ belong to no array: {why} "
                                 "(leftover of an interrupted write or of a removed array)", kind="orphan")
        self.counts["orphan_objects"] = sum(len(v) for v in orphans.values())

    def _check_required(self) -> None:
        """The arrays each level needs for its geometry."""
        geom = self.geometry
        for n, lv in self.levels.items():
            if lv.meta is None:
                continue
            pre = f"{n}/"
            for name in ("vertices", "vertex_fragments"):
                if name not in lv.arrays and f"{pre}{name}/zarr.json" not in self.sizes:
                    self.error(1, f"{pre}{name}/zarr.json", f"required array {pre}{name} is missing")
            needs_index = "object_index" in lv.meta.arrays_present or (n == 0 and geom in OBJECT_GEOMETRIES)
            if needs_index:
                if "object_index" not in lv.groups and f"{pre}object_index/zarr.json" not in self.sizes:
                    self.error(1, f"{pre}object_index/zarr.json",
                               f"the {geom} level needs an object index but {pre}object_index is missing")
                if "object_index/manifests" not in lv.arrays and "object_index/data" not in lv.arrays:
                    if f"{pre}object_index/manifests/zarr.json" not in self.sizes:
                        self.error(1, f"{pre}object_index/manifests/zarr.json",
                                   "the object index has no manifests array")
                elif "object_index/object_ids" not in lv.arrays and "object_index/manifests" in lv.arrays:
                    self.warn(1, f"{pre}object_index/object_ids/zarr.json",
                              "missing: readers will assume object ids 0..O-1")
            if n == 0 and geom in ("graph", "skeleton", "mesh"):
                if "links/0" not in lv.groups:
                    self.warn(1, f"{pre}links/0/zarr.json", f"a {geom} store without a links/0 family (no edges)")
                if "link_fragments" not in lv.arrays:
                    self.warn(1, f"{pre}link_fragments/zarr.json", f"a {geom} level without link_fragments")

    # ================================================================== level 2

    def _metadata(self) -> None:
        root = self.root
        if not root.geometry_types:
            self.warn(2, "zarr.json", "geometry_types is empty: the store was created but never written")
        elif len(root.geometry_types) > 1:
            self.warn(2, "zarr.json", f"several geometry_types {list(root.geometry_types)}; zvf reads the first")
        if root.zv_version.split(".")[:2] < ["0", "9"] and root.zv_version.split(".")[0] == "0":
            self.warn(2, "zarr.json", f"zv_version {root.zv_version} is older than the 0.9 layout zvf reads")
        for n, lv in sorted(self.levels.items()):
            if lv.meta is None:
                continue
            m = lv.meta
            if m.level != n:
                self.error(2, lv.doc_key, f"zarr_vectors_level.level is {m.level} but the group is level {n}")
            if n == 0 and m.parent_level is not None:
                self.error(2, lv.doc_key, f"level 0 names parent_level {m.parent_level}")
            try:
                lv.chunk_shape = root.level_chunk_shape(m, key=lv.doc_key)
            except FormatError as e:
                self.error(2, lv.doc_key, _strip_key(str(e), lv.doc_key))
                lv.chunk_shape = None
            self._level_arrays(lv)

    def _level_arrays(self, lv: LevelInfo) -> None:
        n = lv.index
        vert = lv.array("vertices")
        ref_shape = vert.meta.shape if vert is not None else None
        ref_origin = tuple(vert.origin.tolist()) if vert is not None and vert.origin is not None else None
        sid = self.ndim + (1 if lv.meta.chunk_dims else 0)
        for rel, info in sorted(lv.arrays.items()):
            key = f"{info.path}/zarr.json"
            meta = info.meta
            try:
                info.codec = CellCodec.from_array_metadata(meta.raw, key=key)
            except FormatError as e:
                self.error(2, key, f"codecs not supported: {_strip_key(str(e), key)}")
                info.usable = False
            if not info.usable:
                continue
            zv = info.zv
            spatial = zv in SPATIAL_ZV
            if spatial:
                if not meta.is_vlen:
                    self.error(2, key, f"a per-chunk array must be variable_length_bytes, got {meta.data_type!r}")
                    info.usable = False
                    continue
                if meta.ndim != sid:
                    self.error(2, key, f"shape {list(meta.shape)} has {meta.ndim} axes, expected {sid}")
                    info.usable = False
                    continue
                if info.codec.shard is None and any(c != 1 for c in meta.chunk_shape):
                    self.error(2, key, f"chunk_grid chunk_shape {list(meta.chunk_shape)} must be all ones "
                                       "(one cell per spatial chunk)")
                    info.usable = False
                    continue
                if ref_shape is not None and info is not vert and (
                        meta.shape != ref_shape or tuple(info.origin.tolist()) != ref_origin):
                    self.error(2, key, f"grid shape {list(meta.shape)} / origin {info.origin.tolist()} differ from "
                                       f"{n}/vertices ({list(ref_shape)} / {list(ref_origin)})")
                try:
                    nonempty = meta.nonempty_chunk_array
                except FormatError as e:
                    self.error(2, key, _strip_key(str(e), key))
                    nonempty = np.zeros((0, meta.ndim), np.int64)
                if "nonempty_chunks" not in meta.attributes:
                    self.warn(2, key, "no nonempty_chunks attribute: readers will see no cells")
                if len(nonempty):
                    rel_c = nonempty - info.origin
                    out = np.any((rel_c < 0) | (rel_c >= np.asarray(meta.shape)), axis=1)
                    for row in nonempty[out][:MAX_SIMILAR].tolist():
                        self.error(2, key, f"nonempty_chunks lists chunk {format_chunk_id(row)} outside the "
                                           f"grid (origin {info.origin.tolist()}, shape {list(meta.shape)})")
                    u = np.unique(nonempty, axis=0)
                    if len(u) != len(nonempty):
                        self.warn(2, key, f"nonempty_chunks repeats {len(nonempty) - len(u)} chunk(s)")
                info.listed = set(map(tuple, nonempty.tolist()))
                self._check_dtype(info, key)
            elif zv in DENSE_ZV or rel == "object_index/object_ids":
                if meta.is_vlen or info.codec.serializer != "bytes":
                    self.error(2, key, f"a dense array must use the bytes serializer, got {meta.data_type!r}")
                    info.usable = False
                elif meta.data_type not in md.NUMERIC_DTYPES:
                    self.error(2, key, f"data_type {meta.data_type!r} is not numeric")
                    info.usable = False
            elif rel in ("object_index/manifests", "groups") and (not meta.is_vlen or meta.ndim != 1):
                self.error(2, key, f"must be a 1-D variable_length_bytes array, got {meta.data_type!r} "
                                   f"shape {list(meta.shape)}")
                info.usable = False
        if vert is not None and vert.usable and lv.chunk_shape is not None and ref_shape is not None:
            self._grid_vs_bounds(lv, vert)
        self._links_meta(lv)
        self._objects_meta(lv)

    def _check_dtype(self, info: ArrayInfo, key: str) -> None:
        a = info.attrs
        zv = info.zv
        if zv in ("vertices", "attribute", "fragment_attribute", "links", "link_attribute"):
            dt = a.get("dtype")
            if not isinstance(dt, str) or dt not in md.NUMERIC_DTYPES:
                self.error(2, key, f"attribute dtype {dt!r} is not a supported numeric dtype")
                info.usable = False
                return
            if zv == "vertices" and np.dtype(dt).kind != "f":
                self.warn(2, key, f"vertices dtype {dt} is not a float type")
            if zv == "links" and np.dtype(dt).kind not in "iu":
                self.error(2, key, f"links dtype {dt} is not an integer type")
                info.usable = False
        if zv == "vertices" and a.get("encoding", "raw") != "raw":
            self.warn(2, key, f"vertices encoding {a.get('encoding')!r}: cells are not checked")
            info.usable = False
        if zv in ("attribute", "fragment_attribute", "link_attribute"):
            rs = a.get("row_shape", [])
            if not isinstance(rs, list) or len(rs) > 1 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                  and x >= 1 for x in rs):
                self.error(2, key, f"row_shape {rs!r} must be [] or [C] with C >= 1")
                info.usable = False
            elif rs and "channel_names" in a and (not isinstance(a["channel_names"], list)
                                                  or len(a["channel_names"]) != rs[0]):
                self.warn(2, key, f"channel_names {a['channel_names']!r} do not match row_shape {rs}")

    def _grid_vs_bounds(self, lv: LevelInfo, vert: ArrayInfo) -> None:
        if lv.meta.chunk_dims:
            return
        lo, hi = (np.asarray(b, dtype=np.float64) for b in self.root.bounds)
        cs = np.asarray(lv.chunk_shape, dtype=np.float64)
        need_lo = np.floor(lo / cs).astype(np.int64)
        need_hi = np.ceil(hi / cs).astype(np.int64)  # exclusive: cells with points strictly inside
        org = vert.origin
        top = org + np.asarray(vert.meta.shape, dtype=np.int64)
        if np.any(org > need_lo) or np.any(top < np.maximum(need_hi, need_lo + 1)):
            self.warn(2, f"{vert.path}/zarr.json",
                      f"chunk grid [origin {org.tolist()}, shape {list(vert.meta.shape)}] does not cover the "
                      f"bounds {lo.tolist()}..{hi.tolist()} with chunk_shape {cs.tolist()}")

    def _links_meta(self, lv: LevelInfo) -> None:
        n = lv.index
        for rel, attrs in sorted(lv.groups.items()):
            parts = rel.split("/")
            if len(parts) != 2 or parts[0] != "links":
                continue
            key = f"{n}/{rel}/zarr.json"
            try:
                delta = parse_delta(parts[1])
            except FormatError:
                self.error(2, key, f"links family name {parts[1]!r} is not a level delta (0, +k, -k)")
                continue
            if attrs.get("zv_array") != "links_family":
                self.error(2, key, f"zv_array must be 'links_family', got {attrs.get('zv_array')!r}")
            if attrs.get("level_delta", delta) != delta:
                self.error(2, key, f"level_delta {attrs.get('level_delta')!r} does not match the name {parts[1]}")
            lw = attrs.get("link_width")
            if not isinstance(lw, int) or isinstance(lw, bool) or lw < 1:
                self.error(2, key, f"link_width {lw!r} must be a positive integer")
            if delta != 0 and n + delta not in self.levels:
                self.error(2, key, f"cross-level family points to level {n + delta}, which does not exist")
        for rel, info in sorted(lv.arrays.items()):
            if info.zv not in ("links", "link_attribute") or not info.usable:
                continue
            key = f"{info.path}/zarr.json"
            parts = rel.split("/")
            fam_rel = "/".join(parts[:-1])
            fam = lv.groups.get(fam_rel)
            sid = info.meta.ndim
            try:
                offs = md.parse_offsets_name(parts[-1], sid, key=key)
            except FormatError as e:
                self.error(2, key, _strip_key(str(e), key))
                info.usable = False
                continue
            stated = info.attrs.get("offsets")
            if stated is not None and _as_offsets(stated) != offs:
                self.error(2, key, f"offsets attribute {stated!r} does not match the array name {parts[-1]!r}")
            try:
                delta = parse_delta(parts[-2])
            except FormatError:
                info.usable = False
                continue
            if info.attrs.get("level_delta", delta) != delta:
                self.error(2, key, f"level_delta {info.attrs.get('level_delta')!r} does not match {parts[-2]}")
            if info.zv == "links":
                if fam is None:
                    self.error(1, key, f"links array outside a links family group ({n}/{fam_rel}/zarr.json missing)")
                    continue
                lw = fam.get("link_width")
                if info.attrs.get("link_width", lw) != lw:
                    self.error(2, key, f"link_width {info.attrs.get('link_width')} differs from the family's {lw}")
                if isinstance(lw, int) and len(offs) != lw - 1 and not (delta == 0 and not any(any(o) for o in offs)
                                                                        and len(offs) in (1, lw - 1)):
                    self.error(2, key, f"{len(offs)} offset vector(s) for link_width {lw} (expected {lw - 1})")
                if not isinstance(info.attrs.get("has_perm", False), bool):
                    self.error(2, key, f"has_perm {info.attrs.get('has_perm')!r} must be a boolean")
                    info.usable = False

    def _objects_meta(self, lv: LevelInfo) -> None:
        n = lv.index
        oi = lv.groups.get("object_index")
        man = lv.array("object_index/manifests")
        ids = lv.array("object_index/object_ids")
        if oi is not None:
            key = f"{n}/object_index/zarr.json"
            num = oi.get("num_objects")
            if not isinstance(num, int) or isinstance(num, bool) or num < 0:
                self.error(2, key, f"num_objects {num!r} must be a non-negative integer")
            else:
                lv.num_objects = num
            sidn = oi.get("sid_ndim")
            exp = self.ndim + (1 if lv.meta.chunk_dims else 0)
            if sidn is not None and sidn != exp:
                self.error(2, key, f"sid_ndim {sidn!r} but chunk coordinates have {exp} axes")
            np_ = oi.get("num_present")
            if isinstance(np_, int) and lv.num_objects is not None and np_ > lv.num_objects:
                self.error(2, key, f"num_present {np_} exceeds num_objects {lv.num_objects}")
        if man is not None and man.usable:
            o = man.meta.shape[0] if man.meta.ndim == 1 else None
            if lv.num_objects is None:
                lv.num_objects = o
            elif o is not None and o != lv.num_objects:
                self.error(2, f"{man.path}/zarr.json", f"shape [{o}] but the object index says "
                                                       f"num_objects {lv.num_objects}")
        if ids is not None and ids.usable and lv.num_objects is not None and ids.meta.shape[0] != lv.num_objects:
            self.error(2, f"{ids.path}/zarr.json", f"shape {list(ids.meta.shape)} but there are "
                                                   f"{lv.num_objects} objects")
        for name in lv.named("object_attributes"):
            info = lv.arrays[f"object_attributes/{name}"]
            if info.usable and lv.num_objects is not None and info.meta.shape[0] != lv.num_objects:
                self.error(2, f"{info.path}/zarr.json", f"object attribute has {info.meta.shape[0]} rows for "
                                                        f"{lv.num_objects} objects")
        grp = lv.array("groups")
        if grp is not None:
            ng = grp.attrs.get("num_groups")
            if ng is not None and ng != grp.meta.shape[0]:
                self.error(2, f"{grp.path}/zarr.json", f"num_groups {ng} but shape {list(grp.meta.shape)}")
            for name in lv.named("group_attributes"):
                info = lv.arrays[f"group_attributes/{name}"]
                if info.usable and info.meta.shape[0] != grp.meta.shape[0]:
                    self.error(2, f"{info.path}/zarr.json", f"group attribute has {info.meta.shape[0]} rows for "
                                                            f"{grp.meta.shape[0]} groups")

    # ================================================================== level 3

    async def _consistency(self) -> None:
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is None:
                continue
            await self._presence(lv)
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is not None and lv.array("vertices") is not None:
                await self._vertex_pass(lv)
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is not None:
                await self._link_pass(lv)
                await self._object_pass(lv)
                await self._dense_pass(lv)

    # -- cells --------------------------------------------------------------------

    async def _get_or_issue(self, key: str, level: int = 1) -> Any:
        try:
            return await self.ex.get(key)
        except ZvfError as e:
            self.error(level, key, f"cannot be read: {e}", kind="read")
            return FAILED

    async def _shard_index(self, info: ArrayInfo, shard_key: str) -> Any:
        """(offsets, nbytes) of one shard, FAILED (reported) or None if absent."""
        if shard_key in self._shard_cache:
            return self._shard_cache[shard_key]
        n_inner = int(np.prod(info.codec.shard))
        size = self.sizes.get(shard_key)
        if size is None:
            return None
        try:
            tail = await self.ex.get_suffix(shard_key, index_nbytes(n_inner))
            if tail is None:
                res: Any = None
            else:
                res = decode_shard_index(tail, n_inner, key=shard_key, shard_size=size)
        except ZvfError as e:
            self.error(3, shard_key, _strip_key(str(e), shard_key), kind="shard")
            res = FAILED
        self._shard_cache[shard_key] = res
        return res

    async def _presence(self, lv: LevelInfo) -> None:
        """Stored cells of every spatial array vs its nonempty_chunks."""
        spatial = {id(a) for a in lv.spatial}
        for info in lv.arrays.values():
            if not info.usable or info.codec is None:
                continue
            ndim = info.meta.ndim
            prefix = len(info.path) + 1
            shape = np.asarray(info.meta.shape, dtype=np.int64)
            per = np.asarray(info.meta.chunk_shape, dtype=np.int64)
            n_grid = -(-shape // per)
            for k in info.stored:
                try:
                    g = info.keys.parse(k[prefix:], ndim)
                except FormatError:
                    self.error(3, k, f"not a chunk key of {info.path} (stray object inside the array)", kind="stray")
                    continue
                if any(x < 0 or x >= m for x, m in zip(g, n_grid.tolist())):
                    self.error(3, k, f"cell {format_chunk_id(g)} lies outside the grid {n_grid.tolist()} "
                                     f"of {info.path}", kind="outside")
                    continue
                info.grid_cells[g] = k
            if id(info) not in spatial:
                continue
            present: set[tuple[int, ...]] = set()
            org = info.origin.tolist()
            if info.codec.shard is None:
                present = {tuple(a + o for a, o in zip(g, org)) for g in info.grid_cells}
            else:
                idx = await self.ex.gather([self._shard_index(info, k) for k in info.grid_cells.values()])
                for g, res in zip(info.grid_cells, idx):
                    if res is None or res is FAILED:
                        continue
                    offsets, _ = res
                    inner = np.flatnonzero(offsets != np.uint64(2**64 - 1))
                    if inner.size:
                        local = np.stack(np.unravel_index(inner, tuple(per.tolist())), axis=1)
                        cells = local + np.asarray(g, dtype=np.int64) * per
                        inside = np.all(cells < shape, axis=1)
                        for c in (cells[inside] + info.origin).tolist():
                            present.add(tuple(c))
            info.present = present
            self.counts["cells"] += len(present)
            missing = sorted(info.listed - present)
            extra = sorted(present - info.listed)
            for c in missing:
                self.error(3, info.cell_key(c), f"listed in {info.path} nonempty_chunks (chunk {format_chunk_id(c)}) "
                                                "but the cell does not exist", kind="missing-cell")
            for c in extra:
                self.error(3, info.cell_key(c), f"cell of chunk {format_chunk_id(c)} is stored but not listed in "
                                                f"{info.path} nonempty_chunks (leftover of an interrupted or "
                                                "failed write?)", kind="unlisted-cell")

    async def _payload(self, info: ArrayInfo | None, chunk: tuple[int, ...]) -> Any:
        """Decoded payload of a stored cell; None when not stored; FAILED when broken (reported)."""
        if info is None or not info.usable or info.present is None or chunk not in info.present:
            return None
        key = info.cell_key(chunk)
        try:
            if info.codec.shard is None:
                raw = await self.ex.get(key)
                if raw is None:
                    self.error(3, key, "cell vanished while validating", kind="read")
                    return FAILED
                return info.codec.decode(raw, key=key)
            grid = tuple(int(c) - int(o) for c, o in zip(chunk, info.origin))
            per = info.codec.shard
            shard = tuple(g // s for g, s in zip(grid, per))
            skey = info.keys.key(info.path, shard)
            res = await self._shard_index(info, skey)
            if res is None or res is FAILED:
                return FAILED
            offsets, nbytes = res
            slot = int(np.ravel_multi_index(tuple(g - s * p for g, s, p in zip(grid, shard, per)), per))
            start, n = int(offsets[slot]), int(nbytes[slot])
            raw = await self.ex.get_range(skey, start, start + n)
            if raw is None or len(raw) != n:
                self.error(3, key, "inner chunk shorter than its shard index says", kind="decode")
                return FAILED
            return info.codec.decode(raw, key=key)
        except ZvfError as e:
            self.error(3, key, f"cell does not decode: {_strip_key(str(e), key)}", kind="decode")
            return FAILED

    # -- vertices, fragments, attributes -------------------------------------------

    def _row_layout(self, info: ArrayInfo) -> tuple[np.dtype, int]:
        a = info.attrs
        dt = np.dtype(a.get("dtype", "float32")).newbyteorder("<")
        if info.zv == "vertices":
            return dt, self.ndim
        rs = a.get("row_shape") or []
        return dt, int(np.prod(rs)) if rs else 1

    async def _vertex_pass(self, lv: LevelInfo) -> None:
        vert = lv.array("vertices")
        frag = lv.array("vertex_fragments")
        attrs = [lv.arrays[f"vertex_attributes/{a}"] for a in lv.named("vertex_attributes")]
        fattrs = [lv.arrays[f"fragment_attributes/{a}"] for a in lv.named("fragment_attributes")]
        group = [a for a in [vert, frag, *attrs, *fattrs] if a is not None and a.present is not None]
        chunks: set[tuple[int, ...]] = set()
        for a in group:
            chunks |= a.present
        if not vert.usable or vert.present is None:
            lv.vertex_total_known = False
            return
        bins = self._bin_rule(lv)

        async def one(chunk: tuple[int, ...]) -> None:
            pay = await self.ex.gather([self._payload(a, chunk) for a in group])
            self._check_vertex_chunk(lv, chunk, dict(zip([a.path for a in group], pay)), vert, frag, attrs,
                                     fattrs, bins)

        await self.ex.map(one, sorted(chunks))
        self.counts["chunks"] += len(chunks)
        key = lv.doc_key
        if lv.vertex_total_known and lv.meta.vertex_count != lv.vertex_total:
            self.error(3, key, f"vertex_count is {lv.meta.vertex_count} but the cells hold {lv.vertex_total} "
                               "vertices")

    def _bin_rule(self, lv: LevelInfo) -> Any:
        """(bin_shape, bins_per_chunk) when level-0 point-cloud fragments must tile bins."""
        if (self.max_level < 4 or self.geometry != "point_cloud" or lv.index != 0 or lv.meta.chunk_dims
                or "object_index" in lv.groups or not lv.meta.fragments_tile):
            return None
        cs = np.asarray(lv.chunk_shape or self.root.chunk_shape, dtype=np.float64)
        bs = np.asarray(self.root.bin_shape, dtype=np.float64)
        return bs, np.rint(cs / bs).astype(np.int64)

    def _check_vertex_chunk(self, lv, chunk, pay, vert, frag, attrs, fattrs, bins) -> None:
        cid = format_chunk_id(chunk)
        vp = pay[vert.path]
        if vp is FAILED:
            lv.bad_chunks.add(chunk)
            lv.vertex_total_known = False
            return
        dt, width = self._row_layout(vert)
        row_bytes = dt.itemsize * width
        if vp is None:
            positions = None
            n = 0
            if chunk not in vert.listed:
                have = [a.path for a in (frag, *attrs, *fattrs) if a is not None and pay.get(a.path) is not None]
                if have:
                    self.error(3, have[0] if frag is None else frag.cell_key(chunk),
                               f"chunk {cid} has cells in {', '.join(have)} but no vertices (orphan cells)",
                               kind="orphan-cell")
                return
        else:
            nb = memoryview(vp).nbytes
            if nb % row_bytes:
                self.error(3, vert.cell_key(chunk), f"{nb} bytes is not a whole number of {row_bytes}-byte "
                                                   f"vertex rows ({width} x {dt.name})", kind="rows")
                lv.bad_chunks.add(chunk)
                lv.vertex_total_known = False
                return
            n = nb // row_bytes
            positions = np.frombuffer(vp, dtype=dt).reshape(n, width)
            if n and not np.isfinite(positions).all():
                self.warn(3, vert.cell_key(chunk), "vertices include NaN or infinite coordinates", kind="nan")
        lv.n_rows[chunk] = n
        lv.vertex_total += n
        self.counts["vertices"] += n

        fi = None
        if frag is not None and frag.usable:
            fp = pay.get(frag.path)
            if fp is None:
                if n:
                    self.error(3, frag.cell_key(chunk), f"chunk {cid} has {n} vertices but no fragment index",
                               kind="no-fragments")
            elif fp is not FAILED:
                try:
                    fi = decode_fragment_index(fp, key=frag.cell_key(chunk), n_rows=n)
                except ZvfError as e:
                    self.error(3, frag.cell_key(chunk), f"fragment index invalid: "
                                                        f"{_strip_key(str(e), frag.cell_key(chunk))}", kind="fragments")
        if fi is not None:
            lv.n_frags[chunk] = fi.num_fragments
            self.counts["fragments"] += fi.num_fragments
            if lv.meta.fragments_tile and not fi.tiles(n):
                self.error(3, frag.cell_key(chunk), f"fragments_tile is set on {lv.doc_key} but the fragments of "
                                                    f"chunk {cid} do not tile its {n} rows", kind="tile")
            if bins is not None and positions is not None:
                self._check_bins(frag.cell_key(chunk), chunk, positions, fi, bins)

        for a in attrs:
            if not a.usable:
                continue
            ap = pay.get(a.path)
            if ap is FAILED:
                continue
            if ap is None:
                if n:
                    self.error(3, a.cell_key(chunk), f"chunk {cid} has {n} vertices but no {a.path} cell",
                               kind="attr-missing")
                continue
            adt, aw = self._row_layout(a)
            nb = memoryview(ap).nbytes
            if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != n:
                rows = nb / (adt.itemsize * aw)
                self.error(3, a.cell_key(chunk), f"{rows:g} attribute rows for the chunk's {n} vertices "
                                                 f"(not row-aligned with {vert.cell_key(chunk)})", kind="attr-rows")
        for a in fattrs:
            ap = pay.get(a.path)
            if ap is FAILED or ap is None or fi is None or not a.usable:
                continue
            adt, aw = self._row_layout(a)
            nb = memoryview(ap).nbytes
            if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != fi.num_fragments:
                self.error(3, a.cell_key(chunk), f"{nb / (adt.itemsize * aw):g} fragment-attribute rows for "
                                                 f"{fi.num_fragments} fragments", kind="fattr-rows")

    def _check_bins(self, key: str, chunk, positions: np.ndarray, fi: FragmentIndex, bins) -> None:
        """Level 4: a point cloud's fragment f holds exactly the rows of bin f (C order)."""
        bs, bpc = bins
        nb = int(np.prod(bpc))
        if fi.num_fragments != nb:
            self.error(4, key, f"{fi.num_fragments} fragments but a chunk has {nb} bins "
                               "(one range fragment per bin, empty ones included)", kind="bins")
            return
        if not len(positions):
            return
        absb = np.floor(positions.astype(np.float64) / bs).astype(np.int64)
        local = absb - np.asarray(chunk, dtype=np.int64) * bpc
        strides = np.cumprod(np.concatenate(([1], bpc[::-1][:-1])))[::-1]
        flat = local @ strides
        rows, lengths = fi.gather(np.arange(nb))
        want = np.repeat(np.arange(nb), lengths)
        got = np.full(len(positions), -1, dtype=np.int64)
        got[rows] = want
        bad = int(np.count_nonzero((got != flat) | np.any((local < 0) | (local >= bpc), axis=1)))
        if bad:
            self.warn(4, key, f"{bad} vertex row(s) are not in the fragment of their bin", kind="bins")

    # -- links ---------------------------------------------------------------------

    def _scale(self, lv: LevelInfo) -> np.ndarray:
        cs = np.asarray(lv.chunk_shape or self.root.chunk_shape, dtype=np.float64)
        r = np.rint(cs / np.asarray(self.root.chunk_shape, dtype=np.float64)).astype(np.int64)
        if lv.meta is not None and lv.meta.chunk_dims:
            r = np.concatenate(([1], r))
        return np.maximum(r, 1)

    async def _link_pass(self, lv: LevelInfo) -> None:
        n = lv.index
        fam_rows: Counter = Counter()
        link_rows: dict[tuple[str, tuple[int, ...]], int] = {}
        arrays = sorted((rel, a) for rel, a in lv.arrays.items() if a.zv == "links" and a.usable
                        and a.present is not None)
        for rel, info in arrays:
            parts = rel.split("/")
            fam = lv.groups.get("/".join(parts[:-1]), {})
            try:
                delta = parse_delta(parts[-2])
                offs = np.asarray(md.parse_offsets_name(parts[-1], info.meta.ndim), dtype=np.int64)
            except FormatError:
                continue
            lw = fam.get("link_width", info.attrs.get("link_width"))
            if not isinstance(lw, int) or lw < 1:
                continue
            intra = delta == 0 and not offs.any()
            has_perm = bool(info.attrs.get("has_perm", False))
            dtype = info.attrs.get("dtype", "int64")
            target = self.levels.get(n + delta)
            if delta != 0 and (target is None or target.meta is None):
                continue
            if self.max_level >= 3 and delta == 0 and not fam.get("directed", False) \
                    and fam.get("store", "canonical") == "canonical" and not intra:
                self._canonical(info, offs)
            s_src, s_trg = self._scale(lv), self._scale(target if delta else lv)

            async def one(chunk, info=info, offs=offs, intra=intra, has_perm=has_perm, lw=lw, dtype=dtype,
                          delta=delta, target=target, s_src=s_src, s_trg=s_trg, rel=rel):
                p = await self._payload(info, chunk)
                if p is None or p is FAILED:
                    return
                key = info.cell_key(chunk)
                nsrc = lv.n_rows.get(chunk)
                try:
                    if intra:
                        rows = decode_intra_links(p, lw, key=key, dtype=dtype)
                        perm = None
                    else:
                        rows, perm, _ = decode_ragged_links_groups(p, lw, has_perm, key=key, dtype=dtype)
                except ZvfError as e:
                    self.error(3, key, f"link cell does not decode: {_strip_key(str(e), key)}", kind="links")
                    return
                link_rows[(rel, chunk)] = len(rows)
                fam_rows["/".join(rel.split("/")[:-1])] += len(rows)
                self.counts["links"] += len(rows)
                if intra:
                    lv.intra_rows[chunk] = len(rows)
                if not len(rows):
                    return
                if chunk in lv.bad_chunks:
                    return
                if nsrc is None:
                    self.error(3, key, f"{len(rows)} link row(s) in chunk {format_chunk_id(chunk)}, which holds "
                                       "no vertices", kind="link-src")
                    return
                self._endpoint(key, rows[:, 0], nsrc, f"its own chunk {format_chunk_id(chunk)}", 3)
                if intra:
                    self._endpoint(key, rows[:, 1:], nsrc, f"its own chunk {format_chunk_id(chunk)}", 3)
                else:
                    anchor = (np.asarray(chunk, dtype=np.int64) * s_src) // s_trg
                    tl = target if delta else lv
                    lvl = 5 if delta else 3
                    for j in range(1, lw):
                        off = offs[min(j - 1, len(offs) - 1)]
                        other = tuple((anchor + off).tolist())
                        where = f"chunk {format_chunk_id(other)}" + (f" of level {tl.index}" if delta else "")
                        if other in tl.bad_chunks:
                            continue
                        m = tl.n_rows.get(other)
                        if m is None:
                            self.error(lvl, key, f"link endpoint {j} points into {where}, which holds no vertices",
                                       kind="link-dst")
                            continue
                        self._endpoint(key, rows[:, j], m, where, lvl, j)
                if self.geometry == "skeleton" and delta == 0 and n == 0:
                    self._collect_skeleton(chunk, offs, intra, rows, perm)
                if self.geometry == "mesh" and delta == 0 and intra and lw == 3 and self.max_level >= 4:
                    deg = int(np.count_nonzero((rows[:, 0] == rows[:, 1]) | (rows[:, 1] == rows[:, 2])
                                               | (rows[:, 0] == rows[:, 2])))
                    if deg:
                        self.warn(4, key, f"{deg} degenerate face(s) repeat a vertex", kind="faces")
                if self.geometry in SEQUENTIAL and delta == 0 and intra and len(rows) and self.max_level >= 4:
                    self.error(4, key, f"{len(rows)} intra-chunk link row(s), but {self.geometry}s store no "
                                       "intra links (implicit sequential)", kind="seq")

            await self.ex.map(one, sorted(info.present))

        for fam_rel, attrs in sorted(lv.groups.items()):
            parts = fam_rel.split("/")
            if len(parts) != 2 or parts[0] != "links":
                continue
            key = f"{n}/{fam_rel}/zarr.json"
            total = fam_rows.get(fam_rel, 0)
            phys = attrs.get("num_physical_records", attrs.get("num_links"))
            if isinstance(phys, int) and not isinstance(phys, bool) and phys != total:
                label = "num_physical_records" if "num_physical_records" in attrs else "num_links"
                self.error(3, key, f"{label} is {phys} but the family's cells hold {total} link rows")
        await self._link_fragments(lv)
        await self._link_attributes(lv, link_rows)

    def _endpoint(self, key: str, col: np.ndarray, limit: int, where: str, level: int, j: int = 0) -> None:
        bad = col >= limit
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1) if bad.ndim > 1 else bad)[0])
            v = int(np.asarray(col[r]).max())
            self.error(level, key, f"{int(bad.sum())} link endpoint(s) past the {limit} vertices of {where} "
                                   f"(row {r}: vertex {v})", kind=f"link-range{j}")

    def _canonical(self, info: ArrayInfo, offs: np.ndarray) -> None:
        key = f"{info.path}/zarr.json"
        for i, off in enumerate(offs.tolist()):
            nz = [x for x in off if x]
            if nz and nz[0] < 0:
                self.error(3, key, f"offset {i + 1} {off} is lexicographically negative: a canonical family "
                                   "stores each link once, under the positive offset")
            if i and tuple(off) < tuple(offs[i - 1].tolist()):
                self.error(3, key, "offsets are not in non-decreasing order (canonical sort)")

    async def _link_fragments(self, lv: LevelInfo) -> None:
        lf = lv.array("link_fragments")
        if lf is None or not lf.usable or lf.present is None:
            return

        async def one(chunk):
            p = await self._payload(lf, chunk)
            if p is None or p is FAILED:
                return
            key = lf.cell_key(chunk)
            m = lv.intra_rows.get(chunk, 0)
            try:
                decode_fragment_index(p, key=key, n_rows=m)
            except ZvfError as e:
                self.error(3, key, f"link fragment index invalid for the chunk's {m} intra link rows: "
                                   f"{_strip_key(str(e), key)}", kind="link-fragments")

        await self.ex.map(one, sorted(lf.present))

    async def _link_attributes(self, lv: LevelInfo, link_rows: dict) -> None:
        for rel, info in sorted(lv.arrays.items()):
            if info.zv != "link_attribute" or not info.usable or info.present is None:
                continue
            parts = rel.split("/")  # link_attributes/<name>/<delta>/<offsets>
            links_rel = "links/" + "/".join(parts[-2:])
            if links_rel not in lv.arrays:
                self.error(3, f"{info.path}/zarr.json", f"no links array {lv.index}/{links_rel} to align with")
                continue
            adt, aw = self._row_layout(info)

            async def one(chunk, info=info, links_rel=links_rel, adt=adt, aw=aw):
                p = await self._payload(info, chunk)
                if p is None or p is FAILED:
                    return
                want = link_rows.get((links_rel, chunk), 0)
                nb = memoryview(p).nbytes
                if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != want:
                    self.error(3, info.cell_key(chunk), f"{nb / (adt.itemsize * aw):g} link-attribute rows for "
                                                        f"{want} link rows of {lv.index}/{links_rel}",
                               kind="lattr-rows")

            await self.ex.map(one, sorted(info.present))

    def _collect_skeleton(self, chunk, offs, intra: bool, rows: np.ndarray, perm) -> None:
        """Skeleton rows as (child, parent) global vertex ids (chunk number << 32 | local row)."""
        if rows.shape[1] != 2:
            return
        ids = self._chunk_ids
        c0 = ids.setdefault(tuple(chunk), len(ids))
        a = np.asarray(chunk, dtype=np.int64)
        c1 = c0 if intra else ids.setdefault(tuple((a + offs[0]).tolist()), len(ids))
        g = np.stack([rows[:, 0] + (c0 << 32), rows[:, 1] + (c1 << 32)], axis=1)
        self._skeleton_edges.append(unpermute(g, perm) if perm is not None else g)

    # -- object index ----------------------------------------------------------------

    async def _object_pass(self, lv: LevelInfo) -> None:
        n = lv.index
        man = lv.array("object_index/manifests")
        ids_arr = lv.array("object_index/object_ids")
        if ids_arr is not None and ids_arr.usable:
            ids = await self._dense(ids_arr)
            if ids is not None:
                ids = np.asarray(ids).reshape(-1).astype(np.int64)
                lv.object_ids = ids
                d = np.diff(ids)
                if d.size and (d <= 0).any():
                    r = int(np.flatnonzero(d <= 0)[0])
                    what = "repeated" if d[r] == 0 else "unsorted"
                    self.error(3, ids_arr.keys.key(ids_arr.path, (0,)),
                               f"object_ids must be sorted and unique; {what} at rows {r}..{r + 1} "
                               f"({int(ids[r])}, {int(ids[r + 1])})")
        if man is None or not man.usable or man.codec is None or man.meta.ndim != 1:
            return
        o = int(man.meta.shape[0])
        got = await self._vlen_rows(man, o, "manifest")
        if got is None:
            return
        row_no, payloads, cell_of, missing = got
        if missing:
            first = next(c for c in range(len(man.grid_cells) + 1) if (c,) not in man.grid_cells)
            self.error(3, man.keys.key(man.path, (first,)),
                       f"{missing} of {o} object(s) have no stored manifest (cell missing)")
        sid = self.ndim + (1 if lv.meta.chunk_dims else 0)
        try:
            table = decode_manifests(payloads, sid, key=f"{man.path}")
        except ZvfError as e:
            self.error(3, f"{man.path}/c/0", f"manifests do not decode: {_strip_key(str(e), man.path)}")
            return
        self.counts["objects"] += len(row_no)
        self.counts["manifest_blocks"] += len(table)
        ids = lv.object_ids if lv.object_ids is not None and len(lv.object_ids) == o else None
        oids = np.asarray(row_no, dtype=np.int64) if ids is None else ids[np.asarray(row_no, dtype=np.int64)]
        if not len(table):
            return
        uniq, inv = np.unique(table.coords, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        f_of = np.array([lv.n_frags.get(tuple(c), -1) for c in uniq.tolist()], dtype=np.int64)
        has_v = np.array([tuple(c) in lv.n_rows for c in uniq.tolist()], dtype=bool)
        bad_c = np.array([tuple(c) in lv.bad_chunks for c in uniq.tolist()], dtype=bool)
        fcount = f_of[inv]
        nochunk = ~has_v[inv] & ~bad_c[inv]
        for i in np.flatnonzero(nochunk)[:MAX_SIMILAR].tolist():
            r = int(table.object_row[i])
            self.error(3, cell_of[r], f"object {int(oids[r])} references chunk "
                                      f"{format_chunk_id(table.coords[i].tolist())}, which holds no vertices",
                       kind="manifest-chunk")
        if nochunk.sum() > MAX_SIMILAR:
            self.error(3, f"{man.path}", f"{int(nochunk.sum()) - MAX_SIMILAR} more manifest blocks reference "
                                         "chunks without vertices")
        past = has_v[inv] & (fcount >= 0) & (table.fragment >= fcount)
        for i in np.flatnonzero(past)[:MAX_SIMILAR].tolist():
            r = int(table.object_row[i])
            self.error(3, cell_of[r], f"object {int(oids[r])} references fragment {int(table.fragment[i])} of "
                                      f"chunk {format_chunk_id(table.coords[i].tolist())}, which has only "
                                      f"{int(fcount[i])} fragments", kind="manifest-fragment")
        if past.sum() > MAX_SIMILAR:
            self.error(3, f"{man.path}", f"{int(past.sum()) - MAX_SIMILAR} more manifest blocks reference "
                                         "fragments past their chunk's count")
        # level 4: at level 0 every fragment belongs to some object (one per object and chunk)
        if self.max_level >= 4 and n == 0 and not lv.meta.shared_fragments:
            valid = has_v[inv] & (fcount >= 0) & (table.fragment < np.maximum(fcount, 0))
            chunk_ix = inv[valid]
            base = np.concatenate(([0], np.cumsum(np.maximum(f_of, 0))))
            used = np.zeros(int(base[-1]), dtype=bool)
            used[base[chunk_ix] + table.fragment[valid]] = True
            seen = set(map(tuple, uniq.tolist()))
            orphan_chunks = [c for c, f in lv.n_frags.items() if f and c not in seen]
            unused = int((~used).sum()) + sum(lv.n_frags[c] for c in orphan_chunks)
            # empty fragments (count 0) are legitimate only in bin layouts; objects own theirs
            if unused:
                self.warn(4, f"{man.path}", f"{unused} fragment(s) of level {n} belong to no object's manifest")

    async def _vlen_rows(self, info: ArrayInfo, count: int, what: str):
        """Stored rows of a 1-D vlen array (plain or sharded) among 0..count-1.

        Returns (row numbers, payloads, key of each row, rows missing) or None when a
        stored chunk is broken (reported).  Only stored chunks are visited, so a
        corrupted ``shape`` cannot make this loop or allocate.
        """
        per = int(info.meta.chunk_shape[0])
        codec = info.codec
        inner = per if codec.shard is None else (codec.inner_rows or 1)
        rows: list[int] = []
        payloads: list[bytes] = []
        keys: list[str] = []
        n_chunks = -(-count // per) if count else 0
        for (c,), key in sorted(info.grid_cells.items()):
            if c >= n_chunks:
                continue  # reported as outside the grid
            raw = await self._get_or_issue(key, 3)
            if raw is FAILED or raw is None:
                return None
            lo = c * per
            try:
                if codec.shard is None:
                    parts = [(lo, raw, key)]
                else:
                    n_inner = max(per // inner, 1)
                    offsets, nbytes = decode_shard_index(raw, n_inner, key=key)
                    parts = [(lo + i * inner, raw[int(offsets[i]):int(offsets[i]) + int(nbytes[i])], f"{key}[{i}]")
                             for i in np.flatnonzero(offsets != np.uint64(2**64 - 1)).tolist()]
                for start, blob, k in parts:
                    want = min(inner, count - start)
                    if want <= 0:
                        continue
                    items = codec.decode_items(blob, key=k)
                    if len(items) < want:
                        self.error(3, key, f"{what} chunk {k} holds {len(items)} rows, expected {want}")
                        return None
                    rows.extend(range(start, start + want))
                    payloads.extend(bytes(x) for x in items[:want])
                    keys.extend([key] * want)
            except ZvfError as e:
                self.error(3, key, f"{what} chunk does not decode: {_strip_key(str(e), key)}")
                return None
        return rows, payloads, keys, count - len(rows)

    async def _dense(self, info: ArrayInfo) -> np.ndarray | None:
        """A whole dense array (object ids, attributes) or None when broken (reported)."""
        from ..read.cells import CellArray
        from ..read.dense import read_dense

        nbytes = dense_alloc_bytes(info.meta)
        if nbytes > DENSE_LIMIT:
            self.warn(3, f"{info.path}/zarr.json", f"shape {list(info.meta.shape)} is {nbytes} bytes: not read "
                                                   f"(the validator reads dense arrays up to {DENSE_LIMIT} bytes)")
            return None
        try:
            arr = CellArray(self.ex, info.path, info.meta)
            return await read_dense(self.ex, arr)
        except ZvfError as e:
            self.error(3, f"{info.path}/c/0", f"dense array does not decode: {_strip_key(str(e), info.path)}",
                       kind="dense")
            return None

    async def _dense_pass(self, lv: LevelInfo) -> None:
        for rel in [f"object_attributes/{a}" for a in lv.named("object_attributes")] + \
                   [f"group_attributes/{a}" for a in lv.named("group_attributes")]:
            info = lv.arrays[rel]
            if info.usable and info.codec is not None:
                await self._dense(info)
        grp = lv.array("groups")
        if grp is None or not grp.usable or grp.codec is None or grp.meta.ndim != 1:
            return
        g = int(grp.meta.shape[0])
        got = await self._vlen_rows(grp, g, "groups")
        if got is None:
            return
        members: list[np.ndarray] = []
        for i, row, key in zip(*got[:3]):
            if len(row) % 8:
                self.error(3, key, f"group {i} is {len(row)} bytes, not int64 object ids", kind="groups")
                continue
            members.append(np.frombuffer(row, dtype="<i8"))
        if members and lv.object_ids is not None:
            allm = np.concatenate(members)
            unknown = ~np.isin(allm, lv.object_ids)
            if unknown.any():
                self.error(3, f"{grp.path}/c/0", f"{int(unknown.sum())} group member(s) are not object ids "
                                                 f"(e.g. {int(allm[unknown][0])})")

    # ================================================================== level 4

    def _conventions(self) -> None:
        root = self.root
        geom = self.geometry
        if geom is not None:
            allowed = CONVENTIONS.get(geom, set())
            if root.links_convention not in allowed:
                self.error(4, "zarr.json", f"links_convention {root.links_convention!r} does not suit geometry "
                                           f"{geom!r} (expected {' or '.join(sorted(allowed))})")
        lv = self.levels.get(0)
        if lv is None or lv.meta is None:
            return
        fam = lv.groups.get("links/0")
        if fam is not None:
            lw = fam.get("link_width")
            key = "0/links/0/zarr.json"
            if geom == "point_cloud":
                self.warn(4, key, "a point cloud with a links family")
            elif geom == "mesh" and lw != 3:
                self.error(4, key, f"mesh link_width is {lw!r}, must be 3 (triangles)")
            elif geom in ("graph", "skeleton", "line", "polyline", "streamline") and lw != 2:
                self.error(4, key, f"{geom} link_width is {lw!r}, must be 2 (edges)")
            for rel, info in lv.arrays.items():
                if not rel.startswith("links/0/") or info.zv != "links":
                    continue
                offs = rel.rsplit("/", 1)[-1]
                intra = all(x in ("0",) for part in offs.split("_") for x in part.split("."))
                if intra and info.attrs.get("has_perm"):
                    self.warn(4, f"{info.path}/zarr.json", "intra-chunk links should not carry a perm column")
        if geom == "skeleton" and self._skeleton_edges:
            self._skeleton_check()

    def _skeleton_check(self) -> None:
        e = np.concatenate(self._skeleton_edges)
        key = "0/links/0"
        child, parent = e[:, 0], e[:, 1]
        loops = child == parent
        if loops.any():
            self.warn(4, key, f"{int(loops.sum())} skeleton row(s) link a vertex to itself")
        nodes, inv = np.unique(e.reshape(-1), return_inverse=True)
        inv = inv.reshape(-1, 2)
        c, p = inv[:, 0], inv[:, 1]
        counts = np.bincount(c, minlength=len(nodes))
        if (counts > 1).any():
            self.warn(4, key, f"{int((counts > 1).sum())} skeleton vertex(es) have more than one parent row "
                              "(rows are (child, parent))")
            return
        par = np.full(len(nodes), -1, dtype=np.int64)
        par[c] = p
        par[c[loops]] = -1
        anc = par.copy()
        for _ in range(max(1, math.ceil(math.log2(len(nodes) + 1)) + 1)):
            nxt = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
            anc = nxt
        if (anc >= 0).any():
            self.warn(4, key, f"skeleton (child, parent) rows contain a cycle ({int((anc >= 0).sum())} vertices "
                              "never reach a root)")

    # ================================================================== level 5

    def _multires(self) -> None:
        levels = sorted(self.levels)
        if levels != list(range(len(levels))):
            self.error(5, "zarr.json", f"levels {levels} are not contiguous from 0")
        prev: LevelInfo | None = None
        for n in levels:
            lv = self.levels[n]
            if lv.meta is None:
                prev = None
                continue
            m = lv.meta
            if n > 0:
                if m.parent_level != n - 1:
                    self.error(5, lv.doc_key, f"parent_level is {m.parent_level!r}, expected {n - 1}")
                if prev is not None and prev.meta is not None:
                    if m.vertex_count > prev.meta.vertex_count:
                        self.error(5, lv.doc_key, f"vertex_count {m.vertex_count} exceeds level {n - 1}'s "
                                                  f"{prev.meta.vertex_count}: coarser levels must not grow")
                    if prev.chunk_shape and lv.chunk_shape:
                        q = np.asarray(lv.chunk_shape) / np.asarray(prev.chunk_shape)
                        if np.any(np.abs(q - np.rint(q)) > 1e-9 * np.maximum(q, 1)) or np.any(np.rint(q) < 1):
                            self.error(5, lv.doc_key, f"chunk_shape {list(lv.chunk_shape)} does not nest in level "
                                                      f"{n - 1}'s {list(prev.chunk_shape)}")
                    po = prev.num_objects
                    if m.inherited_num_objects is not None and po is not None and m.inherited_num_objects != po \
                            and po:
                        self.error(5, lv.doc_key, f"inherited_num_objects {m.inherited_num_objects} but level "
                                                  f"{n - 1} has {po} objects")
                    present = self._present_objects(lv)
                    if present is not None and po is not None and present > po:
                        self.error(5, f"{n}/object_index/zarr.json", f"{present} objects present, more than level "
                                                                     f"{n - 1}'s {po}")
                    if m.preserves_object_ids and lv.object_ids is not None and prev.object_ids is not None:
                        lost = ~np.isin(lv.object_ids, prev.object_ids)
                        if lost.any():
                            self.error(5, f"{n}/object_index/object_ids/c/0",
                                       f"{int(lost.sum())} object id(s) not in level {n - 1} although the level "
                                       f"preserves object ids (e.g. {int(lv.object_ids[lost][0])})")
            prev = lv
        storage = self.root.cross_level_storage
        for n in levels:
            lv = self.levels[n]
            for rel in lv.groups:
                parts = rel.split("/")
                if len(parts) == 2 and parts[0] == "links":
                    try:
                        d = parse_delta(parts[1])
                    except FormatError:
                        continue
                    if d > 0 and storage == "explicit":
                        other = self.levels.get(n + d)
                        if other is not None and f"links/-{d}" not in other.groups:
                            self.warn(5, f"{n}/{rel}/zarr.json", f"no matching links/-{d} family at level {n + d} "
                                                                 "(cross_level_storage is 'explicit')")
        trs = sorted(self.root.transforms)
        for a, b in itertools.pairwise(trs):
            if any(y < x for x, y in zip(a.scale, b.scale)):
                self.warn(5, "zarr.json", f"multiscales scale shrinks from level {a.level} to {b.level}")

    def _present_objects(self, lv: LevelInfo) -> int | None:
        oi = lv.groups.get("object_index")
        if oi is None:
            return None
        v = oi.get("num_present")
        return v if isinstance(v, int) and not isinstance(v, bool) else None


# ---------------------------------------------------------------------- helpers


def dense_alloc_bytes(meta: md.ArrayMeta) -> int:
    """Bytes ``read_dense`` allocates for a dense array: whole chunks of the first axis."""
    itemsize = np.dtype(meta.data_type).itemsize if meta.data_type in md.NUMERIC_DTYPES else 8
    shape = [int(x) for x in meta.shape]
    chunk = [max(int(x), 1) for x in meta.chunk_shape] or [1]
    rows = -(-shape[0] // chunk[0]) * chunk[0] if shape else 1
    return rows * math.prod(shape[1:]) * itemsize


def _array_of(key: str) -> str:
    """The node-ish directory a key belongs to (``0/vertices/c/1/0/1`` -> ``0/vertices``)."""
    if "/c/" in key:
        return key.split("/c/", 1)[0]
    if key.endswith("/c"):
        return key[:-2]
    d = key.rsplit("/", 1)[0] if "/" in key else ""
    return d


def _strip_key(msg: str, key: str) -> str:
    """Drop a leading ``key:`` (our issues add it back once)."""
    for k in (key, key.rstrip("/")):
        if msg.startswith(k + ": "):
            return msg[len(k) + 2:]
    return msg


def _as_offsets(v: Any) -> Any:
    try:
        return tuple(tuple(int(x) for x in r) for r in v)
    except (TypeError, ValueError):
        return None
