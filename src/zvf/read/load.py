"""Loading metadata: root, level and array documents in as few round trips as possible.

The first wave of requests asks for everything whose name the format fixes
(root, level 0, its core arrays) together with listings of groups whose
children are user-named (attributes); a second wave fetches what the
listings named.  Families needed only by some reads (links, object index,
groups) load lazily, once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..errors import (
    FormatError,
    IncompleteStoreError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreNotFoundError,
)
from ..format import metadata as md
from ..format.grid import Grid
from ..io.executor import Executor
from .cells import CellArray
from .object_index import ObjectIndex

# What each lazily loaded family consists of: documents at fixed paths, or
# user-named members found by listing (with how deep the names go).
FIXED_DOCS = {
    "core": ("vertices", "vertex_fragments"),
    "object_index": ("object_index", "object_index/manifests", "object_index/object_ids", "object_index/data"),
    "groups": ("groups",),
    "link_fragments": ("link_fragments",),
}
LISTED = {
    "vertex_attributes": 1,
    "object_attributes": 1,
    "group_attributes": 1,
    "fragment_attributes": 1,
    "links": 2,
    "cross_chunk_links": 2,
    "link_attributes": 3,
}


def load_json(raw: bytes, key: str) -> dict:
    """Parse a metadata document, reporting the key on any defect."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{key}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{key}: expected a JSON object, got {type(doc).__name__}")
    return doc


@dataclass
class Level:
    """One resolution level: its metadata, grid and arrays (by path under the level)."""

    index: int
    meta: md.LevelMeta
    grid: Grid
    arrays: dict[str, CellArray] = field(default_factory=dict)
    groups: dict[str, dict] = field(default_factory=dict)  # group path -> attributes
    loaded: set[str] = field(default_factory=set)  # families whose documents are in
    object_index: ObjectIndex | None = None

    def array(self, name: str) -> CellArray | None:
        return self.arrays.get(name)

    def named(self, family: str) -> list[str]:
        """Names of the arrays in a family group such as ``vertex_attributes``."""
        prefix = family + "/"
        return sorted(n[len(prefix):] for n in self.arrays if n.startswith(prefix) and "/" not in n[len(prefix):])

    @property
    def nonempty_chunks(self) -> np.ndarray:
        """Absolute coords of the chunks holding vertices, as listed by ``vertices``."""
        arr = self.arrays.get("vertices")
        if arr is None:
            return np.zeros((0, self.grid.ndim), dtype=np.int64)
        return arr.meta.nonempty_chunk_array


async def _get_json(ex: Executor, key: str) -> dict | None:
    raw = await ex.get(key, cache="meta")
    return None if raw is None else load_json(raw, key)


async def _diagnose_missing_root(ex: Executor, url: str) -> Exception:
    """Explain why there is no root ``zarr.json``: v2, half-written, or nothing."""
    v2 = await ex.gather([ex.get(".zgroup"), ex.get(".zarray")])
    if any(x is not None for x in v2):
        return NotZvfStoreError(f"{url}: a Zarr v2 store (.zgroup/.zarray); zvf reads Zarr v3 ZVF stores only")
    prefixes, objects = await ex.list_dirs("")
    if prefixes or objects:
        return IncompleteStoreError(
            f"{url}: holds data but no root zarr.json -- an unfinished or interrupted write; "
            "run `zvf validate` to see what is left"
        )
    return StoreNotFoundError(f"{url}: no store here (no zarr.json)")


def make_level(root: md.RootMeta, index: int, level_doc: dict) -> Level:
    meta = md.parse_level(level_doc, key=f"{index}/zarr.json")
    chunk_shape = meta.chunk_shape or root.chunk_shape
    bin_shape = meta.bin_shape if meta.bin_shape is not None else (root.base_bin_shape if index == 0 else None)
    grid = Grid(tuple(float(c) for c in chunk_shape), None if bin_shape is None else tuple(float(b) for b in bin_shape))
    return Level(index, meta, grid)


async def family_paths(ex: Executor, level: int, family: str) -> list[str]:
    """Paths (relative to the level) of the nodes a family may hold."""
    if family in FIXED_DOCS:
        return list(FIXED_DOCS[family])
    return [family] + [p for p in await _list_tree(ex, f"{level}/{family}/", LISTED[family])]


async def load_family(ex: Executor, level: Level, family: str, paths: list[str] | None = None) -> None:
    """Fetch the documents of one family into ``level`` (absent ones are skipped)."""
    if family in level.loaded:
        return
    if paths is None:
        paths = await family_paths(ex, level.index, family)
    docs = await ex.gather([_get_json(ex, f"{level.index}/{p}/zarr.json") for p in paths])
    _add_docs(level, ex, paths, docs)
    level.loaded.add(family)


