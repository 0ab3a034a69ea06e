"""Neuroglancer precomputed annotations: record layout, encodings, spatial index levels.

Pure numpy.  An annotation record is the fixed-size part every index repeats:
float32 geometry (a point, or a line's two endpoints), then property values
largest type first (so no padding falls between them, whichever way a reader
lays them out), then zero padding to a multiple of 4 bytes.  ``by_id`` adds
the related object ids; lists (spatial cells, related-object index) are a
uint64 count, the records, then the uint64 ids.

Annotation ids say where an annotation came from, so ``serve`` can answer a
``by_id`` request without an index: a point is ``(i << 32) | row`` (row
``row`` of the ``i``-th entry of the level's ``nonempty_chunks``), a line is
``(object id << 32) | k`` (edge ``k`` of that object).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

#: numpy dtype -> neuroglancer property type kept exactly (float64 narrows to float32).
_PROPERTY_TYPES = {"float32": "float32", "float64": "float32", "int8": "int8", "uint8": "uint8",
                   "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "bool": "uint8"}
_ID_RE = re.compile(r"^[a-z][a-zA-Z0-9_]*$")
ID_SHIFT = np.uint64(32)


@dataclass(frozen=True)
class Property:
    id: str  # neuroglancer property id
    type: str  # neuroglancer type
    source: str  # zvf attribute name
    component: int | None = None  # column of a multi-component attribute


def property_id(name: str, taken: set[str]) -> str:
    """A valid, unused neuroglancer property id for an attribute name."""
    pid = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    pid = pid[:1].lower() + pid[1:] if pid else "p"
    if not _ID_RE.match(pid):
        pid = "p_" + pid
    base, k = pid, 1
    while pid in taken:
        pid, k = f"{base}_{k}", k + 1
    taken.add(pid)
    return pid


def properties_for(attributes: dict[str, tuple[np.dtype, int]]) -> tuple[list[Property], list[str]]:
    """Properties for attributes ``{name: (dtype, components)}``, largest type first; also the names skipped
    (64-bit integers, strings: no neuroglancer type holds them exactly)."""
    props: list[Property] = []
    skipped: list[str] = []
    taken: set[str] = set()
    for name, (dtype, ncomp) in attributes.items():
        ngtype = _PROPERTY_TYPES.get(np.dtype(dtype).name)
        if ngtype is None:
            skipped.append(name)
            continue
        if ncomp == 1:
            props.append(Property(property_id(name, taken), ngtype, name))
        else:
            props.extend(Property(property_id(f"{name}_{c}", taken), ngtype, name, c) for c in range(ncomp))
    props.sort(key=lambda p: -np.dtype(p.type).itemsize)  # stable: store order within a size
    return props, skipped


@dataclass
class Schema:
    """Layout of one annotation collection: type, rank, properties, relationships."""

    annotation_type: str  # "POINT" or "LINE"
    rank: int
    properties: list[Property] = field(default_factory=list)
    relationships: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.annotation_type not in ("POINT", "LINE"):
            raise InvalidArgumentError(f"annotation_type must be POINT or LINE, got {self.annotation_type!r}")
        width = self.rank * (1 if self.annotation_type == "POINT" else 2)
        fields: list[tuple[Any, ...]] = [("geometry", "<f4", (width,))]
        size = 4 * fields[0][2][0]
        for i, p in enumerate(self.properties):
            fields.append((f"p{i}", np.dtype(p.type).newbyteorder("<")))
            size += np.dtype(p.type).itemsize
        if size % 4:
            fields.append(("pad", "u1", (4 - size % 4,)))
        self.dtype = np.dtype(fields)

    def records(self, geometry: np.ndarray, attributes: dict[str, np.ndarray]) -> np.ndarray:
        """Records for ``geometry`` (n, width) and the source attribute rows."""
        out = np.zeros(len(geometry), dtype=self.dtype)
        out["geometry"] = geometry
        for i, p in enumerate(self.properties):
            values = attributes[p.source]
            if p.component is not None or values.ndim > 1:  # a one-channel attribute may read as (n, 1)
                values = values.reshape(len(values), -1)[:, p.component or 0]
            out[f"p{i}"] = values
        return out

    def bbox(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) corners of each record's geometry."""
        g = records["geometry"].astype(np.float64).reshape(len(records), -1, self.rank)
        return g.min(axis=1), g.max(axis=1)

    def info(self, *, dimensions: dict[str, Any], lower: Iterable[float], upper: Iterable[float],
             by_id: dict[str, Any], spatial: list[dict[str, Any]], relationships: list[dict[str, Any]]
             ) -> dict[str, Any]:
        return {"@type": "neuroglancer_annotations_v1", "dimensions": dimensions,
                "lower_bound": [float(v) for v in lower], "upper_bound": [float(v) for v in upper],
                "annotation_type": self.annotation_type,
                "properties": [{"id": p.id, "type": p.type,
                                "description": p.source if p.component is None else f"{p.source}[{p.component}]"}
                               for p in self.properties],
                "relationships": relationships, "by_id": by_id, "spatial": spatial}


