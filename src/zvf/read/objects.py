"""Object reads: manifest -> fragments -> rows, with connectivity.

Every geometry reads the same way: an object's manifest names (chunk,
fragment) blocks; the union of chunks a call needs is fetched once (all
cells of all arrays in flight together) and fragment rows are gathered in
manifest order, which is traversal order for polylines and streamlines.

Connectivity comes back as local row indices into the returned positions:

* polylines / streamlines / lines: consecutive pairs (implicit sequential);
* graphs: the stored rows (intra-chunk ``links/0/0.0.0`` and cross-chunk
  ``links/0/<offsets>``), endpoints in their input order (``perm`` undone);
* skeletons: ``(child, parent)`` rows -- the implicit sequential ones inside
  each fragment plus the stored branch / cross-chunk rows.  A vertex that
  has a stored parent gets no implicit one (a tree vertex has one parent);
* meshes: faces, intra- and cross-chunk, with their input winding.

Cross-chunk rows reference a local vertex index in the source chunk and in
the neighbour chunk(s) at the array's offsets; every endpoint is mapped
``(chunk, local row) -> global row`` over the fetched chunks and then to a
position in the result.  Rows with an endpoint outside the result (another
object, a chunk outside a query box) are dropped.

Seed-layout variants are read too: ``object_index/data`` (back-to-back
manifests, see :func:`split_manifest_stream`), ``cross_chunk_links/0/data``
records, ``links/0`` as a plain intra-chunk array, any chunk key encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import FormatError, InvalidArgumentError, MissingDataError
from ..format.fragments import FragmentIndex, decode_fragment_index
from ..format.grid import inside
from ..format.keys import parse_offsets_name
from ..format.links import decode_intra_links, decode_ragged_links, unpermute
from ..format.manifest import ManifestTable, decode_manifests
from ..format.metadata import parse_array
from .cells import CellArray, rows_from_payload
from .dense import read_dense
from .load import LINKED, load_json
from .points import attribute_layout, attribute_rows, chunks_in_box, pick_attributes
from .selection import Selection

SEQUENTIAL = frozenset({"polyline", "streamline", "line"})

_EMPTY_FI = FragmentIndex(np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int64))


# --------------------------------------------------------------------------
# small vectorized helpers
# --------------------------------------------------------------------------


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - firsts, lengths) + np.arange(total, dtype=np.int64)


def match_rows(known: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of each row of ``query`` in ``known`` (unique rows), -1 when absent."""
    query = np.asarray(query, dtype=np.int64)
    if len(known) == 0 or len(query) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    both = np.concatenate((np.asarray(known, dtype=np.int64), query)).reshape(len(known) + len(query), -1)
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lut = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    lut[inv[: len(known)]] = np.arange(len(known), dtype=np.int64)
    return lut[inv[len(known):]]


