"""The exact ``zarr.json`` documents zarr-vectors 0.9.2 writes, and their bytes.

Same keys, same key order, same values, serialized byte-for-byte like 0.9.2
(:func:`dumps`).  See ``docs/REFERENCE_LAYOUT.md`` for the layout these
builders reproduce.  Pure: no I/O; numpy only for dtypes and chunk coordinates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import InvalidArgumentError
from .metadata import (
    _COMPACT_GROUP_PREFIX,
    _NAME_SUFFIXES,
    COMPACT_GROUP_KEYS,
    DEFAULT_AXIS_NAMES,
    DEFAULT_STORE_NAME,
    LINKS_CONVENTION_BY_GEOMETRY,
    MANIFEST_ROW_CHUNK,
    OBJECT_ATTRIBUTE_ROW_CHUNK,
    ZV_VERSION,
    LevelTransform,
    dtype_name,
    to_json,
)

__all__ = [
    "bytes_codec",
    "consolidated_metadata",
    "default_axes",
    "dense_array_document",
    "dumps",
    "fragment_attribute_attributes",
    "group_attribute_document",
    "group_document",
    "groups_document",
    "level_document",
    "level_transform",
    "link_attribute_attributes",
    "link_attribute_family_document",
    "link_fragments_attributes",
    "links_array_attributes",
    "links_family_document",
    "manifests_document",
    "nonempty_chunk_keys",
    "object_attribute_document",
    "object_attribute_fill",
    "object_ids_document",
    "object_index_group_document",
    "root_document",
    "spatial_array_document",
    "store_name",
    "vertex_attribute_attributes",
    "vertex_fragments_attributes",
    "vertices_attributes",
    "vlen_1d_array_document",
]


def dumps(doc: Mapping[str, Any]) -> bytes:
    """Serialize a document exactly as 0.9.2 stores it.

    Two styles exist on disk.  Nodes written through zarr-python (root, level
    groups, every array, empty groups) are ``json.dumps(doc, indent=2)`` with no
    trailing newline.  Groups zarr-vectors writes itself (``object_index/`` at
    level 0, ``links/<delta>/``, ``link_attributes/<name>/<delta>/``) are one
    compact line whose key order starts with ``zarr_format``; the builders mark
    those by producing exactly that key order (see :func:`group_document`).
    """
    if list(doc.keys()) == COMPACT_GROUP_KEYS and doc.get("node_type") == "group" and doc.get("zarr_format") == 3:
        text = _COMPACT_GROUP_PREFIX + json.dumps(doc["attributes"], allow_nan=True) + "}"
    else:
        text = json.dumps(doc, indent=2, allow_nan=True)
    return text.encode("utf-8")


def consolidated_metadata(docs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """zarr-python's inline ``consolidated_metadata`` section for a root document.

    ``docs``: node path (``"0/vertices"``) -> that node's ``zarr.json``.  Entries are
    sorted by path so the section does not depend on the order documents were made.
    zarr-python and zarr-vectors 0.9.2 open such a root and list its children from it;
    zvf's reader uses it to skip the listings and second wave of an open.
    """
    return {"kind": "inline", "must_understand": False, "metadata": {k: docs[k] for k in sorted(docs)}}


# --------------------------------------------------------------------------
# root and level
# --------------------------------------------------------------------------


def default_axes(ndim: int) -> list[dict[str, Any]]:
    """The axes 0.9.2 generates: x, y, z, w (4-D at most)."""
    if not 1 <= ndim <= len(DEFAULT_AXIS_NAMES):
        raise InvalidArgumentError(f"ndim: no default axis names for ndim={ndim}; pass axes explicitly")
    return [{"name": n, "type": "space"} for n in DEFAULT_AXIS_NAMES[:ndim]]


def _scene_axes(axes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, a in enumerate(axes):
        d = {k: str(a[k]) for k in ("name", "type", "unit") if a.get(k)}
        d.setdefault("name", f"dim{i}")
        d.setdefault("type", "space")
        out.append(d)
    return out


def store_name(url: str) -> str:
    """Name 0.9.2 puts in ``ome.name``: last path segment minus a store suffix."""
    text = str(url or "").strip()
    if not text:
        return DEFAULT_STORE_NAME
    parsed = urlparse(text)
    path = unquote(parsed.path) if len(parsed.scheme) > 1 else text
    seg = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    for suffix in _NAME_SUFFIXES:
        if len(seg) > len(suffix) and seg.lower().endswith(suffix):
            seg = seg[: -len(suffix)]
            break
    return seg.strip() or DEFAULT_STORE_NAME


def level_transform(level: int, level_bin_shape: Sequence[float], base_bin_shape: Sequence[float]) -> LevelTransform:
    """NGFF transform 0.9.2 records for a level: scale = bin / base bin, translation = bin / 2."""
    scale = tuple(float(b) / float(r) if r else 1.0 for b, r in zip(level_bin_shape, base_bin_shape))
    half = tuple(float(b) / 2.0 for b in level_bin_shape)
    return LevelTransform(int(level), scale, half if any(t != 0 for t in half) else None)


def root_document(
    *,
    chunk_shape: Sequence[float],
    bounds: Sequence[Sequence[float]],
    geometry_types: Sequence[str],
    name: str,
    base_bin_shape: Sequence[float] | None = None,
    links_convention: str | None = None,
    object_index_convention: str = "standard",
    cross_chunk_strategy: str = "explicit_links",
    format_capabilities: Sequence[str] = (),
    cross_level_depth: int | None = None,
    cross_level_storage: str | None = None,
    crs: Any = None,
    attribute_specs: Mapping[str, Any] | None = None,
    axes: Sequence[Mapping[str, Any]] | None = None,
    transforms: Sequence[LevelTransform | tuple[Any, ...]] | None = None,
    zv_version: str = ZV_VERSION,
) -> dict[str, Any]:
    """The root ``zarr.json`` 0.9.2 writes.

    Numbers are kept as given (0.9.2 stores ``[50, 50, 50]`` when handed ints).
    ``links_convention`` defaults from the first geometry; ``transforms``
    defaults to level 0 only (scale 1, translation = effective bin / 2);
    ``cross_level_*`` appear only once a pyramid exists.
    """
    chunk_shape = to_json(list(chunk_shape))
    ndim = len(chunk_shape)
    lo, hi = (to_json(list(b)) for b in bounds)
    if len(lo) != ndim or len(hi) != ndim:
        raise InvalidArgumentError(f"bounds: need {ndim} entries per corner")
    geometry_types = [str(g) for g in geometry_types]
    if links_convention is None:
        if not geometry_types or geometry_types[0] not in LINKS_CONVENTION_BY_GEOMETRY:
            raise InvalidArgumentError(f"links_convention: cannot default it for geometry_types={geometry_types}")
        links_convention = LINKS_CONVENTION_BY_GEOMETRY[geometry_types[0]]
    zv: dict[str, Any] = {
        "zv_version": zv_version,
        "format_capabilities": [str(c) for c in format_capabilities],
        "chunk_shape": chunk_shape,
        "bounds": [lo, hi],
        "geometry_types": geometry_types,
    }
    if crs is not None:
        zv["crs"] = to_json(crs)
    if base_bin_shape is not None:
        zv["base_bin_shape"] = to_json(list(base_bin_shape))
        if len(zv["base_bin_shape"]) != ndim:
            raise InvalidArgumentError(f"base_bin_shape: need {ndim} entries")
    if attribute_specs:
        declared = {scope: to_json(named) for scope, named in attribute_specs.items() if named}
        if declared:
            zv["attribute_specs"] = declared
    zv["links_convention"] = links_convention
    zv["object_index_convention"] = object_index_convention
    zv["cross_chunk_strategy"] = cross_chunk_strategy
    if cross_level_depth is not None:
        zv["cross_level_depth"] = int(cross_level_depth)
    if cross_level_storage is not None:
        zv["cross_level_storage"] = cross_level_storage

    axes_list = [dict(a) for a in axes] if axes is not None else default_axes(ndim)
    if len(axes_list) != ndim:
        raise InvalidArgumentError(f"axes: need {ndim} axes, got {len(axes_list)}")
    if transforms is None:
        bins = base_bin_shape if base_bin_shape is not None else chunk_shape
        transforms = [level_transform(0, bins, bins)]
    datasets = []
    for t in sorted((LevelTransform(*t) for t in transforms), key=lambda t: t.level):
        ct: list[dict[str, Any]] = [{"type": "scale", "scale": [float(s) for s in t.scale]}]
        if t.translation is not None:
            ct.append({"type": "translation", "translation": [float(x) for x in t.translation]})
        datasets.append({"path": str(t.level), "coordinateTransformations": ct})
    if not name:
        raise InvalidArgumentError("name: the OME node name must be non-empty")
    return {
        "attributes": {
            "zarr_vectors": zv,
            "multiscales": [
                {
                    "version": "0.4",
                    "name": "default",
                    "axes": axes_list,
                    "datasets": datasets,
                    "metadata": {"format": "zarr_vectors"},
                }
            ],
            "ome": {
                "version": "0.6",
                "type": "collection",
                "name": str(name),
                "attributes": {
                    "scene": {
                        "coordinateSystems": [{"name": "world", "axes": _scene_axes(axes_list)}],
                        "coordinateTransformations": [],
                    }
                },
                "nodes": [{"type": "zv:level", "name": d["path"]} for d in datasets],
            },
        },
        "zarr_format": 3,
        "node_type": "group",
    }


def level_document(
    *,
    level: int,
    vertex_count: int,
    arrays_present: Sequence[str],
    object_sparsity: float = 1.0,
    coarsening_method: str | None = None,
    parent_level: int | None = None,
    chunk_shape: Sequence[float] | None = None,
    chunk_dims: Sequence[str] | None = None,
    chunk_attribute_name: str | None = None,
    chunk_attribute_values: Sequence[Any] | None = None,
    preserves_object_ids: bool = False,
    inherited_num_objects: int | None = None,
    shared_fragments: bool = False,
    fragments_tile: bool = False,
) -> dict[str, Any]:
    """A level group's ``zarr.json``; optional keys appear only when set (flags only when true).

    ``coarsening_method`` defaults to ``"none"`` at level 0 and ``"per_object"`` above.
    """
    if coarsening_method is None:
        coarsening_method = "none" if parent_level is None else "per_object"
    lv: dict[str, Any] = {
        "level": int(level),
        "object_sparsity": float(object_sparsity),
        "vertex_count": int(vertex_count),
        "coarsening_method": coarsening_method,
        "parent_level": None if parent_level is None else int(parent_level),
        "arrays_present": [str(a) for a in arrays_present],
    }
    if chunk_shape is not None:
        lv["chunk_shape"] = [float(c) for c in chunk_shape]
    if chunk_dims is not None:
        lv["chunk_dims"] = [str(d) for d in chunk_dims]
    if chunk_attribute_name is not None:
        lv["chunk_attribute_name"] = chunk_attribute_name
    if chunk_attribute_values is not None:
        lv["chunk_attribute_values"] = to_json(list(chunk_attribute_values))
    if preserves_object_ids:
        lv["preserves_object_ids"] = True
    if inherited_num_objects is not None:
        lv["inherited_num_objects"] = int(inherited_num_objects)
    if shared_fragments:
        lv["shared_fragments"] = True
    if fragments_tile:
        lv["fragments_tile"] = True
    return {"attributes": {"zarr_vectors_level": lv}, "zarr_format": 3, "node_type": "group"}


# --------------------------------------------------------------------------
# arrays
# --------------------------------------------------------------------------


def _array_document(shape: Sequence[int], data_type: str, chunk_shape: Sequence[int], fill_value: Any,
                    codecs_json: Sequence[Mapping[str, Any]], attributes: Mapping[str, Any],
                    separator: str = "/") -> dict[str, Any]:
    return {
        "shape": [int(s) for s in shape],
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunk_shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
        "fill_value": fill_value,
        "codecs": to_json(list(codecs_json)),
        "attributes": to_json(dict(attributes)),
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def nonempty_chunk_keys(coords: Any, ndim: int) -> list[str]:
    """``nonempty_chunks`` strings for absolute chunk coordinates, as 0.9.2 orders them.

    0.9.2 sorts the *strings* (``"0.0.10"`` before ``"0.0.4"``, ``"-1.0"``
    before ``"0.0"``) and drops duplicates.  Vectorized: no per-chunk loop.
    """
    import numpy as np

    a = np.asarray(coords, dtype=np.int64)
    if a.size == 0:
        return []
    a = a.reshape(-1, ndim)
    s = a[:, 0].astype(str)
    for j in range(1, ndim):
        s = np.char.add(np.char.add(s, "."), a[:, j].astype(str))
    keys: list[str] = np.unique(s).tolist()
    return keys


def spatial_array_document(
    grid_shape: Sequence[int],
    codecs_json: Sequence[Mapping[str, Any]],
    attributes: Mapping[str, Any],
    *,
    nonempty_chunks: Any = (),
    grid_origin: Sequence[int] | None = None,
    shard_shape: Sequence[int] | None = None,
) -> dict[str, Any]:
    """A per-chunk vlen-bytes array (vertices, fragments, attributes, links cells).

    Attribute order is 0.9.2's: ``nonempty_chunks`` first, ``chunk_grid_origin``
    (only when non-zero), then ``attributes`` (use the ``*_attributes`` helpers).
    ``nonempty_chunks`` are absolute coordinates (an (n, ndim) array or tuples).
    With sharding, ``codecs_json`` holds the ``sharding_indexed`` codec and
    ``shard_shape`` is the outer chunk grid in cells.
    """
    ndim = len(grid_shape)
    sharded = bool(codecs_json) and codecs_json[0].get("name") == "sharding_indexed"
    if sharded != (shard_shape is not None):
        raise InvalidArgumentError("shard_shape: pass it exactly when codecs_json starts with sharding_indexed")
    if shard_shape is not None and len(shard_shape) != ndim:
        raise InvalidArgumentError(f"shard_shape: need {ndim} entries")
    attrs: dict[str, Any] = {"nonempty_chunks": nonempty_chunk_keys(nonempty_chunks, ndim)}
    if grid_origin is not None:
        origin = [int(o) for o in grid_origin]
        if len(origin) != ndim:
            raise InvalidArgumentError(f"grid_origin: need {ndim} entries")
        if any(origin):
            attrs["chunk_grid_origin"] = origin
    attrs.update(attributes)
    chunks = shard_shape if shard_shape is not None else (1,) * ndim
    return _array_document(grid_shape, "variable_length_bytes", chunks, "", codecs_json, attrs)


def dense_array_document(
    shape: Sequence[int],
    data_type: Any,
    chunk_shape: Sequence[int],
    fill_value: Any,
    codecs_json: Sequence[Mapping[str, Any]],
    attributes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A plain numeric array (object attributes, group attributes, object ids)."""
    name = dtype_name(data_type, "data_type")
    return _array_document(shape, name, chunk_shape, fill_value, codecs_json, attributes or {})


