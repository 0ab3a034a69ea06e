"""Level 2, metadata: field values, dtypes, codecs, chunk grids against bounds,
links and object-index declarations.
"""

from __future__ import annotations

import numpy as np

from ..config import tuning
from ..errors import FormatError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.keys import format_chunk_id, parse_delta, parse_offsets_name
from ..format.layout import LevelLayout
from .model import DENSE_ZV, SPATIAL_ZV, ArrayInfo, LevelInfo, ValidatorBase, as_offsets, strip_key


class MetadataChecks(ValidatorBase):
    """Level 2, metadata checks of :class:`zvf.validation.checks.Validator`."""

    def _metadata(self) -> None:
        root = self.root
        if not root.geometry_types:
            self.warn(2, "zarr.json", "geometry_types is empty: the store was created but never written")
        elif len(root.geometry_types) > 1:
            self.warn(2, "zarr.json", f"several geometry_types {list(root.geometry_types)}; zvf reads the first")
        if root.zv_version.split(".")[:2] < ["0", "9"] and root.zv_version.split(".")[0] == "0":
            self.warn(2, "zarr.json", f"zv_version {root.zv_version} is older than the 0.9 layout zvf reads")
        for n, lv in sorted(self.levels.items()):
            if lv.meta is None:
                continue
            m = lv.meta
            if m.level != n:
                self.error(2, lv.doc_key, f"zarr_vectors_level.level is {m.level} but the group is level {n}")
            if n == 0 and m.parent_level is not None:
                self.error(2, lv.doc_key, f"level 0 names parent_level {m.parent_level}")
            vert = lv.array("vertices")
            try:
                grid = vert.meta if vert is not None and vert.origin is not None else None  # else reported
                lv.layout = LevelLayout.of_level(root, m, grid, key=lv.doc_key)
            except FormatError as e:
                self.error(2, lv.doc_key, strip_key(str(e), lv.doc_key))
                lv.layout = None
            self._level_arrays(lv)

    def _level_arrays(self, lv: LevelInfo) -> None:
        n = lv.index
        vert = lv.array("vertices")
        ref_shape = vert.meta.shape if vert is not None else None
        ref_origin = tuple(vert.origin.tolist()) if vert is not None and vert.origin is not None else None
        sid = self.ndim + (1 if lv.parsed.chunk_dims else 0)
        for rel, info in sorted(lv.arrays.items()):
            key = f"{info.path}/zarr.json"
            meta = info.meta
            try:
                codec = info.codec = CellCodec.from_array_metadata(meta.raw, key=key)
            except FormatError as e:
                self.error(2, key, f"codecs not supported: {strip_key(str(e), key)}")
                info.usable = False
            if not info.usable:
                continue
            zv = info.zv
            spatial = zv in SPATIAL_ZV
            if spatial:
                if not meta.is_vlen:
                    self.error(2, key, f"a per-chunk array must be variable_length_bytes, got {meta.data_type!r}")
                    info.usable = False
                    continue
                if meta.ndim != sid:
                    self.error(2, key, f"shape {list(meta.shape)} has {meta.ndim} axes, expected {sid}")
                    info.usable = False
                    continue
                if codec.shard is None and any(c != 1 for c in meta.chunk_shape):
                    self.error(2, key, f"chunk_grid chunk_shape {list(meta.chunk_shape)} must be all ones "
                                       "(one cell per spatial chunk)")
                    info.usable = False
                    continue
                origin = info.origin
                assert origin is not None  # structure() marks an array without a grid origin unusable
                if ref_shape is not None and ref_origin is not None and info is not vert and (
                        meta.shape != ref_shape or tuple(origin.tolist()) != ref_origin):
                    self.error(2, key, f"grid shape {list(meta.shape)} / origin {origin.tolist()} differ from "
                                       f"{n}/vertices ({list(ref_shape)} / {list(ref_origin)})")
                try:
                    nonempty = meta.nonempty_chunk_array
                except FormatError as e:
                    self.error(2, key, strip_key(str(e), key))
                    nonempty = np.zeros((0, meta.ndim), np.int64)
                if "nonempty_chunks" not in meta.attributes:
                    self.warn(2, key, "no nonempty_chunks attribute: readers will see no cells")
                if len(nonempty):
                    rel_c = nonempty - origin
                    out = np.any((rel_c < 0) | (rel_c >= np.asarray(meta.shape)), axis=1)
                    for row in nonempty[out][:tuning().validation_similar_issues].tolist():
                        self.error(2, key, f"nonempty_chunks lists chunk {format_chunk_id(row)} outside the "
                                           f"grid (origin {origin.tolist()}, shape {list(meta.shape)})")
                    u = np.unique(nonempty, axis=0)
                    if len(u) != len(nonempty):
                        self.warn(2, key, f"nonempty_chunks repeats {len(nonempty) - len(u)} chunk(s)")
                info.listed = set(map(tuple, nonempty.tolist()))
                self._check_dtype(info, key)
            elif zv in DENSE_ZV or rel == "object_index/object_ids":
                if meta.is_vlen or codec.serializer != "bytes":
                    self.error(2, key, f"a dense array must use the bytes serializer, got {meta.data_type!r}")
                    info.usable = False
                elif meta.data_type not in md.NUMERIC_DTYPES:
                    self.error(2, key, f"data_type {meta.data_type!r} is not numeric")
                    info.usable = False
            elif rel in ("object_index/manifests", "groups") and (not meta.is_vlen or meta.ndim != 1):
                self.error(2, key, f"must be a 1-D variable_length_bytes array, got {meta.data_type!r} "
                                   f"shape {list(meta.shape)}")
                info.usable = False
        if vert is not None and vert.usable and lv.layout is not None and ref_shape is not None:
            self._grid_vs_bounds(lv, lv.layout, vert)
        self._links_meta(lv)
        self._objects_meta(lv)

    def _check_dtype(self, info: ArrayInfo, key: str) -> None:
        a = info.attrs
        zv = info.zv
        if zv in ("vertices", "attribute", "fragment_attribute", "links", "link_attribute"):
            dt = a.get("dtype")
            if not isinstance(dt, str) or dt not in md.NUMERIC_DTYPES:
                self.error(2, key, f"attribute dtype {dt!r} is not a supported numeric dtype")
                info.usable = False
                return
            if zv == "vertices" and np.dtype(dt).kind != "f":
                self.warn(2, key, f"vertices dtype {dt} is not a float type")
            if zv == "links" and np.dtype(dt).kind not in "iu":
                self.error(2, key, f"links dtype {dt} is not an integer type")
                info.usable = False
        if zv == "vertices" and a.get("encoding", "raw") != "raw":
            self.warn(2, key, f"vertices encoding {a.get('encoding')!r}: cells are not checked")
            info.usable = False
        if zv in ("attribute", "fragment_attribute", "link_attribute"):
            rs = a.get("row_shape", [])
            if not isinstance(rs, list) or len(rs) > 1 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                  and x >= 1 for x in rs):
                self.error(2, key, f"row_shape {rs!r} must be [] or [C] with C >= 1")
                info.usable = False
            elif rs and "channel_names" in a and (not isinstance(a["channel_names"], list)
                                                  or len(a["channel_names"]) != rs[0]):
                self.warn(2, key, f"channel_names {a['channel_names']!r} do not match row_shape {rs}")

    def _grid_vs_bounds(self, lv: LevelInfo, layout: LevelLayout, vert: ArrayInfo) -> None:
        org = vert.origin
        if lv.parsed.chunk_dims or org is None:  # no origin: structure() marked vertices unusable
            return
        lo, hi = (np.asarray(b, dtype=np.float64) for b in self.root.bounds)
        cs = np.asarray(layout.chunk_shape, dtype=np.float64)
        need_lo = np.floor(lo / cs).astype(np.int64)
        need_hi = np.ceil(hi / cs).astype(np.int64)  # exclusive: cells with points strictly inside
        top = org + np.asarray(vert.meta.shape, dtype=np.int64)
        if np.any(org > need_lo) or np.any(top < np.maximum(need_hi, need_lo + 1)):
            self.warn(2, f"{vert.path}/zarr.json",
                      f"chunk grid [origin {org.tolist()}, shape {list(vert.meta.shape)}] does not cover the "
                      f"bounds {lo.tolist()}..{hi.tolist()} with chunk_shape {cs.tolist()}")

    def _links_meta(self, lv: LevelInfo) -> None:
        n = lv.index
        for rel, attrs in sorted(lv.groups.items()):
            parts = rel.split("/")
            if len(parts) != 2 or parts[0] != "links":
                continue
            key = f"{n}/{rel}/zarr.json"
            try:
                delta = parse_delta(parts[1])
            except FormatError:
                self.error(2, key, f"links family name {parts[1]!r} is not a level delta (0, +k, -k)")
                continue
            if attrs.get("zv_array") != "links_family":
                self.error(2, key, f"zv_array must be 'links_family', got {attrs.get('zv_array')!r}")
            if attrs.get("level_delta", delta) != delta:
                self.error(2, key, f"level_delta {attrs.get('level_delta')!r} does not match the name {parts[1]}")
            lw = attrs.get("link_width")
            if not isinstance(lw, int) or isinstance(lw, bool) or lw < 1:
                self.error(2, key, f"link_width {lw!r} must be a positive integer")
            if delta != 0 and n + delta not in self.levels:
                self.error(2, key, f"cross-level family points to level {n + delta}, which does not exist")
        for rel, info in sorted(lv.arrays.items()):
            if info.zv not in ("links", "link_attribute") or not info.usable:
                continue
            key = f"{info.path}/zarr.json"
            parts = rel.split("/")
            fam_rel = "/".join(parts[:-1])
            fam = lv.groups.get(fam_rel)
            sid = info.meta.ndim
            try:
                offs = as_offsets(parse_offsets_name(parts[-1], sid, key=key))
            except FormatError as e:
                self.error(2, key, strip_key(str(e), key))
                info.usable = False
                continue
            stated = info.attrs.get("offsets")
            if stated is not None and as_offsets(stated) != offs:
                self.error(2, key, f"offsets attribute {stated!r} does not match the array name {parts[-1]!r}")
            try:
                delta = parse_delta(parts[-2])
            except FormatError:
                info.usable = False
                continue
            if info.attrs.get("level_delta", delta) != delta:
                self.error(2, key, f"level_delta {info.attrs.get('level_delta')!r} does not match {parts[-2]}")
            if info.zv == "links":
                if fam is None:
                    self.error(1, key, f"links array outside a links family group ({n}/{fam_rel}/zarr.json missing)")
                    continue
                lw = fam.get("link_width")
                if info.attrs.get("link_width", lw) != lw:
                    self.error(2, key, f"link_width {info.attrs.get('link_width')} differs from the family's {lw}")
                if isinstance(lw, int) and len(offs) != lw - 1 and not (delta == 0 and not any(any(o) for o in offs)
                                                                        and len(offs) in (1, lw - 1)):
                    self.error(2, key, f"{len(offs)} offset vector(s) for link_width {lw} (expected {lw - 1})")
                if not isinstance(info.attrs.get("has_perm", False), bool):
                    self.error(2, key, f"has_perm {info.attrs.get('has_perm')!r} must be a boolean")
                    info.usable = False

    def _objects_meta(self, lv: LevelInfo) -> None:
        n = lv.index
        oi = lv.groups.get("object_index")
        man = lv.array("object_index/manifests")
        ids = lv.array("object_index/object_ids")
        if oi is not None:
            key = f"{n}/object_index/zarr.json"
            num = oi.get("num_objects")
            if num is None and not lv.parsed.vertex_count:
                lv.num_objects = 0
            elif not isinstance(num, int) or isinstance(num, bool) or num < 0:
                self.error(2, key, f"num_objects {num!r} must be a non-negative integer")
            else:
                lv.num_objects = num
            sidn = oi.get("sid_ndim")
            exp = self.ndim + (1 if lv.parsed.chunk_dims else 0)
            if sidn is not None and sidn != exp:
                self.error(2, key, f"sid_ndim {sidn!r} but chunk coordinates have {exp} axes")
            np_ = oi.get("num_present")
            if isinstance(np_, int) and lv.num_objects is not None and np_ > lv.num_objects:
                self.error(2, key, f"num_present {np_} exceeds num_objects {lv.num_objects}")
        if man is not None and man.usable:
            o = man.meta.shape[0] if man.meta.ndim == 1 else None
            if lv.num_objects is None:
                lv.num_objects = o
            elif o is not None and o != lv.num_objects:
                self.error(2, f"{man.path}/zarr.json", f"shape [{o}] but the object index says "
                                                       f"num_objects {lv.num_objects}")
        if ids is not None and ids.usable and lv.num_objects is not None and ids.meta.shape[0] != lv.num_objects:
            self.error(2, f"{ids.path}/zarr.json", f"shape {list(ids.meta.shape)} but there are "
                                                   f"{lv.num_objects} objects")
        for name in lv.named("object_attributes"):
            info = lv.arrays[f"object_attributes/{name}"]
            if info.usable and lv.num_objects is not None and info.meta.shape[0] != lv.num_objects:
                self.error(2, f"{info.path}/zarr.json", f"object attribute has {info.meta.shape[0]} rows for "
                                                        f"{lv.num_objects} objects")
        grp = lv.array("groups")
        if grp is not None:
            ng = grp.attrs.get("num_groups")
            if ng is not None and ng != grp.meta.shape[0]:
                self.error(2, f"{grp.path}/zarr.json", f"num_groups {ng} but shape {list(grp.meta.shape)}")
            for name in lv.named("group_attributes"):
                info = lv.arrays[f"group_attributes/{name}"]
                if info.usable and info.meta.shape[0] != grp.meta.shape[0]:
                    self.error(2, f"{info.path}/zarr.json", f"group attribute has {info.meta.shape[0]} rows for "
                                                            f"{grp.meta.shape[0]} groups")