def _segments(offsets: np.ndarray) -> np.ndarray:
    """Segment id of every row of a CSR ``offsets``."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def _sequential_edges(offsets: np.ndarray) -> np.ndarray:
    """(i, i+1) pairs inside each segment of ``offsets`` (global indices)."""
    n = int(offsets[-1]) if len(offsets) else 0
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    seg = _segments(offsets)
    i = np.flatnonzero(seg[1:] == seg[:-1])
    return np.stack((i, i + 1), axis=1).astype(np.int64)


# --------------------------------------------------------------------------
# seed layout: object_index/data and cross_chunk_links/<delta>/data
# --------------------------------------------------------------------------


def split_manifest_stream(buf, ndim: int, count: int | None = None, *, key: str = "?") -> list[memoryview]:
    """Cut back-to-back manifests (seed ``object_index/data`` without offsets) apart.

    Manifests are self-delimiting (``u32 B`` then B blocks whose size follows
    from their mode byte).  All-mode-0 manifests are cut in one step each;
    others are walked block by block.  With ``count`` exactly that many
    manifests must fill the blob.
    """
    mv = memoryview(bytes(buf) if not isinstance(buf, (bytes, bytearray)) else buf).cast("B")
    u8 = np.frombuffer(mv, dtype=np.uint8)
    n = u8.size
    hdr = 8 * ndim + 1
    out: list[memoryview] = []
    pos = 0
    while (pos < n) if count is None else (len(out) < count):
        i = len(out)
        if pos + 4 > n:
            raise FormatError(f"{key}: manifest {i} starts at byte {pos} but the blob ends at {n}")
        b = int.from_bytes(mv[pos:pos + 4], "little")
        p = pos + 4
        if b * (hdr + 4) > n - p:
            raise FormatError(f"{key}: manifest {i} declares {b} blocks, more than its {n - p} remaining bytes hold")
        end0 = p + b * (hdr + 8)
        if end0 <= n and (b == 0 or not u8[p + 8 * ndim:end0:hdr + 8].any()):
            out.append(mv[pos:end0])
            pos = end0
            continue
        for j in range(b):  # per block of a non-uniform manifest (rare: seed writers only)
            if p + hdr > n:
                raise FormatError(f"{key}: manifest {i} block {j} is truncated")
            mode = int(u8[p + 8 * ndim])
            p += hdr
            if mode == 0:
                p += 8
            elif mode == 1:
                p += 16
            elif mode == 2:
                if p + 4 > n:
                    raise FormatError(f"{key}: manifest {i} block {j} is truncated")
                p += 4 + 8 * int.from_bytes(mv[p:p + 4], "little")
            else:
                raise FormatError(f"{key}: manifest {i} block {j} has unknown mode {mode}")
            if p > n:
                raise FormatError(f"{key}: manifest {i} block {j} runs past the end of the blob")
        out.append(mv[pos:p])
        pos = p
    if count is not None and pos != n:
        raise FormatError(f"{key}: {n - pos} bytes follow the last of {count} manifests")
    return out


async def _blob(ds, level, path: str) -> bytes | None:
    """Bytes of a seed "single flat blob": a raw object, or a Zarr array at ``path``.

    A Zarr array may be a dense numeric array (its bytes, little endian) or a
    vlen-bytes array (its items concatenated in order).
    """
    ex = ds._ex
    arr = level.array(path)
    if arr is None:
        raw_doc = await ex.get(f"{level.index}/{path}/zarr.json", cache="meta")
        if raw_doc is not None:
            doc = load_json(raw_doc, f"{level.index}/{path}/zarr.json")
            if doc.get("node_type") == "array":
                arr = CellArray(ex, f"{level.index}/{path}", parse_array(doc, key=f"{level.index}/{path}/zarr.json"))
    if arr is None:
        return await ex.get(f"{level.index}/{path}")
    if arr.meta.is_vlen:
        n = int(np.prod(arr.meta.shape)) if arr.meta.shape else 1
        per = int(np.prod(arr.meta.chunk_shape)) if arr.meta.chunk_shape else 1
        if len(arr.meta.shape) > 1:
            raise FormatError(f"{arr.path}/zarr.json: a blob array must be 1-D, got shape {arr.meta.shape}")
        cells = await ex.gather([arr.items((c,) if arr.meta.shape else ()) for c in range(-(-n // per) if n else 0)])
        return b"".join(bytes(x) for items in cells if items is not None for x in items)
    data = await read_dense(ex, arr)
    return np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).tobytes()


async def read_seed_object_index(ds, level) -> tuple[np.ndarray, ManifestTable]:
    """(object ids, ManifestTable) from the seed layout ``<level>/object_index/data``.

    Definition (seed 003 §7.6 and seed 000 "object_index/"):

    * ``object_index/data``: the manifests of all B objects back to back, each
      exactly the §7.6 bytes (``u32 B_obj`` + blocks), stored as a raw object
      or as a 1-D Zarr array (uint8, or vlen-bytes whose items concatenate).
    * ``object_index/offsets`` (optional, same storage choices): little-endian
      int64 byte offsets of each manifest in ``data`` -- B+1 values (CSR,
      ``[0] = 0``, ``[B] = len(data)``) or B start offsets.  Without it the
      self-delimiting manifests are cut apart in order.
    * B is the group attribute ``num_objects`` (else from the offsets, else
      every manifest the blob holds); ids come from ``object_index/object_ids``
      when present, else 0..B-1.
    """
    idx = level.index
    key = f"{idx}/object_index/data"
    data, offs_raw = await ds._ex.gather([_blob(ds, level, "object_index/data"),
                                          _blob(ds, level, "object_index/offsets")])
    if data is None:
        raise FormatError(f"{idx}/object_index: neither manifests nor data is present")
    attrs = level.groups.get("object_index", {})
    count = attrs.get("num_objects")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise FormatError(f"{idx}/object_index/zarr.json: num_objects {count!r} is not a count")
    mv = memoryview(data).cast("B")
    if offs_raw is not None:
        if len(offs_raw) % 8:
            raise FormatError(f"{idx}/object_index/offsets: {len(offs_raw)} bytes is not a whole number of int64")
        offs = np.frombuffer(offs_raw, dtype="<i8").astype(np.int64)
        if count is None:
            csr = len(offs) > 1 and offs[0] == 0 and offs[-1] == len(data)
            count = len(offs) - 1 if csr else len(offs)
        if len(offs) == count:
            offs = np.append(offs, len(data))
        if len(offs) != count + 1:
            raise FormatError(f"{idx}/object_index/offsets: {len(offs)} offsets for {count} objects")
        if len(offs) and (offs[0] != 0 or offs[-1] != len(data) or np.any(np.diff(offs) < 0)):
            raise FormatError(f"{idx}/object_index/offsets: offsets must rise from 0 to len(data)={len(data)}")
        payloads = [mv[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist())]
    else:
        payloads = split_manifest_stream(mv, ds.ndim, count, key=key)
    table = decode_manifests(payloads, ds.ndim, key=key)
    ids_arr = level.array("object_index/object_ids")
    if ids_arr is not None:
        oids = np.asarray(await read_dense(ds._ex, ids_arr), dtype=np.int64).reshape(-1)
        if len(oids) < len(payloads):
            raise FormatError(f"{ids_arr.path}: {len(oids)} ids for {len(payloads)} manifests")
        oids = oids[: len(payloads)]
    else:
        oids = np.arange(len(payloads), dtype=np.int64)
    return oids, table


async def _seed_cross_records(ds, level, width: int):
    """(key, coords (M, L, ndim), local (M, L)) from ``cross_chunk_links/0/data``, or None.

    Seed 003 §7.7: ``num_links`` records of ``link_width`` endpoints, each
    endpoint ``(i64 chunk_coords[sid_ndim], i64 local_vertex_index)``; endpoint
    order is the input order (no perm).
    """
    if not any(p == "cross_chunk_links/0" or p.startswith("cross_chunk_links/0/")
               for p in list(level.groups) + list(level.arrays)):
        return None
    key = f"{level.index}/cross_chunk_links/0/data"
    attrs = dict(level.groups.get("cross_chunk_links/0", {}))
    arr = level.array("cross_chunk_links/0/data")
    if arr is not None:
        attrs.update(arr.meta.attributes)
    raw = await _blob(ds, level, "cross_chunk_links/0/data")
    if raw is None:
        return None
    ndim = int(attrs.get("sid_ndim", ds.ndim))
    width = int(attrs.get("link_width", width))
    if ndim != ds.ndim or width < 1:
        raise FormatError(f"{key}: sid_ndim={ndim}, link_width={width} do not fit a {ds.ndim}-D store")
    rec = width * (ndim + 1) * 8
    if len(raw) % rec:
        raise FormatError(f"{key}: {len(raw)} bytes is not a whole number of {rec}-byte records")
    m = len(raw) // rec
    if "num_links" in attrs and int(attrs["num_links"]) != m:
        raise FormatError(f"{key}: holds {m} records but num_links is {attrs['num_links']}")
    a = np.frombuffer(raw, dtype="<i8").astype(np.int64).reshape(m, width, ndim + 1)
    local = a[:, :, ndim]
    if local.size and local.min() < 0:
        r = int(np.flatnonzero((local < 0).any(axis=1))[0])
        raise FormatError(f"{key}: record {r} has a negative vertex index")
    return key, np.ascontiguousarray(a[:, :, :ndim]), np.ascontiguousarray(local)


# --------------------------------------------------------------------------
# link arrays of a level
# --------------------------------------------------------------------------


@dataclass
class _LinkArray:
    arr: CellArray
    offsets: np.ndarray  # (L-1, ndim); all zero = intra
    width: int
    has_perm: bool
    intra: bool
    dtype: str

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
class _Links:
    width: int
    arrays: list[_LinkArray]
    records: tuple | None  # seed cross_chunk_links: (key, coords, local)


async def level_links(ds, index: int) -> _Links:
    """Same-level link arrays of a level (loaded and parsed once per dataset)."""
    cache = ds._object_cache
    if ("links", index) in cache:
        return cache[("links", index)]
    await ds._ex.gather([ds.family(index, "links"), ds.family(index, "cross_chunk_links")])
    level = await ds.level(index)
    default_w = 3 if ds.geometry_type == "mesh" else 2
    fam = level.groups.get("links/0", {})
    width = fam.get("link_width", default_w) if isinstance(fam, dict) else default_w
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise FormatError(f"{index}/links/0/zarr.json: link_width {width!r} is not an integer from 1 to 64")
    arrays: list[_LinkArray] = []
    for name, arr in sorted(level.arrays.items()):
        parts = name.split("/")
        if parts[0] != "links" or len(parts) < 2 or parts[1] not in ("0", "+0"):
            continue
        attrs = arr.meta.attributes
        key = f"{arr.path}/zarr.json"
        w = attrs.get("link_width", width)
        if len(parts) == 2:  # seed layout: links/0 is itself the intra-chunk array
            offs = np.zeros((max(int(w) - 1, 0), ds.ndim), dtype=np.int64)
        elif len(parts) == 3:
            raw = attrs.get("offsets")
            try:
                offs = np.asarray(raw, dtype=np.int64) if raw is not None else parse_offsets_name(parts[2], ds.ndim)
            except (TypeError, ValueError, OverflowError):
                raise FormatError(f"{key}: offsets {raw!r} are not integer vectors") from None
            if offs.size % ds.ndim:
                raise FormatError(f"{key}: offsets {raw!r} are not {ds.ndim}-D vectors")
            offs = offs.reshape(-1, ds.ndim)
            if "link_width" not in attrs:
                w = len(offs) + 1
        else:
            continue
        if not isinstance(w, int) or w < 1 or len(offs) != w - 1:
            raise FormatError(f"{key}: link_width {w!r} does not match its {len(offs)} offset vectors")
        intra = not offs.any()
        has_perm = bool(attrs.get("has_perm", False))
        arrays.append(_LinkArray(arr, offs, int(w), has_perm, intra, str(attrs.get("dtype", "int64"))))
        width = int(w)
    records = await _seed_cross_records(ds, level, width)
    links = _Links(width, arrays, records)
    cache[("links", index)] = links
    return links


# --------------------------------------------------------------------------
# fetched chunks of one read
# --------------------------------------------------------------------------


class ChunkSet:
    """Decoded chunks of one level for one read: each chunk is fetched once.

    Chunks get a slot in load order and a base row in a global row space
    (the concatenation of all loaded chunks' vertices), in which fragment
    rows and link endpoints are expressed.
    """

    def __init__(self, ds, level, names: list[str], links: _Links | None = None, incoming: bool = False):
        self.ds = ds
        self.level = level
        self.names = names
        self.links = links
        self.incoming = incoming
        self.vert = level.array("vertices")
        self.frag = level.array("vertex_fragments")
        if self.vert is None:
            raise FormatError(f"{level.index}/vertices: missing")
        enc = self.vert.meta.attributes.get("encoding", "raw")
        if enc != "raw":
            raise FormatError(f"{self.vert.path}/zarr.json: vertex encoding {enc!r} is not supported (only 'raw')")
        self.dtype = np.dtype(self.vert.meta.attributes.get("dtype", "float32"))
        self.ndim = ds.ndim
        self.attr_arrays = {n: level.array(f"vertex_attributes/{n}") for n in names}
        self.coords: list[tuple] = []
        self.slot: dict[tuple, int] = {}
        self.present: list[bool] = []
        self.frag_present: list[bool] = []
        self.pos: list[np.ndarray] = []
        self.fis: list[FragmentIndex] = []
        self.attrs: dict[str, list[np.ndarray]] = {n: [] for n in names}
        self.counts: list[int] = []
        self.has_attrs: list[bool] = []
        self._channels: dict[str, int] = {}  # inferred channels of attributes stored with row_shape []
        self.intra: list[tuple[int, np.ndarray]] = []  # (slot, rows local)
        self.cross: dict[tuple[int, tuple], tuple] = {}  # (array idx, source) -> (rows, perm, key)
        self._cat = None

    # ------------------------------------------------------------- loading
    async def load(self, chunks, *, attributes: bool = True) -> None:
        """Fetch what ``chunks`` still lack, all arrays in one wave.

        New chunks get vertices, fragments and links; attributes are fetched
        too unless ``attributes=False`` (a query's box scan), and later for
        chunks that were first loaded without them.
        """
        req = [tuple(int(x) for x in c) for c in np.asarray(chunks, dtype=np.int64).reshape(-1, self.ndim).tolist()]
        req = list(dict.fromkeys(req))
        new = [c for c in req if c not in self.slot]
        want_attrs = [c for c in req if c not in self.slot or not self.has_attrs[self.slot[c]]] if attributes else []
        if not new and not (want_attrs and self.attr_arrays):
            return
        jobs: dict[str, tuple[CellArray, list[tuple]]] = {}
        if new:
            jobs["v"] = (self.vert, new)
            if self.frag is not None:
                jobs["f"] = (self.frag, new)
        if want_attrs:
            for n, arr in self.attr_arrays.items():
                jobs[f"a/{n}"] = (arr, want_attrs)
        if self.links is not None and new:
            for i, la in enumerate(self.links.arrays):
                if la.intra:
                    src = la.sources(new, False)
                else:
                    src = [s for s in la.sources(new, self.incoming) if (i, s) not in self.cross]
                if src:
                    jobs[f"l/{i}"] = (la.arr, src)
        # executor.gather raises the first failure itself (a ZvfError naming its key), not a group
        fetched = await self.vert.executor.gather([arr.payloads(cs) for arr, cs in jobs.values()])
        results: dict[str, list] = dict(zip(jobs, fetched))

        for i, c in enumerate(new):  # per chunk
            payload = results["v"][i]
            pos = rows_from_payload(payload, self.dtype, (self.ndim,), key=self.vert.key_of(self.vert.cell_coords(c)))
            fpay = results["f"][i] if "f" in results else None
            fi = _EMPTY_FI if fpay is None else decode_fragment_index(
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
        if self.links is not None:
            self._decode_links(results, jobs)
        self._cat = None

    def _fkey(self, c) -> str:
        arr = self.frag if self.frag is not None else self.vert
        name = arr.key_of(arr.cell_coords(c))
        return name if self.frag is not None else name.replace("/vertices/", "/vertex_fragments/", 1)

    def _decode_links(self, results: dict, jobs: dict) -> None:
        for i, la in enumerate(self.links.arrays):
            name = f"l/{i}"
            if name not in results:
                continue
            cells = jobs[name][1]
            for c, payload in zip(cells, results[name]):
                key = la.arr.key_of(la.arr.cell_coords(c))
                if la.intra:
                    if payload is None:
                        continue
                    s = self.slot[c]
                    if not self.present[s]:  # the chunk's vertices are missing: nothing to link
                        continue
                    rows = decode_intra_links(payload, la.width, key=key, dtype=la.dtype, n_rows=self.counts[s])
                    if len(rows):
                        self.intra.append((s, rows))
                else:
                    if payload is None:
                        self.cross[(i, c)] = None
                        continue
                    rows, perm = decode_ragged_links(payload, la.width, la.has_perm, key=key, dtype=la.dtype)
                    self.cross[(i, c)] = (rows, perm, key)

    # ------------------------------------------------------------- views
    def _concat(self):
        if self._cat is None:
            counts = np.asarray(self.counts, dtype=np.int64)
            base = np.cumsum(counts) - counts
            pos = np.concatenate(self.pos) if self.pos else np.zeros((0, self.ndim), self.dtype)
            attrs = {}
            for n, arr in self.attr_arrays.items():
                adt, rshape = attribute_layout(arr)
                width = self._channels.get(n, 0)
                if not rshape and width:
                    rshape = (width,)
                parts = [np.zeros((cnt, *rshape), adt) if p is None else p if p.shape[1:] == rshape
                         else p.reshape(len(p), *rshape) for p, cnt in zip(self.attrs[n], self.counts)]
                attrs[n] = np.concatenate(parts) if parts else np.zeros((0, *rshape), adt)
            self._cat = (base, counts, pos, attrs)
        return self._cat

    @property
    def base(self) -> np.ndarray:
        return self._concat()[0]

    @property
    def total(self) -> int:
        return int(sum(self.counts))

    def slots_of(self, coords) -> np.ndarray:
        return match_rows(np.asarray(self.coords, dtype=np.int64).reshape(-1, self.ndim), coords)

    def rows(self, global_rows: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Positions and attributes of global rows."""
        _, _, pos, attrs = self._concat()
        return pos[global_rows], {n: a[global_rows] for n, a in attrs.items()}

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
        return rows_sorted[_expand(start, lengths)], lengths

    # ------------------------------------------------------------- links
    def link_rows(self) -> np.ndarray:
        """Every loaded link row in global row space, endpoints in input order (-1 = not loaded)."""
        w = self.links.width if self.links is not None else 2
        base = self.base
        parts = [rows + base[s] for s, rows in self.intra]
        for (i, src), val in self.cross.items():
            if val is None:
                continue
            rows, perm, key = val
            la = self.links.arrays[i]
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
        parts = [p for p in parts if p.shape[1] == w]
        return np.concatenate(parts) if parts else np.zeros((0, w), dtype=np.int64)

    def skeleton_rows(self, explicit: np.ndarray) -> np.ndarray:
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
        return np.concatenate((implicit, explicit))

    def connectivity(self, geometry: str) -> np.ndarray:
        """Global edge / face rows of every loaded chunk for a linked geometry."""
        rows = self.link_rows()
        if geometry == "skeleton":
            rows = self.skeleton_rows(rows)
        return rows


def map_rows(rows: np.ndarray, pos_of_global: np.ndarray) -> np.ndarray:
    """Link rows (global rows, -1 unknown) -> rows of result positions whose endpoints are all present."""
    if rows.size == 0:
        return np.zeros((0, rows.shape[1] if rows.ndim == 2 else 2), dtype=np.int64)
    g = np.where(rows >= 0, rows, 0)
    out = np.where(rows >= 0, pos_of_global[g], -1)
    return out[np.all(out >= 0, axis=1)]


# --------------------------------------------------------------------------
# object id lookup
# --------------------------------------------------------------------------


def _id_rows(ds, level: int, oids: np.ndarray, req: np.ndarray) -> np.ndarray:
    """Manifest row of each requested id; InvalidArgumentError naming an unknown one and the valid ids."""
    hit = ds._object_cache.get(("id_order", level))
    if hit is None or hit[0] is not oids:  # sort the level's ids once
        order = (np.arange(len(oids)) if np.all(oids[1:] > oids[:-1])
                 else np.argsort(oids, kind="stable")).astype(np.int64)
        hit = ds._object_cache[("id_order", level)] = (oids, order, oids[order])
    _, order, so = hit
    at = np.searchsorted(so, req)
    at_c = np.minimum(at, max(len(so) - 1, 0))
    found = (at < len(so)) & (so[at_c] == req) if len(so) else np.zeros(len(req), bool)
    if not found.all():
        bad = int(req[np.flatnonzero(~found)[0]])
        if len(oids) == 0:
            valid = "the level has no objects"
        elif int(so[-1]) - int(so[0]) + 1 == len(so):
            valid = f"valid ids are {int(so[0])}..{int(so[-1])} ({len(so)} objects)"
        else:
            valid = f"valid ids are {len(so)} ids between {int(so[0])} and {int(so[-1])}"
        raise InvalidArgumentError(f"object id {bad} is not in level {level}: {valid}")
    return order[at_c]


# --------------------------------------------------------------------------
# reads
# --------------------------------------------------------------------------


@dataclass
class _Grouped:
    """Objects read together: rows grouped by object, connectivity in global result indices."""

    ids: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray
    attributes: dict
    edges: np.ndarray | None
    faces: np.ndarray | None
    grows: np.ndarray  # global chunk-set row of each result row


async def _prepare(ds, level: int, attributes, *, links: bool, incoming: bool = False, table: bool = True):
    """Level, attribute names, (ids, full ManifestTable) when ``table``, and a ChunkSet."""
    lvl = await ds.level(level)
    names = pick_attributes(lvl, attributes)
    want_links = links and ds.geometry_type in LINKED
    jobs = []
    if table:
        jobs.append(ds.manifests(level))
    if want_links:
        jobs.append(level_links(ds, level))
    got = await ds._ex.gather(jobs)
    manifests = got[0] if table else (None, None)
    lk = got[-1] if want_links else None
    return lvl, names, manifests, ChunkSet(ds, lvl, names, lk, incoming)


async def _object_table(ds, lvl, ids) -> tuple[np.ndarray, ManifestTable]:
    """(ids, their manifests) -- only the manifests asked for when the level's index allows."""
    if not ds.has_objects(lvl.index):
        raise InvalidArgumentError(f"level {lvl.index} has no objects (a point cloud without object ids)")
    oindex = getattr(lvl, "object_index", None)
    if oindex is not None and lvl.index not in ds._manifests:
        oids = await oindex.ids()
        rows = _id_rows(ds, lvl.index, oids, ids)
        return oids[rows], await oindex.table(rows)
    oids, table = await ds.manifests(lvl.index)
    rows = _id_rows(ds, lvl.index, oids, ids)
    return oids[rows], table.take_objects(rows)


async def _read_grouped(ds, cs: ChunkSet, ids: np.ndarray, sub: ManifestTable) -> _Grouped:
    """Objects ``ids`` whose manifests are ``sub`` (``object_row`` k = ``ids[k]``), chunks through ``cs``."""
    geometry = ds.geometry_type
    if len(sub):
        await cs.load(np.unique(sub.coords, axis=0))
    grows, lens = cs.gather(sub.coords, sub.fragment, ids[sub.object_row])
    per_obj = np.bincount(sub.object_row, weights=lens, minlength=len(ids)).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(per_obj))).astype(np.int64)
    positions, attrs = cs.rows(grows)
    edges = faces = None
    if geometry in SEQUENTIAL:
        edges = _sequential_edges(offsets)
    elif geometry in LINKED and cs.links is not None:
        pos_of_global = np.full(cs.total, -1, dtype=np.int64)
        pos_of_global[grows] = np.arange(len(grows), dtype=np.int64)
        conn = map_rows(cs.connectivity(geometry), pos_of_global)
        if len(conn):
            seg = _segments(offsets)
            conn = conn[np.all(seg[conn] == seg[conn[:, :1]], axis=1)]
        if geometry == "mesh":
            faces = conn.reshape(-1, 3) if conn.shape[1] == 3 else np.zeros((0, 3), np.int64)
        else:
            edges = conn
    return _Grouped(ids, offsets, positions, attrs, edges, faces, grows)


