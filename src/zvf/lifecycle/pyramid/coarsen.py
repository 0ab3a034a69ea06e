"""One block's coarsening, pure numpy: its source cells in, its target cells, link rows and fragment paths out.

:func:`coarsen_block` turns one block's source cells into its target cells, its ``±1`` link rows (and the
``±N`` ones of finer levels, composed with their ``+(N-1)`` links) and, for objects, the coarse vertex
sequence of every source fragment it saw (stitched into manifests at the commit).

Object geometries follow zarr-vectors 0.9.2's ``per_object`` method: the vertices of the surviving
objects are binned into bins of the source bin times the factor, each occupied bin becomes one centroid
*metavertex* (its own one-row fragment, shared by every object passing through it), an object's coarse
path is the sequence of its metavertices with consecutive repeats dropped, dropped objects keep their id
with an empty manifest.  Beyond the reference, vertex attributes are carried (weighted mean of floats,
weighted mode of integers) and point clouds without object ids are thinned by a seeded uniform subsample
per bin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import FormatError
from ...format.fragments import (
    FragmentIndex,
    encode_fragment_index,
)
from ...format.grid import row_positions
from ...format.keys import format_offsets_name
from ...format.links import encode_ragged_links
from ...write.partition import partition
from .plan import DeepStep, LevelPlan

COARSEN_ROW_BYTES = 512  # index arrays coarsen_block makes per source row (measured ~500 B, points and streamlines)

Cells = dict[str, list[tuple[tuple[int, ...], bytes]]]
"""Encoded cells of a block: array path -> [(chunk coords, payload)]."""


@dataclass
class BlockInput:
    """A block's source cells, decoded: rows of every source chunk in the block, concatenated."""

    block: tuple[int, ...]
    chunks: np.ndarray  # (K, ndim) source chunks
    starts: np.ndarray  # (K + 1,) first row of each chunk
    positions: np.ndarray  # (N, ndim)
    attributes: dict[str, np.ndarray]
    fragments: list[FragmentIndex]
    # object levels: references of surviving objects to the block's fragments
    ref_chunk: np.ndarray | None = None  # (R,) index into ``chunks``
    ref_fragment: np.ndarray | None = None  # (R,) fragment id
    ref_count: np.ndarray | None = None  # (R,) number of references
    # per DeepStep of the job: the ``+(delta-1)`` rows of its fine level in this block
    # (fine chunk (M, ndim), fine row, chunk at the source level (M, ndim), row there)
    deep: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)


@dataclass
class BlockOutput:
    """Everything a block contributes: cells per array and chunk, link rows, fragment paths."""

    cells: dict[str, list[tuple[tuple[int, ...], bytes]]] = field(default_factory=dict)  # path under level -> cells
    up_cells: dict[str, list[tuple[tuple[int, ...], bytes]]] = field(default_factory=dict)  # "+1" family at source
    low_cells: dict[int, Cells] = field(default_factory=dict)  # "+N" (N >= 2) families, per fine level
    vertex_count: int = 0
    links: int = 0
    deep_links: dict[int, int] = field(default_factory=dict)  # N -> "+N" links of this block
    # object levels: coarse path of each referenced source fragment
    seq_chunk: np.ndarray | None = None  # (R, ndim) source chunk of the fragment
    seq_fragment: np.ndarray | None = None  # (R,)
    seq_offsets: np.ndarray | None = None  # (R + 1,)
    seq_coarse_chunk: np.ndarray | None = None  # (S, ndim)
    seq_coarse_index: np.ndarray | None = None  # (S,)

    def add(self, where: Cells, name: str, chunk: np.ndarray, payload: bytes) -> None:
        where.setdefault(name, []).append((tuple(int(c) for c in chunk), payload))


