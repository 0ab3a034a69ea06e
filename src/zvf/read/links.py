"""The link arrays of a level, parsed once per dataset.

Intra-chunk rows (``links/0/0.0.0``) and ragged cross-chunk rows
(``links/0/<offsets>``), their link attributes, and seed-layout
``cross_chunk_links`` records (see :mod:`zvf.read.seed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError
from ..format.keys import parse_offsets_name
from .cells import CellArray
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

    def sources(self, chunks: list[tuple], incoming: bool) -> list[tuple]:
        """Cells to fetch: the chunks themselves (and, with ``incoming``, cells
        whose rows reach into them), limited to ``nonempty_chunks`` when listed."""
        want = set(chunks)
        if incoming and not self.intra:
            for o in self.offsets.tolist():
                want.update(tuple(int(c) - int(d) for c, d in zip(ch, o)) for ch in chunks)
        if self.listed is not None:
            want &= self.listed
        return sorted(want)

    @cached_property
    def listed(self) -> set[tuple] | None:
        """The array's ``nonempty_chunks`` (None when it does not list them: try every cell)."""
        if "nonempty_chunks" not in self.arr.meta.attributes:
            return None
        return set(map(tuple, self.arr.meta.nonempty_chunk_array.tolist()))


@dataclass
class Links:
    width: int
    arrays: list[LinkArray]
    records: tuple | None  # seed cross_chunk_links: (key, coords, local)
    attribute_names: list[str] = field(default_factory=list)  # link_attributes/<name> of the level


async def level_links(rc: ReadContext, index: int) -> Links:
    """Same-level link arrays of a level (loaded and parsed once per dataset)."""
    cache = rc.object_cache
    if ("links", index) in cache:
        return cache[("links", index)]
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
    links = Links(width, arrays, records, attr_names)
    cache[("links", index)] = links
    return links