def _split(g: _Grouped) -> list[Selection]:
    """One Selection per object, connectivity local to each."""
    n_obj = len(g.ids)
    out = []
    conn = g.edges if g.edges is not None else g.faces
    owner = None
    if conn is not None and len(conn):
        seg = _segments(g.offsets)
        owner = seg[conn[:, 0]]
        order = np.argsort(owner, kind="stable")
        conn = conn[order]
        owner = owner[order]
        cuts = np.searchsorted(owner, np.arange(n_obj + 1))
    for k in range(n_obj):  # per object: slicing only
        a, b = int(g.offsets[k]), int(g.offsets[k + 1])
        local = None
        if conn is not None:
            width = conn.shape[1] if conn.ndim == 2 else 2
            if owner is None:
                local = np.zeros((0, width), np.int64)
            else:
                local = conn[cuts[k]:cuts[k + 1]] - a
        sel = Selection(
            g.positions[a:b],
            {n: v[a:b] for n, v in g.attributes.items()},
            np.full(b - a, g.ids[k], dtype=np.int64),
            edges=local if g.edges is not None else None,
            faces=local if g.faces is not None else None,
            offsets=np.array([0, b - a], dtype=np.int64),
            objects=g.ids[k:k + 1].copy(),
        )
        out.append(sel)
    return out


