"""The link arrays of a level, parsed once per dataset.

Intra-chunk rows (``links/0/0.0.0``) and ragged cross-chunk rows
(``links/0/<offsets>``), their link attributes, and seed-layout
``cross_chunk_links`` records (see :mod:`zvf.read.seed`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError
from ..format.keys import parse_offsets_name
from .cells import CellArray
from .rowops import expand_ranges, match_rows
from .seed import seed_cross_records

if TYPE_CHECKING:
    from .context import ReadContext


@dataclass
class LinkArray:
    arr: CellArray
    offsets: np.ndarray  # (L-1, ndim); all zero = intra
    width: int
    has_perm: bool
    intra: bool
    dtype: str
    attributes: dict[str, CellArray] = field(default_factory=dict)  # link_attributes/<name>/0/<this array>

    def sources(self, chunks: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The cells of ``chunks`` this array lists in ``nonempty_chunks`` (all when it lists none);
        cross-chunk cells are planned by :class:`CrossCells` instead."""
        want = set(chunks)
        if self.listed is not None:
            want &= self.listed
        return sorted(want)

    @cached_property
    def listed(self) -> set[tuple[int, ...]] | None:
        """The array's ``nonempty_chunks`` (None when it does not list them: try every cell)."""
        if "nonempty_chunks" not in self.arr.meta.attributes:
            return None
        return set(map(tuple, self.arr.meta.nonempty_chunk_array.tolist()))


class ChunkCodes:
    """Chunk coordinates as int64 codes, so sets of chunks compare by sorting and searchsorted.

    Each axis is compressed to the values ``universe`` holds and the axes
    are combined in mixed radix; a chunk outside the universe codes -1 (it
    touches no cell).  Falls back to row matching if the radix overflows.
    """

    def __init__(self, universe: np.ndarray):
        self.kdim = universe.shape[1]
        self.values = [np.unique(universe[:, d]) for d in range(self.kdim)]
        sizes = [max(len(v), 1) for v in self.values]
        self.rows = None if float(np.prod(np.asarray(sizes, np.float64))) < 2.0**62 else np.unique(universe, axis=0)
        self.sizes = tuple(sizes)

    def __call__(self, coords: np.ndarray) -> np.ndarray:
        coords = np.asarray(coords, dtype=np.int64).reshape(-1, self.kdim)
        if self.rows is not None:
            return match_rows(self.rows, coords)
        ok = np.ones(len(coords), dtype=bool)
        idx = np.empty_like(coords)
        for d, vals in enumerate(self.values):  # per axis
            at = np.minimum(np.searchsorted(vals, coords[:, d]), max(len(vals) - 1, 0))
            ok &= vals[at] == coords[:, d] if len(vals) else False
            idx[:, d] = at
        codes = np.ravel_multi_index(tuple(idx.T), self.sizes) if len(coords) else np.zeros(0, np.int64)
        return np.where(ok, codes, -1).astype(np.int64)


