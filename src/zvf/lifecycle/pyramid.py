"""Multi-resolution pyramids: coarser levels built chunk block by chunk block.

One coarsening step (level ``s`` -> ``s + 1``) is split so that an engine
can map its work (see docs/LIFECYCLE.md):

* :func:`plan_level` (pure) fixes the target grids and cuts the source
  level into *blocks*: the smallest boxes made of whole source chunks,
  whole target chunks and whole target bins.  Every target bin, every
  target chunk and every cross-level link cell belongs to exactly one
  block, so blocks never share an output and memory is one block's data.
* :func:`coarsen_block` (pure numpy) turns one block's source cells into
  its target cells, its ``±1`` link rows (and the ``±N`` ones of finer
  levels, composed with their ``+(N-1)`` links) and, for objects, the
  coarse vertex sequence of every source fragment it saw.
* :func:`assemble_manifests` (pure, the small commit) stitches those
  sequences into one manifest per object, in the source manifest order.

Between them sits the map step, one code path for every engine:
:func:`plan_blocks` cuts a step into picklable :class:`BlockTask` s sharing
one :class:`StepJob`; :func:`run_block_task` (a store *spec*: URL + storage
options) fetches, coarsens and uploads blocks and returns small
:class:`BlockSummary` s; the driver commits from those alone.  The serial
build runs the same blocks in process; ``zvf.dask.build_pyramid`` maps
:func:`run_block_task` over Dask workers (``map_blocks``).

Object geometries follow zarr-vectors 0.9.2's ``per_object`` method: the
vertices of the surviving objects are binned into bins of the source bin
times the factor, each occupied bin becomes one centroid *metavertex* (its
own one-row fragment, shared by every object passing through it), an
object's coarse path is the sequence of its metavertices with consecutive
repeats dropped, dropped objects keep their id with an empty manifest.
Beyond the reference, vertex attributes are carried (weighted mean of
floats, weighted mode of integers), groups are copied, and point clouds
without object ids are thinned by a seeded uniform subsample per bin.

The store is only changed where readers do not look until the end: new
levels and link families go up first, the root document (which lists the
levels) is replaced last, with a compare-and-swap on the root read under the
store's lock (:mod:`zvf.write.lock`, shared with every writer).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import functools
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import anyio
import numpy as np

from ..errors import FormatError, InvalidArgumentError
from ..format import builders, parse
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.fragments import (
    FragmentIndex,
    decode_fragment_index,
    encode_fragment_index,
)
from ..format.grid import row_positions
from ..format.keys import format_offsets_name, parse_offsets_name
from ..format.layout import LevelLayout
from ..format.links import decode_ragged_links, encode_ragged_links
from ..format.manifest import ManifestTable
from ..io.executor import Executor
from ..io.options import StorageOptions
from ..io.store import StoreHandle, Target, open_store
from ..read import load
from ..read.cells import CellArray, rows_from_payload
from ..read.dataset import DatasetReader
from ..read.points import attribute_layout, attribute_rows
from ..write.engine import ByteBudget, StoreWriter, empty_group
from ..write.level import LevelWriter
from ..write.lock import LEASE, StoreLock
from ..write.object_index import (
    ZSTD,
    put_groups,
    put_object_attributes,
    put_object_index,
)
from ..write.partition import partition
from ..write.publish import Publication

STORAGES = ("explicit", "implicit", "none")
BLOCKS_IN_FLIGHT = 8  # blocks fetched/coarsened at once: hides request latency
BLOCK_BYTES = 256 << 20  # estimated memory of the blocks in flight (a larger block runs alone): bounds the build
COARSEN_ROW_BYTES = 512  # index arrays coarsen_block makes per source row (measured ~500 B, points and streamlines)
STRATEGIES = ("random",)
CAPS_OBJECTS = "preserved_object_ids"
CAP_SHARED = "shared_fragments"
CAP_LINKS = "multiscale_links"
RECORD = "zvf_pyramid"  # a coarse level's group attribute: how zvf built it (see build_record)

Factors = Sequence[tuple[int | Sequence[int], float]]
"""``build_pyramid``'s ``factors``: per new level, (bin coarsening, one per axis or one for all; sparsity)."""
ChunkScales = Sequence[int | Sequence[int]]
"""``build_pyramid``'s ``chunk_scale_factors``: per new level, the chunk edge multiplier (per axis or for all)."""
Cells = dict[str, list[tuple[tuple[int, ...], bytes]]]
"""Encoded cells of a block: array path -> [(chunk coords, payload)]."""
LevelGrid = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""A built level's chunk grid: (chunk scale, chunk edge in root bins, grid origin, grid shape)."""



class BuildProgress(TypedDict):
    """What ``build_pyramid(progress=...)`` is called with as each block's cells are queued."""

    level: int
    blocks: int
    total_blocks: int
    vertices: int


class LevelSummary(TypedDict):
    """One built level: its vertices and blocks; links of finer levels (``cross_level_depth >= 2``) per N,
    and for object geometries the objects of the source and those kept."""

    level: int
    vertex_count: int
    blocks: int
    deep_links: NotRequired[dict[int, int]]
    objects: NotRequired[int]
    objects_kept: NotRequired[int]


class PyramidSummary(TypedDict):
    """What ``build_pyramid`` returns: a summary per level, the link settings, the requests it made and
    the root's ``zarr_vectors`` attributes as published."""

    levels: list[LevelSummary]
    cross_level_storage: str
    cross_level_depth: int
    requests: dict[str, int]
    root: dict[str, object]  # JSON values


class PyramidSpec(TypedDict):
    """The ``build_pyramid`` keywords that rebuild a store's levels as they are (:func:`pyramid_spec`)."""

    factors: list[tuple[list[int], float]]
    chunk_scale_factors: list[list[int]]
    seed: int
    cross_level_depth: int
    cross_level_storage: str


# --------------------------------------------------------------------------- planning (pure)