def _little(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, counts) of runs of equal rows in sorted ``keys`` (N, D)."""
    n = keys.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(new)
    return starts, np.diff(np.append(starts, n))


def weighted_mean_or_mode(values: np.ndarray, group: np.ndarray, weights: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group weighted mean (floats) or weighted mode (integers; ties -> smallest value), per channel."""
    flat = values.reshape(len(values), -1)
    out = np.empty((n_groups, flat.shape[1]), dtype=values.dtype)
    wsum = np.bincount(group, weights=weights, minlength=n_groups)
    for c in range(flat.shape[1]):
        col = flat[:, c]
        if values.dtype.kind == "f":
            s = np.bincount(group, weights=weights * col.astype(np.float64), minlength=n_groups)
            out[:, c] = s / np.maximum(wsum, 1e-300)
            continue
        order = np.lexsort((col, group))
        g, v, w = group[order], col[order], weights[order]
        starts, _ = runs(np.stack([g, v.astype(np.int64)], axis=1))
        tot = np.add.reduceat(w, starts) if len(starts) else w[:0]
        pg, pv = g[starts], v[starts]
        best = np.lexsort((pv, -tot, pg))  # per group: heaviest first, then smallest value
        first = np.ones(len(best), dtype=bool)
        first[1:] = pg[best][1:] != pg[best][:-1]
        out[pg[best][first], c] = pv[best][first]
    return out.reshape((n_groups, *values.shape[1:]))