def encode_single(record: np.ndarray, related: Sequence[Sequence[int]]) -> bytes:
    """``by_id`` value: the record, then per relationship a uint32 count and the uint64 ids."""
    parts = [record.tobytes()]
    for ids in related:
        stored = np.asarray(ids, dtype="<u8")
        parts += [np.uint32(len(stored)).astype("<u4").tobytes(), stored.tobytes()]
    return b"".join(parts)


def encode_multiple(records: np.ndarray, ids: np.ndarray) -> bytes:
    """A list of annotations (spatial cell, related-object index): count, records, ids."""
    return b"".join([np.uint64(len(records)).astype("<u8").tobytes(), records.tobytes(),
                     np.asarray(ids, dtype="<u8").tobytes()])


def point_ids(chunk_index: int, n: int) -> np.ndarray:
    return (np.uint64(chunk_index) << ID_SHIFT) | np.arange(n, dtype=np.uint64)


def line_ids(object_id: int, n: int) -> np.ndarray:
    if not 0 <= int(object_id) < (1 << 32):
        raise InvalidArgumentError(f"object id {object_id} does not fit the 32 bits a line annotation id gives it")
    return (np.uint64(object_id) << ID_SHIFT) | np.arange(n, dtype=np.uint64)


def line_records(schema: Schema, positions: np.ndarray, edges: np.ndarray | None,
                 object_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(records, ids) of one object's edges as LINE annotations (no edges: none)."""
    edges = np.zeros((0, 2), np.int64) if edges is None else edges
    geometry = np.concatenate([positions[edges[:, 0]], positions[edges[:, 1]]], axis=1)
    return schema.records(geometry, {}), line_ids(object_id, len(edges))


def split_id(aid: int) -> tuple[int, int]:
    return int(aid) >> 32, int(aid) & 0xFFFFFFFF


# --------------------------------------------------------------------------
# spatial index
# --------------------------------------------------------------------------


def spatial_levels(lower: np.ndarray, upper: np.ndarray, finest: Sequence[float] | np.ndarray, *,
                   max_levels: int = 12, max_cells: int = 1 << 21) -> list[tuple[np.ndarray, np.ndarray]]:
    """(grid_shape, chunk_size) per level, coarse to fine.

    Level 0 is one cell over the bounds; each next level halves the
    dimensions longer than half the longest (so cells stay near isotropic),
    down to the store's chunk shape ``finest`` (or ``max_levels`` /
    ``max_cells``).  grid_shape x chunk_size == upper - lower on every level.
    """
    extent = np.asarray(upper, np.float64) - np.asarray(lower, np.float64)
    finest_size = np.asarray(finest, np.float64)
    grid = np.ones(len(extent), dtype=np.int64)
    levels = [(grid.copy(), extent.copy())]
    while len(levels) < max_levels:
        size = extent / grid
        halve = (size > size.max() / 2) & (size > finest_size)
        if not halve.any() or np.prod(grid * np.where(halve, 2, 1)) > max_cells:
            break
        grid = grid * np.where(halve, 2, 1)
        levels.append((grid.copy(), extent / grid))
    return levels


def cell_ranges(lo: np.ndarray, hi: np.ndarray, lower: np.ndarray, chunk: np.ndarray,
                grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive cell range each closed box [lo, hi] touches, clipped to the grid."""
    a = np.clip(np.floor((lo - lower) / chunk), 0, grid - 1).astype(np.int64)
    b = np.clip(np.floor((hi - lower) / chunk), 0, grid - 1).astype(np.int64)
    return a, b


def expand_cells(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, cell coords) for every cell of every inclusive range a..b (vectorized)."""
    ext = b - a + 1
    counts = np.prod(ext, axis=1)
    rows = np.repeat(np.arange(len(a)), counts)
    local = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    cells = np.empty((len(rows), a.shape[1]), dtype=np.int64)
    e = ext[rows]
    for d in range(a.shape[1] - 1, -1, -1):
        cells[:, d] = local % e[:, d]
        local = local // e[:, d]
    return rows, cells + a[rows]


def uniform(ids: np.ndarray) -> np.ndarray:
    """A uniform [0, 1) draw per annotation id, fixed by the id (so the sampling is reproducible)."""
    from .sharded import murmurhash3_x86_128_low64

    return (murmurhash3_x86_128_low64(ids) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def flat_cells(cells: np.ndarray, grid: np.ndarray) -> np.ndarray:
    strides = np.cumprod(np.r_[1, grid[::-1][:-1]])[::-1]
    return cells @ strides


def unflat_cells(flat: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return np.stack(np.unravel_index(flat, tuple(int(g) for g in grid)), axis=1)


# --------------------------------------------------------------------------
# serve's spatial index: cells made of whole store chunks
# --------------------------------------------------------------------------


def chunk_factors(grid: np.ndarray, chunk: np.ndarray) -> list[np.ndarray]:
    """Cell sides in store chunks per axis, coarse to fine: one cell over the grid padded to powers of two,
    then halving the sides longer than half the longest (in coordinates, so cells stay near isotropic),
    down to single chunks.  Each level's cells nest in the previous level's."""
    f = np.left_shift(1, np.ceil(np.log2(np.maximum(np.asarray(grid, np.int64), 1))).astype(np.int64))
    chunk = np.asarray(chunk, np.float64)
    out = [f.copy()]
    while (f > 1).any():
        size = f * chunk
        halve = (f > 1) & (size > size.max() / 2)
        if not halve.any():
            halve = (f > 1) & (size == size[f > 1].max())
        f = np.where(halve, f // 2, f)
        out.append(f.copy())
    return out


def object_levels(cells: list[np.ndarray], weight: np.ndarray, key: np.ndarray,
                  limit: int) -> list[tuple[float, float, int]]:
    """(key_lo, key_hi, limit) per spatial level, coarse to fine, for objects drawn by ``key``.

    ``cells[k]``, ``weight`` and ``key`` are per fragment (a piece of one
    object in one store chunk): its cell on level k, the annotations it adds
    to a cell (its vertex count + 1: the edges touching the chunk), its
    object's draw key in [0, 1).  Level k holds the objects with keys in
    ``[key_lo, key_hi)``: the widest range (keys in order) whose fullest
    cell holds at most ``limit`` annotations -- at least one more object per
    level -- and the finest level takes the rest.  Levels stop once every
    object is placed; each level's ``limit`` is its fullest cell.
    """
    out: list[tuple[float, float, int]] = []
    lo = 0.0
    drawn = np.argsort(key, kind="stable")  # fragments in draw order
    for k, cell in enumerate(cells):
        order = drawn[np.searchsorted(key[drawn], lo):]  # those coarser levels left
        if not len(order):
            break
        hi = 1.0
        if k < len(cells) - 1:
            # each fragment's cell total once every fragment up to it in draw order is taken
            by_cell = np.argsort(cell[order], kind="stable")
            w = weight[order][by_cell]
            total = np.cumsum(w)
            first = np.r_[True, np.diff(cell[order][by_cell]) != 0]
            start = np.maximum.accumulate(np.where(first, np.arange(len(w)), 0))
            running = np.empty(len(w))
            running[by_cell] = total - total[start] + w[start]
            over = np.flatnonzero(running > limit)
            if len(over):
                hi = float(key[order[over[0]]])
                if hi <= key[order[0]]:  # the first object alone overfills a cell: it still gets this level
                    later = key[order][key[order] > hi]
                    hi = float(later[0]) if len(later) else 1.0
        take = order[key[order] < hi]
        fullest = np.bincount(cell[take], weights=weight[take]).max() if len(take) else 1
        out.append((lo, hi, max(1, int(fullest))))
        lo = hi
        if hi >= 1.0:
            break
    return out


def point_levels(cells: list[np.ndarray], counts: np.ndarray, limit: int) -> list[tuple[float, float, int]]:
    """(u_lo, u_hi, limit) per spatial level, coarse to fine, for points drawn by their uniform draw u.

    ``cells[k]`` and ``counts`` are per store chunk.  Level k keeps the points
    with u in ``[u_lo, u_hi)``, a uniform sample sized so that its fullest
    cell expects ``limit`` points (the finest level takes the rest); the
    level's ``limit`` is that expectation, rounded up.
    """
    out: list[tuple[float, float, int]] = []
    lo = 0.0
    for k, cell in enumerate(cells):
        per_cell = np.bincount(cell, weights=counts * (1.0 - lo)) if len(cell) else np.zeros(1)
        most = float(per_cell.max())
        p = 1.0 if k == len(cells) - 1 or most <= limit else limit / most
        hi = 1.0 if p >= 1.0 else lo + p * (1.0 - lo)
        out.append((lo, hi, max(1, int(np.ceil(most * p)))))
        lo = hi
        if hi >= 1.0:
            break
    return out
