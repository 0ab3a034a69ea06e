"""The chunk-local steps of an object write, shared by the streaming writer and the distributed tasks.

An object write (polylines, streamlines, lines; graphs, skeletons, meshes)
splits into work on one chunk at a time -- its vertex cells, fragment index,
fragment attributes and the link cells filed under it -- and one small
commit: the object index, the per-object and group tables and the documents.
:mod:`.stream` runs the chunk steps one after another in one
process; :mod:`.tasks` runs them for disjoint chunk groups on many
workers.  Both call the functions here with the same inputs, so both write
the same bytes.

Paths need, beyond each chunk's rows, only a summary of the *runs*
(consecutive vertices of one object in one chunk: a fragment): each run's
chunk and length in input order and each object's run count.
:class:`PathRuns` derives from them every chunk's fragments and the bridge
links between consecutive runs of an object.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...format.codecs import CellCodec
from ...format.fragments import FragmentIndex
from ...format.layout import LevelLayout
from ..fragment_attributes import FragmentAttributes
from ..level import Layout, LevelWriter, put_rows
from ..links import LinkWriter, place_records
from ..object_index import put_groups, put_object_attributes, put_object_index
from ..partition import Partition, partition
from ..store_writer import StoreWriter


@dataclass
class PathRuns:
    """The runs of a paths write, grouped by chunk (input order kept within a chunk)."""

    run_gid: np.ndarray  # (R,) chunk id of each run, runs in input order
    run_count: np.ndarray  # (R,) vertices of each run
    run_obj: np.ndarray  # (R,) object row of each run
    by_chunk: np.ndarray  # (R,) runs grouped by chunk id
    g_start: np.ndarray  # (G + 1,) each chunk's slice of ``by_chunk``
    row0_sorted: np.ndarray  # (R,) chunk-local first row of the runs of ``by_chunk``
    row0: np.ndarray  # (R,) the same per run
    frag_local: np.ndarray  # (R,) chunk-local fragment index of each run
    br_order: np.ndarray  # bridges (run r -> r + 1 of one object) grouped by the chunk that files them
    br_start: np.ndarray  # (G + 1,) each chunk's slice of ``br_order``

    @classmethod
    def build(cls, run_gid: np.ndarray, run_count: np.ndarray, obj_runs: np.ndarray, rank: np.ndarray) -> PathRuns:
        """``obj_runs``: runs per object; ``rank``: each chunk id's position in C order (a bridge is filed
        under the chunk of its two that comes first, where 0.9.2 files it)."""
        n_chunks = len(rank)
        run_gid = np.asarray(run_gid, np.int64)
        run_count = np.asarray(run_count, np.int64)
        run_obj = np.repeat(np.arange(len(obj_runs), dtype=np.int64), obj_runs)
        by_chunk = np.argsort(run_gid, kind="stable")
        g_sorted = run_gid[by_chunk]
        g_start = np.searchsorted(g_sorted, np.arange(n_chunks + 1))
        cum = np.cumsum(run_count[by_chunk]) - run_count[by_chunk]
        row0_sorted = cum - cum[g_start[g_sorted]] if len(cum) else cum
        del cum
        frag_local = np.empty(len(run_gid), np.int64)
        frag_local[by_chunk] = np.arange(len(run_gid)) - g_start[g_sorted]
        row0 = np.empty(len(run_gid), np.int64)
        row0[by_chunk] = row0_sorted
        del g_sorted
        br = np.flatnonzero(run_obj[1:] == run_obj[:-1])
        br_src = np.where(rank[run_gid[br]] <= rank[run_gid[br + 1]], run_gid[br], run_gid[br + 1])
        br_order = br[np.argsort(br_src, kind="stable")]
        br_start = np.searchsorted(np.sort(br_src), np.arange(n_chunks + 1))
        return cls(run_gid, run_count, run_obj, by_chunk, g_start, row0_sorted, row0, frag_local, br_order, br_start)

    def fragments(self, gid: int) -> tuple[np.ndarray, np.ndarray]:
        """(first row, row count) of every fragment of chunk ``gid``."""
        a, b = self.g_start[gid], self.g_start[gid + 1]
        return self.row0_sorted[a:b], self.run_count[self.by_chunk[a:b]]

    def bridges(self, gid: int, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chunk coords (M, 2, ndim), chunk-local vertex (M, 2)) of the bridge links filed under ``gid``."""
        b = self.br_order[self.br_start[gid]:self.br_start[gid + 1]]
        ends_gid = np.stack([self.run_gid[b], self.run_gid[b + 1]], axis=1)
        ends_vi = np.stack([self.row0[b] + self.run_count[b] - 1, self.row0[b + 1]], axis=1)
        return coords[ends_gid].reshape(len(b), 2, coords.shape[1]), ends_vi

    def for_chunks(self, gids: np.ndarray, coords: np.ndarray) -> dict[str, np.ndarray]:
        """What a task writing chunks ``gids`` needs of the runs (see :func:`chunk_slice`)."""
        frags = [self.fragments(g) for g in gids.tolist()]
        links = [self.bridges(g, coords) for g in gids.tolist()]
        ndim = coords.shape[1]
        return {k: _narrow(v) for k, v in {  # task arguments: half the bytes while int32 holds them
            "frag_first": np.concatenate([f for f, _ in frags] or [np.zeros(0, np.int64)]),
            "frag_count": np.concatenate([c for _, c in frags] or [np.zeros(0, np.int64)]),
            "frag_off": np.cumsum([0] + [len(f) for f, _ in frags]).astype(np.int64),
            "bridge_chunks": np.concatenate([c for c, _ in links] or [np.zeros((0, 2, ndim), np.int64)]),
            "bridge_vi": np.concatenate([v for _, v in links] or [np.zeros((0, 2), np.int64)]),
            "bridge_off": np.cumsum([0] + [len(v) for _, v in links]).astype(np.int64),
        }.items()}