def _combined(g: _Grouped) -> Selection:
    return Selection(
        g.positions,
        g.attributes,
        np.repeat(g.ids, np.diff(g.offsets)),
        edges=g.edges,
        faces=g.faces,
        offsets=g.offsets,
        objects=g.ids.copy(),
    )


async def read_objects(ds, ids, *, level: int = 0, attributes=None, combined: bool = False):
    """Objects by id; see :meth:`zvf.read.dataset.AsyncDataset.read_objects`."""
    req = _as_ids(ids)
    uniq, inverse = np.unique(req, return_inverse=True)
    lvl, names, _, cs = await _prepare(ds, level, attributes, links=True, table=False)
    got_ids, sub = await _object_table(ds, lvl, uniq)
    g = await _read_grouped(ds, cs, got_ids, sub)
    inverse = inverse.reshape(-1)
    if combined:
        if not np.array_equal(uniq, req):
            g = _reorder(g, inverse)
        return _combined(g)
    parts = _split(g)
    return [parts[int(i)] for i in inverse]


def _as_ids(ids) -> np.ndarray:
    """Requested ids as a 1-D int64 array (InvalidArgumentError for anything else)."""
    if isinstance(ids, (str, bytes)) or ids is None or isinstance(ids, bool):
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}")
    try:
        req = np.asarray(list(ids) if not np.isscalar(ids) and not isinstance(ids, np.ndarray) else ids)
    except TypeError as exc:
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}") from exc
    if req.size == 0:
        return np.zeros(0, np.int64)
    if req.dtype == bool or req.dtype.kind not in "iu":
        raise InvalidArgumentError(f"object ids must be integers, got {ids!r}")
    if req.dtype.kind == "u" and req.max() > np.iinfo(np.int64).max:
        raise InvalidArgumentError(f"object ids must fit int64, got {ids!r}")
    return req.astype(np.int64).reshape(-1)


