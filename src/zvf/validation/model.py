"""What the validator's passes share: the level model, limits, and the issue sink.

``LevelInfo`` is the reader's level model (:class:`zvf.read.levels.LevelNodes`)
with the metadata a broken store may lack and the per-chunk counts the
consistency passes gather; ``ValidatorBase`` holds one run's state and
records issues.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..config import tuning
from ..errors import ZvfError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.keys import ChunkKeyEncoding, format_chunk_id
from ..format.layout import LevelLayout
from ..format.versions import Record
from ..io.executor import Executor
from ..read.levels import LevelNodes
from .report import ERROR, WARNING, Issue, Report

SPATIAL_ZV = {
    "vertices", "vertex_fragments", "link_fragments", "attribute", "fragment_attribute", "links",
    "link_attribute",
}
DENSE_ZV = {"object_attribute", "groupings_attribute"}
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


class Failed:
    """Marker for a cell whose read or decode already produced an issue."""


FAILED = Failed()
# (offsets, nbytes) of one shard's inner chunks
ShardIndex = tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]


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
    channels: int | None = None  # values per row of a ``row_shape: []`` attribute, from its first cell

    @property
    def zv(self) -> str | None:
        return self.meta.zv_array

    @property
    def attrs(self) -> dict[str, Any]:
        return self.meta.attributes

    def cell_key(self, chunk: tuple[int, ...]) -> str:
        # only asked of arrays structure() parsed a key encoding and grid origin for
        assert self.keys is not None and self.origin is not None, self.path
        grid = tuple(int(c) - int(o) for c, o in zip(chunk, self.origin))
        if self.codec is not None and self.codec.shard is not None:
            shard = tuple(g // s for g, s in zip(grid, self.codec.shard))
            return self.keys.key(self.path, shard) + f"[{format_chunk_id(grid)}]"
        return self.keys.key(self.path, grid)


@dataclass
class LevelInfo(LevelNodes[ArrayInfo]):
    """A level as the validator sees it: the reader's level nodes, metadata that may be missing
    or broken, and the per-chunk counts the consistency passes gather."""

    doc_key: str
    meta: md.LevelMeta | None = None
    layout: LevelLayout | None = None  # None when its documents are too broken to place vertices
    n_rows: dict[tuple[int, ...], int] = field(default_factory=dict)  # chunk -> vertex rows (decoded ok)
    bad_chunks: set[tuple[int, ...]] = field(default_factory=set)  # vertices cell failed to decode
    n_frags: dict[tuple[int, ...], int] = field(default_factory=dict)
    intra_rows: dict[tuple[int, ...], int] = field(default_factory=dict)  # link rows of the intra array
    num_objects: int | None = None
    object_ids: np.ndarray | None = None
    vertex_total: int = 0
    vertex_total_known: bool = True

    @property
    def parsed(self) -> md.LevelMeta:
        """The level's parsed document: the passes after structure() skip levels without one."""
        if self.meta is None:
            raise RuntimeError(f"{self.doc_key} was not parsed")
        return self.meta

    @property
    def spatial(self) -> list[ArrayInfo]:
        return [a for a in self.arrays.values() if a.zv in SPATIAL_ZV or (a.meta.is_vlen and a.zv is None
                                                                           and a.meta.ndim > 1)]


class ValidatorBase:
    """State of one validation run and the issue sink every level's checks write to."""

    def __init__(self, ex: Executor, url: str, level: int) -> None:
        self.ex = ex
        self.url = url
        self.max_level = level
        self.report = Report(url, level)
        self.sizes: dict[str, int] = {}
        self.keys: list[str] = []
        self.docs: dict[str, dict[str, Any]] = {}  # node path ("" = root) -> decoded zarr.json
        self._root: md.RootMeta | None = None
        self.geometry: str | None = None
        self.ndim = 0
        self.levels: dict[int, LevelInfo] = {}
        self._similar: Counter[tuple[str, str]] = Counter()
        self._suppressed: Counter[tuple[tuple[str, str], str, int]] = Counter()
        self._shard_cache: dict[str, ShardIndex | Failed | None] = {}
        self.counts: Counter[str] = Counter()
        # level 4 material gathered during the link pass
        self._skeleton_edges: list[np.ndarray] = []
        self._chunk_ids: dict[tuple[int, ...], int] = {}
        # versions (zvf.format.versions): families kept versions use, and cells in other families
        self.record: Record | None = None
        self.kept: dict[str, set[str]] = {}
        self._kept_cells: Counter[str] = Counter()
        self._leftover: Counter[tuple[str, str]] = Counter()

    @property
    def root(self) -> md.RootMeta:
        """The parsed root document: the passes after structure() run only once it parsed."""
        if self._root is None:
            raise RuntimeError("the root document was not parsed")
        return self._root

    def issue(self, severity: str, level: int, key: str, text: str, *, kind: str | None = None) -> None:
        """Record an issue, keeping at most ``tuning().validation_similar_issues`` of one ``kind`` per array."""
        if level > self.max_level:
            return
        if kind is not None:
            group = (kind, array_of(key))
            self._similar[group] += 1
            if self._similar[group] > tuning().validation_similar_issues:
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

    async def _get_or_issue(self, key: str, level: int = 1) -> Any:
        try:
            return await self.ex.get(key)
        except ZvfError as e:
            self.error(level, key, f"cannot be read: {e}", kind="read")
            return FAILED

    def _row_layout(self, info: ArrayInfo) -> tuple[np.dtype, int]:
        a = info.attrs
        dt = np.dtype(a.get("dtype", "float32")).newbyteorder("<")
        if info.zv == "vertices":
            return dt, self.ndim
        rs = a.get("row_shape") or []
        return dt, int(np.prod(rs)) if rs else 1


def dense_alloc_bytes(meta: md.ArrayMeta) -> int:
    """Bytes ``read_dense`` allocates for a dense array: whole chunks of the first axis."""
    itemsize = np.dtype(meta.data_type).itemsize if meta.data_type in md.NUMERIC_DTYPES else 8
    shape = [int(x) for x in meta.shape]
    chunk = [max(int(x), 1) for x in meta.chunk_shape] or [1]
    rows = -(-shape[0] // chunk[0]) * chunk[0] if shape else 1
    return rows * math.prod(shape[1:]) * itemsize


def array_of(key: str) -> str:
    """The node-ish directory a key belongs to (``0/vertices/c/1/0/1`` -> ``0/vertices``)."""
    if "/c/" in key:
        return key.split("/c/", 1)[0]
    if key.endswith("/c"):
        return key[:-2]
    d = key.rsplit("/", 1)[0] if "/" in key else ""
    return d


def strip_key(msg: str, key: str) -> str:
    """Drop a leading ``key:`` (our issues add it back once)."""
    for k in (key, key.rstrip("/")):
        if msg.startswith(k + ": "):
            return msg[len(k) + 2:]
    return msg


def as_offsets(v: Any) -> Any:
    try:
        return tuple(tuple(int(x) for x in r) for r in v)
    except (TypeError, ValueError):
        return None