def _narrow(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) if not a.size or (a.min() >= -(1 << 31) and a.max() < 1 << 31) else a


def path_links(level: LevelWriter, ndim: int) -> LinkWriter:
    """The links of a paths write: bridges between consecutive runs only, no all-zero offsets array and no
    link fragments (as 0.9.2 files them)."""
    return LinkWriter(level, ndim=ndim, width=2, intra_array=False, link_fragments=False)


def graph_links(level: LevelWriter, ndim: int, width: int, attribute_names: Iterable[str]) -> LinkWriter:
    """The links of a graph, skeleton or mesh: every record, the all-zero offsets array and link fragments."""
    return LinkWriter(level, ndim=ndim, width=width, attribute_names=list(attribute_names), intra_array=True,
                      link_fragments=True)


def chunk_slice(work: dict[str, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Chunk ``k``'s (fragment first rows, counts, bridge chunks, bridge vertices) of :meth:`PathRuns.for_chunks`."""
    f0, f1 = work["frag_off"][k], work["frag_off"][k + 1]
    b0, b1 = work["bridge_off"][k], work["bridge_off"][k + 1]
    first, count, bridge_chunks, bridge_vi = (a.astype(np.int64) for a in (
        work["frag_first"][f0:f1], work["frag_count"][f0:f1], work["bridge_chunks"][b0:b1], work["bridge_vi"][b0:b1]))
    return first, count, bridge_chunks, bridge_vi


async def put_path_chunk(level: LevelWriter, links: LinkWriter, frag_attrs: FragmentAttributes, chunk: np.ndarray,
                         frag_first: np.ndarray, frag_count: np.ndarray, pos: np.ndarray,
                         attrs: dict[str, np.ndarray], bridge_chunks: np.ndarray, bridge_vi: np.ndarray) -> None:
    """One chunk of a paths write: its rows (stored in input order, one fragment per run), fragment
    attributes and the bridge links filed under it."""
    n, f = len(pos), len(frag_count)
    part = Partition(np.arange(n, dtype=np.int64), np.asarray(chunk, np.int64).reshape(1, -1),
                     np.array([0, n], np.int64), np.zeros(f, np.int64), frag_first, frag_count,
                     np.arange(f, dtype=np.int64))

    def fragments_of(k: int) -> FragmentIndex:
        return FragmentIndex.from_ranges(frag_first, frag_count)

    await put_rows(level, part, pos, attrs, fragments_of)
    await frag_attrs.put(level, chunk, f)
    await links.add_deferred(bridge_chunks, bridge_vi)  # the caller flushes them before a shard flush


async def put_no_rows(level: LevelWriter, ndim: int, dtype: np.dtype,
                      attr_schema: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
    """No vertex at all: declare the arrays anyway, as the in-memory writers do."""
    await put_rows(level, partition(np.zeros((0, ndim), np.int64), np.zeros(0, np.int64)),
                   np.zeros((0, ndim), dtype),
                   {k: np.zeros((0, *rs), adt) for k, (adt, rs) in attr_schema.items()}, None)


async def put_tables(writer: StoreWriter, obj_attrs: dict[str, np.ndarray], group_rows: list[np.ndarray],
                     grp_attrs: dict[str, np.ndarray], compression: str | None) -> None:
    """Per-object attributes and groups; their codec follows the compressor, as the in-memory writers'."""
    codec = CellCodec.for_writing(compression)
    await put_object_attributes(writer, 0, obj_attrs, codec)
    await put_groups(writer, group_rows, grp_attrs, codec)


async def put_path_index(writer: StoreWriter, runs: PathRuns, coords: np.ndarray, num: int, ndim: int, *,
                         compression: str | None,
                         layout: str) -> None:
    """The object index of a paths write: object ``i``'s manifest lists its runs in path order."""
    await put_object_index(writer, 0, runs.run_obj, coords[runs.run_gid], runs.frag_local,
                           np.arange(num, dtype=np.int64), ndim, compression=compression, layout=layout)


# ----------------------------------------------------------------------------- graphs, skeletons, meshes


@dataclass
class ConnectedChunk:
    """What writing one chunk of a graph/skeleton/mesh tells the rest of the write."""

    frag_keys: np.ndarray  # (F,) object id of each fragment, in stored order
    local: np.ndarray  # (n,) chunk-local stored row of each input row
    starts: np.ndarray | None  # (n,) skeletons: whether each input row begins a fragment


async def put_connected_chunk(level: LevelWriter, frag_attrs: FragmentAttributes, level_layout: LevelLayout,
                              chunk: np.ndarray,
                              pos: np.ndarray, oids: np.ndarray, attrs: dict[str, np.ndarray],
                              skeleton: bool) -> ConnectedChunk:
    """One chunk's rows (input order) stored one fragment per object, ids ascending."""
    lay = Layout.by_key(level_layout, pos, oids)
    part = lay.part
    starts = None
    if skeleton:
        starts = np.zeros(len(pos), bool)
        starts[part.order[lay.frag_first[part.frag_counts > 0]]] = True
    await put_rows(level, part, pos, attrs, lay.fragments_of)
    await frag_attrs.put(level, chunk, len(part.frag_keys))
    return ConnectedChunk(np.asarray(part.frag_keys, np.int64), lay.local, starts)


async def put_link_records(links: LinkWriter, ends_chunks: np.ndarray, vi: np.ndarray,
                           link_attrs: dict[str, np.ndarray], child_starts: np.ndarray | None) -> None:
    """Link records filed under one chunk: endpoints' chunk coords (M, L, ndim) and chunk-local rows (M, L).

    ``child_starts`` (skeletons): whether each record's child begins a fragment.  A (child, parent) edge
    the reader implies -- parent stored right before its child in one fragment -- is not stored.
    """
    if child_starts is not None:
        same = np.all(ends_chunks[:, 0] == ends_chunks[:, 1], axis=1)
        keep = ~(same & (vi[:, 0] == vi[:, 1] + 1) & ~child_starts)
        ends_chunks, vi = ends_chunks[keep], vi[keep]
        link_attrs = {k: v[keep] for k, v in link_attrs.items()}
    if len(vi):
        await links.add(place_records(ends_chunks, vi), link_attrs)


async def put_connected_index(writer: StoreWriter, frag_oid: np.ndarray, frag_chunk: np.ndarray,
                              frag_local: np.ndarray, uniq: np.ndarray, chunks: np.ndarray, ndim: int, *,
                              compression: str | None, layout: str) -> None:
    """The object index of a graph/skeleton/mesh write: object ``o``'s manifest lists its fragments in chunk
    C order.  ``frag_chunk``: each fragment's row in ``chunks`` (C order)."""
    frag_object = np.searchsorted(uniq, frag_oid)
    order = np.lexsort((frag_chunk, frag_object))
    await put_object_index(writer, 0, frag_object[order], chunks[frag_chunk[order]], frag_local[order], uniq, ndim,
                           compression=compression, layout=layout)
