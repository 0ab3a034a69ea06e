"""Neuroglancer precomputed skeletons and legacy single-resolution meshes (pure encoders).

Both are in the "model" space neuroglancer expects in nanometres: skeletons
say so with their ``transform`` (a uniform scale from store units), meshes
(the legacy format has no transform) get their vertices scaled.  The legacy
mesh format is chosen over multi-LOD Draco because it keeps float32
vertices exactly (Draco fragments quantize them to 10 or 16 bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

#: nanometres per unit, for the units a store's axes may name.
NM_PER_UNIT = {"": 1.0, "nm": 1.0, "nanometer": 1.0, "um": 1e3, "micrometer": 1e3, "µm": 1e3,
               "mm": 1e6, "millimeter": 1e6, "m": 1e9, "meter": 1e9, "pm": 1e-3, "picometer": 1e-3}
SKELETON_TYPES = {"float32", "int8", "uint8", "int16", "uint16", "int32", "uint32"}


def nm_per_unit(unit: str) -> float:
    try:
        return NM_PER_UNIT[unit]
    except KeyError:
        raise InvalidArgumentError(f"unit must be one of {sorted(k for k in NM_PER_UNIT if k)}, got {unit!r}") from None


def xyz(positions: np.ndarray) -> np.ndarray:
    """Positions as (n, 3) float32: 2-D stores get z = 0; skeletons and meshes have no other rank."""
    positions = np.asarray(positions, dtype=np.float32)
    if positions.shape[1] == 3:
        return positions
    if positions.shape[1] == 2:
        planar: np.ndarray = np.c_[positions, np.zeros(len(positions), np.float32)]
        return planar
    raise InvalidArgumentError(f"neuroglancer skeletons and meshes are 3-D; the store has {positions.shape[1]} axes")


def skeleton_attributes(attributes: dict[str, np.ndarray]) -> list[tuple[str, np.dtype, int]]:
    """(name, dtype, components) of the vertex attributes a skeleton can carry (float64 narrows to float32)."""
    out = []
    for name, values in attributes.items():
        dtype = np.dtype(np.float32) if values.dtype == np.float64 else values.dtype
        if dtype.name in SKELETON_TYPES:
            out.append((name, dtype, int(np.prod(values.shape[1:], dtype=np.int64))))
    return out


PROPERTIES = "segment_properties"  # where skeleton and mesh infos point: a directory inside theirs (the viewer
# refuses "../" out of a source at the root of its server)


def skeleton_info(attrs: list[tuple[str, np.dtype, int]], scale_nm: float,
                  sharding: dict[str, Any] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"@type": "neuroglancer_skeletons",
            "transform": [scale_nm, 0, 0, 0, 0, scale_nm, 0, 0, 0, 0, scale_nm, 0],
            "vertex_attributes": [{"id": n, "data_type": d.name, "num_components": c} for n, d, c in attrs],
            "segment_properties": PROPERTIES}
    if sharding is not None:
        info["sharding"] = sharding
    return info


def encode_skeleton(positions: np.ndarray, edges: np.ndarray, attributes: dict[str, np.ndarray],
                    attrs: list[tuple[str, np.dtype, int]]) -> bytes:
    """uint32 vertex and edge counts, float32 positions, uint32 edge pairs, then each attribute."""
    pos = xyz(positions)
    edges = np.asarray(edges, dtype="<u4").reshape(-1, 2)
    parts = [np.array([len(pos), len(edges)], "<u4").tobytes(), pos.astype("<f4").tobytes(), edges.tobytes()]
    parts += [np.asarray(attributes[n]).astype(d.newbyteorder("<")).tobytes() for n, d, _ in attrs]
    return b"".join(parts)


MESH_INFO = {"@type": "neuroglancer_legacy_mesh", "segment_properties": PROPERTIES}


def mesh_manifest(object_id: int) -> tuple[str, bytes]:
    """(name, JSON) of the ``<id>:0`` manifest naming the object's one fragment file."""
    return f"{int(object_id)}:0", b'{"fragments": ["%d.frag"]}' % int(object_id)


