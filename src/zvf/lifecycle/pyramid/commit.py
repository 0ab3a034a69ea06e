"""The small commit of each pyramid step, from its blocks' summaries alone: manifests, documents, root.

:func:`assemble_manifests` (pure) stitches the coarse paths the blocks saw into one manifest per object, in
the source manifest order; :func:`declare_arrays` writes the array documents of the cells the blocks
wrote, :func:`link_families` the cross-level link families, :func:`carry_object_data` the object
attributes and groups; :func:`root_with_levels` is the root document that lists the new levels, published
last (:mod:`.writer`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...format import builders
from ...format import metadata as md
from ...format.keys import parse_offsets_name
from ...format.manifest import ManifestTable
from ...read import load
from ...read.dataset import DatasetReader
from ...write.object_index import (
    ZSTD,
    put_groups,
    put_object_attributes,
)
from ...write.store_writer import empty_group
from .plan import LevelPlan
from .tasks import BlockSummary, StepJob, level_writers
from .writer import PyramidWriter

CAPS_OBJECTS = "preserved_object_ids"
CAP_SHARED = "shared_fragments"
CAP_LINKS = "multiscale_links"


def assemble_manifests(table: ManifestTable, kept: np.ndarray, outputs: Sequence[BlockSummary],
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


def root_with_levels(raw: dict[str, Any], root: md.RootMeta, plans: list[LevelPlan], *, objects: bool, depth: int,
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


async def declare_arrays(writer: PyramidWriter, job: StepJob, src: load.Level,
                          summaries: list[BlockSummary]) -> None:
    """Array documents of every cell the blocks wrote (``nonempty_chunks`` from the summaries)."""
    docs = {f"vertex_attributes/{n}": {k: v for k, v in src.arrays[f"vertex_attributes/{n}"].meta.attributes.items()
                                       if k not in ("nonempty_chunks", "chunk_grid_origin")} for n in job.names}
    docs["vertices"] = builders.vertices_attributes(np.dtype("float32") if job.objects else job.dtype)  # metavertices
    docs["vertex_fragments"] = builders.vertex_fragments_attributes()
    out_level, up_level, low_levels = level_writers(writer, job)
    for s in summaries:
        pairs = [(out_level, s.cells), (up_level, s.up_cells)]
        pairs += [(low_levels[lv], cells) for lv, cells in s.low_cells.items()]
        for level, written in pairs:
            for name, chunks in written.items():
                if name not in level.arrays:
                    level.array(name, _link_attrs(name) if name.startswith("links/") else docs[name])
                level.arrays[name].nonempty.extend(chunks.tolist())
    if "vertices" not in out_level.arrays:  # no block kept a vertex (say, the objects kept have none): the
        for name, attrs in docs.items():  # level's arrays are there all the same, with no chunk
            out_level.array(name, attrs)
    for lw in (out_level, up_level, *low_levels.values()):
        await lw.finish()


def _link_attrs(name: str) -> dict[str, Any]:
    """Document attributes of ``links/<delta>/<offsets>``."""
    delta = int(name.split("/")[1])
    leaf = name.rsplit("/", 1)[1]
    offsets = parse_offsets_name(leaf, leaf.count(".") + 1)
    return builders.links_array_attributes(offsets, has_perm=False, link_width=2, level_delta=delta)


async def link_families(writer: PyramidWriter, plan: LevelPlan, fine: int, delta: int, num: int,
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


async def carry_object_data(ds: DatasetReader, src: load.Level, writer: PyramidWriter, plan: LevelPlan,
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
