"""Parse ``zarr.json`` documents into the models of :mod:`zvf.format.metadata`.

Trusts nothing: every type, length and range is checked, and every failure is a
:class:`~zvf.errors.FormatError` (or :class:`~zvf.errors.NotZvfStoreError`)
naming the key and the field.  Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from ..config import tuning
from ..errors import FormatError, IncompleteStoreError, NotZvfStoreError, StoreNotFoundError
from .metadata import (
    COMPACT_GROUP_KEYS,
    CROSS_CHUNK_STRATEGIES,
    CROSS_LEVEL_STORAGES,
    DEFAULT_CHUNK_KEY_ENCODING,
    GEOMETRY_TYPES,
    LINKS_CONVENTIONS,
    MAX_NDIM,
    OBJECT_INDEX_CONVENTIONS,
    ArrayMeta,
    GroupMeta,
    LevelMeta,
    LevelTransform,
    RootMeta,
    fail,
    is_real,
    need_bool,
    need_dict,
    need_int,
    need_ints,
    need_list,
    need_reals,
    need_str,
    need_strs,
)

__all__ = [
    "MAX_GRID_CELLS",
    "check_level_grid",
    "classify_root",
    "loads",
    "parse_array",
    "parse_group",
    "parse_level",
    "parse_root",
]

#: The most chunks a level's grid may span over the store's bounds: past it chunk numbers leave the range
#: int64 arithmetic holds (a chunk_shape of 1e-300 made every query answer nothing).
MAX_GRID_CELLS = 1 << 62


def loads(data: bytes | bytearray | memoryview | str, *, key: str) -> dict[str, Any]:
    """Decode one ``zarr.json``; any decoding problem is a FormatError naming ``key``, and a document over
    the ``max_document_bytes`` setting is refused unparsed."""
    size = len(data) if isinstance(data, (bytes, bytearray, str)) else memoryview(data).nbytes
    most = tuning().max_document_bytes
    if size > most:
        raise FormatError(f"{key}: a metadata document of {size} bytes, over the {most / 2**20:g} MiB zvf reads "
                          f"(zvf.config setting max_document_bytes); not parsed")
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        doc = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
        raise FormatError(f"{key}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{key}: JSON document must be an object, got {type(doc).__name__}")
    return doc


def _node(doc: Any, key: str, node_type: str) -> dict[str, Any]:
    doc = need_dict(doc, key, "document")
    fmt = doc.get("zarr_format")
    if fmt != 3 or isinstance(fmt, bool):
        raise fail(key, "zarr_format", f"must be 3, got {fmt!r}")
    nt = doc.get("node_type")
    if nt != node_type:
        raise fail(key, "node_type", f"must be {node_type!r}, got {nt!r}")
    return need_dict(doc.get("attributes", {}), key, "attributes")


def _field(block: dict[str, Any], name: str, check: Callable[..., Any], key: str, prefix: str, *,
           default: Any = None, **limits: Any) -> Any:
    """``block[name]`` (``default`` where absent) passed through ``check`` (need_int, need_str, ...);
    a field without a default is optional: None where absent or null."""
    v = block.get(name, default)
    return None if v is None and default is None else check(v, key, prefix + name, **limits)


def _parse_transforms(
    ms: Any, key: str, ndim: int
) -> tuple[tuple[dict[str, Any], ...] | None, tuple[LevelTransform, ...]]:
    if ms is None:
        return None, ()
    ms = need_list(ms, key, "multiscales")
    if not ms:
        return None, ()
    entry = need_dict(ms[0], key, "multiscales[0]")
    axes = entry.get("axes")
    parsed_axes = None
    if axes is not None:
        axes = need_list(axes, key, "multiscales[0].axes", max_len=MAX_NDIM)
        for a in axes:
            need_dict(a, key, "multiscales[0].axes[]")
            need_str(a.get("name"), key, "multiscales[0].axes[].name")
        n_space = sum(1 for a in axes if a.get("type", "space") == "space")
        if n_space != ndim:
            raise fail(key, "multiscales[0].axes", f"declares {n_space} space axes but chunk_shape has {ndim}")
        parsed_axes = tuple(dict(a) for a in axes)
    out = []
    seen = set()
    for i, ds in enumerate(need_list(entry.get("datasets", []), key, "multiscales[0].datasets")):
        f = f"multiscales[0].datasets[{i}]"
        ds = need_dict(ds, key, f)
        path = need_str(ds.get("path"), key, f + ".path")
        if not re.fullmatch(r"[0-9]{1,6}", path):
            raise fail(key, f + ".path", f"must be a level number, got {path!r}")
        level = int(path)
        if level in seen:
            raise fail(key, f + ".path", f"repeats level {level}")
        seen.add(level)
        scale = translation = None
        for t in need_list(ds.get("coordinateTransformations", []), key, f + ".coordinateTransformations"):
            t = need_dict(t, key, f + ".coordinateTransformations[]")
            kind = t.get("type")
            if kind == "scale":
                scale = need_reals(t.get("scale"), key, f + ".scale", ndim=ndim)
            elif kind == "translation":
                translation = need_reals(t.get("translation"), key, f + ".translation", ndim=ndim)
        if scale is None:
            scale = (1.0,) * ndim
        out.append(LevelTransform(level, scale, translation))
    return parsed_axes, tuple(out)


def _check_grid(chunk_shape: tuple[float, ...], bounds: tuple[tuple[float, ...], tuple[float, ...]], key: str,
                field: str) -> None:
    """Refuse a chunk edge that spans more than :data:`MAX_GRID_CELLS` chunks over ``bounds``, or puts a bound
    at a chunk number float64 cannot hold exactly (2**52)."""
    cells = 1.0
    for i, (c, a, b) in enumerate(zip(chunk_shape, *bounds)):
        first, last = a / c, b / c
        if not (math.isfinite(first) and math.isfinite(last)) or max(abs(first), abs(last)) >= 2.0**52:
            raise fail(key, field, f"[{i}]={c} puts the bounds {a}..{b} beyond chunk 2**52: absurdly many cells")
        cells *= math.floor(last) - math.floor(first) + 1
    if cells > MAX_GRID_CELLS:
        raise fail(key, field, f"{list(chunk_shape)} spans {cells:.3g} cells over the bounds, more than the "
                               f"{MAX_GRID_CELLS:.3g} zvf reads")


def _check_bins(chunk_shape: tuple[float, ...], bin_shape: tuple[float, ...], key: str, field: str) -> None:
    """Refuse bins that do not tile the chunk a whole number of times per axis, or more than
    the ``max_bins_per_chunk`` setting of them."""
    bins = 1
    for i, (c, b) in enumerate(zip(chunk_shape, bin_shape)):
        r = c / b
        if not math.isfinite(r) or r > 2**31:
            raise fail(key, field, f"[{i}]={b} gives too many bins per chunk (cells of chunk_shape[{i}]={c})")
        if round(r) < 1 or abs(r - round(r)) > 1e-9 * max(1.0, r):
            raise fail(key, field, f"[{i}]={b} does not divide chunk_shape[{i}]={c}")
        bins *= round(r)
    most = tuning().max_bins_per_chunk
    if bins > most:
        raise fail(key, field, f"{list(bin_shape)} makes {bins} bins (cells) per chunk, more than the "
                               f"{most} zvf reads (zvf.config setting max_bins_per_chunk)")


def check_level_grid(root: RootMeta, level: LevelMeta, *, key: str) -> None:
    """A level's own chunk edge and bins, held to the root's grid limits (the root's are checked by
    :func:`parse_root`): level 0's bins tile its chunks."""
    chunk = level.chunk_shape or root.chunk_shape
    if len(chunk) != root.ndim:
        raise fail(key, "zarr_vectors_level.chunk_shape", f"has {len(chunk)} entries but the store has {root.ndim}")
    _check_grid(chunk, root.bounds, key, "zarr_vectors_level.chunk_shape")
    if level.level == 0 and level.bin_shape is not None:
        if len(level.bin_shape) != root.ndim:
            raise fail(key, "zarr_vectors_level.bin_shape", f"has {len(level.bin_shape)} entries, not {root.ndim}")
        _check_bins(chunk, level.bin_shape, key, "zarr_vectors_level.bin_shape")


