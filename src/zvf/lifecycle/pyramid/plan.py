"""The plan of a pyramid: what each coarsening step makes, from the build's arguments or a store's levels.

:func:`parse_factors` checks ``build_pyramid``'s factors; :func:`plan_level` fixes one step's target grids
and cuts the source level into *blocks*: the smallest boxes made of whole source chunks, whole target
chunks and whole target bins.  Every target bin, every target chunk and every cross-level link cell
belongs to exactly one block, so blocks never share an output and memory is one block's data.
:func:`deep_steps` names the ``+N`` links (N >= 2) a step composes; :func:`build_record` and
:func:`pyramid_spec` are what a rebuild reads back from the levels (through the reader it is given: this
module does no I/O of its own).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from ...errors import InvalidArgumentError
from ...format import metadata as md
from ...format import parse
from ...format.layout import LevelLayout

if TYPE_CHECKING:
    from ...read import load
    from ...read.dataset import DatasetReader

STORAGES = ("explicit", "implicit", "none")
STRATEGIES = ("random",)
RECORD = "zvf_pyramid"  # a coarse level's group attribute: how zvf built it (see build_record)

Factors = Sequence[tuple[int | Sequence[int], float]]
"""``build_pyramid``'s ``factors``: per new level, (bin coarsening, one per axis or one for all; sparsity)."""
ChunkScales = Sequence[int | Sequence[int]]
"""``build_pyramid``'s ``chunk_scale_factors``: per new level, the chunk edge multiplier (per axis or for all)."""
LevelGrid = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""A built level's chunk grid: (chunk scale, chunk edge in root bins, grid origin, grid shape)."""


class PyramidSpec(TypedDict):
    """The ``build_pyramid`` keywords that rebuild a store's levels as they are (:func:`pyramid_spec`)."""

    factors: list[tuple[list[int], float]]
    chunk_scale_factors: list[list[int]]
    seed: int
    cross_level_depth: int
    cross_level_storage: str


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


def deep_steps(nodes: dict[str, dict[str, Any]], plan: LevelPlan, grids: dict[int, LevelGrid],
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
