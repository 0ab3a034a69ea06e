"""Level 3, link cells: rows decode, endpoints land on stored vertices, offsets are
canonical, link fragments and link attributes agree with the link rows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import FormatError, ZvfError
from ..format import metadata as md
from ..format.fragments import decode_fragment_index
from ..format.keys import format_chunk_id, parse_delta, parse_offsets_name
from ..format.links import decode_intra_links, decode_ragged_links_groups, unpermute
from .cells import CellReads
from .model import ArrayInfo, Failed, LevelInfo, strip_key


class LinkChecks(CellReads):
    """Level 3, link cells checks of :class:`zvf.validation.checks.Validator`."""

    def _scale(self, lv: LevelInfo) -> np.ndarray:
        r = np.asarray(lv.layout.chunk_scale if lv.layout is not None else (1,) * self.ndim, dtype=np.int64)
        if lv.meta is not None and lv.meta.chunk_dims:
            r = np.concatenate(([1], r))
        return np.maximum(r, 1)

    async def _link_pass(self, lv: LevelInfo) -> None:
        n = lv.index
        fam_rows: Counter[str] = Counter()
        link_rows: dict[tuple[str, tuple[int, ...]], int] = {}
        vert = lv.arrays.get("vertices")
        if vert is not None and vert.meta is not None and vert.meta.attributes.get("encoding", "raw") != "raw":
            return  # Draco cells reorder vertices: link rows index the pre-encoding order (not checkable)
        arrays = sorted((rel, a) for rel, a in lv.arrays.items() if a.zv == "links" and a.usable
                        and a.present is not None)
        for rel, info in arrays:
            parts = rel.split("/")
            fam = lv.groups.get("/".join(parts[:-1]), {})
            try:
                delta = parse_delta(parts[-2])
                offs = parse_offsets_name(parts[-1], info.meta.ndim)
            except FormatError:
                continue
            lw = fam.get("link_width", info.attrs.get("link_width"))
            if not isinstance(lw, int) or lw < 1:
                continue
            intra = delta == 0 and not offs.any()
            has_perm = bool(info.attrs.get("has_perm", False))
            dtype = info.attrs.get("dtype", "int64")
            target = self.levels.get(n + delta)
            if target is None or (delta != 0 and target.meta is None):  # at delta 0 the target is lv
                continue
            if self.max_level >= 3 and delta == 0 and not fam.get("directed", False) \
                    and fam.get("store", "canonical") == "canonical" and not intra:
                self._canonical(info, offs)
            s_src, s_trg = self._scale(lv), self._scale(target if delta else lv)

            async def one(chunk: tuple[int, ...], info: ArrayInfo = info, offs: npt.NDArray[np.int64] = offs,
                          intra: bool = intra, has_perm: bool = has_perm, lw: int = lw, dtype: npt.DTypeLike = dtype,
                          delta: int = delta, target: LevelInfo = target, s_src: np.ndarray = s_src,
                          s_trg: np.ndarray = s_trg, rel: str = rel) -> None:
                p = await self._payload(info, chunk)
                if p is None or isinstance(p, Failed):
                    return
                key = info.cell_key(chunk)
                nsrc = lv.n_rows.get(chunk)
                try:
                    if intra:
                        rows = decode_intra_links(p, lw, key=key, dtype=dtype)
                        perm: npt.NDArray[np.int64] | None = None
                    else:
                        rows, perm, _ = decode_ragged_links_groups(p, lw, has_perm, key=key, dtype=dtype)
                except ZvfError as e:
                    self.error(3, key, f"link cell does not decode: {strip_key(str(e), key)}", kind="links")
                    return
                link_rows[(rel, chunk)] = len(rows)
                fam_rows["/".join(rel.split("/")[:-1])] += len(rows)
                self.counts["links"] += len(rows)
                if intra:
                    lv.intra_rows[chunk] = len(rows)
                if not len(rows):
                    return
                if chunk in lv.bad_chunks:
                    return
                if nsrc is None:
                    self.error(3, key, f"{len(rows)} link row(s) in chunk {format_chunk_id(chunk)}, which holds "
                                       "no vertices", kind="link-src")
                    return
                self._endpoint(key, rows[:, 0], nsrc, f"its own chunk {format_chunk_id(chunk)}", 3)
                if intra:
                    self._endpoint(key, rows[:, 1:], nsrc, f"its own chunk {format_chunk_id(chunk)}", 3)
                else:
                    anchor = (np.asarray(chunk, dtype=np.int64) * s_src) // s_trg
                    tl = target if delta else lv
                    lvl = 5 if delta else 3
                    for j in range(1, lw):
                        off = offs[min(j - 1, len(offs) - 1)]
                        other = tuple((anchor + off).tolist())
                        where = f"chunk {format_chunk_id(other)}" + (f" of level {tl.index}" if delta else "")
                        if other in tl.bad_chunks:
                            continue
                        m = tl.n_rows.get(other)
                        if m is None:
                            self.error(lvl, key, f"link endpoint {j} points into {where}, which holds no vertices",
                                       kind="link-dst")
                            continue
                        self._endpoint(key, rows[:, j], m, where, lvl, j)
                if self.geometry == "skeleton" and delta == 0 and n == 0:
                    self._collect_skeleton(chunk, offs, intra, rows, perm)
                if self.geometry == "mesh" and delta == 0 and intra and lw == 3 and self.max_level >= 4:
                    deg = int(np.count_nonzero((rows[:, 0] == rows[:, 1]) | (rows[:, 1] == rows[:, 2])
                                               | (rows[:, 0] == rows[:, 2])))
                    if deg:
                        self.warn(4, key, f"{deg} degenerate face(s) repeat a vertex", kind="faces")
                if (self.geometry in md.SEQUENTIAL_GEOMETRIES and delta == 0 and intra and len(rows)
                        and self.max_level >= 4):
                    self.error(4, key, f"{len(rows)} intra-chunk link row(s), but {self.geometry}s store no "
                                       "intra links (implicit sequential)", kind="seq")

            await self.ex.map(one, sorted(info.present or ()))

        for fam_rel, attrs in sorted(lv.groups.items()):
            parts = fam_rel.split("/")
            if len(parts) != 2 or parts[0] != "links":
                continue
            key = f"{n}/{fam_rel}/zarr.json"
            total = fam_rows.get(fam_rel, 0)
            phys = attrs.get("num_physical_records", attrs.get("num_links"))
            if isinstance(phys, int) and not isinstance(phys, bool) and phys != total:
                label = "num_physical_records" if "num_physical_records" in attrs else "num_links"
                self.error(3, key, f"{label} is {phys} but the family's cells hold {total} link rows")
        await self._link_fragments(lv)
        await self._link_attributes(lv, link_rows)

    def _endpoint(self, key: str, col: np.ndarray, limit: int, where: str, level: int, j: int = 0) -> None:
        bad = col >= limit
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1) if bad.ndim > 1 else bad)[0])
            v = int(np.asarray(col[r]).max())
            self.error(level, key, f"{int(bad.sum())} link endpoint(s) past the {limit} vertices of {where} "
                                   f"(row {r}: vertex {v})", kind=f"link-range{j}")

    def _canonical(self, info: ArrayInfo, offs: np.ndarray) -> None:
        key = f"{info.path}/zarr.json"
        for i, off in enumerate(offs.tolist()):
            nz = [x for x in off if x]
            if nz and nz[0] < 0:
                self.error(3, key, f"offset {i + 1} {off} is lexicographically negative: a canonical family "
                                   "stores each link once, under the positive offset")
            if i and tuple(off) < tuple(offs[i - 1].tolist()):
                self.error(3, key, "offsets are not in non-decreasing order (canonical sort)")

    async def _link_fragments(self, lv: LevelInfo) -> None:
        lf = lv.array("link_fragments")
        if lf is None or not lf.usable or lf.present is None:
            return

        async def one(chunk: tuple[int, ...]) -> None:
            p = await self._payload(lf, chunk)
            if p is None or isinstance(p, Failed):
                return
            key = lf.cell_key(chunk)
            m = lv.intra_rows.get(chunk, 0)
            try:
                decode_fragment_index(p, key=key, n_rows=m)
            except ZvfError as e:
                self.error(3, key, f"link fragment index invalid for the chunk's {m} intra link rows: "
                                   f"{strip_key(str(e), key)}", kind="link-fragments")

        await self.ex.map(one, sorted(lf.present))

    async def _link_attributes(self, lv: LevelInfo, link_rows: dict[tuple[str, tuple[int, ...]], int]) -> None:
        for rel, info in sorted(lv.arrays.items()):
            if info.zv != "link_attribute" or not info.usable or info.present is None:
                continue
            parts = rel.split("/")  # link_attributes/<name>/<delta>/<offsets>
            links_rel = "links/" + "/".join(parts[-2:])
            if links_rel not in lv.arrays:
                self.error(3, f"{info.path}/zarr.json", f"no links array {lv.index}/{links_rel} to align with")
                continue
            adt, aw = self._row_layout(info)

            async def one(chunk: tuple[int, ...], info: ArrayInfo = info, links_rel: str = links_rel,
                          adt: np.dtype[Any] = adt, aw: int = aw) -> None:
                p = await self._payload(info, chunk)
                if p is None or isinstance(p, Failed):
                    return
                want = link_rows.get((links_rel, chunk), 0)
                nb = memoryview(p).nbytes
                if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != want:
                    self.error(3, info.cell_key(chunk), f"{nb / (adt.itemsize * aw):g} link-attribute rows for "
                                                        f"{want} link rows of {lv.index}/{links_rel}",
                               kind="lattr-rows")

            await self.ex.map(one, sorted(info.present))

    def _collect_skeleton(self, chunk: tuple[int, ...], offs: npt.NDArray[np.int64], intra: bool, rows: np.ndarray,
                          perm: npt.NDArray[np.int64] | None) -> None:
        """Skeleton rows as (child, parent) global vertex ids (chunk number << 32 | local row)."""
        if rows.shape[1] != 2:
            return
        ids = self._chunk_ids
        c0 = ids.setdefault(tuple(chunk), len(ids))
        a = np.asarray(chunk, dtype=np.int64)
        c1 = c0 if intra else ids.setdefault(tuple((a + offs[0]).tolist()), len(ids))
        g = np.stack([rows[:, 0] + (c0 << 32), rows[:, 1] + (c1 << 32)], axis=1)
        self._skeleton_edges.append(unpermute(g, perm) if perm is not None else g)