def parse_root(doc: Any, *, key: str = "zarr.json") -> RootMeta:
    """Parse the store root group; refuse anything that is not a ZVF root."""
    doc = need_dict(doc, key, "document")
    if doc.get("node_type") == "array":
        raise NotZvfStoreError(f"{key}: a Zarr array, not a Zarr Vectors store")
    attrs = _node(doc, key, "group")
    if "zarr_vectors" not in attrs:
        raise NotZvfStoreError(f"{key}: a Zarr group but not a Zarr Vectors store")
    zv = need_dict(attrs["zarr_vectors"], key, "attributes.zarr_vectors")
    f = "zarr_vectors."

    version = need_str(zv.get("zv_version"), key, f + "zv_version")
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){0,2}([.+-][0-9A-Za-z.+-]*)?", version):
        raise fail(key, f + "zv_version", f"is not a version string: {version!r}")
    caps = need_strs(zv.get("format_capabilities", []), key, f + "format_capabilities")
    chunk_shape = need_reals(zv.get("chunk_shape"), key, f + "chunk_shape", positive=True)
    ndim = len(chunk_shape)
    bounds_raw = need_list(zv.get("bounds"), key, f + "bounds")
    if len(bounds_raw) != 2:
        raise fail(key, f + "bounds", "must be [min_corner, max_corner]")
    lo = need_reals(bounds_raw[0], key, f + "bounds[0]", ndim=ndim, ndim_from=f + "chunk_shape")
    hi = need_reals(bounds_raw[1], key, f + "bounds[1]", ndim=ndim, ndim_from=f + "chunk_shape")
    if any(a > b for a, b in zip(lo, hi)):
        raise fail(key, f + "bounds", f"has min > max: {list(lo)} > {list(hi)}")
    _check_grid(chunk_shape, (lo, hi), key, f + "chunk_shape")
    geoms = need_strs(zv.get("geometry_types", []), key, f + "geometry_types", allowed=GEOMETRY_TYPES)

    bbs_raw = zv.get("base_bin_shape")
    bbs = None
    if bbs_raw is not None:
        bbs = need_reals(bbs_raw, key, f + "base_bin_shape", ndim=ndim, positive=True,
                          ndim_from=f + "chunk_shape")
        _check_bins(chunk_shape, bbs, key, f + "base_bin_shape")

    links = _field(zv, "links_convention", need_str, key, f, default="implicit_sequential",
                   allowed=LINKS_CONVENTIONS)
    oic = _field(zv, "object_index_convention", need_str, key, f, default="standard",
                 allowed=OBJECT_INDEX_CONVENTIONS)
    ccs = _field(zv, "cross_chunk_strategy", need_str, key, f, default="explicit_links",
                 allowed=CROSS_CHUNK_STRATEGIES)
    cld = _field(zv, "cross_level_depth", need_int, key, f, lo=-1, hi=1 << 16)
    cls = _field(zv, "cross_level_storage", need_str, key, f, allowed=CROSS_LEVEL_STORAGES)
    specs = _field(zv, "attribute_specs", need_dict, key, f)

    axes, transforms = _parse_transforms(attrs.get("multiscales"), key, ndim)
    name = None
    ome = attrs.get("ome")
    if isinstance(ome, dict) and isinstance(ome.get("name"), str):
        name = ome["name"]
    return RootMeta(
        zv_version=version,
        format_capabilities=caps,
        chunk_shape=chunk_shape,
        bounds=(lo, hi),
        geometry_types=geoms,
        base_bin_shape=bbs,
        links_convention=links,
        object_index_convention=oic,
        cross_chunk_strategy=ccs,
        cross_level_depth=cld,
        cross_level_storage=cls,
        crs=zv.get("crs"),
        attribute_specs=specs,
        axes=axes,
        transforms=transforms,
        name=name,
        # without the consolidated section: a root rebuilt from raw (pyramids) must not list stale nodes
        raw={k: v for k, v in doc.items() if k != "consolidated_metadata"},
    )


