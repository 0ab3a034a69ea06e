"""Link records -> ``links/0/<offsets>/`` cells, the way 0.9.2 files them.

A record is ``L`` endpoints, each a (chunk, chunk-local vertex index).
Placement (all vectorized):

* a record whose endpoints share one chunk keeps its input endpoint
  order and lands in the all-zero offsets array (flat rows, no perm,
  partitioned by one ``link_fragments`` range per cell);
* any other record is sorted by ``(chunk coords, vertex index)`` (stable,
  so ties keep input order), stored at the cell of its first endpoint in
  the array named by the other endpoints' chunk offsets, with the Lehmer
  code of that sort as a leading ``perm`` column (one ragged group per
  cell);
* inside a cell rows keep input record order, so attribute rows are the
  same gather.

Link attributes mirror every links array cell for cell, as flat rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..config import tuning
from ..format import builders
from ..format.fragments import FragmentIndex, encode_fragment_index
from ..format.keys import format_offsets_name
from ..format.links import encode_intra_links, encode_ragged_links, lehmer_encode
from .partition import sort_codes
from .store_writer import SpatialArrayOut, empty_group, ordered_map

if TYPE_CHECKING:
    from .level import LevelWriter


@dataclass(frozen=True)
class LinkCells:
    """Records grouped by (source chunk, offsets): cell ``k`` is rows ``starts[k]:starts[k+1]``."""

    link_width: int
    order: np.ndarray  # (M,) input record of each placed row
    vi: np.ndarray  # (M, L) placed chunk-local vertex indices
    perm: np.ndarray  # (M,) Lehmer code of the placement (0 for intra rows)
    cell_chunk: np.ndarray  # (K, ndim) source chunk of each cell
    cell_offsets: np.ndarray  # (K, L-1, ndim) offsets of each cell's array
    starts: np.ndarray  # (K + 1,)

    @property
    def num_links(self) -> int:
        return int(self.order.size)

    def cell_is_intra(self) -> np.ndarray:
        k = len(self.cell_chunk)
        crossing: np.ndarray = np.any(self.cell_offsets.reshape(k, int(np.prod(self.cell_offsets.shape[1:]))), axis=1)
        return ~crossing


def place_records(chunks: np.ndarray, vi: np.ndarray) -> LinkCells:
    """Place ``M`` undirected records: ``chunks`` (M, L, ndim), ``vi`` (M, L)."""
    chunks = np.asarray(chunks, dtype=np.int64)
    vi = np.asarray(vi, dtype=np.int64)
    m, width, ndim = chunks.shape
    if m == 0:
        z = np.zeros(0, np.int64)
        return LinkCells(width, z, np.zeros((0, width), np.int64), z, np.zeros((0, ndim), np.int64),
                         np.zeros((0, width - 1, ndim), np.int64), np.zeros(1, np.int64))
    flat = chunks.reshape(-1, ndim)
    low = flat.min(axis=0)
    span = flat.max(axis=0) - low + 1
    if _fits(span, width, int(vi.max()) + 1 if vi.size else 1):
        return _place_coded(chunks, vi, low, span)
    return _place_lexsort(chunks, vi)


def _fits(span: np.ndarray, width: int, nvi: int) -> bool:
    """Whether chunk numbers times vertex indices, and cell keys, fit the packed int64 sort codes."""
    cells = math.prod(int(s) for s in span)
    offsets = math.prod(2 * int(s) - 1 for s in span) ** (width - 1)
    return cells * nvi < 1 << 62 and cells * offsets < 1 << 62


def _c_strides(shape: np.ndarray) -> np.ndarray:
    """C-order strides (in items) of an array of ``shape``."""
    out = np.ones(len(shape), dtype=np.int64)
    out[:-1] = np.cumprod(shape[::-1].astype(np.int64))[::-1][1:]
    return out


def _place_coded(chunks: np.ndarray, vi: np.ndarray, low: np.ndarray, span: np.ndarray) -> LinkCells:
    """:func:`place_records` on integer codes: a chunk's C-order number in the records' box orders chunks
    as their coordinates do, and a cell's key (source number, then offsets in mixed radix) orders cells as
    the lexicographic (source, offsets) sort does -- one packed integer sort instead of lexsorts."""
    m, width, _ = chunks.shape
    code = (chunks - low) @ _c_strides(span)  # (M, L) chunk numbers
    if width == 2:  # the common case: swap the endpoints of a record whose second chunk sorts first
        swap = code[:, 1] < code[:, 0]
        sigma = np.where(swap[:, None], np.array([1, 0]), np.array([0, 1])).astype(np.int64)
        perm = swap.astype(np.int64)
    else:
        key = code * (int(vi.max()) + 1) + vi
        sigma = np.argsort(key, axis=1, kind="stable")
        sigma[np.all(code == code[:, :1], axis=1)] = np.arange(width)  # records inside one chunk keep their order
        perm = lehmer_encode(sigma)
    rows = np.arange(m)[:, None]
    placed = code[rows, sigma]
    placed_vi = vi[rows, sigma]
    # offsets of the other endpoints' chunks from the first, per axis in [-(span-1), span-1]
    radix = np.tile(2 * span - 1, width - 1)
    pc = chunks[rows, sigma]
    off = (pc[:, 1:, :] - pc[:, :1, :]).reshape(m, -1) + np.tile(span - 1, width - 1)
    cell_key = placed[:, 0] * int(np.prod(radix)) + off @ _c_strides(radix)
    order, _, starts = sort_codes(cell_key)
    first = order[starts[:-1]]
    src = pc[first, 0, :]
    return LinkCells(width, order, placed_vi[order], perm[order], src,
                     pc[first, 1:, :] - src[:, None, :], starts)


def _place_lexsort(chunks: np.ndarray, vi: np.ndarray) -> LinkCells:
    """:func:`place_records` by lexsorts, for chunk boxes too wide to number in an int64."""
    m, width, ndim = chunks.shape
    intra = np.all(chunks == chunks[:, :1, :], axis=(1, 2))
    # Canonical endpoint order: lexsort over every endpoint, record as primary key.
    rec = np.repeat(np.arange(m, dtype=np.int64), width)
    flat = chunks.reshape(-1, ndim)
    keys = [vi.reshape(-1)] + [flat[:, d] for d in range(ndim - 1, -1, -1)] + [rec]
    sigma = np.lexsort(keys).reshape(m, width) - (np.arange(m, dtype=np.int64) * width)[:, None]
    sigma[intra] = np.arange(width)
    rows = np.arange(m)[:, None]
    placed_chunks = chunks[rows, sigma]
    placed_vi = vi[rows, sigma]
    perm = lehmer_encode(sigma)
    src = placed_chunks[:, 0, :]
    offsets = (placed_chunks[:, 1:, :] - src[:, None, :]).reshape(m, -1)
    key = np.concatenate([src, offsets], axis=1)
    order = np.lexsort(key.T[::-1])  # stable: input order inside a cell
    ks = key[order]
    new = np.ones(m, dtype=bool)
    new[1:] = np.any(ks[1:] != ks[:-1], axis=1)
    first = np.flatnonzero(new)
    return LinkCells(
        width, order, placed_vi[order], perm[order], ks[first, :ndim],
        ks[first, ndim:].reshape(-1, width - 1, ndim),
        np.append(first, m).astype(np.int64),
    )




class LinkWriter:
    """Level 0's ``links/0`` family (and its attribute families), fed cells in any number of parts.

    ``level`` is a :class:`~zvf.write.level.LevelWriter`.  ``intra_array``:
    create the all-zero offsets array (and the family) even when no record
    lands there, as 0.9.2's graph and mesh writers do; ``link_fragments``:
    index every intra cell with one range fragment (graphs, meshes).  A
    streaming writer adds the cells of each source chunk as it goes; no cell
    may come twice.
    """

    def __init__(self, level: LevelWriter, *, ndim: int, width: int, attribute_names: Iterable[str] = (),
                 intra_array: bool, link_fragments: bool) -> None:
        self.level = level
        self.ndim = ndim
        self.width = width
        self.attribute_names = list(attribute_names)
        self.intra_array = intra_array
        self.total = 0
        self._intra_name = format_offsets_name([[0] * ndim] * (width - 1))
        self._attr_arrays: dict[tuple[str, str], SpatialArrayOut] = {}
        if intra_array:
            self._array(self._intra_name, [[0] * ndim] * (width - 1))
        self._frags = level.array("link_fragments", builders.link_fragments_attributes()) if link_fragments else None
        self._deferred: list[tuple[np.ndarray, np.ndarray]] = []
        self._deferred_n = 0

    def _array(self, name: str, offsets: Sequence[Sequence[int]]) -> SpatialArrayOut:
        return self.level.array(f"links/0/{name}", builders.links_array_attributes(
            offsets, has_perm=name != self._intra_name, link_width=self.width, level_delta=0))

    async def add(self, cells: LinkCells, link_attributes: dict[str, np.ndarray]) -> None:
        """Upload ``cells``; ``link_attributes`` rows are aligned with the records placed into them.

        Arrays are resolved on the event loop (one name per distinct offsets, not per cell); the cells
        are encoded in the engine's worker threads, the ``link_cells_per_task`` setting at a time, and put in order.
        """
        writer = self.level.writer
        k = len(cells.cell_chunk)
        self.total += cells.num_links
        if k == 0:
            return
        is_intra = cells.cell_is_intra().tolist()
        uniq, inverse = np.unique(cells.cell_offsets.reshape(k, -1), axis=0, return_inverse=True)
        shape = (self.width - 1, self.ndim)
        offsets = [u.reshape(shape).tolist() for u in uniq]
        names = [format_offsets_name(o) for o in offsets]
        arrays = [self._array(name, o) for name, o in zip(names, offsets)]
        attrs = [(values.dtype.newbyteorder("<"), values, [self._attribute_array(an, values, name, o)
                                                           for name, o in zip(names, offsets)])
                 for an, values in link_attributes.items()]
        which = inverse.reshape(-1).tolist()
        chunks = cells.cell_chunk.tolist()
        starts = cells.starts.tolist()
        frags = self._frags

        def encode(batch: range) -> list[tuple[SpatialArrayOut, int, bytes]]:
            out: list[tuple[SpatialArrayOut, int, bytes]] = []
            for c in batch:
                lo, hi = starts[c], starts[c + 1]
                arr = arrays[which[c]]
                rows = cells.vi[lo:hi]
                if is_intra[c]:
                    out.append((arr, c, arr.codec.encode(encode_intra_links(rows))))
                    if frags is not None:
                        out.append((frags, c, frags.codec.encode(
                            encode_fragment_index(FragmentIndex.from_ranges([0], [hi - lo])))))
                else:
                    out.append((arr, c, arr.codec.encode(encode_ragged_links(rows, cells.perm[lo:hi]))))
                sel = cells.order[lo:hi]
                for dt, values, outs in attrs:
                    o = outs[which[c]]
                    out.append((o, c, o.codec.encode(np.ascontiguousarray(values[sel]).astype(dt).tobytes())))
            return out

        async def store(_: range, blobs: list[tuple[SpatialArrayOut, int, bytes]]) -> None:
            for out, c, blob in blobs:
                await out.put(writer, chunks[c], blob)

        per = tuning().link_cells_per_task
        await ordered_map([range(i, min(i + per, k)) for i in range(0, k, per)],
                          encode, store)

    async def add_deferred(self, chunks: np.ndarray, vi: np.ndarray) -> None:
        """Queue undirected records (``chunks`` (M, L, ndim), ``vi`` (M, L)) that fill whole cells; they are
        placed and uploaded together once ``deferred_link_records`` (a setting; ~64 bytes each) wait, or at
        :meth:`flush`.  A streamed write files a few records under each of its chunks, and one placement and
        upload round per chunk cost more than the chunk's rows."""
        if len(vi):
            self._deferred.append((chunks, vi))
            self._deferred_n += len(vi)
            if self._deferred_n >= tuning().deferred_link_records:
                await self.flush()

    async def flush(self) -> None:
        """Place and upload the queued records: before a shard of the link arrays is flushed, and at the end."""
        if self._deferred:
            chunks = np.concatenate([c for c, _ in self._deferred])
            vi = np.concatenate([v for _, v in self._deferred])
            self._deferred, self._deferred_n = [], 0
            await self.add(place_records(chunks, vi), {})

    def _attribute_array(self, an: str, values: np.ndarray, name: str,
                         offsets: Sequence[Sequence[int]]) -> SpatialArrayOut:
        out = self._attr_arrays.get((an, name))
        if out is None:
            out = self._attr_arrays[(an, name)] = self.level.array(
                f"link_attributes/{an}/0/{name}",
                builders.link_attribute_attributes(an, values.dtype, offsets, level_delta=0,
                                                   row_shape=values.shape[1:]))
        return out

    def finish(self) -> None:
        """Queue the family documents (the arrays' own documents come with the level's)."""
        if self._deferred:
            raise RuntimeError("LinkWriter.finish: queued records were never flushed")
        writer = self.level.writer
        if self.intra_array or self.total:
            empty_group(writer, "0/links")
            doc = builders.links_family_document(level_delta=0, link_width=self.width, directed=False,
                                                 sid_ndim=self.ndim, num_links=self.total)
            if not self.total:  # 0.9.2 stamps only the policy on a family it created empty
                doc["attributes"].pop("num_links")
                doc["attributes"].pop("num_physical_records")
            writer.add_document("0/links/0/zarr.json", doc, stage=0)
        if self.attribute_names and self.total:
            empty_group(writer, "0/link_attributes")
            for an in self.attribute_names:
                empty_group(writer, f"0/link_attributes/{an}")
                writer.add_document(f"0/link_attributes/{an}/0/zarr.json", builders.link_attribute_family_document(
                    an, level_delta=0, num_links=self.total), stage=0)


async def put_links(level: LevelWriter, cells: LinkCells, *, ndim: int, link_attributes: dict[str, np.ndarray],
                    intra_array: bool, link_fragments: bool) -> None:
    """Upload every cell of ``cells`` at once and queue the family documents (see :class:`LinkWriter`)."""
    lw = LinkWriter(level, ndim=ndim, width=cells.link_width, attribute_names=link_attributes,
                    intra_array=intra_array, link_fragments=link_fragments)
    await lw.add(cells, link_attributes)
    lw.finish()


__all__ = ["LinkCells", "LinkWriter", "place_records", "put_links"]
