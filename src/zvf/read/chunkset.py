"""``ChunkSet``: the decoded chunks of one read, each fetched once.

Vertices, fragment indexes, attributes and link rows of every chunk a read
needs, laid out in one global row space in which manifests' fragment rows
and link endpoints are resolved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from ..errors import FormatError, MissingDataError
from ..format.draco import decode_cell
from ..format.fragments import FragmentIndex, decode_fragment_index
from ..format.links import decode_intra_links, decode_ragged_links, unpermute
from .cells import CellArray, ChunkList, rows_from_payload
from .links import LinkArray, Links
from .points import attribute_layout, attribute_rows
from .rowops import expand_ranges, match_rows

if TYPE_CHECKING:
    from .context import ReadContext
    from .load import Level

Chunk: TypeAlias = tuple[int, ...]  # chunk coordinates (a leading category axis included)
Rows: TypeAlias = "np.ndarray[Any, np.dtype[Any]]"  # positions or attribute rows, of the array's dtype
Concatenated: TypeAlias = tuple[NDArray[np.int64], NDArray[np.int64], Rows, dict[str, Rows]]
"""(base row, counts, positions, attributes) of every loaded chunk (:meth:`ChunkSet.concat`)."""
IntraCell: TypeAlias = tuple[NDArray[np.int64], dict[str, Rows]]
"""A decoded intra-chunk link cell: (chunk-local rows, link attribute rows)."""
CrossCell: TypeAlias = tuple[NDArray[np.int64], NDArray[np.int64] | None, str, dict[str, Rows]]
"""A decoded cross-chunk link cell: (rows, perm or None, key, link attribute rows)."""
LinkCell: TypeAlias = IntraCell | CrossCell | tuple[()]
"""A decoded link cell as cached; ``()`` for an absent one."""
Fetched: TypeAlias = dict[str, list[bytes | memoryview | None]]
"""Payloads of one fetch wave by job name (``v``, ``f``, ``a/<name>``, ``l/<i>``, ``la/<i>/<name>``), in cell order."""

LINK_CACHE = "link_cells"  # executor cache of decoded link cells, shared by the reads of a dataset
EMPTY_FI = FragmentIndex(np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int64))


class ChunkSet:
    """Decoded chunks of one level for one read: each chunk is fetched once.

    Chunks get a slot in load order and a base row in a global row space
    (the concatenation of all loaded chunks' vertices), in which fragment
    rows and link endpoints are expressed.
    """

    def __init__(self, rc: ReadContext, level: Level, names: list[str], links: Links | None = None,
                 incoming: bool = False, category: bool = False) -> None:
        self.level = level
        self.names = names
        self.links = links
        self.vert = level.need("vertices")
        self.frag = level.array("vertex_fragments")
        self.draco = level.is_draco()
        self.dtype = np.dtype(self.vert.meta.attributes.get("dtype", "float32"))
        self.ndim = rc.ndim
        self.kdim = level.key_ndim  # chunk coordinate rank (a leading category axis adds one)
        self.category = category  # add the chunking attribute's value of every row
        self.attr_arrays = {n: level.need(f"vertex_attributes/{n}") for n in names}
        # a sweep of the whole level (the export's): sharded fragment indexes come a shard at a time and stay
        # cached, as later windows need the rest of each shard (see CellArray.payloads)
        self.sweep = False
        self.coords: list[Chunk] = []
        self.slot: dict[Chunk, int] = {}
        self.present: list[bool] = []
        self.frag_present: list[bool] = []
        self.pos: list[np.ndarray] = []
        self.fis: list[FragmentIndex] = []
        self.attrs: dict[str, list[Rows | None]] = {n: [] for n in names}  # None: chunk loaded without them
        self.counts: list[int] = []
        self.has_attrs: list[bool] = []
        self._channels: dict[str, int] = {}  # inferred channels of attributes stored with row_shape []
        self.intra: list[tuple[int, NDArray[np.int64], dict[str, Rows]]] = []  # (slot, rows local, link attr rows)
        self.cross: dict[tuple[int, Chunk], CrossCell | None] = {}  # (array idx, source) -> decoded cell
        # a cross-chunk link row counts when all its endpoints are held; skeletons (and ``incoming``)
        # take rows with any endpoint held: a stored parent outside still replaces the implicit one
        self.any_end = incoming or rc.geometry_type == "skeleton"
        self._taken: np.ndarray | None = None  # listed cross cells (CrossCells indices) planned already
        self.ex = rc.ex
        self._cat: Concatenated | None = None

    # ------------------------------------------------------------- loading
    async def load(self, chunks: ChunkList, *, attributes: bool = True) -> None:
        """Fetch what ``chunks`` still lack, all arrays in one wave.

        New chunks get vertices, fragments and links; attributes are fetched
        too unless ``attributes=False`` (a query's box scan), and later for
        chunks that were first loaded without them.
        """
        req = [tuple(int(x) for x in c) for c in np.asarray(chunks, dtype=np.int64).reshape(-1, self.kdim).tolist()]
        req = list(dict.fromkeys(req))
        new = [c for c in req if c not in self.slot]
        want_attrs = [c for c in req if c not in self.slot or not self.has_attrs[self.slot[c]]] if attributes else []
        if not new and not (want_attrs and self.attr_arrays):
            return
        jobs: dict[str, tuple[CellArray, list[Chunk]]] = {}
        if new:
            jobs["v"] = (self.vert, new)
            if self.frag is not None and not self.draco:  # a Draco chunk is one fragment, whatever is stored
                jobs["f"] = (self.frag, new)
        if want_attrs:
            for n, arr in self.attr_arrays.items():
                jobs[f"a/{n}"] = (arr, want_attrs)
        # Draco: faces come from the bitstream
        link_cells = self._link_cells(self.links, new) if self.links is not None and new and not self.draco else []
        link_arrays = self.links.arrays if self.links is not None else []
        hits: dict[tuple[int, Chunk], LinkCell] = {}
        for i, cells in link_cells:
            la = link_arrays[i]
            miss = []
            for c in cells:  # per cell: decoded cells of earlier reads are reused
                hit = self.ex.get_cached(LINK_CACHE, self._link_ckey(la, c))
                if hit is None:
                    miss.append(c)
                else:
                    hits[(i, c)] = hit
            if miss:
                jobs[f"l/{i}"] = (la.arr, miss)
                for an, arr in la.attributes.items():
                    jobs[f"la/{i}/{an}"] = (arr, miss)
        # executor.gather raises the first failure itself (a ZvfError naming its key), not a group
        fetched = await self.vert.executor.gather([arr.payloads(cs, keep_shards=self.sweep and name == "f")
                                                   for name, (arr, cs) in jobs.items()])
        results: Fetched = dict(zip(jobs, fetched))

        for i, c in enumerate(new):  # per chunk
            payload = results["v"][i]
            vkey = self.vert.key_of(self.vert.cell_coords(c))
            if self.draco:
                pos, faces = (np.zeros((0, 3), np.float32), None) if payload is None else decode_cell(payload, key=vkey)
                pos = pos.astype(self.dtype, copy=False)
                fpay = payload
                fi = FragmentIndex.from_ranges([0], [len(pos)]) if payload is not None else EMPTY_FI
                if faces is not None and len(faces) and self.links is not None:
                    self.intra.append((len(self.coords), faces, {}))
            else:
                pos = rows_from_payload(payload, self.dtype, (self.ndim,), key=vkey)
                fpay = results["f"][i] if "f" in results else None
                fi = EMPTY_FI if fpay is None else decode_fragment_index(
                    fpay, key=self._fkey(c), n_rows=len(pos) if payload is not None else None)
            self.slot[c] = len(self.coords)
            self.coords.append(c)
            self.present.append(payload is not None)
            self.frag_present.append(fpay is not None)
            self.pos.append(pos)
            self.fis.append(fi)
            self.counts.append(len(pos))
            self.has_attrs.append(False)
            for n in self.attr_arrays:
                self.attrs[n].append(None)
        for i, c in enumerate(want_attrs):  # per chunk
            s = self.slot[c]
            if not self.present[s]:  # no vertices: nothing to align (reading it is a MissingDataError)
                continue
            for n, arr in self.attr_arrays.items():
                akey = arr.key_of(arr.cell_coords(c))
                self.attrs[n][s] = attribute_rows(n, arr, results[f"a/{n}"][i], self.counts[s], akey, self._channels)
            self.has_attrs[s] = True
        if link_cells:
            self._decode_links(link_cells, hits, results, jobs)
        self._cat = None

    # ------------------------------------------------------------- link cells
    def _link_cells(self, links: Links, new: list[Chunk]) -> list[tuple[int, list[Chunk]]]:
        """(array index, cells) of the link cells the ``new`` chunks bring into use (:meth:`Links.plan`)."""
        if self._taken is None:
            self._taken = np.zeros(len(links.cells), dtype=bool)
        return links.plan(self.coords + new, new, self.any_end, self._taken, self.cross)

    @staticmethod
    def _link_ckey(la: LinkArray, c: Chunk) -> tuple[str, str, Chunk]:
        return ("link", la.arr.key_of(la.arr.cell_coords(c)), c)

    def _fkey(self, c: Chunk) -> str:
        arr = self.frag if self.frag is not None else self.vert
        name = arr.key_of(arr.cell_coords(c))
        return name if self.frag is not None else name.replace("/vertices/", "/vertex_fragments/", 1)

    def _decode_links(self, link_cells: list[tuple[int, list[Chunk]]], hits: dict[tuple[int, Chunk], LinkCell],
                      results: Fetched, jobs: dict[str, tuple[CellArray, list[Chunk]]]) -> None:
        """Decode fetched link cells (caching them for later reads) and file every planned one, in plan order."""
        link_arrays = self.links.arrays if self.links is not None else []
        for i, cells in link_cells:
            la = link_arrays[i]
            name = f"l/{i}"
            fetched = dict(zip(jobs[name][1], range(len(jobs[name][1])))) if name in jobs else {}
            for c in cells:  # per cell
                val = hits.get((i, c))
                if val is None:
                    val = self._decode_cell(la, i, fetched[c], c, results)
                    if val is None:
                        continue
                if not la.intra:  # a cross array's cells are (rows, perm, key, attrs) or () when absent
                    self.cross[(i, c)] = val if len(val) == 4 else None
                elif len(val) == 2 and len(val[0]):
                    self.intra.append((self.slot[c], val[0], val[1]))

    def _decode_cell(self, la: LinkArray, i: int, k: int, c: Chunk, results: Fetched) -> LinkCell | None:
        """The k-th fetched cell of array ``i``: intra (rows, attrs) or cross (rows, perm, key, attrs),
        ``()`` for an absent cell; None where nothing can be linked (no vertices)."""
        payload = results[f"l/{i}"][k]
        key = la.arr.key_of(la.arr.cell_coords(c))
        if payload is None:
            val: LinkCell = ()
        elif la.intra:
            s = self.slot[c]
            if not self.present[s]:  # the chunk's vertices are missing: nothing to link
                return None
            rows = decode_intra_links(payload, la.width, key=key, dtype=la.dtype, n_rows=self.counts[s])
            val = (rows, self._link_attrs(la, i, k, c, len(rows), results))
        else:
            rows, perm = decode_ragged_links(payload, la.width, la.has_perm, key=key, dtype=la.dtype)
            val = (rows, perm, key, self._link_attrs(la, i, k, c, len(rows), results))
        arrays = [v for v in val if isinstance(v, np.ndarray)] + [a for v in val if isinstance(v, dict)
                                                                   for a in v.values()]
        self.ex.put_cached(LINK_CACHE, self._link_ckey(la, c), val, nbytes=64 + sum(a.nbytes for a in arrays))
        return val

    @staticmethod
    def _link_attrs(la: LinkArray, i: int, k: int, c: Chunk, n_rows: int, results: Fetched) -> dict[str, Rows]:
        """Attribute rows of link cell ``c`` of array ``i`` (k-th fetched), one per link row."""
        out: dict[str, Rows] = {}
        for an, arr in la.attributes.items():
            key = arr.key_of(arr.cell_coords(c))
            dtype, rshape = attribute_layout(arr)
            vals = rows_from_payload(results[f"la/{i}/{an}"][k], dtype, rshape, key=key)
            if len(vals) != n_rows:
                if not rshape and n_rows and vals.size % n_rows == 0 and len(vals) > n_rows:
                    vals = vals.reshape(n_rows, -1)  # multi-channel rows labelled row_shape []
                else:
                    raise FormatError(f"{key}: {len(vals)} link attribute rows for {n_rows} links")
            out[an] = vals.copy()  # cached with the cell: keep the rows, not the payload they view
        return out

    async def learn_widths(self) -> None:
        """Load one non-empty chunk when an attribute labelled ``row_shape: []`` saw no rows yet.

        0.9.2 labels multi-channel attributes that way; only a cell tells how
        many channels they hold, and an empty result must still come back (0, C).
        """
        unknown = [n for n, arr in self.attr_arrays.items()
                   if not attribute_layout(arr)[1] and n not in self._channels]
        chunks = self.level.nonempty_chunks
        if unknown and len(chunks):
            await self.load(chunks[:1])

    # ------------------------------------------------------------- views
    def concat(self) -> Concatenated:
        """(base row, counts, positions, attributes) of every loaded chunk, concatenated once."""
        if self._cat is None:
            counts = np.asarray(self.counts, dtype=np.int64)
            base = np.cumsum(counts, dtype=np.int64) - counts
            pos = np.concatenate(self.pos) if self.pos else np.zeros((0, self.ndim), self.dtype)
            attrs: dict[str, Rows] = {}
            for n, arr in self.attr_arrays.items():
                adt, rshape = attribute_layout(arr)
                width = self._channels.get(n, 0)
                if not rshape and width:
                    rshape = (width,)
                parts = [np.zeros((cnt, *rshape), adt) if p is None else p if p.shape[1:] == rshape
                         else p.reshape(len(p), *rshape) for p, cnt in zip(self.attrs[n], self.counts)]
                attrs[n] = np.concatenate(parts) if parts else np.zeros((0, *rshape), adt)
            if self.category:
                assert self.level.category_name is not None  # ``category`` reads are of attribute-chunked levels
                values = np.asarray(self.level.categories)
                lead = np.asarray(self.coords, dtype=np.int64).reshape(-1, self.kdim)[:, 0]
                attrs[self.level.category_name] = np.repeat(values[lead], counts)
            self._cat = (base, counts, pos, attrs)
        return self._cat

    @property
    def base(self) -> np.ndarray:
        return self.concat()[0]

    @property
    def total(self) -> int:
        return int(sum(self.counts))

    def slots_of(self, coords: NDArray[np.integer[Any]]) -> NDArray[np.int64]:
        return match_rows(np.asarray(self.coords, dtype=np.int64).reshape(-1, self.kdim), coords)

    def rows(self, global_rows: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Positions and attributes of global rows."""
        _, _, pos, attrs = self.concat()
        # np.take along axis 0 copies whole rows: about twice as fast as fancy indexing for (N, 3) rows
        return np.take(pos, global_rows, axis=0), {n: np.take(a, global_rows, axis=0) for n, a in attrs.items()}

    def row_owners(self, owners: dict[Chunk, NDArray[np.int64]]) -> NDArray[np.int64]:
        """Object id of every global row from its fragment (-1 where no manifest names it)."""
        owner = np.full(self.total, -1, dtype=np.int64)
        base = self.base
        for s, c in enumerate(self.coords):  # per chunk
            per = owners.get(c)
            if per is None or self.fis[s].num_fragments == 0:
                continue
            rows, seg = self.all_fragment_rows(s)
            known = seg < len(per)
            owner[rows[known] + base[s]] = per[seg[known]]
        return owner

    def all_fragment_rows(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(local rows, fragment id of each) of every fragment of a chunk, in fragment order."""
        fi = self.fis[slot]
        rows, lengths = fi.gather(np.arange(fi.num_fragments), key=self._fkey(self.coords[slot]))
        return rows, np.repeat(np.arange(fi.num_fragments, dtype=np.int64), lengths)

    # ------------------------------------------------------------- manifests -> rows
    def gather(self, coords: np.ndarray, frags: np.ndarray, owner_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global rows of manifest references (coords, fragment), in reference order, and rows per reference."""
        n = len(frags)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        slots = self.slots_of(coords)
        if (slots < 0).any():
            j = int(np.flatnonzero(slots < 0)[0])
            raise MissingDataError(f"chunk {tuple(coords[j].tolist())} was not fetched (internal error)")
        fast = self._gather_ranges(slots, frags)
        if fast is not None:
            return fast
        base = self.base
        order = np.argsort(slots, kind="stable")
        s_sorted = slots[order]
        cut = np.flatnonzero(np.diff(s_sorted)) + 1
        lens_sorted = np.empty(n, dtype=np.int64)
        parts = []
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, n].tolist()):  # per chunk
            s = int(s_sorted[a])
            c = self.coords[s]
            refs = order[a:b]
            if not self.present[s]:
                raise MissingDataError(
                    f"{self.vert.key_of(self.vert.cell_coords(c))}: missing, but the manifest of object "
                    f"{int(owner_ids[refs[0]])} names chunk {c}"
                )
            if not self.frag_present[s]:
                raise MissingDataError(
                    f"{self._fkey(c)}: missing, but the manifest of object {int(owner_ids[refs[0]])} "
                    f"names fragment {int(frags[refs[0]])} of chunk {c}"
                )
            fi = self.fis[s]
            bad = frags[refs] >= fi.num_fragments
            if bad.any():
                k = refs[int(np.flatnonzero(bad)[0])]
                raise MissingDataError(
                    f"{self._fkey(c)}: the manifest of object {int(owner_ids[k])} names fragment "
                    f"{int(frags[k])} but the chunk has {fi.num_fragments} fragments"
                )
            rows, lens = fi.gather(frags[refs], key=self._fkey(c))
            parts.append(rows + base[s])
            lens_sorted[a:b] = lens
        rows_sorted = np.concatenate(parts)
        lengths = np.empty(n, dtype=np.int64)
        lengths[order] = lens_sorted
        start = np.empty(n, dtype=np.int64)
        start[order] = np.cumsum(lens_sorted) - lens_sorted
        return rows_sorted[expand_ranges(start, lengths)], lengths

    def _gather_ranges(self, slots: np.ndarray, frags: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`gather` in one vectorized pass when every reference is a row range of a present chunk
        that fits it (what zvf and 0.9.2 write); None otherwise, and the per-chunk path reads (and
        names the problem of) the rest."""
        ok = np.asarray(self.present, bool) & np.asarray(self.frag_present, bool)
        if not ok[slots].all():
            return None
        n_frag = np.fromiter((fi.num_fragments for fi in self.fis), np.int64, count=len(self.fis))
        if (frags < 0).any() or (frags >= n_frag[slots]).any():
            return None
        at = (np.cumsum(n_frag) - n_frag)[slots] + frags  # into the fragments of all chunks, end to end
        if not np.concatenate([fi.is_range for fi in self.fis])[at].all():
            return None
        starts = np.concatenate([fi.starts for fi in self.fis])[at]
        lens = np.concatenate([fi.counts for fi in self.fis])[at]
        if (starts + lens > np.asarray(self.counts, np.int64)[slots]).any():
            return None
        return expand_ranges(self.base[slots] + starts, lens), lens

    # ------------------------------------------------------------- links
    def link_rows(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Every loaded link row in global row space, endpoints in input order (-1 = not loaded),
        and the link attributes aligned with those rows (fill values where a row has none)."""
        w = self.links.width if self.links is not None else 2
        link_arrays = self.links.arrays if self.links is not None else []
        base = self.base
        parts = [rows + base[s] for s, rows, _ in self.intra]
        attr_parts = [a for _, _, a in self.intra]
        for (i, src), val in self.cross.items():
            if val is None:
                continue
            rows, perm, key, attrs = val
            attr_parts.append(attrs)
            la = link_arrays[i]
            g = np.full(rows.shape, -1, dtype=np.int64)
            for j in range(rows.shape[1]):  # per endpoint column (link width)
                c = src if j == 0 else tuple(int(a) + int(b) for a, b in zip(src, la.offsets[j - 1]))
                s = self.slot.get(c)
                if s is None or not self.present[s]:
                    continue
                col = rows[:, j]
                if len(col) and int(col.max()) >= self.counts[s]:
                    r = int(np.flatnonzero(col >= self.counts[s])[0])
                    raise FormatError(
                        f"{key}: link row {r} endpoint {j} is vertex {int(col[r])} of chunk {c}, "
                        f"past the chunk's {self.counts[s]} vertices"
                    )
                g[:, j] = col + base[s]
            parts.append(unpermute(g, perm) if perm is not None else g)
        if self.links is not None and self.links.records is not None:
            key, coords, local = self.links.records
            m, width = local.shape
            slots = self.slots_of(coords.reshape(-1, self.ndim)).reshape(m, width)
            ok = slots >= 0
            if ok.any():
                present = np.asarray(self.present, dtype=bool)
                ok &= present[np.where(ok, slots, 0)]
            counts = np.asarray(self.counts, dtype=np.int64)
            cnt = np.where(ok, counts[np.where(ok, slots, 0)], 0)
            over = ok & (local >= cnt)
            if over.any():
                r, j = (int(x[0]) for x in np.nonzero(over))
                raise FormatError(
                    f"{key}: record {r} endpoint {j} is vertex {int(local[r, j])} of chunk "
                    f"{tuple(coords[r, j].tolist())}, past the chunk's {int(cnt[r, j])} vertices"
                )
            parts.append(np.where(ok, base[np.where(ok, slots, 0)] + local, -1))
            attr_parts.append({})
        fits = [k for k, p in enumerate(parts) if p.shape[1] == w]
        rows = np.concatenate([parts[k] for k in fits]) if fits else np.zeros((0, w), dtype=np.int64)
        return rows, self._stack_link_attrs([parts[k] for k in fits], [attr_parts[k] for k in fits])

    def _stack_link_attrs(self, parts: list[NDArray[np.int64]], attrs: list[dict[str, Rows]]) -> dict[str, Rows]:
        """Concatenated link attributes of row blocks; blocks without one get its fill value."""
        out: dict[str, Rows] = {}
        for an in self.links.attribute_names if self.links is not None else ():
            have = [a[an] for a in attrs if an in a]
            if not have:
                continue
            proto = have[0]
            fill = np.nan if proto.dtype.kind in "fc" else 0
            out[an] = np.concatenate([a[an] if an in a else np.full((len(p), *proto.shape[1:]), fill, proto.dtype)
                                      for p, a in zip(parts, attrs)])
        return out

    def skeleton_rows(self, explicit: NDArray[np.int64], attrs: dict[str, Rows]
                      ) -> tuple[NDArray[np.int64], dict[str, Rows]]:
        """(child, parent) rows: implicit sequential ones inside fragments + ``explicit``.

        Inside a fragment row k's parent is row k-1, except at the fragment's
        first row and for vertices that already have a stored parent.
        """
        base = self.base
        parts = []
        for s in range(len(self.coords)):  # per chunk
            if self.fis[s].num_fragments == 0:
                continue
            rows, seg = self.all_fragment_rows(s)
            keep = np.flatnonzero(seg[1:] == seg[:-1])
            if keep.size:
                parts.append(np.stack((rows[keep + 1], rows[keep]), axis=1) + base[s])
        implicit = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        has_parent = explicit[:, 0][explicit[:, 0] >= 0]
        if has_parent.size and implicit.size:
            implicit = implicit[~np.isin(implicit[:, 0], has_parent)]
        return np.concatenate((implicit, explicit)), self._stack_link_attrs([implicit, explicit], [{}, attrs])

    def connectivity(self, geometry: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Global edge / face rows of every loaded chunk for a linked geometry, with link attributes."""
        rows, attrs = self.link_rows()
        if geometry == "skeleton":
            rows, attrs = self.skeleton_rows(rows, attrs)
        return rows, attrs