def coarsen_block(plan: LevelPlan, data: BlockInput, *, seed: int, objects: bool,
                  deep: tuple[DeepStep, ...] = ()) -> BlockOutput:
    """The target cells of one block (see the module docstring); no I/O.

    ``deep``: the ``+N``/``-N`` links (N >= 2) ending at the target level,
    composed from ``data.deep`` and this step's parents.
    """
    out = BlockOutput()
    n, nd = data.positions.shape
    if n == 0:
        return out
    bin_arr = np.asarray(plan.bin, np.float64)
    blk = np.asarray(data.block, np.int64) * np.asarray(plan.block)  # block origin in root bins
    bins_per_block = np.asarray(plan.block) // np.asarray(plan.bin_units)
    chunks_per_block = np.asarray(plan.block) // np.asarray(plan.chunk_units)
    b0 = blk // np.asarray(plan.bin_units)
    c0 = blk // np.asarray(plan.chunk_units)
    pos64 = data.positions.astype(np.float64)
    # float rounding at a block face must not move a row into another block's bin
    bins = np.clip(np.floor(pos64 / bin_arr).astype(np.int64), b0, b0 + bins_per_block - 1)
    bin_key = np.ravel_multi_index(tuple((bins - b0).T), tuple(bins_per_block))
    row_chunk = np.repeat(np.arange(len(data.chunks)), np.diff(data.starts))
    row_local = np.arange(n) - data.starts[row_chunk]

    if objects:
        weight = np.zeros(n, dtype=np.float64)
        assert data.ref_chunk is not None and data.ref_fragment is not None and data.ref_count is not None
        for k, fi in enumerate(data.fragments):
            sel = np.flatnonzero(data.ref_chunk == k)
            if not sel.size:
                continue
            rows, lens = fi.gather(data.ref_fragment[sel], key=f"{plan.source}/vertex_fragments")
            weight += np.bincount(rows + data.starts[k], weights=np.repeat(data.ref_count[sel], lens), minlength=n)
        uniq, inv = np.unique(bin_key, return_inverse=True)
        wsum = np.bincount(inv, weights=weight, minlength=len(uniq))
        live = wsum > 0
        mv_of_bin = np.full(len(uniq), -1, np.int64)
        mv_of_bin[live] = np.arange(int(live.sum()))
        n_mv = int(live.sum())
        cent = np.empty((n_mv, nd), np.float32)
        for d in range(nd):
            cent[:, d] = np.bincount(inv, weights=weight * pos64[:, d], minlength=len(uniq))[live] / wsum[live]
        # the chunk holding each metavertex; one that rounded onto its block's far face is moved back by
        # an ulp, into the chunk its block owns
        cent, mv_chunk = plan.target_layout(objects=True).settle(cent, c0, c0 + chunks_per_block - 1)
        mv_key = uniq[live]
        order = np.lexsort((mv_key, *mv_chunk.T[::-1]))  # chunk C-order, then bin
        rank = np.empty(n_mv, np.int64)
        rank[order] = np.arange(n_mv)
        row_mv = mv_of_bin[inv]  # -1: the row's bin has no surviving object
        mv_vals = {name: weighted_mean_or_mode(a, inv, weight, len(uniq))[live] for name, a in data.attributes.items()}
        sorted_chunks = mv_chunk[order]
        starts, counts = runs(sorted_chunks)
        mv_local = np.empty(n_mv, np.int64)
        for s, c in zip(starts.tolist(), counts.tolist()):
            mv_local[order[s:s + c]] = np.arange(c)
            ch = sorted_chunks[s]
            idx = order[s:s + c]
            out.add(out.cells, "vertices", ch, _little(cent[idx]))
            out.add(out.cells, "vertex_fragments", ch, encode_fragment_index(
                FragmentIndex.from_ranges(np.arange(c), np.ones(c, np.int64))))
            for name, vals in mv_vals.items():
                out.add(out.cells, f"vertex_attributes/{name}", ch, _little(vals[idx]))
        out.vertex_count = n_mv
        if n_mv:
            parent_chunk = np.where(row_mv[:, None] >= 0, mv_chunk[np.maximum(row_mv, 0)], 0)
            parent_local = np.where(row_mv >= 0, mv_local[np.maximum(row_mv, 0)], -1)
        else:  # every row here belongs to dropped objects only
            parent_chunk, parent_local = np.zeros((n, nd), np.int64), np.full(n, -1, np.int64)
        # the coarse path of every referenced fragment, consecutive repeats dropped
        seq_c, seq_i, offs = [], [], []
        rc, rf = [], []
        for k, fi in enumerate(data.fragments):
            sel = np.flatnonzero(data.ref_chunk == k)
            if not sel.size:
                continue
            frags = data.ref_fragment[sel]
            rows, lens = fi.gather(frags, key=f"{plan.source}/vertex_fragments")
            g = rows + data.starts[k]
            pc, pl = parent_chunk[g], parent_local[g]
            fid = np.repeat(np.arange(len(frags)), lens)
            keep = np.ones(len(g), bool)
            keep[1:] = (fid[1:] != fid[:-1]) | (pl[1:] != pl[:-1]) | np.any(pc[1:] != pc[:-1], axis=1)
            seq_c.append(pc[keep])
            seq_i.append(pl[keep])
            offs.append(np.bincount(fid[keep], minlength=len(frags)))
            rc.append(np.repeat(data.chunks[k][None, :], len(frags), axis=0))
            rf.append(frags)
        if rf:
            out.seq_chunk = np.concatenate(rc)
            out.seq_fragment = np.concatenate(rf)
            out.seq_offsets = np.concatenate(([0], np.cumsum(np.concatenate(offs)))).astype(np.int64)
            out.seq_coarse_chunk = np.concatenate(seq_c)
            out.seq_coarse_index = np.concatenate(seq_i)
    else:
        # point cloud: keep a seeded uniform sample of each target bin
        per_bin = float(np.prod(plan.coarsen)) * plan.sparsity
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, plan.target]
                                    + [int(b) & 0xFFFFFFFF for b in data.block])
        draw = rng.random(n)
        order = np.lexsort((draw, bin_key))
        sk = bin_key[order]
        starts, counts = runs(sk[:, None])
        want = np.maximum(1, np.ceil(counts / per_bin)).astype(np.int64)
        rank = np.arange(n) - np.repeat(starts, counts)
        kept = np.sort(order[rank < np.repeat(want, counts)])
        first_kept_of_bin = order[starts]  # rank 0 of each bin is always kept
        # each kept row in the chunk that holds it, rows sorted by, and one range fragment per, level-0 bin
        # of the chunk: the target's layout, which readers of point levels (0.9.2's included) expect
        layout = plan.target_layout(objects=False)
        kchunk, key = layout.bin_of(data.positions[kept])
        stray = np.any((kchunk < c0) | (kchunk >= c0 + chunks_per_block), axis=1)
        if stray.any():  # its source chunk is in this block, so its bin is unless the source is misfiled
            raise FormatError(f"{plan.source}/vertices: {int(stray.sum())} point(s) of block {list(data.block)} "
                              "lie outside the chunk they are filed under (zvf validate --level 5 names them)")
        part = partition(kchunk, key, all_keys=layout.bins_in_chunk)
        where = np.empty(len(kept), np.int64)  # sorted row of each kept row
        where[part.order] = np.arange(len(kept))
        kpos = data.positions[kept][part.order]
        for k, ch in enumerate(part.chunks.tolist()):
            lo, hi = int(part.chunk_starts[k]), int(part.chunk_starts[k + 1])
            s = part.chunk_fragments(k)
            out.add(out.cells, "vertices", ch, _little(kpos[lo:hi]))
            out.add(out.cells, "vertex_fragments", ch, encode_fragment_index(
                FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])))
            for name, a in data.attributes.items():
                out.add(out.cells, f"vertex_attributes/{name}", ch, _little(a[kept][part.order][lo:hi]))
        out.vertex_count = len(kept)
        # parent of every source row: the first kept row of its bin
        kept_pos = np.full(n, -1, np.int64)
        kept_pos[kept] = np.arange(len(kept))
        bin_slot = np.repeat(np.arange(len(starts)), counts)
        rep = kept_pos[first_kept_of_bin][bin_slot]  # index into kept, in ``order``
        rows_sorted = where[rep]
        kc = part.chunks[np.searchsorted(part.chunk_starts, rows_sorted, side="right") - 1]
        parent_local_sorted = rows_sorted - part.chunk_starts[np.searchsorted(part.chunk_starts, rows_sorted,
                                                                               side="right") - 1]
        parent_chunk = np.empty((n, nd), np.int64)
        parent_local = np.empty(n, np.int64)
        parent_chunk[order] = kc
        parent_local[order] = parent_local_sorted
    out.links = int((parent_local >= 0).sum())
    _link_cells(plan, out, data.chunks[row_chunk], row_local, parent_chunk, parent_local)
    for step, (fc, fl, mc, ml) in zip(deep, data.deep):
        # a fine vertex's parent here is the parent of its ancestor at the source level (same block)
        at = row_positions(data.chunks, mc) if len(mc) else np.zeros(0, np.int64)
        bad = (np.any(data.chunks[at] != mc, axis=1) | (ml >= np.diff(data.starts)[at])) if len(mc) \
            else at.astype(bool)
        if bad.any():
            raise FormatError(f"{step.level}/links/+{step.delta - 1}: a link names a vertex that "
                              f"{plan.source}/vertices does not hold")
        row = data.starts[at] + ml
        ok = parent_local[row] >= 0
        out.deep_links[step.delta] = int(ok.sum())
        _link_cells(plan, out, fc, fl, parent_chunk[row], parent_local[row], delta=step.delta,
                    fine_scale=step.scale, up=out.low_cells.setdefault(step.level, {}))
    return out