@dataclass(frozen=True)
class LevelPlan:
    """One coarsening step: grids of both levels and the block size, in root-bin units."""

    source: int  # the finer level this step reads
    coarsen: tuple[int, ...]  # bin edge ratio target / source, per axis
    sparsity: float  # object sparsity factor: about one object in this many is kept (1: all)
    src_chunk: tuple[float, ...]  # source chunk edge, in coordinates
    src_bin: tuple[float, ...]  # source bin edge, in coordinates
    chunk: tuple[float, ...]  # target chunk edge, in coordinates
    bin: tuple[float, ...]  # target bin edge, in coordinates
    src_scale: tuple[int, ...]  # chunk edge / root chunk edge, per axis
    scale: tuple[int, ...]
    block: tuple[int, ...]  # block edge in root bins
    src_chunk_units: tuple[int, ...]
    chunk_units: tuple[int, ...]
    bin_units: tuple[int, ...]
    chunk_override: tuple[float, ...] | None  # level chunk_shape when it differs from the root's
    root_chunk: tuple[float, ...]
    root_bin: tuple[float, ...]  # level 0's bin: a point level's rows are filed and fragmented by it

    @property
    def target(self) -> int:
        return self.source + 1

    def target_layout(self, objects: bool) -> LevelLayout:
        """Where the target level files its vertices: metavertices by chunk, points by level 0's bins."""
        if objects:
            return LevelLayout.for_objects(self.target, self.chunk, self.root_chunk)
        return LevelLayout.for_points(self.target, self.chunk, self.root_chunk, self.root_bin)

    @property
    def ndim(self) -> int:
        return len(self.chunk)

    def block_of(self, src_chunks: np.ndarray) -> np.ndarray:
        """Block coords of source chunks (floor division: negative coords too)."""
        blocks: np.ndarray = np.floor_divide(src_chunks * np.asarray(self.src_chunk_units), np.asarray(self.block))
        return blocks

    def target_grid(self, src_origin: Sequence[int], src_shape: Sequence[int]
                    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(origin, shape) of the target chunk grid covering the source grid exactly."""
        o = np.asarray(src_origin, np.int64)
        top = o + np.asarray(src_shape, np.int64) - 1
        s, t = np.asarray(self.src_scale), np.asarray(self.scale)
        lo, hi = np.floor_divide(o * s, t), np.floor_divide(top * s, t)
        return tuple(int(v) for v in lo), tuple(int(v) for v in hi - lo + 1)


def _whole(values: object, name: str, ndim: int) -> tuple[int, ...]:
    """Positive integers per axis from an int or a sequence."""
    vals = [values] * ndim if np.isscalar(values) else list(values)  # type: ignore[call-overload]  # checked below
    if len(vals) != ndim:
        raise InvalidArgumentError(f"{name}: need one value or {ndim}, got {values!r}")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or v < 1 or v != int(v):
            raise InvalidArgumentError(f"{name}: must be whole numbers >= 1 (nested grids), got {values!r}")
        out.append(int(v))
    return tuple(out)


def parse_factors(factors: Factors, chunk_scale_factors: ChunkScales | None,
                  ndim: int) -> list[tuple[tuple[int, ...], float, tuple[int, ...]]]:
    """(coarsen per axis, sparsity, chunk scale per axis) per new level, checked."""
    if isinstance(factors, (str, bytes)) or not hasattr(factors, "__len__") or len(factors) == 0:
        raise InvalidArgumentError(f"factors: need a non-empty list of (coarsen, sparsity) pairs, got {factors!r}")
    if chunk_scale_factors is not None and len(chunk_scale_factors) != len(factors):
        raise InvalidArgumentError(
            f"chunk_scale_factors: {len(chunk_scale_factors)} entries for {len(factors)} factors")
    out = []
    for i, fac in enumerate(factors):
        if not isinstance(fac, (tuple, list)) or len(fac) != 2:
            raise InvalidArgumentError(f"factors[{i}]: must be a (coarsen, sparsity) pair, got {fac!r}")
        coarsen = _whole(fac[0], f"factors[{i}][0] (coarsen)", ndim)
        try:
            sparsity = float(fac[1])
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"factors[{i}][1] (sparsity): must be a number >= 1, got {fac[1]!r}") from None
        if not math.isfinite(sparsity) or sparsity < 1:
            raise InvalidArgumentError(f"factors[{i}][1] (sparsity): must be a number >= 1, got {fac[1]!r}")
        scale = _whole(1 if chunk_scale_factors is None else chunk_scale_factors[i],
                       f"chunk_scale_factors[{i}]", ndim)
        out.append((coarsen, sparsity, scale))
    return out


def plan_level(root: md.RootMeta, source: int, src_chunk: Sequence[float], src_bin: Sequence[float],
               coarsen: tuple[int, ...], sparsity: float, scale: tuple[int, ...]) -> LevelPlan:
    """Target grids of one step; everything is a whole multiple of the root bin."""
    unit = np.asarray(root.bin_shape, np.float64)
    root_chunk = np.asarray(root.chunk_shape, np.float64)

    def units(shape: Sequence[float]) -> np.ndarray:
        return np.round(np.asarray(shape, np.float64) / unit).astype(np.int64)

    src_units = units(src_chunk)
    chunk = tuple(float(c) * s for c, s in zip(src_chunk, scale))
    binv = tuple(float(b) * c for b, c in zip(src_bin, coarsen))
    chunk_units, bin_units = units(chunk), units(binv)
    block = tuple(math.lcm(int(a), int(b), int(c)) for a, b, c in zip(src_units, chunk_units, bin_units))
    src_scale = tuple(round(c / r) for c, r in zip(src_chunk, root_chunk))
    tscale = tuple(round(c / r) for c, r in zip(chunk, root_chunk))
    override = None if all(abs(c - r) < 1e-9 for c, r in zip(chunk, root.chunk_shape)) else chunk
    return LevelPlan(source, tuple(coarsen), float(sparsity), tuple(float(c) for c in src_chunk),
                     tuple(float(b) for b in src_bin), chunk, binv, src_scale, tscale, block,
                     tuple(int(v) for v in src_units), tuple(int(v) for v in chunk_units),
                     tuple(int(v) for v in bin_units), override, tuple(float(c) for c in root.chunk_shape),
                     tuple(float(b) for b in root.bin_shape))


def kept_rows(n: int, sparsity: float, seed: int) -> np.ndarray:
    """Object rows that survive: ``round(n / sparsity)`` drawn uniformly (0.9.2's ``random``, same draws)."""
    if sparsity <= 1.0 or n <= 1:
        return np.arange(n, dtype=np.int64)
    count = max(1, round(n / sparsity))
    if count >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=count, replace=False)).astype(np.int64)


# --------------------------------------------------------------------------- one block (pure numpy)


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


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
        starts, _ = _runs(np.stack([g, v.astype(np.int64)], axis=1))
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
        starts, counts = _runs(sorted_chunks)
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
        starts, counts = _runs(sk[:, None])
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
        starts, counts = _runs(key[order])
        where = (out.up_cells if up is None else up) if name[0] == "+" else out.cells
        for a, c in zip(starts.tolist(), counts.tolist()):
            idx = order[a:a + c]
            rows = np.stack([src_i[idx], dst_i[idx]], axis=1)
            ch = src_c[idx[0]]
            offs = off[idx[0]]
            out.add(where, f"links/{name}/{format_offsets_name([offs.tolist()])}", ch, encode_ragged_links(rows))


# --------------------------------------------------------------------------- commit (pure)