def parse_level(doc: Any, *, key: str = "0/zarr.json") -> LevelMeta:
    """Parse a level group's ``zarr_vectors_level`` block."""
    attrs = _node(doc, key, "group")
    if "zarr_vectors_level" not in attrs:
        raise FormatError(f"{key}: level group has no zarr_vectors_level attributes")
    lv = need_dict(attrs["zarr_vectors_level"], key, "attributes.zarr_vectors_level")
    f = "zarr_vectors_level."
    level = need_int(lv.get("level"), key, f + "level", lo=0, hi=1 << 16)
    vc = need_int(lv.get("vertex_count"), key, f + "vertex_count", lo=0)
    present = need_strs(lv.get("arrays_present"), key, f + "arrays_present")
    sparsity = lv.get("object_sparsity", 1.0)
    if not is_real(sparsity) or not 0 < sparsity <= 1:
        raise fail(key, f + "object_sparsity", f"must be in (0, 1], got {sparsity!r}")
    parent = lv.get("parent_level")
    if parent is not None:
        parent = need_int(parent, key, f + "parent_level", lo=0, hi=1 << 16)
        if parent >= level:
            raise fail(key, f + "parent_level", f"must be below level {level}, got {parent}")

    chunk_shape = _field(lv, "chunk_shape", need_reals, key, f, positive=True)
    bin_shape = _field(lv, "bin_shape", need_reals, key, f, positive=True)
    if bin_shape is None:  # seed-era spelling
        bin_shape = _field(lv, "bin_size", need_reals, key, f, positive=True)
    inherited = _field(lv, "inherited_num_objects", need_int, key, f, lo=0)
    dims = _field(lv, "chunk_dims", need_strs, key, f)
    can = _field(lv, "chunk_attribute_name", need_str, key, f)
    cav = _field(lv, "chunk_attribute_values", need_list, key, f)
    return LevelMeta(
        level=level,
        vertex_count=vc,
        object_sparsity=sparsity,
        coarsening_method=_field(lv, "coarsening_method", need_str, key, f, default="none"),
        parent_level=parent,
        arrays_present=present,
        fragments_tile=_field(lv, "fragments_tile", need_bool, key, f, default=False),
        chunk_shape=chunk_shape,
        bin_shape=bin_shape,
        preserves_object_ids=_field(lv, "preserves_object_ids", need_bool, key, f, default=False),
        inherited_num_objects=inherited,
        shared_fragments=_field(lv, "shared_fragments", need_bool, key, f, default=False),
        chunk_dims=dims,
        chunk_attribute_name=can,
        chunk_attribute_values=None if cav is None else tuple(cav),
        raw=doc,
    )