def _link_cells(plan: LevelPlan, out: BlockOutput, fine_chunk: np.ndarray, fine_local: np.ndarray,
                coarse_chunk: np.ndarray, coarse_local: np.ndarray, *, delta: int = 1,
                fine_scale: tuple[int, ...] | None = None, up: Cells | None = None) -> None:
    """``+delta`` rows at the fine chunk (into ``up``, default the source level's) and ``-delta`` rows at
    the coarse chunk, filed by offsets from the anchor of the other level's grid."""
    ok = coarse_local >= 0
    fine_chunk, fine_local = fine_chunk[ok], fine_local[ok]
    coarse_chunk, coarse_local = coarse_chunk[ok], coarse_local[ok]
    s = np.asarray(plan.src_scale if fine_scale is None else fine_scale)
    t = np.asarray(plan.scale)
    for name, src_c, src_i, dst_c, dst_i, anchor in (
        (f"+{delta}", fine_chunk, fine_local, coarse_chunk, coarse_local, np.floor_divide(fine_chunk * s, t)),
        (f"-{delta}", coarse_chunk, coarse_local, fine_chunk, fine_local, np.floor_divide(coarse_chunk * t, s)),
    ):
        off = dst_c - anchor
        key = np.concatenate([src_c, off], axis=1)
        order = np.lexsort(key.T[::-1])  # stable: fine row order inside a cell
        starts, counts = runs(key[order])
        where = (out.up_cells if up is None else up) if name[0] == "+" else out.cells
        for a, c in zip(starts.tolist(), counts.tolist()):
            idx = order[a:a + c]
            rows = np.stack([src_i[idx], dst_i[idx]], axis=1)
            ch = src_c[idx[0]]
            offs = off[idx[0]]
            out.add(where, f"links/{name}/{format_offsets_name([offs.tolist()])}", ch, encode_ragged_links(rows))
