"""Seed-layout readers: ``object_index/data`` and ``cross_chunk_links/0/data`` blobs.

Early writers stored an object index as back-to-back manifests (with
optional offsets) and cross-chunk links as fixed-width records; both may be
a raw object or a Zarr array.  These functions turn them into the same
tables the current layout decodes to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError
from ..format.manifest import ManifestTable, decode_manifests
from ..format.parse import loads, parse_array
from .cells import CellArray
from .dense import read_dense

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from .context import ReadContext
    from .load import Level


def split_manifest_stream(buf: Buffer, ndim: int, count: int | None = None, *, key: str = "?") -> list[memoryview]:
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


async def read_blob(rc: ReadContext, level: Level, path: str) -> bytes | None:
    """Bytes of a seed "single flat blob": a raw object, or a Zarr array at ``path``.

    A Zarr array may be a dense numeric array (its bytes, little endian) or a
    vlen-bytes array (its items concatenated in order).
    """
    ex = rc.ex
    arr = level.array(path)
    if arr is None:
        raw_doc = await ex.get(f"{level.index}/{path}/zarr.json", cache="meta")
        if raw_doc is not None:
            doc = loads(raw_doc, key=f"{level.index}/{path}/zarr.json")
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


async def read_seed_object_index(rc: ReadContext, level: Level) -> tuple[np.ndarray, ManifestTable]:
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
    data, offs_raw = await rc.ex.gather([read_blob(rc, level, "object_index/data"),
                                          read_blob(rc, level, "object_index/offsets")])
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
        payloads = split_manifest_stream(mv, rc.ndim, count, key=key)
    table = decode_manifests(payloads, rc.ndim, key=key)
    ids_arr = level.array("object_index/object_ids")
    if ids_arr is not None:
        oids = np.asarray(await read_dense(rc.ex, ids_arr), dtype=np.int64).reshape(-1)
        if len(oids) < len(payloads):
            raise FormatError(f"{ids_arr.path}: {len(oids)} ids for {len(payloads)} manifests")
        oids = oids[: len(payloads)]
    else:
        oids = np.arange(len(payloads), dtype=np.int64)
    return oids, table


async def seed_cross_records(rc: ReadContext, level: Level, width: int
                             ) -> tuple[str, np.ndarray, np.ndarray] | None:
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
    raw = await read_blob(rc, level, "cross_chunk_links/0/data")
    if raw is None:
        return None
    ndim = int(attrs.get("sid_ndim", rc.ndim))
    width = int(attrs.get("link_width", width))
    if ndim != rc.ndim or width < 1:
        raise FormatError(f"{key}: sid_ndim={ndim}, link_width={width} do not fit a {rc.ndim}-D store")
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