def parse_array(doc: Any, *, key: str) -> ArrayMeta:
    """Parse a Zarr v3 array node; the ZVF attributes are checked where cheap."""
    attrs = _node(doc, key, "array")
    shape = need_ints(doc.get("shape"), key, "shape", lo=0, allow_empty=False)
    ndim = len(shape)
    dt = doc.get("data_type")
    if isinstance(dt, dict):  # extension data types are spelled as objects
        dt = dt.get("name")
    data_type = need_str(dt, key, "data_type")
    grid = need_dict(doc.get("chunk_grid"), key, "chunk_grid")
    if grid.get("name") != "regular":
        raise fail(key, "chunk_grid.name", f"must be 'regular', got {grid.get('name')!r}")
    conf = need_dict(grid.get("configuration"), key, "chunk_grid.configuration")
    chunks = need_ints(conf.get("chunk_shape"), key, "chunk_grid.configuration.chunk_shape", ndim=ndim, lo=1)
    cke = doc.get("chunk_key_encoding")
    cke = json.loads(json.dumps(DEFAULT_CHUNK_KEY_ENCODING)) if cke is None else cke
    need_dict(cke, key, "chunk_key_encoding")
    need_str(cke.get("name"), key, "chunk_key_encoding.name", allowed=("default", "v2"))
    cke_conf = need_dict(cke.get("configuration", {}), key, "chunk_key_encoding.configuration")
    if "separator" in cke_conf:
        need_str(cke_conf["separator"], key, "chunk_key_encoding.configuration.separator", allowed=("/", "."))
    codecs = need_list(doc.get("codecs", []), key, "codecs", max_len=64)
    for c in codecs:
        need_str(need_dict(c, key, "codecs[]").get("name"), key, "codecs[].name")
    if "fill_value" not in doc:
        raise fail(key, "fill_value", "is missing")
    nonempty = attrs.get("nonempty_chunks")
    if nonempty is not None:
        need_list(nonempty, key, "attributes.nonempty_chunks")
    meta = ArrayMeta(
        key=key,
        shape=shape,
        data_type=data_type,
        chunk_shape=chunks,
        chunk_key_encoding=cke,
        fill_value=doc["fill_value"],
        codecs=tuple(codecs),
        attributes=attrs,
        raw=doc,
    )
    _ = meta.grid_origin  # validate now (cached)
    _check_zv_attributes(meta, attrs, key)
    return meta