async def _list_tree(ex: Executor, prefix: str, depth: int) -> list[str]:
    """Relative paths of the nodes below ``prefix`` down to ``depth`` levels (no chunk keys)."""
    out: list[str] = []
    frontier = [prefix]
    base = len(prefix.split("/", 1)[0]) + 1  # strip the level number
    for step in range(depth):
        results = await ex.gather([ex.list_dirs(p) for p in frontier])
        frontier = []
        for dirs, _objs in results:
            for d in dirs:
                d = d.rstrip("/")
                # below a member, "c" is its chunk key space; a group's own member may be named "c"
                if step and d.rsplit("/", 1)[-1] == "c":
                    continue
                out.append(d[base:])
                frontier.append(d + "/")
        if not frontier:
            break
    return out


# Documents at fixed paths fetched when a level opens, and groups listed then
# (their members' documents arrive in the second wave).
OPEN_FIXED = ("core", "object_index", "link_fragments")
OPEN_LISTED = ("vertex_attributes", "links", "links/0")
# Geometries whose reads need their link arrays (polylines and lines are implicitly sequential).
LINKED = frozenset({"graph", "skeleton", "mesh"})


async def open_level(ex: Executor, root_key: str | None, index: int) -> tuple[dict | None, Level | None]:
    """A level ready for bbox queries and object reads, in two round trips.

    Wave 1 asks at once for (optionally) the root, the level document, every
    fixed-name array document and listings of the attribute and delta-0
    link groups; wave 2 fetches the documents those listings named.  Other
    families (cross-level links, object attributes, ...) load on first use.
    """
    fixed = [p for fam in OPEN_FIXED for p in FIXED_DOCS[fam]]
    wave1 = await ex.gather(
        [_get_json(ex, root_key) if root_key else _none(), _get_json(ex, f"{index}/zarr.json")]
        + [_list_tree(ex, f"{index}/{g}/", 1) for g in OPEN_LISTED]
        + [_get_json(ex, f"{index}/{p}/zarr.json") for p in fixed]
    )
    root_doc, level_doc = wave1[:2]
    listed = dict(zip(OPEN_LISTED, wave1[2:2 + len(OPEN_LISTED)]))
    return root_doc, (level_doc, listed, dict(zip(fixed, wave1[2 + len(OPEN_LISTED):])))


async def _none():
    return None


async def _finish_level(ex: Executor, root: md.RootMeta, index: int, level_doc, listed, fixed_docs) -> Level:
    if level_doc is None:
        raise FormatError(f"{ex.handle.url}/{index}/zarr.json: level {index} is listed by the root but missing")
    level = make_level(root, index, level_doc)
    _add_docs(level, ex, list(fixed_docs), list(fixed_docs.values()))
    if level.array("vertices") is None:
        raise FormatError(f"{ex.handle.url}/{index}/vertices/zarr.json: missing or not an array")
    level.loaded.update(OPEN_FIXED)
    deltas = listed["links"] if root.geometry_type in LINKED else []
    paths = listed["vertex_attributes"] + (["links", *deltas, *listed["links/0"]] if deltas else [])
    if level.array("object_index/manifests") is not None:
        level.object_index = ObjectIndex(ex, level, root.ndim)
        wave2 = await ex.gather([_get_json(ex, f"{index}/{p}/zarr.json") for p in paths]
                                + [level.object_index.prefetch()])
        docs = wave2[:-1]
    else:
        docs = await ex.gather([_get_json(ex, f"{index}/{p}/zarr.json") for p in paths])
    _add_docs(level, ex, paths, docs)
    level.loaded.add("vertex_attributes")
    if deltas and set(deltas) <= {"links/0"}:
        level.loaded.add("links")  # no cross-level families: every link document is in
    return level


def _add_docs(level: Level, ex: Executor, paths, docs) -> None:
    for name, doc in zip(paths, docs):
        if doc is None:
            continue
        key = f"{level.index}/{name}/zarr.json"
        if doc.get("node_type") == "array":
            level.arrays[name] = CellArray(ex, f"{level.index}/{name}", md.parse_array(doc, key=key))
        else:
            attrs = doc.get("attributes")
            level.groups[name] = attrs if isinstance(attrs, dict) else {}


async def load_root(ex: Executor, url: str) -> tuple[md.RootMeta, Level]:
    """Root and level 0, ready for queries and object reads, in two round trips."""
    root_doc, level_parts = await open_level(ex, "zarr.json", 0)
    if root_doc is None:
        raise await _diagnose_missing_root(ex, url)
    if root_doc.get("zarr_format") != 3:
        raise NotZvfStoreError(f"{url}/zarr.json: not a Zarr v3 document (zarr_format={root_doc.get('zarr_format')!r})")
    root = md.parse_root(root_doc, key="zarr.json")
    return root, await _finish_level(ex, root, 0, *level_parts)


async def load_level(ex: Executor, root: md.RootMeta, index: int) -> Level:
    """A coarser level, in two round trips."""
    _, level_parts = await open_level(ex, None, index)
    return await _finish_level(ex, root, index, *level_parts)


def check_level(levels: list[int], level) -> int:
    if not isinstance(level, (int, np.integer)) or int(level) not in levels:
        raise InvalidArgumentError(f"level={level!r} is not in this store (levels: {levels})")
    return int(level)