def _reorder(g: _Grouped, take: np.ndarray) -> _Grouped:
    """Objects of ``g`` in the order ``take`` (repeats allowed), connectivity remapped."""
    lens = np.diff(g.offsets)
    new_lens = lens[take]
    new_off = np.concatenate(([0], np.cumsum(new_lens))).astype(np.int64)
    src = _expand(g.offsets[take], new_lens)
    conn = g.edges if g.edges is not None else g.faces
    new_conn = None
    if conn is not None:
        seg = _segments(g.offsets)
        owner = seg[conn[:, 0]] if len(conn) else np.zeros(0, np.int64)
        # each output object k copies the rows of source object take[k]
        by_owner = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[by_owner], np.arange(len(g.ids) + 1))
        counts = cuts[take + 1] - cuts[take]
        pick = by_owner[_expand(cuts[take], counts)]
        shift = np.repeat(new_off[:-1] - g.offsets[take], counts)
        new_conn = conn[pick] + shift[:, None]
    return _Grouped(
        g.ids[take], new_off, g.positions[src], {n: v[src] for n, v in g.attributes.items()},
        new_conn if g.edges is not None else None, new_conn if g.faces is not None else None, g.grows[src],
    )


# --------------------------------------------------------------------------
# bbox queries of object geometries
# --------------------------------------------------------------------------