def _check_zv_attributes(meta: ArrayMeta, attrs: dict[str, Any], key: str) -> None:
    """Type-check the ZVF attributes readers act on (dtype, row_shape, link fields)."""
    if "dtype" in attrs or not meta.is_vlen:
        _ = meta.dtype  # raises FormatError for anything but a numeric dtype name
    if "row_shape" in attrs:
        need_ints(attrs["row_shape"], key, "attributes.row_shape", lo=1, allow_empty=True)
        if len(attrs["row_shape"]) > 1:
            raise fail(key, "attributes.row_shape", f"must be [] or [C], got {attrs['row_shape']!r}")
    if "link_width" in attrs:
        need_int(attrs["link_width"], key, "attributes.link_width", lo=1, hi=64)
    if "has_perm" in attrs:
        need_bool(attrs["has_perm"], key, "attributes.has_perm")
    if "offsets" in attrs:
        offsets = need_list(attrs["offsets"], key, "attributes.offsets", max_len=64)
        for row in offsets:
            if any(abs(x) > 1 << 20 for x in need_ints(row, key, "attributes.offsets[]")):
                raise fail(key, "attributes.offsets", f"offset out of range in {row!r}")


def parse_group(doc: Any, *, key: str) -> GroupMeta:
    """Parse any group node, recording which serialization style it uses."""
    attrs = _node(doc, key, "group")
    return GroupMeta(key=key, attributes=attrs, compact=list(doc.keys()) == COMPACT_GROUP_KEYS, raw=doc)


def classify_root(
    zarr_json: bytes | None,
    *,
    has_zgroup: bool = False,
    has_zarray: bool = False,
    has_other_keys: bool = False,
    key: str = "zarr.json",
) -> RootMeta:
    """Decide what a store root is from its ``zarr.json`` bytes and the v2 markers.

    ``zarr_json`` is ``None`` when the key does not exist.  Raises
    NotZvfStoreError (Zarr v2, a plain group, an array), IncompleteStoreError
    (data but no root metadata: a write never finished), StoreNotFoundError
    (nothing there), FormatError (malformed); returns the parsed root otherwise.
    """
    prefix = key[: -len("zarr.json")].rstrip("/") or "."
    if zarr_json is None:
        if has_zgroup or has_zarray:
            what = ".zgroup" if has_zgroup else ".zarray"
            raise NotZvfStoreError(
                f"{prefix}: Zarr v2 store ({what}) is not supported; Zarr Vectors stores are Zarr v3"
            )
        if has_other_keys:
            raise IncompleteStoreError(f"{key}: missing, but the store holds data (an unfinished write?)")
        raise StoreNotFoundError(f"{key}: no store at {prefix}")
    doc = loads(zarr_json, key=key)
    fmt = doc.get("zarr_format")
    if fmt == 2 and not isinstance(fmt, bool):
        raise NotZvfStoreError(f"{key}: Zarr v2 store is not supported; Zarr Vectors stores are Zarr v3")
    return parse_root(doc, key=key)