class CrossCells:
    """Every listed cross-chunk link cell of a level, indexed by the chunks its rows touch.

    A read plans its link cells from the chunks it holds, before fetching
    anything: a cell counts only when its rows can land in those chunks.
    Arrays that do not list ``nonempty_chunks`` are planned per read
    (:meth:`unlisted`).
    """

    def __init__(self, arrays: list[LinkArray], kdim: int):
        cross = [(i, la) for i, la in enumerate(arrays) if not la.intra]
        self.unlisted_arrays = [i for i, la in cross if la.listed is None]
        listed = [(i, la) for i, la in cross if la.listed is not None]
        ends = max((len(la.offsets) for _, la in listed), default=0)
        blocks, owner = [], []
        for i, la in listed:  # per array: its listed sources, then the chunk at each offset (padded: the source)
            src = la.arr.meta.nonempty_chunk_array.reshape(-1, kdim)
            offs = np.zeros((ends, kdim), np.int64)
            offs[:len(la.offsets)] = la.offsets
            blocks.append(src[:, None, :] + np.concatenate((np.zeros((1, kdim), np.int64), offs))[None])
            owner.append(np.full(len(src), i, np.int64))
        self.chunks = np.concatenate(blocks) if blocks else np.zeros((0, ends + 1, kdim), np.int64)
        self.array = np.concatenate(owner) if owner else np.zeros(0, np.int64)
        self.codes = ChunkCodes(self.chunks.reshape(-1, kdim))
        cols = self.codes(self.chunks.reshape(-1, kdim)).reshape(len(self.array), ends + 1)
        self.cols = cols
        flat = cols.reshape(-1)
        self.by_code = np.argsort(flat, kind="stable")
        self.sorted_codes = flat[self.by_code]

    def __len__(self) -> int:
        return len(self.array)

    def plan(self, have: np.ndarray, fresh: np.ndarray, any_end: bool) -> np.ndarray:
        """Cells (indices, in array then source order) with rows touching ``fresh`` chunks that a chunk
        set holding ``have`` (fresh included) can use: every endpoint held, or with ``any_end`` one."""
        width = self.cols.shape[1]
        if not len(self.array) or not len(fresh):
            return np.zeros(0, np.int64)
        f = np.unique(self.codes(fresh))
        f = f[f >= 0]
        lo = np.searchsorted(self.sorted_codes, f, side="left")
        hi = np.searchsorted(self.sorted_codes, f, side="right")
        cells = np.unique(self.by_code[expand_ranges(lo, hi - lo)] // width)
        if not any_end and len(cells):
            held = np.unique(self.codes(have))
            c = self.cols[cells]
            at = np.minimum(np.searchsorted(held, c), len(held) - 1)
            cells = cells[np.all(held[at] == c, axis=1)]
        return cells[np.lexsort((*self.chunks[cells, 0].T[::-1], self.array[cells]))]

    def unlisted(self, arrays: list[LinkArray], have: list[tuple[int, ...]], fresh: list[tuple[int, ...]],
                 any_end: bool) -> list[tuple[int, list[tuple[int, ...]]]]:
        """(array index, sources) to try in arrays that do not list their cells: held chunks whose
        rows (at the array's offsets) touch ``fresh`` and land in held chunks (one of them with ``any_end``)."""
        out: list[tuple[int, list[tuple[int, ...]]]] = []
        if not self.unlisted_arrays or not fresh:
            return out
        held = np.asarray(have, dtype=np.int64).reshape(len(have), -1)
        new = np.asarray(fresh, dtype=np.int64).reshape(len(fresh), -1)
        for i in self.unlisted_arrays:  # per array (arrays rarely lack their list)
            offs = np.concatenate((np.zeros((1, held.shape[1]), np.int64), arrays[i].offsets))
            # every source whose rows can reach a held chunk: a held chunk minus any offset
            cand = np.unique((held[:, None, :] - offs[None]).reshape(-1, held.shape[1]), axis=0)
            ends = cand[:, None, :] + offs[None]
            flat = ends.reshape(-1, held.shape[1])
            in_held = (match_rows(held, flat) >= 0).reshape(len(cand), len(offs))
            in_new = (match_rows(new, flat) >= 0).reshape(len(cand), len(offs))
            keep = in_new.any(axis=1) & (in_held.any(axis=1) if any_end else in_held.all(axis=1))
            if keep.any():
                out.append((i, [tuple(r) for r in cand[keep].tolist()]))
        return out


@dataclass
class Links:
    width: int
    arrays: list[LinkArray]
    records: tuple[str, np.ndarray, np.ndarray] | None  # seed cross_chunk_links: (key, coords, local)
    attribute_names: list[str] = field(default_factory=list)  # link_attributes/<name> of the level
    kdim: int = 3

    @cached_property
    def cells(self) -> CrossCells:
        """The level's cross-chunk link cells, indexed once per dataset."""
        return CrossCells(self.arrays, self.kdim)

    def plan(self, have: list[tuple[int, ...]], fresh: list[tuple[int, ...]], any_end: bool,
             taken: np.ndarray | None = None, seen: Collection[tuple[int, tuple[int, ...]]] = (),
             ) -> list[tuple[int, list[tuple[int, ...]]]]:
        """(array index, cells) that ``fresh`` chunks bring into use in a read holding ``have`` (fresh
        included), in array then cell order: the intra cell of each fresh chunk, and the cross-chunk
        cells whose rows land in held chunks (:meth:`CrossCells.plan`).  ``taken`` (a mask over
        :attr:`cells`) and ``seen`` ((array, cell) pairs) hold cells an earlier wave planned; ``taken``
        is updated.  Query plans and :class:`zvf.read.chunkset.ChunkSet` both plan here."""
        out = [(i, src) for i, la in enumerate(self.arrays) if la.intra and (src := la.sources(fresh))]
        cells = self.cells.plan(np.asarray(have, np.int64), np.asarray(fresh, np.int64), any_end)
        if taken is not None:
            cells = cells[~taken[cells]]
            taken[cells] = True
        arrays = self.cells.array[cells]
        for part in np.split(cells, np.flatnonzero(np.diff(arrays)) + 1) if len(cells) else ():
            out.append((int(self.cells.array[part[0]]), list(map(tuple, self.cells.chunks[part, 0].tolist()))))
        for i, src in self.cells.unlisted(self.arrays, have, fresh, any_end):
            src = [c for c in src if (i, c) not in seen]
            if src:
                out.append((i, src))
        return sorted(out, key=lambda job: job[0])


async def level_links(rc: ReadContext, index: int) -> Links:
    """Same-level link arrays of a level (loaded and parsed once per dataset)."""
    cache = rc.object_cache
    if ("links", index) in cache:
        known: Links = cache[("links", index)]
        return known
    await rc.ex.gather([rc.family(index, "links"), rc.family(index, "cross_chunk_links"),
                         rc.family(index, "link_attributes")])
    level = await rc.level(index)
    kdim = level.key_ndim
    default_w = 3 if rc.geometry_type == "mesh" else 2
    fam = level.groups.get("links/0", {})
    width = fam.get("link_width", default_w) if isinstance(fam, dict) else default_w
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise FormatError(f"{index}/links/0/zarr.json: link_width {width!r} is not an integer from 1 to 64")
    arrays: list[LinkArray] = []
    attr_names = sorted({n.split("/")[1] for n in level.arrays if n.startswith("link_attributes/")})
    for name, arr in sorted(level.arrays.items()):
        parts = name.split("/")
        if parts[0] != "links" or len(parts) < 2 or parts[1] not in ("0", "+0"):
            continue
        attrs = arr.meta.attributes
        key = f"{arr.path}/zarr.json"
        w = attrs.get("link_width", width)
        if len(parts) == 2:  # seed layout: links/0 is itself the intra-chunk array
            offs = np.zeros((max(int(w) - 1, 0), kdim), dtype=np.int64)
        elif len(parts) == 3:
            raw = attrs.get("offsets")
            try:
                offs = np.asarray(raw, dtype=np.int64) if raw is not None else parse_offsets_name(parts[2], kdim)
            except (TypeError, ValueError, OverflowError):
                raise FormatError(f"{key}: offsets {raw!r} are not integer vectors") from None
            if offs.size % kdim:
                raise FormatError(f"{key}: offsets {raw!r} are not {kdim}-D vectors")
            offs = offs.reshape(-1, kdim)
            if "link_width" not in attrs:
                w = len(offs) + 1
        else:
            continue
        if not isinstance(w, int) or w < 1 or len(offs) != w - 1:
            raise FormatError(f"{key}: link_width {w!r} does not match its {len(offs)} offset vectors")
        intra = not offs.any()
        has_perm = bool(attrs.get("has_perm", False))
        link_attrs = {} if len(parts) != 3 else {
            an: a for an in attr_names if (a := level.array(f"link_attributes/{an}/0/{parts[2]}")) is not None}
        arrays.append(LinkArray(arr, offs, int(w), has_perm, intra, str(attrs.get("dtype", "int64")), link_attrs))
        width = int(w)
    records = await seed_cross_records(rc, level, width)
    links = Links(width, arrays, records, attr_names, kdim)
    cache[("links", index)] = links
    return links