def bytes_codec(dtype: Any) -> dict[str, Any]:
    """The serializer zarr-python writes for a dense array: no endian for 1-byte types."""
    import numpy as np

    if np.dtype(dtype_name(dtype, "dtype")).itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": "little"}}


def object_attribute_fill(dtype: Any) -> Any:
    """Absent-value sentinel 0.9.2 uses as fill: NaN, int min, uint max; bool is refused."""
    import numpy as np

    name = dtype_name(dtype, "dtype")
    dt = np.dtype(name)
    if dt.kind == "f":
        return "NaN"
    if dt.kind == "i":
        return int(np.iinfo(dt).min)
    if dt.kind == "u":
        return int(np.iinfo(dt).max)
    raise InvalidArgumentError(f"dtype: no absent sentinel for {name} object attributes (0.9.2 refuses them too)")


def object_attribute_document(name: str, dtype: Any, shape: Sequence[int],
                              codecs_json: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``object_attributes/<name>``: (O,) or (O, C), rows chunked by 65536, sentinel fill."""
    shape = [int(s) for s in shape]
    dt = dtype_name(dtype, f"object_attributes/{name}")
    chunks = [OBJECT_ATTRIBUTE_ROW_CHUNK, *shape[1:]]
    attrs = {"zv_array": "object_attribute", "name": name, "dtype": dt, "shape": shape,
             "fill_sentinel_meaning": "absent"}
    return dense_array_document(shape, dt, chunks, object_attribute_fill(dt), codecs_json, attrs)


def group_attribute_document(name: str, dtype: Any, shape: Sequence[int],
                             codecs_json: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``group_attributes/<name>``: one chunk, zero fill."""
    import numpy as np

    shape = [int(s) for s in shape]
    dt = dtype_name(dtype, f"group_attributes/{name}")
    fill = np.zeros((), dtype=dt).item()
    attrs = {"zv_array": "groupings_attribute", "name": name, "dtype": dt, "shape": shape}
    return dense_array_document(shape, dt, shape, fill, codecs_json, attrs)


def object_ids_document(num_objects: int, codecs_json: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``object_index/object_ids``: int64 (O,), one chunk of O rows, fill 0, no attributes."""
    n = int(num_objects)
    return dense_array_document([n], "int64", [max(n, 1)], 0, codecs_json, {})


def vlen_1d_array_document(
    length: int,
    codecs_json: Sequence[Mapping[str, Any]],
    attributes: Mapping[str, Any] | None = None,
    *,
    chunk: int | None = None,
) -> dict[str, Any]:
    """A 1-D vlen-bytes array (``manifests``, ``groups``); one chunk unless ``chunk``."""
    n = int(length)
    c = n if chunk is None else int(chunk)
    return _array_document([n], "variable_length_bytes", [max(c, 1)], "", codecs_json, attributes or {})


def manifests_document(num_objects: int, codecs_json: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``object_index/manifests``: chunk = min(O, 16384), no attributes."""
    n = int(num_objects)
    return vlen_1d_array_document(n, codecs_json, {}, chunk=min(n, MANIFEST_ROW_CHUNK))


def groups_document(num_groups: int, codecs_json: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``groups``: one vlen row per group id 0..max(id)."""
    n = int(num_groups)
    return vlen_1d_array_document(n, codecs_json, {"zv_array": "groups", "num_groups": n})


# --------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------


def group_document(attributes: Mapping[str, Any] | None = None, *, compact: bool = False) -> dict[str, Any]:
    """A group node.  ``compact=True`` gives the one-line form (see :func:`dumps`)."""
    attrs = to_json(dict(attributes or {}))
    if compact:
        return {"zarr_format": 3, "node_type": "group", "attributes": attrs}
    return {"attributes": attrs, "zarr_format": 3, "node_type": "group"}


def object_index_group_document(
    num_objects: int, num_present: int, sid_ndim: int, *, compact: bool = True, object_ids_sorted: bool = True
) -> dict[str, Any]:
    """``object_index/`` group; compact at level 0, indented on pyramid levels."""
    return group_document(
        {"zv_array": "object_index", "num_objects": int(num_objects), "num_present": int(num_present),
         "sid_ndim": int(sid_ndim), "layout": "vlen_manifests_v2", "object_ids_sorted": bool(object_ids_sorted)},
        compact=compact,
    )


def links_family_document(
    *,
    level_delta: int,
    link_width: int,
    directed: bool,
    sid_ndim: int,
    num_links: int,
    num_physical_records: int | None = None,
) -> dict[str, Any]:
    """``links/<delta>/`` group (compact form)."""
    return group_document(
        {
            "zv_array": "links_family",
            "level_delta": int(level_delta),
            "link_width": int(link_width),
            "directed": bool(directed),
            "store": "canonical",
            "sid_ndim": int(sid_ndim),
            "num_links": int(num_links),
            "num_physical_records": int(num_links if num_physical_records is None else num_physical_records),
        },
        compact=True,
    )


def link_attribute_family_document(name: str, *, level_delta: int, num_links: int) -> dict[str, Any]:
    """``link_attributes/<name>/<delta>/`` group (compact form)."""
    return group_document(
        {"zv_array": "link_attribute_family", "name": name, "level_delta": int(level_delta),
         "num_links": int(num_links)},
        compact=True,
    )


# --------------------------------------------------------------------------
# attribute blocks of the per-chunk arrays (pass to spatial_array_document)
# --------------------------------------------------------------------------


def vertices_attributes(dtype: Any, encoding: str = "raw") -> dict[str, Any]:
    return {"zv_array": "vertices", "dtype": dtype_name(dtype, "vertices"), "encoding": encoding}


def vertex_fragments_attributes() -> dict[str, Any]:
    return {"zv_array": "vertex_fragments", "encoding": "fragment_index_v1"}


def link_fragments_attributes() -> dict[str, Any]:
    return {"zv_array": "link_fragments", "encoding": "fragment_index_v1"}


def _row_shape(row_shape: Sequence[int]) -> list[int]:
    rs = [int(r) for r in row_shape]
    if len(rs) > 1 or any(r < 1 for r in rs):
        raise InvalidArgumentError(f"row_shape: must be [] or [C], got {rs}")
    return rs


def vertex_attribute_attributes(
    name: str, dtype: Any, row_shape: Sequence[int] = (), channel_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """``vertex_attributes/<name>``: multi-channel ones get ``channel_names`` (default ch0..)."""
    rs = _row_shape(row_shape)
    d: dict[str, Any] = {"zv_array": "attribute", "name": name, "dtype": dtype_name(dtype, name)}
    if rs:
        names = [f"ch{i}" for i in range(rs[0])] if channel_names is None else [str(c) for c in channel_names]
        if len(names) != rs[0]:
            raise InvalidArgumentError(f"channel_names: need {rs[0]} names for {name}")
        d["channel_names"] = names
    # 0.9.2 labels a one-channel (N, 1) attribute ``row_shape: []``; its channel_names say it has one channel.
    d["row_shape"] = [] if rs == [1] else rs
    return d


def fragment_attribute_attributes(name: str, dtype: Any, row_shape: Sequence[int] = ()) -> dict[str, Any]:
    return {"zv_array": "fragment_attribute", "name": name, "dtype": dtype_name(dtype, name),
            "row_shape": _row_shape(row_shape)}


def _offsets_list(offsets: Any) -> list[list[int]]:
    rows = to_json(offsets)
    if not rows or not isinstance(rows[0], list):
        raise InvalidArgumentError(f"offsets: need a list of offset vectors, got {offsets!r}")
    return [[int(x) for x in r] for r in rows]


def links_array_attributes(offsets: Any, *, has_perm: bool, link_width: int, level_delta: int) -> dict[str, Any]:
    """``links/<delta>/<offsets>``: ``offsets`` is the list of per-endpoint offset vectors."""
    return {"zv_array": "links", "dtype": "int64", "offsets": _offsets_list(offsets), "has_perm": bool(has_perm),
            "link_width": int(link_width), "level_delta": int(level_delta)}


def link_attribute_attributes(name: str, dtype: Any, offsets: Any, *, level_delta: int,
                              row_shape: Sequence[int] = ()) -> dict[str, Any]:
    """``link_attributes/<name>/<delta>/<offsets>`` (no channel_names, unlike vertex attributes)."""
    return {"zv_array": "link_attribute", "name": name, "dtype": dtype_name(dtype, name),
            "offsets": _offsets_list(offsets), "level_delta": int(level_delta), "row_shape": _row_shape(row_shape)}
