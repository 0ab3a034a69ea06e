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
    for name, doc in zip(paths, docs):
        if doc is None:
            continue
        key = f"{level.index}/{name}/zarr.json"
        if doc.get("node_type") == "array":
            level.arrays[name] = CellArray(ex, f"{level.index}/{name}", md.parse_array(doc, key=key))
        else:
            attrs = doc.get("attributes")
            level.groups[name] = attrs if isinstance(attrs, dict) else {}
    level.loaded.add(family)


async def _list_tree(ex: Executor, prefix: str, depth: int) -> list[str]:
    """Relative paths of the nodes below ``prefix`` down to ``depth`` levels (no chunk keys)."""
    out: list[str] = []
    frontier = [prefix]
    base = len(prefix.split("/", 1)[0]) + 1  # strip the level number
    for _ in range(depth):
        results = await ex.gather([ex.list_dirs(p) for p in frontier])
        frontier = []
        for dirs, _objs in results:
            for d in dirs:
                d = d.rstrip("/")
                if d.rsplit("/", 1)[-1] == "c":  # chunk key space, not a node
                    continue
                out.append(d[base:])
                frontier.append(d + "/")
        if not frontier:
            break
    return out


async def load_root(ex: Executor, url: str) -> tuple[md.RootMeta, Level]:
    """Root and level 0 ready for a bbox query, in two round trips.

    Round trip 1 asks for the root, level 0, its core arrays and the listing
    of its vertex attributes all at once; round trip 2 fetches the attribute
    documents that listing named.
    """
    core = list(FIXED_DOCS["core"])
    first = await ex.gather(
        [_get_json(ex, "zarr.json"), _get_json(ex, "0/zarr.json"), _list_tree(ex, "0/vertex_attributes/", 1)]
        + [_get_json(ex, f"0/{p}/zarr.json") for p in core]
    )
    root_doc, level_doc, attr_paths = first[:3]
    if root_doc is None:
        raise await _diagnose_missing_root(ex, url)
    if root_doc.get("zarr_format") != 3:
        raise NotZvfStoreError(f"{url}/zarr.json: not a Zarr v3 document (zarr_format={root_doc.get('zarr_format')!r})")
    root = md.parse_root(root_doc, key="zarr.json")
    if level_doc is None:
        raise FormatError(f"{url}/0/zarr.json: level 0 is missing")
    level = make_level(root, 0, level_doc)
    for name, doc in zip(core, first[3:]):
        if doc is not None:
            level.arrays[name] = CellArray(ex, f"0/{name}", md.parse_array(doc, key=f"0/{name}/zarr.json"))
    level.loaded.add("core")
    await load_family(ex, level, "vertex_attributes", attr_paths)
    return root, level


async def load_level(ex: Executor, root: md.RootMeta, index: int) -> Level:
    """A coarser level with its core arrays and vertex attributes (two round trips)."""
    core = list(FIXED_DOCS["core"])
    first = await ex.gather(
        [_get_json(ex, f"{index}/zarr.json"), _list_tree(ex, f"{index}/vertex_attributes/", 1)]
        + [_get_json(ex, f"{index}/{p}/zarr.json") for p in core]
    )
    if first[0] is None:
        raise FormatError(f"{index}/zarr.json: level {index} is listed by the root but missing")
    level = make_level(root, index, first[0])
    for name, doc in zip(core, first[2:]):
        if doc is not None:
            level.arrays[name] = CellArray(ex, f"{index}/{name}", md.parse_array(doc, key=f"{index}/{name}/zarr.json"))
    level.loaded.add("core")
    await load_family(ex, level, "vertex_attributes", first[1])
    return level


def level_indices(root: md.RootMeta) -> list[int]:
    """Levels named by the root's multiscales datasets (level 0 when none are listed)."""
    found = []
    for ms in root.raw.get("multiscales") or []:
        for ds in (ms.get("datasets") or []) if isinstance(ms, dict) else []:
            path = ds.get("path") if isinstance(ds, dict) else None
            if isinstance(path, str) and path.isdigit():
                found.append(int(path))
    return sorted(set(found)) or [0]


def check_level(levels: list[int], level) -> int:
    if not isinstance(level, (int, np.integer)) or int(level) not in levels:
        raise InvalidArgumentError(f"level={level!r} is not in this store (levels: {levels})")
    return int(level)