async def query_sequential(ds, lo, hi, *, level: int, attributes, clip: bool) -> Selection:
    """Polylines/streamlines with at least one vertex in the closed box, whole or clipped."""
    lvl, names, (oids, table), cs = await _prepare(ds, level, attributes, links=False)
    box_chunks = chunks_in_box(lvl, lo, hi)
    await cs.load(box_chunks, attributes=False)
    hit_coords, hit_frags = [], []
    for c in map(tuple, box_chunks.tolist()):  # per chunk
        s = cs.slot[c]
        if not cs.counts[s] or cs.fis[s].num_fragments == 0:
            continue
        ins = inside(cs.pos[s], lo, hi)
        if not ins.any():
            continue
        rows, seg = cs.all_fragment_rows(s)
        f = np.unique(seg[ins[rows]])
        hit_frags.append(f)
        hit_coords.append(np.broadcast_to(np.asarray(c, dtype=np.int64), (len(f), cs.ndim)))
    if hit_frags:
        hc = np.concatenate(hit_coords)
        hf = np.concatenate(hit_frags)
        clo, chi = lvl.grid.chunk_range(lo, hi)
        cand = np.flatnonzero(np.all((table.coords >= clo) & (table.coords <= chi), axis=1))
        keys = np.concatenate((hc, hf[:, None]), axis=1)
        qkeys = np.concatenate((table.coords[cand], table.fragment[cand, None]), axis=1)
        hit = match_rows(np.unique(keys, axis=0), qkeys) >= 0
        rows = np.unique(table.object_row[cand[hit]])
    else:
        rows = np.zeros(0, np.int64)
    rows = rows[np.argsort(oids[rows], kind="stable")]
    g = await _read_grouped(ds, cs, oids[rows], table.take_objects(rows))
    sel = _combined(g)
    if not clip:
        return sel
    keep = inside(sel.positions, lo, hi)
    new_index = np.cumsum(keep) - 1
    e = sel.edges
    e = e[keep[e[:, 0]] & keep[e[:, 1]]] if len(e) else e
    seg = _segments(sel.offsets)
    per = np.bincount(seg[keep], minlength=len(sel.objects)).astype(np.int64)
    return Selection(
        sel.positions[keep],
        {n: v[keep] for n, v in sel.attributes.items()},
        sel.object_ids[keep],
        edges=new_index[e] if len(e) else np.zeros((0, 2), np.int64),
        offsets=np.concatenate(([0], np.cumsum(per))).astype(np.int64),
        objects=sel.objects,
    )


