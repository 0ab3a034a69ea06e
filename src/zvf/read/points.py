"""Vertex reads by chunk: the bbox query and the full read.

A query resolves to the stored chunks the closed box touches; their
vertex, fragment and attribute cells are fetched together, and rows are
kept by an exact closed-box test.  Object ids, when the store has them,
come from the fragment each row belongs to (one fragment per object and
chunk) and the inverted object index.
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError, InvalidArgumentError
from ..format.fragments import decode_fragment_index
from ..format.grid import inside
from .cells import rows_from_payload
from .selection import Selection


def attribute_layout(arr) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, row_shape) of a vertex attribute array from its attributes."""
    attrs = arr.meta.attributes
    row_shape = tuple(int(x) for x in attrs.get("row_shape") or ())
    return np.dtype(attrs.get("dtype", "float32")), row_shape


def attribute_rows(name: str, arr, payload, n_vertices: int, key: str, channels: dict[str, int]) -> np.ndarray:
    """Attribute rows of a chunk, aligned with its vertices.

    0.9.2's polyline and graph writers store multi-channel attributes with
    ``row_shape: []``; the channel count is then read off the payload (a
    whole multiple of the vertex count, the same in every chunk: ``channels``
    remembers it across chunks).
    """
    adt, rshape = attribute_layout(arr)
    rows = rows_from_payload(payload, adt, rshape, key=key)
    if len(rows) != n_vertices and not rshape and n_vertices and len(rows) % n_vertices == 0:
        width = len(rows) // n_vertices
        if channels.setdefault(name, width) != width:
            raise FormatError(f"{key}: {width} values per vertex, other chunks hold {channels[name]}")
        rows = rows.reshape(n_vertices, width)
    elif rshape or len(rows):
        channels.setdefault(name, rows.shape[1] if rows.ndim == 2 else 0)
    if len(rows) != n_vertices:
        raise FormatError(f"{key}: {len(rows)} attribute rows for {n_vertices} vertices")
    return rows


def pick_attributes(level, attributes) -> list[str]:
    names = level.named("vertex_attributes")
    if attributes is None:
        return names
    if isinstance(attributes, str):
        attributes = [attributes]
    missing = [a for a in attributes if a not in names]
    if missing:
        raise InvalidArgumentError(f"attributes {missing} not in this store (it has {names})")
    return list(attributes)


def chunks_in_box(level, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Stored chunks a closed box can hold vertices of."""
    chunks = level.nonempty_chunks
    if chunks.size == 0:
        return chunks
    clo, chi = level.grid.chunk_range(lo, hi)
    keep = np.all((chunks >= clo) & (chunks <= chi), axis=1)
    return chunks[keep]


async def read_chunks(ds, level, chunks: np.ndarray, names: list[str], box=None) -> Selection:
    """Rows of the given chunks (optionally only those inside ``box``)."""
    vert = level.array("vertices")
    dtype = np.dtype(vert.meta.attributes.get("dtype", "float32"))
    ndim = level.grid.ndim
    owners = await ds.fragment_owners(level.index) if ds.has_objects(level.index) else None
    arrays = {"vertices": vert}
    arrays.update({f"vertex_attributes/{n}": level.array(f"vertex_attributes/{n}") for n in names})
    if owners is not None:
        arrays["vertex_fragments"] = level.array("vertex_fragments")
    chunk_list = list(map(tuple, chunks.tolist()))
    # executor.gather raises the first error itself (a FormatError naming the key), not an ExceptionGroup
    fetched = await vert.executor.gather([arr.payloads(chunk_list) for arr in arrays.values()])
    payloads = dict(zip(arrays, fetched))

    pos_parts, attr_parts, oid_parts, channels = [], {n: [] for n in names}, [], {}
    for i, chunk in enumerate(map(tuple, chunks.tolist())):
        key = vert.key_of(vert.cell_coords(chunk))
        pos = rows_from_payload(payloads["vertices"][i], dtype, (ndim,), key=key)
        keep = None if box is None else inside(pos, *box)
        pos_parts.append(pos if keep is None else pos[keep])
        for n in names:
            arr = arrays[f"vertex_attributes/{n}"]
            adt, rshape = attribute_layout(arr)
            akey = arr.key_of(arr.cell_coords(chunk))
            rows = attribute_rows(n, arr, payloads[f"vertex_attributes/{n}"][i], len(pos), akey, channels)
            attr_parts[n].append(rows if keep is None else rows[keep])
        if owners is not None:
            fkey = arrays["vertex_fragments"].key_of(arrays["vertex_fragments"].cell_coords(chunk))
            fi = decode_fragment_index(payloads["vertex_fragments"][i] or b"", key=fkey, n_rows=len(pos))
            per_frag = owners.get(chunk)
            oids = np.full(len(pos), -1, dtype=np.int64)
            if per_frag is not None and fi.num_fragments:
                rows, lengths = fi.gather(np.arange(fi.num_fragments))
                oids[rows] = np.repeat(per_frag[: fi.num_fragments], lengths)
            oid_parts.append(oids if keep is None else oids[keep])

    positions = np.concatenate(pos_parts) if pos_parts else np.zeros((0, ndim), dtype)
    attrs = {}
    for n in names:
        adt, rshape = attribute_layout(arrays[f"vertex_attributes/{n}"])
        if not rshape and channels.get(n):
            rshape = (channels[n],)
        attrs[n] = np.concatenate(attr_parts[n]) if attr_parts[n] else np.zeros((0, *rshape), adt)
    object_ids = None
    if owners is not None:
        object_ids = np.concatenate(oid_parts) if oid_parts else np.zeros(0, np.int64)
    return Selection(positions, attrs, object_ids)
