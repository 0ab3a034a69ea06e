"""Level 3, consistency (driver, cells, vertices, dense arrays): every cell decodes and
fragments, attributes and counts agree with each other and with the listing.
Links and objects have their own passes (:mod:`.link_pass`, :mod:`.object_pass`).
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError, ZvfError
from ..format.fragments import FragmentIndex, decode_fragment_index
from ..format.keys import format_chunk_id
from ..format.layout import LevelLayout
from .link_pass import LinkChecks
from .model import ArrayInfo, Failed, LevelInfo, strip_key
from .object_pass import ObjectChecks


class ConsistencyChecks(LinkChecks, ObjectChecks):
    """Level 3 checks of :class:`zvf.validation.checks.Validator`: the driver, cells and vertices
    (links and the object index in their own passes)."""

    async def _consistency(self) -> None:
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is None:
                continue
            await self._presence(lv)
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is not None and lv.array("vertices") is not None:
                await self._vertex_pass(lv)
        for n in sorted(self.levels):
            lv = self.levels[n]
            if lv.meta is not None:
                await self._link_pass(lv)
                await self._object_pass(lv)
                await self._dense_pass(lv)

    async def _presence(self, lv: LevelInfo) -> None:
        """Stored cells of every spatial array vs its nonempty_chunks."""
        spatial = {id(a) for a in lv.spatial}
        for info in lv.arrays.values():
            keys, origin = info.keys, info.origin
            if not info.usable or info.codec is None or keys is None or origin is None:  # usable: both parsed
                continue
            ndim = info.meta.ndim
            prefix = len(info.path) + 1
            shape = np.asarray(info.meta.shape, dtype=np.int64)
            per = np.asarray(info.meta.chunk_shape, dtype=np.int64)
            n_grid = -(-shape // per)
            for k in info.stored:
                try:
                    g = keys.parse(k[prefix:], ndim)
                except FormatError:
                    self.error(3, k, f"not a chunk key of {info.path} (stray object inside the array)", kind="stray")
                    continue
                if any(x < 0 or x >= m for x, m in zip(g, n_grid.tolist())):
                    self.error(3, k, f"cell {format_chunk_id(g)} lies outside the grid {n_grid.tolist()} "
                                     f"of {info.path}", kind="outside")
                    continue
                info.grid_cells[g] = k
            if id(info) not in spatial:
                continue
            present: set[tuple[int, ...]] = set()
            org = origin.tolist()
            if info.codec.shard is None:
                present = {tuple(a + o for a, o in zip(g, org)) for g in info.grid_cells}
            else:
                idx = await self.ex.gather([self._shard_index(info.codec.shard, k) for k in info.grid_cells.values()])
                for g, res in zip(info.grid_cells, idx):
                    if res is None or isinstance(res, Failed):
                        continue
                    offsets, _ = res
                    inner = np.flatnonzero(offsets != np.uint64(2**64 - 1))
                    if inner.size:
                        local = np.stack(np.unravel_index(inner, tuple(per.tolist())), axis=1)
                        cells = local + np.asarray(g, dtype=np.int64) * per
                        inside = np.all(cells < shape, axis=1)
                        for c in (cells[inside] + info.origin).tolist():
                            present.add(tuple(c))
            info.present = present
            self.counts["cells"] += len(present)
            missing = sorted(info.listed - present)
            extra = sorted(present - info.listed)
            for c in missing:
                self.error(3, info.cell_key(c), f"listed in {info.path} nonempty_chunks (chunk {format_chunk_id(c)}) "
                                                "but the cell does not exist", kind="missing-cell")
            for c in extra:
                self.error(3, info.cell_key(c), f"cell of chunk {format_chunk_id(c)} is stored but not listed in "
                                                f"{info.path} nonempty_chunks (leftover of an interrupted or "
                                                "failed write?)", kind="unlisted-cell")

    async def _vertex_pass(self, lv: LevelInfo) -> None:
        vert = lv.array("vertices")
        if vert is None:  # asked only of levels with a vertices array
            return
        frag = lv.array("vertex_fragments")
        attrs = [lv.arrays[f"vertex_attributes/{a}"] for a in lv.named("vertex_attributes")]
        fattrs = [lv.arrays[f"fragment_attributes/{a}"] for a in lv.named("fragment_attributes")]
        group = [a for a in [vert, frag, *attrs, *fattrs] if a is not None and a.present is not None]
        chunks: set[tuple[int, ...]] = set()
        for a in group:
            chunks |= a.present or set()
        if not vert.usable or vert.present is None:
            lv.vertex_total_known = False
            return
        layout = lv.layout if self.max_level >= 4 else None

        async def one(chunk: tuple[int, ...]) -> None:
            pay = await self.ex.gather([self._payload(a, chunk) for a in group])
            self._check_vertex_chunk(lv, chunk, dict(zip([a.path for a in group], pay)), vert, frag, attrs,
                                     fattrs, layout)

        await self.ex.map(one, sorted(chunks))
        self.counts["chunks"] += len(chunks)
        key = lv.doc_key
        if lv.vertex_total_known and lv.parsed.vertex_count != lv.vertex_total:
            self.error(3, key, f"vertex_count is {lv.parsed.vertex_count} but the cells hold {lv.vertex_total} "
                               "vertices")

    def _check_vertex_chunk(self, lv: LevelInfo, chunk: tuple[int, ...], pay: dict[str, bytes | Failed | None],
                            vert: ArrayInfo, frag: ArrayInfo | None, attrs: list[ArrayInfo], fattrs: list[ArrayInfo],
                            layout: LevelLayout | None) -> None:
        cid = format_chunk_id(chunk)
        vp = pay[vert.path]
        if isinstance(vp, Failed):
            lv.bad_chunks.add(chunk)
            lv.vertex_total_known = False
            return
        dt, width = self._row_layout(vert)
        row_bytes = dt.itemsize * width
        if vp is None:
            positions = None
            n = 0
            if chunk not in vert.listed:
                have = [a.path for a in (frag, *attrs, *fattrs) if a is not None and pay.get(a.path) is not None]
                if have:
                    self.error(3, have[0] if frag is None else frag.cell_key(chunk),
                               f"chunk {cid} has cells in {', '.join(have)} but no vertices (orphan cells)",
                               kind="orphan-cell")
                return
        else:
            nb = memoryview(vp).nbytes
            if nb % row_bytes:
                self.error(3, vert.cell_key(chunk), f"{nb} bytes is not a whole number of {row_bytes}-byte "
                                                   f"vertex rows ({width} x {dt.name})", kind="rows")
                lv.bad_chunks.add(chunk)
                lv.vertex_total_known = False
                return
            n = nb // row_bytes
            positions = np.frombuffer(vp, dtype=dt).reshape(n, width)
            if n and not np.isfinite(positions).all():
                self.warn(3, vert.cell_key(chunk), "vertices include NaN or infinite coordinates", kind="nan")
            if n and layout is not None and width == layout.ndim:
                self._check_place(vert.cell_key(chunk), chunk, positions, layout)
        lv.n_rows[chunk] = n
        lv.vertex_total += n
        self.counts["vertices"] += n

        fi = None
        if frag is not None and frag.usable:
            fp = pay.get(frag.path)
            if fp is None:
                if n:
                    self.error(3, frag.cell_key(chunk), f"chunk {cid} has {n} vertices but no fragment index",
                               kind="no-fragments")
            elif not isinstance(fp, Failed):
                try:
                    fi = decode_fragment_index(fp, key=frag.cell_key(chunk), n_rows=n)
                except ZvfError as e:
                    self.error(3, frag.cell_key(chunk), f"fragment index invalid: "
                                                        f"{strip_key(str(e), frag.cell_key(chunk))}", kind="fragments")
        if fi is not None and frag is not None:  # fi is decoded from frag
            lv.n_frags[chunk] = fi.num_fragments
            self.counts["fragments"] += fi.num_fragments
            if lv.parsed.fragments_tile and not fi.tiles(n):
                self.error(3, frag.cell_key(chunk), f"fragments_tile is set on {lv.doc_key} but the fragments of "
                                                    f"chunk {cid} do not tile its {n} rows", kind="tile")
            if (layout is not None and layout.fragments_are_bins and "object_index" not in lv.groups
                    and positions is not None and width == layout.ndim):
                self._check_bins(frag.cell_key(chunk), chunk, positions, fi, layout)

        for a in attrs:
            if not a.usable:
                continue
            ap = pay.get(a.path)
            if isinstance(ap, Failed):
                continue
            if ap is None:
                if n:
                    self.error(3, a.cell_key(chunk), f"chunk {cid} has {n} vertices but no {a.path} cell",
                               kind="attr-missing")
                continue
            adt, aw = self._row_layout(a)
            nb = memoryview(ap).nbytes
            if not a.attrs.get("row_shape") and n and nb % (adt.itemsize * n) == 0:
                # 0.9.2 labels multi-channel attributes ``row_shape: []`` too: C is read off the cells.
                width = nb // (adt.itemsize * n)
                if a.channels is None:
                    a.channels = width
                if width != a.channels:
                    self.error(3, a.cell_key(chunk), f"{width} values per vertex, other cells of {a.path} "
                                                     f"hold {a.channels}", kind="attr-rows")
                continue
            if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != n:
                rows = nb / (adt.itemsize * aw)
                self.error(3, a.cell_key(chunk), f"{rows:g} attribute rows for the chunk's {n} vertices "
                                                 f"(not row-aligned with {vert.cell_key(chunk)})", kind="attr-rows")
        for a in fattrs:
            ap = pay.get(a.path)
            if isinstance(ap, Failed) or ap is None or fi is None or not a.usable:
                continue
            adt, aw = self._row_layout(a)
            nb = memoryview(ap).nbytes
            if nb % (adt.itemsize * aw) or nb // (adt.itemsize * aw) != fi.num_fragments:
                self.error(3, a.cell_key(chunk), f"{nb / (adt.itemsize * aw):g} fragment-attribute rows for "
                                                 f"{fi.num_fragments} fragments", kind="fattr-rows")

    def _check_place(self, key: str, chunk: tuple[int, ...], positions: np.ndarray, layout: LevelLayout) -> None:
        """Level 4: every vertex lies in the chunk it is filed under, by either placement rule of the
        level's layout -- exactly the rows a box query finds there."""
        spatial = np.asarray(chunk[len(chunk) - layout.ndim:], dtype=np.int64)
        bad = np.flatnonzero(layout.misfiled(spatial, positions))
        if len(bad):
            row = int(bad[0])
            where = layout.chunk_of(positions[row:row + 1])[0].tolist()
            self.error(4, key, f"{len(bad)} vertex row(s) lie outside chunk {format_chunk_id(chunk)}, which they "
                               f"are filed under (row {row} at {positions[row].tolist()} belongs in chunk "
                               f"{format_chunk_id(where)} of edge {list(layout.chunk_shape)}): box queries miss "
                               "them", kind="placement")

    def _check_bins(self, key: str, chunk: tuple[int, ...], positions: np.ndarray, fi: FragmentIndex,
                    layout: LevelLayout) -> None:
        """Level 4: a point cloud's fragment f holds exactly the rows of bin f (C order), placed by
        the level's layout (bin-narrowed reads and counts read only the bins a box touches)."""
        nb = layout.bins_in_chunk
        if fi.num_fragments != nb:
            self.error(4, key, f"{fi.num_fragments} fragments but a chunk has {nb} bins "
                               "(one range fragment per bin, empty ones included)", kind="bins")
            return
        if not len(positions):
            return
        chunks, flat = layout.bin_of(positions)
        spatial = np.asarray(chunk[len(chunk) - layout.ndim:], dtype=np.int64)
        local = chunks - spatial  # zero when the row's bin is in this chunk
        rows, lengths = fi.gather(np.arange(nb))
        want = np.repeat(np.arange(nb), lengths)
        got = np.full(len(positions), -1, dtype=np.int64)
        got[rows] = want
        finite = np.all(np.isfinite(positions), axis=1)
        bad = int(np.count_nonzero(((got != flat) | np.any(local != 0, axis=1)) & finite))
        if bad:
            self.error(4, key, f"{bad} vertex row(s) are not in the fragment of their bin (bins of edge "
                               f"{list(layout.grid.effective_bin_shape)}): reads narrowed to the bins a box "
                               "touches miss them", kind="bins")
