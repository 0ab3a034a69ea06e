"""Resolution: what a query's spec asks of one store (its level, attributes, categories and id set).

Every error a query can name from metadata (unknown attribute, channel, group, an id narrowing on a
level without object ids) is raised here, before any cell request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidArgumentError
from .. import load
from ..context import ReadContext
from ..points import attribute_layout, level_attributes
from ..rowops import match_rows, unique_ints
from ..selection import Selection
from .spec import Spec, Term

if TYPE_CHECKING:
    from ..cells import CellArray


@dataclass
class Resolved:
    """A query resolved against the store: its level, the attributes to return, its id set."""

    spec: Spec
    level: load.Level
    names: list[str]  # stored attributes to return
    with_cat: bool  # add the chunking attribute (attribute-chunked levels)
    vterms: tuple[Term, ...]  # where on vertex attributes
    allowed: np.ndarray | None  # object id set (objects & groups & object-attribute where)
    level_note: str
    categories: list[Any] | None = None  # values of the chunking attribute a ``where`` on it keeps

    def chunks_in(self, box: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        """Stored chunks of the box (all when None), within ``categories`` when a ``where`` named them."""
        lo, hi = box if box is not None else (None, None)
        return self.level.chunks_in(lo, hi, self.categories)

    @property
    def box(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self.spec.box()

    @property
    def vertex_predicates(self) -> bool:
        return self.spec.bbox is not None or self.spec.near is not None or bool(self.vterms)

    def candidates(self, sub_coords: np.ndarray | None) -> np.ndarray:
        """Chunks that can hold a matching vertex: the box's, and the id set's when there is one."""
        cand = self.chunks_in(self.box)
        if sub_coords is not None:
            cand = cand[match_rows(np.unique(sub_coords, axis=0), cand) >= 0] if len(sub_coords) else cand[:0]
        return cand

    def vertex_pass(self, positions: np.ndarray, attrs: dict[str, np.ndarray]) -> np.ndarray:
        """Rows inside the box and the ball that pass every vertex ``where``."""
        keep = self.spec.vertex_mask(positions)
        for t in self.vterms:
            arr = self.level.need(f"vertex_attributes/{t.name}")
            keep &= t.test(t.column(attrs[t.name], arr.meta.attributes.get("channel_names")))
        return keep

    def names_with_where(self) -> list[str]:
        """The attributes to read: those returned and those a vertex ``where`` tests."""
        return list(dict.fromkeys([*self.names, *(t.name for t in self.vterms)]))

    def strip(self, sel: Selection) -> Selection:
        """Drop attributes read only to test ``where``."""
        category = self.level.category_name
        keep = [*self.names, *([category] if self.with_cat and category is not None else [])]
        sel.attributes = {n: sel.attributes[n] if len(sel.attributes[n]) or n not in self.names
                          else no_rows(self.level.need(f"vertex_attributes/{n}")) for n in keep}
        return sel


async def resolve(rc: ReadContext, spec: Spec) -> Resolved:
    if not isinstance(spec.level, int):  # "auto"
        lvl, note = await _pick_level(rc, spec)
    else:
        lvl, note = await rc.level(spec.level), f"level {spec.level} (asked for)"
    names, with_cat = level_attributes(lvl, list(spec.attributes) if spec.attributes is not None else None)
    vnames = lvl.named("vertex_attributes")
    cname = lvl.category_name
    cterms = tuple(t for t in spec.where if cname is not None and t.name == cname and cname not in vnames)
    oterms = tuple(t for t in spec.where if t.name not in vnames and t not in cterms)
    vterms = tuple(t for t in spec.where if t.name in vnames)
    categories = None
    if cterms:  # the chunking attribute: a where on it picks whole categories, before any request
        values = np.asarray(lvl.categories)
        keep = np.ones(len(values), dtype=bool)
        for t in cterms:
            keep &= t.test(t.column(values, None))
        categories = values[keep].tolist()
    if oterms and not rc.has_objects(lvl.index):
        raise InvalidArgumentError(f"where {oterms[0].name!r}: no such vertex attribute (it has {vnames})")
    narrowed_by_id = spec.objects is not None or spec.groups is not None
    if narrowed_by_id and not rc.has_objects(lvl.index):
        raise InvalidArgumentError(f"objects=/groups=/object-attribute where need object ids; level {lvl.index} "
                                   f"is a point cloud without them")
    if oterms:
        await rc.family(lvl.index, "object_attributes")
        onames = lvl.named("object_attributes")
        bad = [t.name for t in oterms if t.name not in onames]
        if bad:
            raise InvalidArgumentError(f"where {bad[0]!r}: no such attribute (vertex attributes: {vnames}, "
                                       f"object attributes: {onames})")
    allowed = None if spec.objects is None else np.asarray(spec.objects, dtype=np.int64)
    if spec.groups is not None:
        from ..dense import read_groups  # here (and below): a query without group or object terms reads neither

        groups = await read_groups(rc, lvl.index)
        out_of_range = [g for g in spec.groups if not 0 <= g < len(groups)]
        if out_of_range:
            raise InvalidArgumentError(
                f"groups: group {out_of_range[0]} out of range (the level has {len(groups)} groups)")
        members = unique_ints(np.concatenate([groups[g] for g in spec.groups] + [np.zeros(0, np.int64)]))
        allowed = members if allowed is None else np.intersect1d(allowed, members)
    if oterms:
        from ..dense import dense_attribute

        ids = await rc.object_ids(lvl.index)
        keep = np.ones(len(ids), dtype=bool)
        for t in oterms:
            values = await dense_attribute(rc, "object_attributes", t.name, lvl.index)
            arr = lvl.need(f"object_attributes/{t.name}")
            keep &= t.test(t.column(np.asarray(values)[: len(ids)], arr.meta.attributes.get("channel_names")))
        ids = unique_ints(ids[keep])
        allowed = ids if allowed is None else np.intersect1d(allowed, ids)
    for t in vterms:  # channel errors before any request, where the metadata tells the width
        arr = lvl.need(f"vertex_attributes/{t.name}")
        _, rshape = attribute_layout(arr)
        channels = arr.meta.attributes.get("channel_names")
        width = int(np.prod(rshape)) if rshape else len(channels or [])
        if width:
            t.column(np.zeros((0, width) if width > 1 else (0,)), channels)
    return Resolved(spec, lvl, names, with_cat, vterms, allowed, note, categories)


async def _pick_level(rc: ReadContext, spec: Spec) -> tuple[load.Level, str]:
    """Finest level whose estimated result fits ``max_vertices``: the level's ``vertex_count``
    scaled by the share of its stored chunks the box touches."""
    box = spec.box()
    notes = []
    chosen = None
    for index in rc.level_ids:
        lvl = await rc.level(index)
        chunks = lvl.nonempty_chunks
        share = 1.0
        if box is not None and len(chunks):
            share = len(lvl.chunks_in(*box)) / len(chunks)
        est = round((lvl.meta.vertex_count or 0) * share)
        notes.append(f"level {index} ~{est:,}")
        if est <= (spec.max_vertices or 0):  # set whenever level="auto" (Spec.build)
            chosen = lvl
            break
    if chosen is None:
        chosen = await rc.level(rc.level_ids[-1])
        return chosen, (f"level {chosen.index} (auto: none fits max_vertices={spec.max_vertices:,}; "
                        f"coarsest; estimates {', '.join(notes)})")
    return chosen, f"level {chosen.index} (auto: finest within max_vertices={spec.max_vertices:,}; {', '.join(notes)})"


def no_rows(arr: CellArray) -> np.ndarray:
    """An empty attribute column; channels from ``channel_names`` when ``row_shape`` is [] (0.9.2 object writers)."""
    adt, rshape = attribute_layout(arr)
    width = len(arr.meta.attributes.get("channel_names") or [])
    return np.zeros((0, *(rshape or ((width,) if width > 1 else ()))), adt)

