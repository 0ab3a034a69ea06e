"""Level 5, multi-resolution: levels nest, counts shrink, ids are preserved,
cross-level links land on existing vertices.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import FormatError
from ..format.keys import parse_delta
from .model import LevelInfo, ValidatorBase


class MultiresChecks(ValidatorBase):
    """Level 5, multi-resolution checks of :class:`zvf.validation.checks.Validator`."""

    def _multires(self) -> None:
        levels = sorted(self.levels)
        if levels != list(range(len(levels))):
            self.error(5, "zarr.json", f"levels {levels} are not contiguous from 0")
        prev: LevelInfo | None = None
        for n in levels:
            lv = self.levels[n]
            if lv.meta is None:
                prev = None
                continue
            m = lv.meta
            if n > 0:
                if m.parent_level != n - 1:
                    self.error(5, lv.doc_key, f"parent_level is {m.parent_level!r}, expected {n - 1}")
                if prev is not None and prev.meta is not None:
                    if m.vertex_count > prev.meta.vertex_count:
                        self.error(5, lv.doc_key, f"vertex_count {m.vertex_count} exceeds level {n - 1}'s "
                                                  f"{prev.meta.vertex_count}: coarser levels must not grow")
                    if prev.layout is not None and lv.layout is not None:
                        q = np.asarray(lv.layout.chunk_shape) / np.asarray(prev.layout.chunk_shape)
                        if np.any(np.abs(q - np.rint(q)) > 1e-9 * np.maximum(q, 1)) or np.any(np.rint(q) < 1):
                            self.error(5, lv.doc_key, f"chunk_shape {list(lv.layout.chunk_shape)} does not nest in "
                                                      f"level {n - 1}'s {list(prev.layout.chunk_shape)}")
                    po = prev.num_objects
                    if m.inherited_num_objects is not None and po is not None and m.inherited_num_objects != po \
                            and po:
                        self.error(5, lv.doc_key, f"inherited_num_objects {m.inherited_num_objects} but level "
                                                  f"{n - 1} has {po} objects")
                    present = self._present_objects(lv)
                    if present is not None and po is not None and present > po:
                        self.error(5, f"{n}/object_index/zarr.json", f"{present} objects present, more than level "
                                                                     f"{n - 1}'s {po}")
                    if m.preserves_object_ids and lv.object_ids is not None and prev.object_ids is not None:
                        lost = ~np.isin(lv.object_ids, prev.object_ids)
                        if lost.any():
                            self.error(5, f"{n}/object_index/object_ids/c/0",
                                       f"{int(lost.sum())} object id(s) not in level {n - 1} although the level "
                                       f"preserves object ids (e.g. {int(lv.object_ids[lost][0])})")
            prev = lv
        storage = self.root.cross_level_storage
        for n in levels:
            lv = self.levels[n]
            for rel in lv.groups:
                parts = rel.split("/")
                if len(parts) == 2 and parts[0] == "links":
                    try:
                        d = parse_delta(parts[1])
                    except FormatError:
                        continue
                    if d > 0 and storage == "explicit":
                        other = self.levels.get(n + d)
                        if other is not None and f"links/-{d}" not in other.groups:
                            self.warn(5, f"{n}/{rel}/zarr.json", f"no matching links/-{d} family at level {n + d} "
                                                                 "(cross_level_storage is 'explicit')")
        trs = sorted(self.root.transforms)
        for a, b in itertools.pairwise(trs):
            if any(y < x for x, y in zip(a.scale, b.scale)):
                self.warn(5, "zarr.json", f"multiscales scale shrinks from level {a.level} to {b.level}")

    def _present_objects(self, lv: LevelInfo) -> int | None:
        oi = lv.groups.get("object_index")
        if oi is None:
            return None
        v = oi.get("num_present")
        return v if isinstance(v, int) and not isinstance(v, bool) else None