async def query_linked(ds, lo, hi, *, level: int, attributes) -> Selection:
    """Graph/skeleton/mesh vertices in the closed box plus the edges/faces among them.

    Rows are grouped by object (ascending id, then chunk and row order) with
    ``offsets``/``objects``; rows no manifest names get object id -1.
    """
    geometry = ds.geometry_type
    lvl, names, _, cs = await _prepare(ds, level, attributes, links=True, incoming=geometry == "skeleton",
                                       table=False)
    box_chunks = chunks_in_box(lvl, lo, hi)
    owners = await ds.fragment_owners(level)
    await cs.load(box_chunks)
    _, _, pos_all, _ = cs._concat()
    ins = inside(pos_all, lo, hi) if len(pos_all) else np.zeros(0, bool)
    owner = np.full(cs.total, -1, dtype=np.int64)
    base = cs.base
    for s, c in enumerate(cs.coords):  # per chunk
        per = owners.get(c)
        if per is None or cs.fis[s].num_fragments == 0:
            continue
        rows, seg = cs.all_fragment_rows(s)
        known = seg < len(per)
        owner[rows[known] + base[s]] = per[seg[known]]
    sel = np.flatnonzero(ins)
    sel = sel[np.argsort(owner[sel], kind="stable")]
    positions, attrs = cs.rows(sel)
    pos_of_global = np.full(cs.total, -1, dtype=np.int64)
    pos_of_global[sel] = np.arange(len(sel), dtype=np.int64)
    conn = map_rows(cs.connectivity(geometry), pos_of_global) if cs.links is not None else None
    obj = owner[sel]
    objects, first = np.unique(obj, return_index=True)
    offsets = np.concatenate((first, [len(sel)])).astype(np.int64) if len(sel) else np.zeros(1, np.int64)
    width = 3 if geometry == "mesh" else 2
    if conn is None or conn.shape[1] != width:
        conn = np.zeros((0, width), np.int64)
    return Selection(
        positions, attrs, obj,
        edges=None if geometry == "mesh" else conn,
        faces=conn if geometry == "mesh" else None,
        offsets=offsets, objects=objects,
    )