def encode_mesh(vertices: np.ndarray, faces: np.ndarray, scale_nm: float = 1.0,
                offset: np.ndarray | None = None) -> bytes:
    """uint32 vertex count, float32 xyz vertices (nm, after subtracting ``offset`` in store units), then
    uint32 triangle indices."""
    if scale_nm == 1.0 and (offset is None or not offset.any()):
        v = xyz(vertices)
    else:
        shift = np.zeros(vertices.shape[1]) if offset is None else offset
        v = xyz((np.asarray(vertices, np.float64) - shift) * scale_nm)
    return b"".join([np.uint32(len(v)).astype("<u4").tobytes(), v.astype("<f4").tobytes(),
                     np.asarray(faces, dtype="<u4").reshape(-1, 3).tobytes()])


#: numpy dtype -> segment-property data_type that holds every value exactly.
_NUMBER_TYPES = {"float32": "float32", "float64": "float32", "int8": "int8", "uint8": "uint8", "int16": "int16",
                 "uint16": "uint16", "int32": "int32", "uint32": "uint32", "bool": "uint8"}


def _number_values(values: np.ndarray) -> list[Any]:
    """JSON values of a numeric property; an absent float (NaN, which JSON cannot hold) is the string "NaN",
    which the viewer's typed-array conversion reads back as NaN."""
    if values.dtype.kind == "f":
        return [v if v == v else "NaN" for v in values.astype(np.float64).tolist()]
    numbers: list[Any] = values.tolist()
    return numbers


def segment_properties(ids: np.ndarray, attributes: dict[str, np.ndarray], groups: list[np.ndarray],
                       label: str | None = None) -> dict[str, Any]:
    """``neuroglancer_segment_properties`` info: one entry per object id.

    Numeric object attributes become ``number`` properties (an (O, k) one,
    ``name_0 .. name_k-1``); 64-bit integers become ``string`` properties
    (no number type holds them exactly); ``label`` names the attribute shown
    beside each id; every group is a tag ``group<g>`` on its members.
    """
    ids = np.asarray(ids, dtype=np.int64)
    props: list[dict[str, Any]] = []
    if label is not None:
        if label not in attributes:
            raise InvalidArgumentError(f"label {label!r} is not an object attribute (the store has "
                                       f"{sorted(attributes)})")
        props.append({"id": "label", "type": "label", "values": [str(v) for v in attributes[label].tolist()]})
    for name, values in attributes.items():
        values = np.asarray(values).reshape(len(ids), -1)
        for c in range(values.shape[1]):
            pid = name if values.shape[1] == 1 else f"{name}_{c}"
            column = values[:, c]
            ngtype = _NUMBER_TYPES.get(column.dtype.name)
            if ngtype is None:
                props.append({"id": pid, "type": "string", "values": [str(v) for v in column.tolist()]})
            else:
                props.append({"id": pid, "type": "number", "data_type": ngtype, "values": _number_values(column)})
    if groups and len(ids):
        members = np.concatenate([np.asarray(m, dtype=np.int64).reshape(-1) for m in groups])
        group_of = np.repeat(np.arange(len(groups)), [np.size(m) for m in groups])
        order = np.argsort(ids, kind="stable")
        rows = order[np.minimum(np.searchsorted(ids, members, sorter=order), len(ids) - 1)]
        known = ids[rows] == members
        pairs = np.unique(np.c_[rows[known], group_of[known]], axis=0)  # (row, group), sorted, no repeats
        cuts = np.searchsorted(pairs[:, 0], np.arange(1, len(ids)))
        props.append({"id": "groups", "type": "tags", "tags": [f"group{g}" for g in range(len(groups))],
                      "values": [tags.tolist() for tags in np.split(pairs[:, 1], cuts)]})
    return {"@type": "neuroglancer_segment_properties",
            "inline": {"ids": [str(i) for i in ids.tolist()], "properties": props}}