def assemble_manifests(table: ManifestTable, kept: np.ndarray, outputs: Sequence[BlockOutput | BlockSummary],
                       ndim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(object_row, coords, fragment) of every kept object's coarse manifest, in source manifest order.

    ``table`` is the source ManifestTable; each reference's coarse path comes
    from the block that saw its fragment; repeats across fragment borders go.
    """
    parts = [o for o in outputs if o.seq_fragment is not None and len(o.seq_fragment)]
    seq_chunk = [o.seq_chunk for o in parts if o.seq_chunk is not None]
    seq_fragment = [o.seq_fragment for o in parts if o.seq_fragment is not None]
    seq_offsets = [o.seq_offsets for o in parts if o.seq_offsets is not None]
    seq_coarse_chunk = [o.seq_coarse_chunk for o in parts if o.seq_coarse_chunk is not None]
    seq_coarse_index = [o.seq_coarse_index for o in parts if o.seq_coarse_index is not None]
    if not parts:
        z = np.zeros(0, np.int64)
        return z, np.zeros((0, ndim), np.int64), z
    view_dt = np.dtype((np.void, 8 * (ndim + 1)))

    def packed(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray((a + (1 << 62)).astype(">u8")).view(view_dt).ravel()  # big-endian = lexicographic

    # temporaries go as soon as they are used: this runs once over every reference of the level
    keys = np.concatenate([np.concatenate(seq_chunk), np.concatenate(seq_fragment)[:, None]], axis=1)
    korder = np.lexsort(keys.T[::-1])
    skeys = packed(keys[korder])
    del keys
    lens = np.concatenate([np.diff(offsets) for offsets in seq_offsets])
    cchunk = np.concatenate(seq_coarse_chunk)
    cidx = np.concatenate(seq_coarse_index)

    base = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)

    is_kept = np.zeros(table.num_objects, bool)
    is_kept[kept] = True
    sel = np.flatnonzero(is_kept[table.object_row])
    # binary search of each reference among the fragment keys (row-wise lexicographic)
    pos = np.searchsorted(skeys, packed(np.concatenate([table.coords[sel], table.fragment[sel][:, None]], axis=1)))
    del skeys
    hit = korder[np.minimum(pos, len(korder) - 1)]
    rlen = lens[hit]
    total = int(rlen.sum())
    gather = np.repeat(base[hit], rlen) + (np.arange(total) - np.repeat(np.cumsum(rlen) - rlen, rlen))
    obj = np.repeat(table.object_row[sel], rlen)
    cc, ci = cchunk[gather], cidx[gather]
    keep = np.ones(total, bool)
    keep[1:] = (obj[1:] != obj[:-1]) | (ci[1:] != ci[:-1]) | np.any(cc[1:] != cc[:-1], axis=1)
    return obj[keep], cc[keep], ci[keep]


# --------------------------------------------------------------------------- I/O


class _PyramidWriter(StoreWriter):
    """A StoreWriter adding levels to a published store through a publication (the caller holds the lock):
    cells first, the root by compare-and-swap, then the documents (:mod:`zvf.write.publish`).

    Without a publication it is a block task's cells-only writer (``taken``: the families kept versions use).
    """

    def __init__(self, executor: Executor, publication: Publication | None = None, *,
                 taken: Mapping[str, Iterable[str]] | None = None, max_inflight_bytes: int = 256 << 20):
        super().__init__(executor, publication=publication, taken=taken, max_inflight_bytes=max_inflight_bytes)
        self.new_root: dict[str, Any] | None = None
        self.documents: dict[str, dict[str, Any]] = {}  # every document this build writes (the section names them)

    def _committing(self) -> Publication:
        """The publication this build commits through (a block task's writer has none and never commits)."""
        if self.publication is None:
            raise RuntimeError("a block task's writer has no publication to commit through")
        return self.publication

    def add_document(self, key: str, doc: dict[str, Any], *, stage: int) -> None:
        super().add_document(key, doc, stage=stage)
        self.documents[key] = doc

    async def _claim(self) -> None:
        """Nothing to claim: the caller holds the store's lock."""

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Every node document of the new version: the base's and this build's (as published)."""
        built = {k[:-len("/zarr.json")]: d for k, d in self.documents.items()}
        pub = self._committing()
        return {**pub.base_docs, **pub.patched(built)}

    async def flush(self) -> None:
        """Wait for every queued cell; the documents written so far become what this build's own reads see
        (from memory: nothing is on disk before the root names it)."""
        async with self._budget._cond:
            while self._budget.used and self._error is None:
                await self._budget._cond.wait()
        if self._error is not None:
            raise self._error
        if self.publication is not None:
            for key, doc in self.documents.items():  # arrays block tasks elsewhere wrote: the family they chose
                if doc.get("node_type") == "array":
                    self.publication.family(key[:-len("/zarr.json")], len(doc.get("shape") or ()))
            seed_section(self.ex, self.nodes())

    def level_doc(self, level: int) -> dict[str, Any]:
        return self.documents[f"{level}/zarr.json"]

    async def _publish(self) -> None:
        await self.flush()
        if self.new_root is not None:
            await self._committing().commit(self.nodes(), self.new_root)


def seed_section(ex: Executor, nodes: dict[str, dict[str, Any]]) -> None:
    """Let this executor's loads answer documents and listings from ``nodes`` (the version being built)."""
    ex.put_cached(load.SECTION, "zarr.json", nodes, nbytes=len(json.dumps(nodes)))


Payloads = list[bytes | memoryview | None]
"""One array's payload per chunk of a block (None: the cell is absent)."""


async def _fetch_block(arrays: dict[str, CellArray], chunks: np.ndarray,
                       names: Sequence[str]) -> tuple[Payloads, dict[str, Payloads], Payloads]:
    vert = arrays["vertices"]
    wanted = [vert, arrays["vertex_fragments"]] + [arrays[f"vertex_attributes/{n}"] for n in names]
    chunk_list = [tuple(c) for c in chunks.tolist()]
    got = await vert.executor.gather([a.payloads(chunk_list) for a in wanted])
    return got[0], dict(zip(names, got[2:])), got[1]


def _decode_block(plan: LevelPlan, arrays: dict[str, CellArray], block: tuple[int, ...], chunks: np.ndarray,
                  payloads: Payloads, attr_payloads: dict[str, Payloads], frag_payloads: Payloads, dtype: np.dtype,
                  channels: dict[str, int]) -> BlockInput:
    nd, src = plan.ndim, plan.source
    pos, fis, starts = [], [], [0]
    attrs: dict[str, list[np.ndarray]] = {n: [] for n in attr_payloads}
    for k, ch in enumerate(chunks.tolist()):
        key = f"{src}/vertices/{ch}"
        rows = rows_from_payload(payloads[k], dtype, (nd,), key=key)
        pos.append(rows)
        starts.append(starts[-1] + len(rows))
        fp = frag_payloads[k]
        fis.append(decode_fragment_index(fp, key=f"{src}/vertex_fragments/{ch}", n_rows=len(rows))
                   if fp is not None else FragmentIndex.from_ranges([0], [len(rows)]))
        for n, pl in attr_payloads.items():
            arr = arrays[f"vertex_attributes/{n}"]
            attrs[n].append(attribute_rows(n, arr, pl[k], len(rows), f"{src}/vertex_attributes/{n}", channels))
    positions = np.concatenate(pos) if pos else np.zeros((0, nd), dtype)
    return BlockInput(tuple(int(b) for b in block), chunks, np.asarray(starts, np.int64), positions,
                      {n: np.concatenate(v) for n, v in attrs.items()}, fis)


def _root_with_levels(raw: dict[str, Any], root: md.RootMeta, plans: list[LevelPlan], *, objects: bool, depth: int,
                      storage: str) -> dict[str, Any]:
    """The root document listing the new levels (transforms, OME nodes, capabilities, cross-level keys)."""
    doc = copy.deepcopy(raw)
    attrs = doc["attributes"]
    zv = attrs["zarr_vectors"]
    caps = list(zv.get("format_capabilities", []))
    new_caps = ([CAPS_OBJECTS] if objects else []) + [CAP_SHARED]
    if storage != "none" and depth != 0:
        new_caps.append(CAP_LINKS)
    caps += [c for c in new_caps if c not in caps]
    zv["format_capabilities"] = caps
    zv["cross_level_depth"] = int(depth)
    zv["cross_level_storage"] = storage
    ms = attrs["multiscales"][0]
    for p in plans:
        t = builders.level_transform(p.target, p.bin, root.bin_shape)
        ct = [{"type": "scale", "scale": [float(s) for s in t.scale]}]
        if t.translation is not None:
            ct.append({"type": "translation", "translation": [float(x) for x in t.translation]})
        ms["datasets"].append({"path": str(p.target), "coordinateTransformations": ct})
        if isinstance(attrs.get("ome"), dict) and isinstance(attrs["ome"].get("nodes"), list):
            attrs["ome"]["nodes"].append({"type": "zv:level", "name": str(p.target)})
    return doc


async def build_pyramid(
    target: Target,
    factors: Factors,
    *,
    chunk_scale_factors: ChunkScales | None = None,
    cross_level_depth: int = 1,
    cross_level_storage: str = "explicit",
    sparsity_strategy: str = "random",
    seed: int = 0,
    storage_options: StorageOptions | None = None,
    progress: Callable[[BuildProgress], object] | None = None,
    max_inflight_bytes: int = 64 << 20,
    lock_timeout: float = 60.0,
    stale_after: float = LEASE,
    map_blocks: BlockMapper | None = None,
    retention: float | None = None,
) -> PyramidSummary:
    """Add coarser levels 1..len(factors) to a store that has only level 0.

    ``factors[i] = (coarsen, sparsity)`` makes level ``i + 1`` from level
    ``i``: bins ``coarsen`` times the source level's (whole numbers, per
    axis or one for all), keeping ``1 / sparsity`` of the objects (point
    clouds: of the points of each bin, with ``coarsen ** ndim``).
    ``chunk_scale_factors[i]`` multiplies the source level's chunk shape.
    ``cross_level_storage``: "explicit" writes ``+N`` links at the finer
    and ``-N`` at the coarser level, "implicit" only ``+N``, "none" none;
    ``cross_level_depth`` is the largest ``N`` (0: none, -1: every pair
    of levels; ``±N`` for N >= 2 compose the ``±1`` parents, as 0.9.2's).  ``progress`` is
    called with a :class:`BuildProgress` (level, blocks, total_blocks, vertices).  The build
    holds the store's lock (waits up to ``lock_timeout`` s for an append or
    another build; a holder without a heartbeat for ``stale_after`` s is taken
    over) and publishes the levels at one instant (:mod:`zvf.write.publish`;
    ``retention``: seconds the store as it was stays readable for readers that
    opened it, default the store's).
    ``map_blocks(job, tasks)`` runs a step's block tasks elsewhere and
    returns their summaries in task order (``zvf.dask.build_pyramid``);
    by default they run in this process.  Returns a :class:`PyramidSummary` (a summary per level).
    """
    if cross_level_storage not in STORAGES:
        raise InvalidArgumentError(f"cross_level_storage must be one of {STORAGES}, got {cross_level_storage!r}")
    if isinstance(cross_level_depth, bool) or not isinstance(cross_level_depth, (int, np.integer)) \
            or cross_level_depth < -1:
        raise InvalidArgumentError(
            f"cross_level_depth must be an integer >= -1 (-1: every pair of levels), got {cross_level_depth!r}")
    if sparsity_strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"sparsity_strategy must be one of {STRATEGIES}, got {sparsity_strategy!r}: zarr-vectors 0.9.2 "
            "itself implements only 'random'; its other names are plug-ins of the separate zarr-vectors-tools "
            "package, which zvf does not implement")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgumentError(f"seed must be an integer >= 0, got {seed!r}")

    handle = open_store(target, mode="a", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreLock(ex, handle.url, purpose="pyramid build", timeout=lock_timeout, lease=stale_after) as lock:
        return await _locked_build(handle, ex, lock, factors, chunk_scale_factors, cross_level_depth,
                                   cross_level_storage, seed, progress, max_inflight_bytes, map_blocks, retention)


def build_record(plan: LevelPlan, *, seed: int, depth: int, storage: str) -> dict[str, Any]:
    """What a rebuild of level ``plan.target`` needs, kept in its group's attributes under :data:`RECORD`
    (a key 0.9.2 ignores): 0.9.2's documents keep the level bin only as an NGFF translation and no seed."""
    return {"coarsen": list(plan.coarsen), "sparsity": plan.sparsity, "chunk_scale": [
        round(c / s) for c, s in zip(plan.chunk, plan.src_chunk)], "chunk_shape": list(plan.chunk),
        "bin_shape": list(plan.bin), "sparsity_strategy": STRATEGIES[0], "seed": int(seed),
        "cross_level_depth": int(depth), "cross_level_storage": storage}


class _Record(TypedDict):
    """A level's :data:`RECORD`, checked."""

    coarsen: list[int]
    sparsity: float
    chunk_scale: list[int]
    seed: int
    cross_level_depth: int
    cross_level_storage: str


def _recorded(lvl: load.Level, ndim: int) -> _Record | None:
    """A level's :data:`RECORD`, when it is there and well formed (a store another tool changed may have
    dropped or mangled it: then the documents are read instead)."""
    rec = lvl.meta.raw.get("attributes", {}).get(RECORD)
    try:
        coarsen = _whole(rec["coarsen"], "coarsen", ndim)
        scale = _whole(rec["chunk_scale"], "chunk_scale", ndim)
        sparsity, seed = float(rec["sparsity"]), rec["seed"]
        depth, storage = rec["cross_level_depth"], rec["cross_level_storage"]
    except (TypeError, KeyError, ValueError, InvalidArgumentError):
        return None
    if not (math.isfinite(sparsity) and sparsity >= 1 and isinstance(seed, int) and seed >= 0
            and isinstance(depth, int) and depth >= -1 and storage in STORAGES
            and rec.get("sparsity_strategy") in STRATEGIES):
        return None
    return {"coarsen": list(coarsen), "sparsity": sparsity, "chunk_scale": list(scale), "seed": seed,
            "cross_level_depth": depth, "cross_level_storage": storage}


async def pyramid_spec(ds: DatasetReader) -> PyramidSpec | None:
    """The ``build_pyramid`` keywords that rebuild ``ds``'s coarser levels as they are.

    From each level's :data:`RECORD` (zvf's builds write one); for levels without one (another tool's
    build), from 0.9.2's documents: the level bin is the NGFF translation's double, the chunk edge the
    level's override or the root's, the kept share ``object_sparsity``, seed 0, the root's link depth
    and storage.  None when the store has level 0 only, or levels that are not one chain
    0 <- 1 <- 2 ... (which only another tool writes).
    """
    if ds.levels == [0] or ds.levels != list(range(len(ds.levels))):
        return None
    root = ds.root
    records: list[_Record] = []
    complete = True  # every level has its record
    for index in ds.levels[1:]:
        lvl = await ds.level(index)
        if lvl.meta.parent_level != index - 1:
            return None
        rec = _recorded(lvl, root.ndim)
        if rec is None:
            complete = False
        else:
            records.append(rec)
    if complete:
        first = records[0]
        return {"factors": [(r["coarsen"], r["sparsity"]) for r in records],
                "chunk_scale_factors": [r["chunk_scale"] for r in records], "seed": first["seed"],
                "cross_level_depth": first["cross_level_depth"], "cross_level_storage": first["cross_level_storage"]}
    factors: list[tuple[list[int], float]] = []
    scales: list[list[int]] = []
    prev_bin, prev_chunk = np.asarray(root.bin_shape), np.asarray(root.chunk_shape)
    for index in ds.levels[1:]:
        meta = (await ds.level(index)).meta
        if not meta.object_sparsity:
            return None
        level_bin = np.asarray(root.level_bin_shape(index))
        level_chunk = np.asarray(meta.chunk_shape or root.chunk_shape)
        factors.append(([round(float(b)) for b in level_bin / prev_bin], round(1.0 / meta.object_sparsity, 9)))
        scales.append([round(float(c)) for c in level_chunk / prev_chunk])
        prev_bin, prev_chunk = level_bin, level_chunk
    return {"factors": factors, "chunk_scale_factors": scales, "seed": 0,
            "cross_level_depth": 1 if root.cross_level_depth is None else int(root.cross_level_depth),
            "cross_level_storage": root.cross_level_storage or "explicit"}


async def build_locked(handle: StoreHandle, ex: Executor, lock: StoreLock, *, factors: Factors,
                       chunk_scale_factors: ChunkScales | None, cross_level_depth: int, cross_level_storage: str,
                       seed: int = 0, retention: float | None = None) -> PyramidSummary:
    """:func:`build_pyramid` on a store whose lock the caller holds (an append rebuilding the levels it
    replaced, in the same lock, so no other writer comes between)."""
    return await _locked_build(handle, ex, lock, factors, chunk_scale_factors, cross_level_depth,
                               cross_level_storage, seed, None, 64 << 20, None, retention)


async def _locked_build(handle: StoreHandle, ex: Executor, lock: StoreLock, factors: Factors,
                        chunk_scale_factors: ChunkScales | None, cross_level_depth: int, cross_level_storage: str,
                        seed: int, progress: Callable[[BuildProgress], object] | None, max_inflight_bytes: int,
                        map_blocks: BlockMapper | None, retention: float | None) -> PyramidSummary:
    """The build under the store's lock: everything it reads is what it replaces."""
    pub = await Publication(ex, lock, retention=retention).begin()
    seed_section(ex, pub.base_docs)  # the version being extended: never the documents on disk (they may lag)
    root, level0 = await load.load_root(ex, handle.url)
    base = DatasetReader(handle, ex, root, level0)
    if base.levels != [0]:
        raise InvalidArgumentError(f"{handle.url}: the store already has levels {base.levels}; "
                                   "a pyramid is built on a store with level 0 only")
    steps = parse_factors(factors, chunk_scale_factors, root.ndim)
    if level0.meta.chunk_dims is not None:
        raise InvalidArgumentError(f"{handle.url}: pyramids of attribute-chunked stores are not supported")
    objects = "object_index" in level0.meta.arrays_present
    links = cross_level_storage != "none" and cross_level_depth != 0
    levels: list[LevelSummary] = []
    doc = await _build(handle, ex, root, pub, level0, steps, levels, objects=objects, links=links,
                       depth=int(cross_level_depth), storage=cross_level_storage, seed=int(seed), progress=progress,
                       max_inflight_bytes=max_inflight_bytes, map_blocks=map_blocks)
    return {"levels": levels, "cross_level_storage": cross_level_storage, "cross_level_depth": cross_level_depth,
            "requests": ex.stats.snapshot(), "root": doc["attributes"]["zarr_vectors"]}


async def _build(handle: StoreHandle, ex: Executor, root: md.RootMeta, pub: Publication, level0: load.Level,
                 steps: list[tuple[tuple[int, ...], float, tuple[int, ...]]], levels: list[LevelSummary], *,
                 objects: bool, links: bool, depth: int, storage: str, seed: int,
                 progress: Callable[[BuildProgress], object] | None, max_inflight_bytes: int,
                 map_blocks: BlockMapper | None) -> dict[str, Any]:
    """Build every level, publish the root; returns the new root document.  A failure takes the cells
    written so far away (no version uses their families); a kill leaves them to the next change or gc."""
    writer = _PyramidWriter(ex, pub, max_inflight_bytes=max_inflight_bytes)
    async with writer:  # (StoreWriter's __aenter__ is typed as returning a StoreWriter)
        plans: list[LevelPlan] = []
        ds, src = DatasetReader(handle, ex, root, level0), level0
        src_chunk, src_bin = root.chunk_shape, root.bin_shape
        grids: dict[int, LevelGrid] = {}  # level -> (scale, chunk units, grid origin, grid shape)
        for coarsen, sparsity, scale in steps:
            plan = plan_level(root, src.index, src_chunk, src_bin, coarsen, sparsity, scale)
            for prefix in [f"{plan.target}/"] + [f"{lv}/links/" for lv in range(plan.target)]:
                await pub.clear_garbage(prefix)  # a dead build's cells there: block tasks write clean families
            info = await _build_level(ds, src, plan, writer, objects=objects, links=links,
                                      explicit=storage == "explicit", seed=seed, progress=progress,
                                      map_blocks=map_blocks, depth=depth if links else 0, grids=grids)
            await writer.flush()
            writer.level_doc(plan.target)["attributes"][RECORD] = build_record(
                plan, seed=seed, depth=depth, storage=storage)
            plans.append(plan)
            levels.append(info)
            # the next step reads the level just written (not yet listed by the published root)
            doc = _root_with_levels(root.raw, root, plans, objects=objects, depth=depth, storage=storage)
            ds = DatasetReader(handle, ex, parse.parse_root(doc), level0)
            _, parts = await load.open_level(ex, None, plan.target)
            src = ds.context.levels[plan.target] = await load.finish_level(ex, ds.root, plan.target,
                                                                     writer.level_doc(plan.target), *parts[1:])
            src_chunk, src_bin = plan.chunk, plan.bin
        writer.new_root = doc
    return doc


async def _build_level(ds: DatasetReader, src: load.Level, plan: LevelPlan, writer: _PyramidWriter, *,
                       objects: bool, links: bool, explicit: bool, seed: int,
                       progress: Callable[[BuildProgress], object] | None,
                       map_blocks: BlockMapper | None, depth: int = 1,
                       grids: dict[int, LevelGrid] | None = None) -> LevelSummary:
    """Plan one step's blocks, map them, then its small commit (array documents, object index, level)."""
    nd = plan.ndim
    vert = src.arrays["vertices"]
    codec = vert.codec
    if codec.shard is not None:  # coarse cells go up as they are made: never buffered in shards
        codec = dataclasses.replace(codec, shard=None)
    src_origin = tuple(int(o) for o in vert.meta.grid_origin)
    coarse_origin, coarse_shape = plan.target_grid(src_origin, vert.meta.shape)
    names = src.named("vertex_attributes")
    paths = ["vertices", "vertex_fragments"] + [f"vertex_attributes/{n}" for n in names]
    src_shape = tuple(int(s) for s in vert.meta.shape)
    grids = {} if grids is None else grids
    grids[plan.source] = (plan.src_scale, plan.src_chunk_units, src_origin, src_shape)
    deep = _deep_steps(writer.nodes(), plan, grids, depth)
    job = StepJob(plan, {p: src.arrays[p].meta for p in paths}, tuple(names),
                  np.dtype(vert.meta.attributes.get("dtype", "float32")), codec, src_origin,
                  src_shape, coarse_origin, coarse_shape, objects, links, explicit, seed, deep,
                  writer._committing().taken() if map_blocks is not None else {})

    manifests: tuple[np.ndarray, ManifestTable, np.ndarray] | None = None  # ids, table, kept rows
    table = kept = None
    if objects:
        oids, table = await ds.manifests(src.index)
        kept = kept_rows(table.num_objects, plan.sparsity, seed)
        manifests = (oids, table, kept)
    tasks = plan_blocks(plan, src.nonempty_chunks, table, kept,
                        rows_per_chunk=src.meta.vertex_count / max(1, len(src.nonempty_chunks)))
    assign_deep(plan, tasks, deep)
    n_blocks = len(tasks)
    if map_blocks is None:
        arrays = {p: src.arrays[p] for p in paths}
        summaries = await run_blocks(job, arrays, tasks, writer, on_block=None if progress is None else (
            lambda done, vertices: progress({"level": plan.target, "blocks": done, "total_blocks": n_blocks,
                                             "vertices": vertices})))
    else:
        summaries = await map_blocks(job, tasks)
    del tasks  # per-block chunk lists and manifest references: not needed by the commit

    n_mv = sum(s.vertex_count for s in summaries)
    n_links = sum(s.links for s in summaries)
    await _declare_arrays(writer, job, src, summaries)
    arrays_present = ["vertices"]
    if names:
        empty_group(writer, f"{plan.target}/vertex_attributes")
        arrays_present.append("vertex_attributes")
    if links and n_links:
        await _link_families(writer, plan, plan.source, 1, n_links, explicit)
    info: LevelSummary = {"level": plan.target, "vertex_count": int(n_mv), "blocks": n_blocks}
    for d in deep:
        n_deep = sum(s.deep_links.get(d.delta, 0) for s in summaries)
        if n_deep:
            await _link_families(writer, plan, d.level, d.delta, n_deep, explicit)
            info.setdefault("deep_links", {})[d.delta] = n_deep
    if manifests is not None:
        oids, table, kept = manifests
        arrays_present.append("object_index")
        obj, cc, ci = assemble_manifests(table, kept, summaries, nd)
        await put_object_index(writer, plan.target, obj, cc, ci, oids, nd, compression=None)
        await _carry_object_data(ds, src, writer, plan, kept, table.num_objects)
        info["objects"], info["objects_kept"] = int(table.num_objects), len(kept)
    doc = builders.level_document(
        level=plan.target, vertex_count=int(n_mv), arrays_present=arrays_present,
        object_sparsity=1.0 / plan.sparsity, coarsening_method="per_object" if objects else "random_subsample",
        parent_level=plan.source, chunk_shape=plan.chunk_override, preserves_object_ids=objects,
        inherited_num_objects=int(manifests[1].num_objects) if manifests is not None else 0, shared_fragments=objects,
        fragments_tile=not objects and n_mv > 0)
    writer.add_document(f"{plan.target}/zarr.json", doc, stage=1)
    return info


async def _declare_arrays(writer: _PyramidWriter, job: StepJob, src: load.Level,
                          summaries: list[BlockSummary]) -> None:
    """Array documents of every cell the blocks wrote (``nonempty_chunks`` from the summaries)."""
    docs = {f"vertex_attributes/{n}": {k: v for k, v in src.arrays[f"vertex_attributes/{n}"].meta.attributes.items()
                                       if k not in ("nonempty_chunks", "chunk_grid_origin")} for n in job.names}
    docs["vertices"] = builders.vertices_attributes(np.dtype("float32") if job.objects else job.dtype)  # metavertices
    docs["vertex_fragments"] = builders.vertex_fragments_attributes()
    out_level, up_level, low_levels = _level_writers(writer, job)
    for s in summaries:
        pairs = [(out_level, s.cells), (up_level, s.up_cells)]
        pairs += [(low_levels[lv], cells) for lv, cells in s.low_cells.items()]
        for level, written in pairs:
            for name, chunks in written.items():
                if name not in level.arrays:
                    level.array(name, _link_attrs(name) if name.startswith("links/") else docs[name])
                level.arrays[name].nonempty.extend(chunks.tolist())
    for lw in (out_level, up_level, *low_levels.values()):
        await lw.finish()


def _level_writers(writer: StoreWriter, job: StepJob) -> tuple[LevelWriter, LevelWriter, dict[int, LevelWriter]]:
    """Writers of the target level, the source level (``+1``) and the finer levels (``+N``, N >= 2)."""
    plan = job.plan
    return (LevelWriter(writer, plan.target, job.coarse_origin, job.coarse_shape, job.codec),
            LevelWriter(writer, plan.source, job.src_origin, job.src_shape, job.codec),
            {d.level: LevelWriter(writer, d.level, d.origin, d.shape, job.codec) for d in job.deep})


# --------------------------------------------------------------------------- the map step (one code path)


@dataclass(frozen=True)
class StepJob:
    """What every block task of one step shares; picklable (an engine ships it once per worker)."""

    plan: LevelPlan
    arrays: dict[str, md.ArrayMeta]  # source arrays the blocks read, path under the level -> ArrayMeta
    names: tuple[str, ...]  # vertex attributes
    dtype: np.dtype  # source positions
    codec: CellCodec  # of the new cells (never sharded)
    src_origin: tuple[int, ...]
    src_shape: tuple[int, ...]
    coarse_origin: tuple[int, ...]
    coarse_shape: tuple[int, ...]
    objects: bool
    links: bool
    explicit: bool
    seed: int
    deep: tuple[DeepStep, ...] = ()  # links of the finer levels to the target (cross_level_depth >= 2)
    taken: dict[str, list[str]] = field(default_factory=dict)  # array path -> families kept versions use


@dataclass(frozen=True)
class DeepStep:
    """``+delta``/``-delta`` links (delta >= 2) between ``level`` and the step's target.

    They compose the ``+(delta - 1)`` links of ``level`` (to the step's
    source) with the step's own parents.  Grids nest, so a block of the step
    holds every vertex of ``level`` whose ancestors are in it.
    """

    delta: int
    level: int
    scale: tuple[int, ...]  # the level's chunk edge / root chunk edge
    chunk_units: tuple[int, ...]  # the level's chunk edge in root bins
    origin: tuple[int, ...]  # the level's chunk grid
    shape: tuple[int, ...]
    arrays: dict[str, md.ArrayMeta]  # ``links/+(delta-1)/<offsets>`` under the level -> ArrayMeta


@dataclass
class BlockTask:
    """One block: its source chunks and (object levels) the surviving objects' references into them."""

    block: tuple[int, ...]
    chunks: np.ndarray  # (K, ndim)
    rows: int = 0  # estimated source rows (the memory budget of run_blocks)
    ref_chunk: np.ndarray | None = None  # (R,) row of ``chunks``
    ref_fragment: np.ndarray | None = None  # (R,)
    ref_count: np.ndarray | None = None  # (R,)
    deep: list[dict[str, np.ndarray]] = field(default_factory=list)  # per DeepStep: link array -> its chunks here


@dataclass
class BlockSummary:
    """What a block hands back to the commit: where its cells went, counts, and its fragment paths."""

    block: tuple[int, ...]
    cells: dict[str, np.ndarray]  # array path under the target level -> (k, ndim) chunks written
    up_cells: dict[str, np.ndarray]  # ``links/+1/...`` arrays under the source level -> chunks written
    vertex_count: int = 0
    links: int = 0
    seq_chunk: np.ndarray | None = None  # as in BlockOutput
    seq_fragment: np.ndarray | None = None
    seq_offsets: np.ndarray | None = None
    seq_coarse_chunk: np.ndarray | None = None
    seq_coarse_index: np.ndarray | None = None
    low_cells: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # ``+N`` arrays per finer level
    deep_links: dict[int, int] = field(default_factory=dict)  # N -> ``+N`` links


#: ``map_blocks(job, tasks)``: an engine's way of running block tasks; summaries in task order.
BlockMapper = Callable[[StepJob, list[BlockTask]], Awaitable[list[BlockSummary]]]


def plan_blocks(plan: LevelPlan, chunks: np.ndarray, table: ManifestTable | None = None,
                kept: np.ndarray | None = None, *,
                rows_per_chunk: float = 0.0) -> list[BlockTask]:
    """The blocks of one step, in block C-order; with a manifest ``table``, the references of ``kept`` objects.

    ``rows_per_chunk``: the source level's mean, which estimates each block's rows (``BlockTask.rows``).

    A reference (source chunk, fragment) is listed once per block with its
    count over the kept objects: the weight of its rows in the metavertices.
    """
    nd = plan.ndim
    if not len(chunks):
        return []
    blocks = plan.block_of(chunks)
    border = np.lexsort(blocks.T[::-1])
    bstarts, bcounts = _runs(blocks[border])
    tasks = [BlockTask(tuple(int(v) for v in blocks[border[s]]), chunks[border[s:s + c]], round(c * rows_per_chunk))
             for s, c in zip(bstarts.tolist(), bcounts.tolist())]
    if table is None:
        return tasks
    empty = np.zeros(0, np.int64)
    for t in tasks:
        t.ref_chunk, t.ref_fragment, t.ref_count = empty, empty, empty
    is_kept = np.zeros(table.num_objects, bool)
    is_kept[kept] = True
    sel = is_kept[table.object_row]
    rkeys = np.concatenate([table.coords[sel], table.fragment[sel][:, None]], axis=1)
    if not len(rkeys):
        return tasks
    rkeys, rcount = np.unique(rkeys, axis=0, return_counts=True)
    rblock = plan.block_of(rkeys[:, :nd])
    rorder = np.lexsort(rblock.T[::-1])  # stable: references stay sorted inside a block
    rstarts, rcounts = _runs(rblock[rorder])
    block_arr = np.asarray([t.block for t in tasks], np.int64)
    firsts = rblock[rorder[rstarts]]
    which = row_positions(block_arr, firsts) if len(block_arr) else empty
    if not len(block_arr) or np.any(block_arr[np.minimum(which, len(block_arr) - 1)] != firsts):
        raise FormatError(f"{plan.source}/object_index: a manifest names a chunk that "
                          f"{plan.source}/vertices does not list as non-empty")
    for j, (s, c) in enumerate(zip(rstarts.tolist(), rcounts.tolist())):
        t = tasks[int(which[j])]
        idx = rorder[s:s + c]
        t.ref_chunk = row_positions(t.chunks, rkeys[idx, :nd])
        t.ref_fragment, t.ref_count = rkeys[idx, nd], rcount[idx]
    return tasks


async def run_blocks(job: StepJob, arrays: dict[str, CellArray], tasks: list[BlockTask], writer: StoreWriter, *,
                     on_block: Callable[[int, int], object] | None = None) -> list[BlockSummary]:

    """Fetch, coarsen and upload ``tasks`` through ``writer``, ``BLOCKS_IN_FLIGHT`` at a time and as many as
    :data:`BLOCK_BYTES` holds by their estimate (:func:`block_bytes`); freed memory goes back to the OS after
    each block (:func:`release_freed_memory`).

    The one block loop of every engine; ``on_block(blocks_done, vertices)``
    is called as each block's cells are queued.
    """
    plan = job.plan
    out_level, up_level, low_levels = _level_writers(writer, job)
    ex = arrays["vertices"].executor
    deep_arrays = [{name: CellArray(ex, f"{d.level}/{name}", meta) for name, meta in d.arrays.items()}
                   for d in job.deep]
    summaries: list[BlockSummary | None] = [None] * len(tasks)
    done = {"blocks": 0, "vertices": 0}
    channels: dict[str, int] = {}
    limiter = anyio.Semaphore(BLOCKS_IN_FLIGHT)
    memory, row_bytes = ByteBudget(BLOCK_BYTES), block_bytes(job, arrays)

    async def run(i: int) -> None:
        async with limiter, _reserved(memory, tasks[i].rows * row_bytes):
            task = tasks[i]
            payloads, attr_payloads, frag_payloads = await _fetch_block(arrays, task.chunks, job.names)
            data = _decode_block(plan, arrays, task.block, task.chunks, payloads, attr_payloads, frag_payloads,
                                 job.dtype, channels)
            del payloads, attr_payloads, frag_payloads
            data.ref_chunk, data.ref_fragment, data.ref_count = task.ref_chunk, task.ref_fragment, task.ref_count
            data.deep = [await _fetch_deep(plan, d, deep_arrays[j], task.deep[j] if task.deep else {})
                         for j, d in enumerate(job.deep)]
            out = await anyio.to_thread.run_sync(functools.partial(coarsen_block, plan, data, seed=job.seed,
                                                                   objects=job.objects, deep=job.deep))
            del data
            cells, up_cells, low = await _upload(out, out_level, up_level, low_levels, links=job.links,
                                                 explicit=job.explicit)
            summaries[i] = BlockSummary(task.block, cells, up_cells, out.vertex_count, out.links, out.seq_chunk,
                                        out.seq_fragment, out.seq_offsets, out.seq_coarse_chunk,
                                        out.seq_coarse_index, low, out.deep_links)
            done["blocks"] += 1
            done["vertices"] += out.vertex_count
            if on_block is not None:
                on_block(done["blocks"], done["vertices"])

    async with anyio.create_task_group() as tg:
        for i in range(len(tasks)):
            tg.start_soon(run, i)
    return [s for s in summaries if s is not None]  # every task filled its slot (or the group raised)


def block_bytes(job: StepJob, arrays: dict[str, CellArray]) -> int:
    """Estimated bytes a block holds per source row while it is fetched and coarsened: the row's data
    (payload and decoded copies) and :data:`COARSEN_ROW_BYTES`."""
    data = job.dtype.itemsize * job.plan.ndim
    for name in job.names:
        dtype, row_shape = attribute_layout(arrays[f"vertex_attributes/{name}"])
        data += dtype.itemsize * math.prod(row_shape)
    return 2 * data + COARSEN_ROW_BYTES


@contextlib.asynccontextmanager
async def _reserved(budget: ByteBudget, n: int) -> AsyncIterator[None]:
    """Hold ``n`` of ``budget`` for one block; then hand what the block freed back to the OS."""
    await budget.acquire(n)
    try:
        yield
    finally:
        await budget.release(n)
        release_freed_memory()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None where the C library has none: macOS, musl, Windows)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, TypeError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> None:
    """Return the memory a finished block freed to the OS.

    glibc keeps freed memory in the arena of the thread that freed it (blocks are coarsened in worker
    threads), and once a large array has been freed it serves the next ones from those arenas rather
    than from fresh mappings: without this, a build's RSS grew block by block to 3-4x the traced peak
    of its blocks (2 M LAS points: 930 MiB against 275 MiB with it and the budget).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def run_block_task(url: str, storage_options: StorageOptions | None, job: StepJob, tasks: list[BlockTask], *,
                   max_inflight_bytes: int = 64 << 20) -> list[BlockSummary]:
    """A block task on any worker: open the store from its spec, run ``tasks``, return their summaries.

    Every key it writes depends only on the block, and its bytes only on
    the source level, so a task rerun after its worker died rewrites the
    same objects.  The caller (driver) holds the store's lock and commits.
    """
    async def main() -> list[BlockSummary]:
        ex = Executor(open_store(url, mode="a", storage_options=storage_options))
        arrays = {p: CellArray(ex, f"{job.plan.source}/{p}", meta) for p, meta in job.arrays.items()}
        async with _PyramidWriter(ex, taken=job.taken, max_inflight_bytes=max_inflight_bytes) as writer:
            return await run_blocks(job, arrays, tasks, writer)

    return anyio.run(main, backend="asyncio")


def assign_deep(plan: LevelPlan, tasks: list[BlockTask], deep: tuple[DeepStep, ...]) -> None:
    """Give each task the ``+(delta-1)`` link cells of every DeepStep's level that lie in its block."""
    if not deep or not tasks:
        return
    block_arr = np.asarray([t.block for t in tasks], np.int64)
    for t in tasks:
        t.deep = [{} for _ in deep]
    for j, d in enumerate(deep):
        for name, meta in sorted(d.arrays.items()):
            chunks = meta.nonempty_chunk_array
            if not len(chunks):
                continue
            blocks = np.floor_divide(chunks * np.asarray(d.chunk_units), np.asarray(plan.block))
            which = row_positions(block_arr, blocks)
            if np.any(block_arr[which] != blocks):
                raise FormatError(f"{d.level}/{name}: links from chunks with no vertex of {plan.source}/vertices "
                                  "in their block")
            order = np.argsort(which, kind="stable")
            starts, counts = _runs(which[order][:, None])
            for a, c in zip(starts.tolist(), counts.tolist()):
                tasks[int(which[order[a]])].deep[j][name] = chunks[order[a:a + c]]


async def _fetch_deep(plan: LevelPlan, step: DeepStep, arrays: dict[str, CellArray],
                      chunks_of: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A block's ``+(delta-1)`` rows of ``step.level``: (fine chunk, fine row, source-level chunk, row there)."""
    nd = plan.ndim
    names = sorted(chunks_of)
    if not names:
        z = np.zeros((0, nd), np.int64)
        return z, z[:, 0], z, z[:, 0]
    got = await arrays[names[0]].executor.gather(
        [arrays[n].payloads([tuple(c) for c in chunks_of[n].tolist()]) for n in names])
    fc, fl, mc, ml = [], [], [], []
    s, t = np.asarray(step.scale), np.asarray(plan.src_scale)
    for n, payloads in zip(names, got):
        arr = arrays[n]
        off = np.asarray(arr.meta.attributes.get("offsets"), np.int64).reshape(-1, nd)[0]
        for ch, payload in zip(chunks_of[n], payloads):
            key = arr.key_of(arr.cell_coords(ch))
            if payload is None:
                raise FormatError(f"{key}: listed in nonempty_chunks but absent")
            rows, _ = decode_ragged_links(payload, 2, False, key=key)
            fc.append(np.repeat(ch[None, :], len(rows), axis=0))
            fl.append(rows[:, 0])
            mc.append(np.repeat((np.floor_divide(ch * s, t) + off)[None, :], len(rows), axis=0))
            ml.append(rows[:, 1])
    return np.concatenate(fc), np.concatenate(fl), np.concatenate(mc), np.concatenate(ml)


async def _upload(out: BlockOutput, level: LevelWriter, up: LevelWriter, low: dict[int, LevelWriter], *,
                  links: bool, explicit: bool
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """Queue a block's cells; returns the chunks written per array (target level, ``+1`` at the source,
    ``+N`` per finer level).

    Array documents come at the commit (:func:`_declare_arrays`), from these lists.
    """
    async def put(lw: LevelWriter, cells_of: Cells, keep: Callable[[str], bool]) -> dict[str, np.ndarray]:
        written = {}
        for name, cells in cells_of.items():
            if keep(name):
                arr = lw.array(name, {})
                for ch, payload in cells:
                    await arr.add(lw.writer, ch, payload)
                written[name] = np.asarray([ch for ch, _ in cells], np.int64).reshape(len(cells), -1)
        cells_of.clear()
        return written

    return (await put(level, out.cells, lambda name: not name.startswith("links/") or (links and explicit)),
            await put(up, out.up_cells, lambda name: links),
            {lv: await put(low[lv], cells, lambda name: links) for lv, cells in out.low_cells.items()})


def _link_attrs(name: str) -> dict[str, Any]:
    """Document attributes of ``links/<delta>/<offsets>``."""
    delta = int(name.split("/")[1])
    leaf = name.rsplit("/", 1)[1]
    offsets = parse_offsets_name(leaf, leaf.count(".") + 1)
    return builders.links_array_attributes(offsets, has_perm=False, link_width=2, level_delta=delta)


async def _link_families(writer: _PyramidWriter, plan: LevelPlan, fine: int, delta: int, num: int,
                         explicit: bool) -> None:
    """Family documents of ``+delta`` (at level ``fine``) and ``-delta`` (at the target)."""
    nd = plan.ndim
    if await writer.ex.head(f"{fine}/links/zarr.json") is None:
        empty_group(writer, f"{fine}/links")
    writer.add_document(f"{fine}/links/+{delta}/zarr.json", builders.links_family_document(
        level_delta=delta, link_width=2, directed=True, sid_ndim=nd, num_links=num), stage=0)
    if explicit:
        if delta == 1:  # the first family of the target level (deeper ones follow it)
            empty_group(writer, f"{plan.target}/links")
        writer.add_document(f"{plan.target}/links/-{delta}/zarr.json", builders.links_family_document(
            level_delta=-delta, link_width=2, directed=True, sid_ndim=nd, num_links=num), stage=0)


def _deep_steps(nodes: dict[str, dict[str, Any]], plan: LevelPlan, grids: dict[int, LevelGrid],
                depth: int) -> tuple[DeepStep, ...]:

    """The ``+N`` (N >= 2, up to ``depth``; -1 = all) links ending at the step's target, from the
    ``+(N-1)`` arrays earlier steps wrote (``nodes``: the documents of the version being built)."""
    out = []
    for delta in range(2, (plan.target if depth == -1 else depth) + 1):
        level = plan.target - delta
        if level < 0:
            break
        prefix = f"{level}/links/+{delta - 1}/"
        arrays = {}
        for path in sorted(p for p in nodes if p.startswith(prefix) and "/" not in p[len(prefix):]):
            key = f"{path}/zarr.json"
            arrays[f"links/+{delta - 1}/{path[len(prefix):]}"] = parse.parse_array(nodes[path], key=key)
        if arrays:
            out.append(DeepStep(delta, level, *grids[level], arrays))
    return tuple(out)


async def _carry_object_data(ds: DatasetReader, src: load.Level, writer: _PyramidWriter, plan: LevelPlan,
                             kept: np.ndarray, n: int) -> None:
    """Object attributes (dropped objects = absent) and groups of the source level, at the target."""
    lvl = await ds.family(src.index, "object_attributes")
    attrs = {}
    for name in lvl.named("object_attributes"):
        values = await ds.object_attribute(name, level=src.index)
        out = np.full_like(values, builders.object_attribute_fill(values.dtype))
        out[kept] = values[kept]
        attrs[name] = out
    await put_object_attributes(writer, plan.target, attrs, ZSTD)
    groups = await ds.groups(level=src.index)
    if groups:
        glvl = await ds.family(src.index, "group_attributes")
        gattrs = {name: await ds.group_attribute(name, level=src.index) for name in glvl.named("group_attributes")}
        await put_groups(writer, groups, gattrs, ZSTD, level=plan.target)
