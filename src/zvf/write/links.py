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

from dataclasses import dataclass

import numpy as np

from ..format import builders
from ..format.fragments import FragmentIndex, encode_fragment_index
from ..format.keys import format_offsets_name
from ..format.links import encode_intra_links, encode_ragged_links, lehmer_encode
from .engine import empty_group


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
        return ~np.any(self.cell_offsets.reshape(k, int(np.prod(self.cell_offsets.shape[1:]))), axis=1)


def place_records(chunks: np.ndarray, vi: np.ndarray) -> LinkCells:
    """Place ``M`` undirected records: ``chunks`` (M, L, ndim), ``vi`` (M, L)."""
    chunks = np.asarray(chunks, dtype=np.int64)
    vi = np.asarray(vi, dtype=np.int64)
    m, width, ndim = chunks.shape
    if m == 0:
        z = np.zeros(0, np.int64)
        return LinkCells(width, z, np.zeros((0, width), np.int64), z, np.zeros((0, ndim), np.int64),
                         np.zeros((0, width - 1, ndim), np.int64), np.zeros(1, np.int64))
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

    ``level`` is a :class:`~zvf.write.points.LevelWriter`.  ``intra_array``:
    create the all-zero offsets array (and the family) even when no record
    lands there, as 0.9.2's graph and mesh writers do; ``link_fragments``:
    index every intra cell with one range fragment (graphs, meshes).  A
    streaming writer adds the cells of each source chunk as it goes; no cell
    may come twice.
    """

    def __init__(self, level, *, ndim: int, width: int, attribute_names=(), intra_array: bool,
                 link_fragments: bool):
        self.level = level
        self.ndim = ndim
        self.width = width
        self.attribute_names = list(attribute_names)
        self.intra_array = intra_array
        self.total = 0
        self._intra_name = format_offsets_name([[0] * ndim] * (width - 1))
        self._attr_arrays: dict = {}
        if intra_array:
            self._array(self._intra_name, [[0] * ndim] * (width - 1))
        self._frags = level.array("link_fragments", builders.link_fragments_attributes()) if link_fragments else None

    def _array(self, name: str, offsets):
        return self.level.array(f"links/0/{name}", builders.links_array_attributes(
            offsets, has_perm=name != self._intra_name, link_width=self.width, level_delta=0))

    async def add(self, cells: LinkCells, link_attributes: dict[str, np.ndarray]) -> None:
        """Upload ``cells``; ``link_attributes`` rows are aligned with the records placed into them."""
        writer = self.level.writer
        is_intra = cells.cell_is_intra()
        self.total += cells.num_links
        for k, (offsets, chunk) in enumerate(zip(cells.cell_offsets.tolist(), cells.cell_chunk.tolist())):
            name = format_offsets_name(offsets)
            lo, hi = int(cells.starts[k]), int(cells.starts[k + 1])
            arr = self._array(name, offsets)
            rows = cells.vi[lo:hi]
            if is_intra[k]:
                await arr.add(writer, chunk, encode_intra_links(rows))
                if self._frags is not None:
                    await self._frags.add(writer, chunk,
                                          encode_fragment_index(FragmentIndex.from_ranges([0], [hi - lo])))
            else:
                await arr.add(writer, chunk, encode_ragged_links(rows, cells.perm[lo:hi]))
            sel = cells.order[lo:hi]
            for an, values in link_attributes.items():
                out = self._attr_arrays.get((an, name))
                if out is None:
                    out = self._attr_arrays[(an, name)] = self.level.array(
                        f"link_attributes/{an}/0/{name}",
                        builders.link_attribute_attributes(an, values.dtype, offsets, level_delta=0,
                                                     row_shape=values.shape[1:]))
                await out.add(writer, chunk,
                              np.ascontiguousarray(values[sel]).astype(values.dtype.newbyteorder("<")).tobytes())

    def finish(self) -> None:
        """Queue the family documents (the arrays' own documents come with the level's)."""
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


async def put_links(level, cells: LinkCells, *, ndim: int, link_attributes: dict[str, np.ndarray],
                    intra_array: bool, link_fragments: bool) -> None:
    """Upload every cell of ``cells`` at once and queue the family documents (see :class:`LinkWriter`)."""
    lw = LinkWriter(level, ndim=ndim, width=cells.link_width, attribute_names=link_attributes,
                    intra_array=intra_array, link_fragments=link_fragments)
    await lw.add(cells, link_attributes)
    lw.finish()


__all__ = ["LinkCells", "LinkWriter", "place_records", "put_links"]
