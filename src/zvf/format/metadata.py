"""Root, level and array metadata of a ZVF store.

Two directions, both pure (no I/O):

* **parse** a ``zarr.json`` (bytes or decoded dict) into small frozen models,
  trusting nothing: every type, length and range is checked and every failure
  is a :class:`~zvf.errors.FormatError` (or :class:`~zvf.errors.NotZvfStoreError`)
  naming the key and the field;
* **build** the exact documents zarr-vectors 0.9.2 writes (same keys, same key
  order, same values) and serialize them byte-for-byte like it does
  (:func:`dumps`).

See ``docs/REFERENCE_LAYOUT.md`` for the layout these builders reproduce.
numpy is imported lazily: only the helpers that handle chunk-coordinate arrays
and dtypes need it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

from ..errors import (
    FormatError,
    IncompleteStoreError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreNotFoundError,
)

__all__ = [
    "ZV_VERSION",
    "GEOMETRY_TYPES",
    "LINKS_CONVENTION_BY_GEOMETRY",
    "OBJECT_ATTRIBUTE_ROW_CHUNK",
    "MANIFEST_ROW_CHUNK",
    "RootMeta",
    "LevelMeta",
    "ArrayMeta",
    "GroupMeta",
    "LevelTransform",
    "loads",
    "parse_root",
    "parse_level",
    "parse_array",
    "parse_group",
    "classify_root",
    "dumps",
    "root_document",
    "level_document",
    "level_transform",
    "default_axes",
    "store_name",
    "nonempty_chunk_keys",
    "spatial_array_document",
    "dense_array_document",
    "object_attribute_document",
    "group_attribute_document",
    "object_ids_document",
    "vlen_1d_array_document",
    "manifests_document",
    "groups_document",
    "group_document",
    "object_index_group_document",
    "links_family_document",
    "link_attribute_family_document",
    "vertices_attributes",
    "vertex_fragments_attributes",
    "link_fragments_attributes",
    "vertex_attribute_attributes",
    "fragment_attribute_attributes",
    "links_array_attributes",
    "link_attribute_attributes",
    "offsets_name",
    "parse_offsets_name",
    "bytes_codec",
    "object_attribute_fill",
]

# --------------------------------------------------------------------------
# constants of the 0.9.2 layout
# --------------------------------------------------------------------------

ZV_VERSION = "0.9.2"

GEOMETRY_TYPES = frozenset(
    {"point_cloud", "line", "polyline", "streamline", "graph", "skeleton", "mesh"}
)
LINKS_CONVENTIONS = frozenset(
    {"explicit", "implicit_sequential", "implicit_sequential_with_branches"}
)
OBJECT_INDEX_CONVENTIONS = frozenset({"standard", "identity"})
CROSS_CHUNK_STRATEGIES = frozenset({"boundary_deduplication", "explicit_links", "both"})
CROSS_LEVEL_STORAGES = frozenset({"none", "implicit", "explicit"})

#: ``links_convention`` each 0.9.2 writer stamps for its geometry.
LINKS_CONVENTION_BY_GEOMETRY = {
    "point_cloud": "implicit_sequential",
    "line": "implicit_sequential",
    "polyline": "implicit_sequential",
    "streamline": "implicit_sequential",
    "graph": "explicit",
    "mesh": "explicit",
    "skeleton": "implicit_sequential_with_branches",
}

DEFAULT_AXIS_NAMES = ("x", "y", "z", "w")
DEFAULT_STORE_NAME = "zarr_vectors"
_NAME_SUFFIXES = (".zarrvectors", ".zv", ".zarr")

#: Row chunk of every ``object_attributes/<name>`` array, whatever its length.
OBJECT_ATTRIBUTE_ROW_CHUNK = 65536
#: ``object_index/manifests`` chunk = min(num_objects, this).
MANIFEST_ROW_CHUNK = 16384

DEFAULT_CHUNK_KEY_ENCODING = {"name": "default", "configuration": {"separator": "/"}}
VLEN_DATA_TYPES = frozenset({"variable_length_bytes", "bytes"})

#: Numeric dtypes a ZVF array may declare (``dtype`` attribute / ``data_type``).
NUMERIC_DTYPES = frozenset(
    {
        "bool", "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64",
    }
)

_COMPACT_GROUP_KEYS = ["zarr_format", "node_type", "attributes"]
_COMPACT_GROUP_PREFIX = '{"zarr_format":3,"node_type":"group","attributes":'
_MAX_NDIM = 32
_MAX_INT = 2**63 - 1


# --------------------------------------------------------------------------
# small validation helpers (all raise FormatError naming key + field)
# --------------------------------------------------------------------------


def _fail(key: str, fieldname: str, what: str) -> FormatError:
    return FormatError(f"{key}: {fieldname} {what}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _need_dict(v: Any, key: str, fieldname: str) -> dict:
    if not isinstance(v, dict):
        raise _fail(key, fieldname, f"must be a JSON object, got {type(v).__name__}")
    return v


def _need_str(v: Any, key: str, fieldname: str, *, allowed: Iterable[str] | None = None) -> str:
    if not isinstance(v, str):
        raise _fail(key, fieldname, f"must be a string, got {type(v).__name__}")
    if allowed is not None and v not in allowed:
        raise _fail(key, fieldname, f"has unknown value {v!r} (expected one of {sorted(allowed)})")
    return v


def _need_int(v: Any, key: str, fieldname: str, *, lo: int | None = None, hi: int = _MAX_INT) -> int:
    if not _is_int(v):
        raise _fail(key, fieldname, f"must be an integer, got {type(v).__name__}")
    if (lo is not None and v < lo) or v > hi:
        raise _fail(key, fieldname, f"is out of range: {v}")
    return v


def _need_bool(v: Any, key: str, fieldname: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(key, fieldname, f"must be true or false, got {type(v).__name__}")
    return v


def _need_list(v: Any, key: str, fieldname: str, *, max_len: int | None = None) -> list:
    if not isinstance(v, list):
        raise _fail(key, fieldname, f"must be a JSON array, got {type(v).__name__}")
    if max_len is not None and len(v) > max_len:
        raise _fail(key, fieldname, f"has too many entries ({len(v)})")
    return v


def _need_reals(v: Any, key: str, fieldname: str, *, ndim: int | None = None, positive: bool = False,
                ndim_from: str = "the store") -> tuple:
    items = _need_list(v, key, fieldname, max_len=_MAX_NDIM)
    if not items:
        raise _fail(key, fieldname, "must not be empty")
    if ndim is not None and len(items) != ndim:
        raise _fail(key, fieldname, f"has {len(items)} entries but {ndim_from} has {ndim} (ndim mismatch)")
    for x in items:
        if not _is_real(x):
            raise _fail(key, fieldname, f"must hold finite numbers, got {x!r}")
        if positive and not x > 0:
            raise _fail(key, fieldname, f"must hold positive numbers, got {x!r}")
    return tuple(items)


def _need_ints(v: Any, key: str, fieldname: str, *, ndim: int | None = None, lo: int | None = None,
               max_len: int = _MAX_NDIM, allow_empty: bool = False) -> tuple[int, ...]:
    items = _need_list(v, key, fieldname, max_len=max_len)
    if not items and not allow_empty:
        raise _fail(key, fieldname, "must not be empty")
    if ndim is not None and len(items) != ndim:
        raise _fail(key, fieldname, f"has {len(items)} entries, expected {ndim}")
    for x in items:
        if not _is_int(x) or abs(x) > _MAX_INT or (lo is not None and x < lo):
            raise _fail(key, fieldname, f"must hold integers{'' if lo is None else f' >= {lo}'}, got {x!r}")
    return tuple(items)


def _need_strs(v: Any, key: str, fieldname: str, *, allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    items = _need_list(v, key, fieldname)
    for x in items:
        _need_str(x, key, fieldname, allowed=allowed)
    return tuple(items)


def _py(v: Any) -> Any:
    """numpy scalars/arrays and tuples -> plain JSON-able Python values."""
    if isinstance(v, (str, bool, int, float)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {str(k): _py(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_py(x) for x in v]
    tolist = getattr(v, "tolist", None)
    if tolist is not None:
        return _py(tolist())
    raise InvalidArgumentError(f"value {v!r} of type {type(v).__name__} is not JSON-serializable")


def _dtype_name(dtype: Any, what: str) -> str:
    """Canonical numeric dtype name ('float32', ...) of a numpy-compatible dtype."""
    import numpy as np

    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise InvalidArgumentError(f"{what}: {dtype!r} is not a dtype") from exc
    if name not in NUMERIC_DTYPES:
        raise InvalidArgumentError(f"{what}: dtype {name!r} is not supported (use one of {sorted(NUMERIC_DTYPES)})")
    return name


# --------------------------------------------------------------------------
# JSON decoding / encoding
# --------------------------------------------------------------------------


def loads(data: bytes | bytearray | memoryview | str, *, key: str) -> dict:
    """Decode one ``zarr.json``; any decoding problem is a FormatError naming ``key``."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        doc = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
        raise FormatError(f"{key}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{key}: JSON document must be an object, got {type(doc).__name__}")
    return doc


def dumps(doc: Mapping[str, Any]) -> bytes:
    """Serialize a document exactly as 0.9.2 stores it.

    Two styles exist on disk.  Nodes written through zarr-python (root, level
    groups, every array, empty groups) are ``json.dumps(doc, indent=2)`` with no
    trailing newline.  Groups zarr-vectors writes itself (``object_index/`` at
    level 0, ``links/<delta>/``, ``link_attributes/<name>/<delta>/``) are one
    compact line whose key order starts with ``zarr_format``; the builders mark
    those by producing exactly that key order (see :func:`group_document`).
    """
    if list(doc.keys()) == _COMPACT_GROUP_KEYS and doc.get("node_type") == "group" and doc.get("zarr_format") == 3:
        text = _COMPACT_GROUP_PREFIX + json.dumps(doc["attributes"], allow_nan=True) + "}"
    else:
        text = json.dumps(doc, indent=2, allow_nan=True)
    return text.encode("utf-8")


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------


class LevelTransform(NamedTuple):
    """One ``multiscales[0].datasets`` entry: level path and NGFF transform."""

    level: int
    scale: tuple[float, ...]
    translation: tuple[float, ...] | None


@dataclass(frozen=True)
class RootMeta:
    """The root ``zarr_vectors`` block plus what the NGFF/OME blocks add."""

    zv_version: str
    format_capabilities: tuple[str, ...]
    chunk_shape: tuple[float, ...]
    bounds: tuple[tuple[float, ...], tuple[float, ...]]
    geometry_types: tuple[str, ...]
    base_bin_shape: tuple[float, ...] | None
    links_convention: str
    object_index_convention: str
    cross_chunk_strategy: str
    cross_level_depth: int | None = None
    cross_level_storage: str | None = None
    crs: Any = None
    attribute_specs: dict | None = None
    axes: tuple[dict, ...] | None = None
    transforms: tuple[LevelTransform, ...] = ()
    name: str | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def ndim(self) -> int:
        return len(self.chunk_shape)

    @property
    def geometry_type(self) -> str | None:
        """The store's geometry (0.9.2 writers stamp exactly one)."""
        return self.geometry_types[0] if self.geometry_types else None

    @property
    def bin_shape(self) -> tuple[float, ...]:
        """Effective level-0 bin: ``base_bin_shape`` or one bin per chunk."""
        return self.base_bin_shape if self.base_bin_shape is not None else self.chunk_shape

    @property
    def bins_per_chunk(self) -> tuple[int, ...]:
        return tuple(int(round(c / b)) for c, b in zip(self.chunk_shape, self.bin_shape))

    @property
    def levels(self) -> tuple[int, ...]:
        """Levels named by ``multiscales[0].datasets`` (sorted)."""
        return tuple(sorted(t.level for t in self.transforms))

    def level_bin_shape(self, level: int) -> tuple[float, ...]:
        """A level's bin edge: 0.9.2 keeps it only as NGFF translation (= bin / 2).

        Falls back to ``bin_shape * scale``, then to the level-0 bin.
        """
        for t in self.transforms:
            if t.level == level:
                if t.translation is not None:
                    return tuple(2.0 * x for x in t.translation)
                return tuple(b * s for b, s in zip(self.bin_shape, t.scale))
        return self.bin_shape

    def level_chunk_shape(self, level: LevelMeta, *, key: str = "zarr.json") -> tuple[float, ...]:
        """A level's chunk edge (its override or the root's); must nest in the level-0 grid."""
        cs = level.chunk_shape
        if cs is None:
            return self.chunk_shape
        if len(cs) != self.ndim:
            raise _fail(key, "zarr_vectors_level.chunk_shape", f"has {len(cs)} entries but the store has {self.ndim}")
        for i, (c, r) in enumerate(zip(cs, self.chunk_shape)):
            q = c / r
            if not math.isfinite(q) or q > 2**31 or round(q) < 1 or abs(q - round(q)) > 1e-9 * max(1.0, q):
                raise _fail(key, "zarr_vectors_level.chunk_shape",
                            f"[{i}]={c} is not a whole multiple of the root chunk_shape[{i}]={r}")
        return cs


@dataclass(frozen=True)
class LevelMeta:
    """A level group's ``zarr_vectors_level`` block."""

    level: int
    vertex_count: int
    object_sparsity: float
    coarsening_method: str
    parent_level: int | None
    arrays_present: tuple[str, ...]
    fragments_tile: bool = False
    chunk_shape: tuple[float, ...] | None = None
    bin_shape: tuple[float, ...] | None = None
    preserves_object_ids: bool = False
    inherited_num_objects: int | None = None
    shared_fragments: bool = False
    chunk_dims: tuple[str, ...] | None = None
    chunk_attribute_name: str | None = None
    chunk_attribute_values: tuple | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_coarsened(self) -> bool:
        return self.parent_level is not None


@dataclass(frozen=True)
class ArrayMeta:
    """A Zarr v3 array node (``zarr.json`` with ``node_type: array``)."""

    key: str
    shape: tuple[int, ...]
    data_type: str
    chunk_shape: tuple[int, ...]
    chunk_key_encoding: dict
    fill_value: Any
    codecs: tuple[dict, ...]
    attributes: dict
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def zv_array(self) -> str | None:
        v = self.attributes.get("zv_array")
        return v if isinstance(v, str) else None

    @property
    def is_vlen(self) -> bool:
        return self.data_type in VLEN_DATA_TYPES

    @property
    def separator(self) -> str:
        conf = self.chunk_key_encoding.get("configuration") or {}
        default = "." if self.chunk_key_encoding.get("name") == "v2" else "/"
        return conf.get("separator", default)

    @property
    def sharded(self) -> bool:
        return bool(self.codecs) and self.codecs[0].get("name") == "sharding_indexed"

    @cached_property
    def grid_origin(self) -> tuple[int, ...]:
        """``chunk_grid_origin`` (absolute coordinate of cell 0), zeros when absent."""
        origin = self.attributes.get("chunk_grid_origin")
        if origin is None:
            return (0,) * self.ndim
        return _need_ints(origin, self.key, "attributes.chunk_grid_origin", ndim=self.ndim)

    @cached_property
    def nonempty_chunk_array(self):
        """``nonempty_chunks`` as an (n, ndim) int64 array of absolute chunk coordinates."""
        return _parse_nonempty(self.attributes.get("nonempty_chunks", []), self.ndim, self.key)

    @property
    def nonempty_chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(r) for r in self.nonempty_chunk_array.tolist())

    @cached_property
    def dtype(self):
        """Element dtype: the ``dtype`` attribute of vlen arrays, else ``data_type``.

        ``None`` for blobs with no declared dtype (fragment indexes, manifests).
        """
        import numpy as np

        name = self.attributes.get("dtype") if self.is_vlen else self.data_type
        if name is None:
            return None
        if not isinstance(name, str) or name not in NUMERIC_DTYPES:
            raise FormatError(f"{self.key}: dtype {name!r} is not a supported numeric dtype")
        return np.dtype(name).newbyteorder("<")


@dataclass(frozen=True)
class GroupMeta:
    """Any Zarr v3 group; ``compact`` tells which serialization it used."""

    key: str
    attributes: dict
    compact: bool
    raw: dict = field(default_factory=dict, repr=False, compare=False)


# --------------------------------------------------------------------------
# parsers
# --------------------------------------------------------------------------


def _node(doc: Any, key: str, node_type: str) -> dict:
    doc = _need_dict(doc, key, "document")
    fmt = doc.get("zarr_format")
    if fmt != 3 or isinstance(fmt, bool):
        raise _fail(key, "zarr_format", f"must be 3, got {fmt!r}")
    nt = doc.get("node_type")
    if nt != node_type:
        raise _fail(key, "node_type", f"must be {node_type!r}, got {nt!r}")
    attrs = doc.get("attributes", {})
    _need_dict(attrs, key, "attributes")
    return attrs


def _parse_transforms(ms: Any, key: str, ndim: int) -> tuple[tuple[dict, ...] | None, tuple[LevelTransform, ...]]:
    if ms is None:
        return None, ()
    ms = _need_list(ms, key, "multiscales")
    if not ms:
        return None, ()
    entry = _need_dict(ms[0], key, "multiscales[0]")
    axes = entry.get("axes")
    parsed_axes = None
    if axes is not None:
        axes = _need_list(axes, key, "multiscales[0].axes", max_len=_MAX_NDIM)
        for a in axes:
            _need_dict(a, key, "multiscales[0].axes[]")
            _need_str(a.get("name"), key, "multiscales[0].axes[].name")
        n_space = sum(1 for a in axes if a.get("type", "space") == "space")
        if n_space != ndim:
            raise _fail(key, "multiscales[0].axes", f"declares {n_space} space axes but chunk_shape has {ndim}")
        parsed_axes = tuple(dict(a) for a in axes)
    out = []
    seen = set()
    for i, ds in enumerate(_need_list(entry.get("datasets", []), key, "multiscales[0].datasets")):
        f = f"multiscales[0].datasets[{i}]"
        ds = _need_dict(ds, key, f)
        path = _need_str(ds.get("path"), key, f + ".path")
        if not re.fullmatch(r"[0-9]{1,6}", path):
            raise _fail(key, f + ".path", f"must be a level number, got {path!r}")
        level = int(path)
        if level in seen:
            raise _fail(key, f + ".path", f"repeats level {level}")
        seen.add(level)
        scale = translation = None
        for t in _need_list(ds.get("coordinateTransformations", []), key, f + ".coordinateTransformations"):
            t = _need_dict(t, key, f + ".coordinateTransformations[]")
            kind = t.get("type")
            if kind == "scale":
                scale = _need_reals(t.get("scale"), key, f + ".scale", ndim=ndim)
            elif kind == "translation":
                translation = _need_reals(t.get("translation"), key, f + ".translation", ndim=ndim)
        if scale is None:
            scale = (1.0,) * ndim
        out.append(LevelTransform(level, scale, translation))
    return parsed_axes, tuple(out)


def parse_root(doc: Any, *, key: str = "zarr.json") -> RootMeta:
    """Parse the store root group; refuse anything that is not a ZVF root."""
    doc = _need_dict(doc, key, "document")
    if doc.get("node_type") == "array":
        raise NotZvfStoreError(f"{key}: a Zarr array, not a Zarr Vectors store")
    attrs = _node(doc, key, "group")
    if "zarr_vectors" not in attrs:
        raise NotZvfStoreError(f"{key}: a Zarr group but not a Zarr Vectors store")
    zv = _need_dict(attrs["zarr_vectors"], key, "attributes.zarr_vectors")
    f = "zarr_vectors."

    version = _need_str(zv.get("zv_version"), key, f + "zv_version")
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){0,2}([.+-][0-9A-Za-z.+-]*)?", version):
        raise _fail(key, f + "zv_version", f"is not a version string: {version!r}")
    caps = _need_strs(zv.get("format_capabilities", []), key, f + "format_capabilities")
    chunk_shape = _need_reals(zv.get("chunk_shape"), key, f + "chunk_shape", positive=True)
    ndim = len(chunk_shape)
    bounds_raw = _need_list(zv.get("bounds"), key, f + "bounds")
    if len(bounds_raw) != 2:
        raise _fail(key, f + "bounds", "must be [min_corner, max_corner]")
    lo = _need_reals(bounds_raw[0], key, f + "bounds[0]", ndim=ndim, ndim_from=f + "chunk_shape")
    hi = _need_reals(bounds_raw[1], key, f + "bounds[1]", ndim=ndim, ndim_from=f + "chunk_shape")
    if any(a > b for a, b in zip(lo, hi)):
        raise _fail(key, f + "bounds", f"has min > max: {list(lo)} > {list(hi)}")
    geoms = _need_strs(zv.get("geometry_types", []), key, f + "geometry_types", allowed=GEOMETRY_TYPES)

    bbs_raw = zv.get("base_bin_shape")
    bbs = None
    if bbs_raw is not None:
        bbs = _need_reals(bbs_raw, key, f + "base_bin_shape", ndim=ndim, positive=True,
                          ndim_from=f + "chunk_shape")
        for i, (c, b) in enumerate(zip(chunk_shape, bbs)):
            r = c / b
            if not math.isfinite(r) or r > 2**31:
                raise _fail(key, f + "base_bin_shape", f"[{i}]={b} gives too many bins per chunk")
            if round(r) < 1 or abs(r - round(r)) > 1e-9 * max(1.0, r):
                raise _fail(key, f + "base_bin_shape", f"[{i}]={b} does not divide chunk_shape[{i}]={c}")

    links = _need_str(zv.get("links_convention", "implicit_sequential"), key, f + "links_convention",
                      allowed=LINKS_CONVENTIONS)
    oic = _need_str(zv.get("object_index_convention", "standard"), key, f + "object_index_convention",
                    allowed=OBJECT_INDEX_CONVENTIONS)
    ccs = _need_str(zv.get("cross_chunk_strategy", "explicit_links"), key, f + "cross_chunk_strategy",
                    allowed=CROSS_CHUNK_STRATEGIES)
    cld = zv.get("cross_level_depth")
    if cld is not None:
        cld = _need_int(cld, key, f + "cross_level_depth", lo=-1, hi=1 << 16)
    cls = zv.get("cross_level_storage")
    if cls is not None:
        cls = _need_str(cls, key, f + "cross_level_storage", allowed=CROSS_LEVEL_STORAGES)
    specs = zv.get("attribute_specs")
    if specs is not None:
        specs = _need_dict(specs, key, f + "attribute_specs")

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
        raw=doc,
    )


def parse_level(doc: Any, *, key: str = "0/zarr.json") -> LevelMeta:
    """Parse a level group's ``zarr_vectors_level`` block."""
    attrs = _node(doc, key, "group")
    if "zarr_vectors_level" not in attrs:
        raise FormatError(f"{key}: level group has no zarr_vectors_level attributes")
    lv = _need_dict(attrs["zarr_vectors_level"], key, "attributes.zarr_vectors_level")
    f = "zarr_vectors_level."
    level = _need_int(lv.get("level"), key, f + "level", lo=0, hi=1 << 16)
    vc = _need_int(lv.get("vertex_count"), key, f + "vertex_count", lo=0)
    present = _need_strs(lv.get("arrays_present"), key, f + "arrays_present")
    sparsity = lv.get("object_sparsity", 1.0)
    if not _is_real(sparsity) or not 0 < sparsity <= 1:
        raise _fail(key, f + "object_sparsity", f"must be in (0, 1], got {sparsity!r}")
    method = _need_str(lv.get("coarsening_method", "none"), key, f + "coarsening_method")
    parent = lv.get("parent_level")
    if parent is not None:
        parent = _need_int(parent, key, f + "parent_level", lo=0, hi=1 << 16)
        if parent >= level:
            raise _fail(key, f + "parent_level", f"must be below level {level}, got {parent}")

    def opt_reals(name: str) -> tuple | None:
        v = lv.get(name)
        return None if v is None else _need_reals(v, key, f + name, positive=True)

    chunk_shape = opt_reals("chunk_shape")
    bin_shape = opt_reals("bin_shape")
    if bin_shape is None and lv.get("bin_size") is not None:  # seed-era spelling
        bin_shape = opt_reals("bin_size")
    inherited = lv.get("inherited_num_objects")
    if inherited is not None:
        inherited = _need_int(inherited, key, f + "inherited_num_objects", lo=0)
    dims = lv.get("chunk_dims")
    if dims is not None:
        dims = _need_strs(dims, key, f + "chunk_dims")
    can = lv.get("chunk_attribute_name")
    if can is not None:
        can = _need_str(can, key, f + "chunk_attribute_name")
    cav = lv.get("chunk_attribute_values")
    if cav is not None:
        cav = tuple(_need_list(cav, key, f + "chunk_attribute_values"))
    return LevelMeta(
        level=level,
        vertex_count=vc,
        object_sparsity=sparsity,
        coarsening_method=method,
        parent_level=parent,
        arrays_present=present,
        fragments_tile=_need_bool(lv.get("fragments_tile", False), key, f + "fragments_tile"),
        chunk_shape=chunk_shape,
        bin_shape=bin_shape,
        preserves_object_ids=_need_bool(lv.get("preserves_object_ids", False), key, f + "preserves_object_ids"),
        inherited_num_objects=inherited,
        shared_fragments=_need_bool(lv.get("shared_fragments", False), key, f + "shared_fragments"),
        chunk_dims=dims,
        chunk_attribute_name=can,
        chunk_attribute_values=cav,
        raw=doc,
    )


def parse_array(doc: Any, *, key: str) -> ArrayMeta:
    """Parse a Zarr v3 array node; the ZVF attributes are checked where cheap."""
    attrs = _node(doc, key, "array")
    shape = _need_ints(doc.get("shape"), key, "shape", lo=0, allow_empty=False)
    ndim = len(shape)
    dt = doc.get("data_type")
    if isinstance(dt, dict):  # extension data types are spelled as objects
        dt = dt.get("name")
    data_type = _need_str(dt, key, "data_type")
    grid = _need_dict(doc.get("chunk_grid"), key, "chunk_grid")
    if grid.get("name") != "regular":
        raise _fail(key, "chunk_grid.name", f"must be 'regular', got {grid.get('name')!r}")
    conf = _need_dict(grid.get("configuration"), key, "chunk_grid.configuration")
    chunks = _need_ints(conf.get("chunk_shape"), key, "chunk_grid.configuration.chunk_shape", ndim=ndim, lo=1)
    cke = doc.get("chunk_key_encoding")
    cke = json.loads(json.dumps(DEFAULT_CHUNK_KEY_ENCODING)) if cke is None else cke
    _need_dict(cke, key, "chunk_key_encoding")
    _need_str(cke.get("name"), key, "chunk_key_encoding.name", allowed=("default", "v2"))
    cke_conf = _need_dict(cke.get("configuration", {}), key, "chunk_key_encoding.configuration")
    if "separator" in cke_conf:
        _need_str(cke_conf["separator"], key, "chunk_key_encoding.configuration.separator", allowed=("/", "."))
    codecs = _need_list(doc.get("codecs", []), key, "codecs", max_len=64)
    for c in codecs:
        _need_str(_need_dict(c, key, "codecs[]").get("name"), key, "codecs[].name")
    if "fill_value" not in doc:
        raise _fail(key, "fill_value", "is missing")
    nonempty = attrs.get("nonempty_chunks")
    if nonempty is not None:
        _need_list(nonempty, key, "attributes.nonempty_chunks")
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
    meta.grid_origin  # validate now, cached
    _check_zv_attributes(meta, attrs, key)
    return meta


def _check_zv_attributes(meta: ArrayMeta, attrs: dict, key: str) -> None:
    """Type-check the ZVF attributes readers act on (dtype, row_shape, link fields)."""
    if "dtype" in attrs or not meta.is_vlen:
        meta.dtype  # raises FormatError for anything but a numeric dtype name
    if "row_shape" in attrs:
        _need_ints(attrs["row_shape"], key, "attributes.row_shape", lo=1, allow_empty=True)
        if len(attrs["row_shape"]) > 1:
            raise _fail(key, "attributes.row_shape", f"must be [] or [C], got {attrs['row_shape']!r}")
    if "link_width" in attrs:
        _need_int(attrs["link_width"], key, "attributes.link_width", lo=1, hi=64)
    if "has_perm" in attrs:
        _need_bool(attrs["has_perm"], key, "attributes.has_perm")
    if "offsets" in attrs:
        offsets = _need_list(attrs["offsets"], key, "attributes.offsets", max_len=64)
        for row in offsets:
            if any(abs(x) > 1 << 20 for x in _need_ints(row, key, "attributes.offsets[]")):
                raise _fail(key, "attributes.offsets", f"offset out of range in {row!r}")


def parse_group(doc: Any, *, key: str) -> GroupMeta:
    """Parse any group node, recording which serialization style it uses."""
    attrs = _node(doc, key, "group")
    return GroupMeta(key=key, attributes=attrs, compact=list(doc.keys()) == _COMPACT_GROUP_KEYS, raw=doc)


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


_NONEMPTY_RE_CACHE: dict[int, re.Pattern] = {}


def _parse_nonempty(entries: Any, ndim: int, key: str):
    """Validate ``nonempty_chunks`` in one regex pass, convert with numpy."""
    import numpy as np

    entries = _need_list(entries, key, "attributes.nonempty_chunks")
    if not entries:
        return np.zeros((0, ndim), dtype=np.int64)
    if not all(isinstance(e, str) for e in entries):
        raise _fail(key, "attributes.nonempty_chunks", "must hold strings")
    pat = _NONEMPTY_RE_CACHE.get(ndim)
    if pat is None:
        one = r"-?[0-9]{1,18}" + r"(?:\.-?[0-9]{1,18})" * (ndim - 1)
        pat = _NONEMPTY_RE_CACHE[ndim] = re.compile(f"{one}(?:,{one})*")
    joined = ",".join(entries)
    if pat.fullmatch(joined) is None or joined.count(",") != len(entries) - 1:
        raise _fail(key, "attributes.nonempty_chunks", f"entries must be {ndim} dot-separated integers")
    flat = np.array(joined.replace(",", ".").split("."), dtype=np.int64)
    return flat.reshape(len(entries), ndim)


# --------------------------------------------------------------------------
# builders: root and level
# --------------------------------------------------------------------------


def default_axes(ndim: int) -> list[dict]:
    """The axes 0.9.2 generates: x, y, z, w (4-D at most)."""
    if not 1 <= ndim <= len(DEFAULT_AXIS_NAMES):
        raise InvalidArgumentError(f"ndim: no default axis names for ndim={ndim}; pass axes explicitly")
    return [{"name": n, "type": "space"} for n in DEFAULT_AXIS_NAMES[:ndim]]


def _scene_axes(axes: Sequence[Mapping]) -> list[dict]:
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
    translation = tuple(float(b) / 2.0 for b in level_bin_shape)
    if not any(t != 0 for t in translation):
        translation = None
    return LevelTransform(int(level), scale, translation)


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
    attribute_specs: Mapping | None = None,
    axes: Sequence[Mapping] | None = None,
    transforms: Sequence[LevelTransform | tuple] | None = None,
    zv_version: str = ZV_VERSION,
) -> dict:
    """The root ``zarr.json`` 0.9.2 writes.

    Numbers are kept as given (0.9.2 stores ``[50, 50, 50]`` when handed ints).
    ``links_convention`` defaults from the first geometry; ``transforms``
    defaults to level 0 only (scale 1, translation = effective bin / 2);
    ``cross_level_*`` appear only once a pyramid exists.
    """
    chunk_shape = _py(list(chunk_shape))
    ndim = len(chunk_shape)
    lo, hi = (_py(list(b)) for b in bounds)
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
        zv["crs"] = _py(crs)
    if base_bin_shape is not None:
        zv["base_bin_shape"] = _py(list(base_bin_shape))
        if len(zv["base_bin_shape"]) != ndim:
            raise InvalidArgumentError(f"base_bin_shape: need {ndim} entries")
    if attribute_specs:
        declared = {scope: _py(named) for scope, named in attribute_specs.items() if named}
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
        ct: list[dict] = [{"type": "scale", "scale": [float(s) for s in t.scale]}]
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
    chunk_attribute_values: Sequence | None = None,
    preserves_object_ids: bool = False,
    inherited_num_objects: int | None = None,
    shared_fragments: bool = False,
    fragments_tile: bool = False,
) -> dict:
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
        lv["chunk_attribute_values"] = _py(list(chunk_attribute_values))
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
# builders: arrays
# --------------------------------------------------------------------------


def _array_document(shape, data_type, chunk_shape, fill_value, codecs_json, attributes, separator="/") -> dict:
    return {
        "shape": [int(s) for s in shape],
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunk_shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
        "fill_value": fill_value,
        "codecs": _py(list(codecs_json)),
        "attributes": _py(dict(attributes)),
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
    return np.unique(s).tolist()


def spatial_array_document(
    grid_shape: Sequence[int],
    codecs_json: Sequence[Mapping],
    attributes: Mapping[str, Any],
    *,
    nonempty_chunks: Any = (),
    grid_origin: Sequence[int] | None = None,
    shard_shape: Sequence[int] | None = None,
) -> dict:
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
    codecs_json: Sequence[Mapping],
    attributes: Mapping[str, Any] | None = None,
) -> dict:
    """A plain numeric array (object attributes, group attributes, object ids)."""
    name = _dtype_name(data_type, "data_type")
    return _array_document(shape, name, chunk_shape, fill_value, codecs_json, attributes or {})


def bytes_codec(dtype: Any) -> dict:
    """The serializer zarr-python writes for a dense array: no endian for 1-byte types."""
    import numpy as np

    if np.dtype(_dtype_name(dtype, "dtype")).itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": "little"}}


def object_attribute_fill(dtype: Any) -> Any:
    """Absent-value sentinel 0.9.2 uses as fill: NaN, int min, uint max; bool is refused."""
    import numpy as np

    name = _dtype_name(dtype, "dtype")
    dt = np.dtype(name)
    if dt.kind == "f":
        return "NaN"
    if dt.kind == "i":
        return int(np.iinfo(dt).min)
    if dt.kind == "u":
        return int(np.iinfo(dt).max)
    raise InvalidArgumentError(f"dtype: no absent sentinel for {name} object attributes (0.9.2 refuses them too)")


def object_attribute_document(name: str, dtype: Any, shape: Sequence[int], codecs_json: Sequence[Mapping]) -> dict:
    """``object_attributes/<name>``: (O,) or (O, C), rows chunked by 65536, sentinel fill."""
    shape = [int(s) for s in shape]
    dt = _dtype_name(dtype, f"object_attributes/{name}")
    chunks = [OBJECT_ATTRIBUTE_ROW_CHUNK, *shape[1:]]
    attrs = {"zv_array": "object_attribute", "name": name, "dtype": dt, "shape": shape,
             "fill_sentinel_meaning": "absent"}
    return dense_array_document(shape, dt, chunks, object_attribute_fill(dt), codecs_json, attrs)


def group_attribute_document(name: str, dtype: Any, shape: Sequence[int], codecs_json: Sequence[Mapping]) -> dict:
    """``group_attributes/<name>``: one chunk, zero fill."""
    import numpy as np

    shape = [int(s) for s in shape]
    dt = _dtype_name(dtype, f"group_attributes/{name}")
    fill = np.zeros((), dtype=dt).item()
    attrs = {"zv_array": "groupings_attribute", "name": name, "dtype": dt, "shape": shape}
    return dense_array_document(shape, dt, shape, fill, codecs_json, attrs)


def object_ids_document(num_objects: int, codecs_json: Sequence[Mapping]) -> dict:
    """``object_index/object_ids``: int64 (O,), one chunk of O rows, fill 0, no attributes."""
    n = int(num_objects)
    return dense_array_document([n], "int64", [max(n, 1)], 0, codecs_json, {})


def vlen_1d_array_document(
    length: int,
    codecs_json: Sequence[Mapping],
    attributes: Mapping[str, Any] | None = None,
    *,
    chunk: int | None = None,
) -> dict:
    """A 1-D vlen-bytes array (``manifests``, ``groups``); one chunk unless ``chunk``."""
    n = int(length)
    c = n if chunk is None else int(chunk)
    return _array_document([n], "variable_length_bytes", [max(c, 1)], "", codecs_json, attributes or {})


def manifests_document(num_objects: int, codecs_json: Sequence[Mapping]) -> dict:
    """``object_index/manifests``: chunk = min(O, 16384), no attributes."""
    n = int(num_objects)
    return vlen_1d_array_document(n, codecs_json, {}, chunk=min(n, MANIFEST_ROW_CHUNK))


def groups_document(num_groups: int, codecs_json: Sequence[Mapping]) -> dict:
    """``groups``: one vlen row per group id 0..max(id)."""
    n = int(num_groups)
    return vlen_1d_array_document(n, codecs_json, {"zv_array": "groups", "num_groups": n})


# --------------------------------------------------------------------------
# builders: groups
# --------------------------------------------------------------------------


def group_document(attributes: Mapping[str, Any] | None = None, *, compact: bool = False) -> dict:
    """A group node.  ``compact=True`` gives the one-line form (see :func:`dumps`)."""
    attrs = _py(dict(attributes or {}))
    if compact:
        return {"zarr_format": 3, "node_type": "group", "attributes": attrs}
    return {"attributes": attrs, "zarr_format": 3, "node_type": "group"}


def object_index_group_document(
    num_objects: int, num_present: int, sid_ndim: int, *, compact: bool = True, object_ids_sorted: bool = True
) -> dict:
    """``object_index/`` group; compact at level 0, indented on pyramid levels."""
    return group_document(
        {
            "zv_array": "object_index",
            "num_objects": int(num_objects),
            "num_present": int(num_present),
            "sid_ndim": int(sid_ndim),
            "layout": "vlen_manifests_v2",
            "object_ids_sorted": bool(object_ids_sorted),
        },
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
) -> dict:
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


def link_attribute_family_document(name: str, *, level_delta: int, num_links: int) -> dict:
    """``link_attributes/<name>/<delta>/`` group (compact form)."""
    return group_document(
        {"zv_array": "link_attribute_family", "name": name, "level_delta": int(level_delta),
         "num_links": int(num_links)},
        compact=True,
    )


# --------------------------------------------------------------------------
# attribute blocks of the per-chunk arrays (pass to spatial_array_document)
# --------------------------------------------------------------------------


def vertices_attributes(dtype: Any, encoding: str = "raw") -> dict:
    return {"zv_array": "vertices", "dtype": _dtype_name(dtype, "vertices"), "encoding": encoding}


def vertex_fragments_attributes() -> dict:
    return {"zv_array": "vertex_fragments", "encoding": "fragment_index_v1"}


def link_fragments_attributes() -> dict:
    return {"zv_array": "link_fragments", "encoding": "fragment_index_v1"}


def _row_shape(row_shape: Sequence[int]) -> list[int]:
    rs = [int(r) for r in row_shape]
    if len(rs) > 1 or any(r < 1 for r in rs):
        raise InvalidArgumentError(f"row_shape: must be [] or [C], got {rs}")
    return rs


def vertex_attribute_attributes(
    name: str, dtype: Any, row_shape: Sequence[int] = (), channel_names: Sequence[str] | None = None
) -> dict:
    """``vertex_attributes/<name>``: multi-channel ones get ``channel_names`` (default ch0..)."""
    rs = _row_shape(row_shape)
    d: dict[str, Any] = {"zv_array": "attribute", "name": name, "dtype": _dtype_name(dtype, name)}
    if rs:
        names = [f"ch{i}" for i in range(rs[0])] if channel_names is None else [str(c) for c in channel_names]
        if len(names) != rs[0]:
            raise InvalidArgumentError(f"channel_names: need {rs[0]} names for {name}")
        d["channel_names"] = names
    d["row_shape"] = rs
    return d


def fragment_attribute_attributes(name: str, dtype: Any, row_shape: Sequence[int] = ()) -> dict:
    return {"zv_array": "fragment_attribute", "name": name, "dtype": _dtype_name(dtype, name),
            "row_shape": _row_shape(row_shape)}


def _offsets_list(offsets: Any) -> list[list[int]]:
    rows = _py(offsets)
    if not rows or not isinstance(rows[0], list):
        raise InvalidArgumentError(f"offsets: need a list of offset vectors, got {offsets!r}")
    return [[int(x) for x in r] for r in rows]


def links_array_attributes(offsets: Any, *, has_perm: bool, link_width: int, level_delta: int) -> dict:
    """``links/<delta>/<offsets>``: ``offsets`` is the list of per-endpoint offset vectors."""
    return {"zv_array": "links", "dtype": "int64", "offsets": _offsets_list(offsets), "has_perm": bool(has_perm),
            "link_width": int(link_width), "level_delta": int(level_delta)}


def link_attribute_attributes(name: str, dtype: Any, offsets: Any, *, level_delta: int,
                              row_shape: Sequence[int] = ()) -> dict:
    """``link_attributes/<name>/<delta>/<offsets>`` (no channel_names, unlike vertex attributes)."""
    return {"zv_array": "link_attribute", "name": name, "dtype": _dtype_name(dtype, name),
            "offsets": _offsets_list(offsets), "level_delta": int(level_delta), "row_shape": _row_shape(row_shape)}


def _signed(v: int) -> str:
    return f"+{v}" if v > 0 else str(v)


def offsets_name(offsets: Any) -> str:
    """Node name of an offsets array: ``[[1, 0, -1]]`` -> ``"+1.0.-1"``, faces joined by ``_``."""
    return "_".join(".".join(_signed(int(x)) for x in row) for row in _offsets_list(offsets))


def parse_offsets_name(name: str, ndim: int, *, key: str = "") -> tuple[tuple[int, ...], ...]:
    """Inverse of :func:`offsets_name`; FormatError on anything else."""
    one = r"(?:\+[1-9][0-9]{0,8}|-[1-9][0-9]{0,8}|0)"
    row = one + (r"\." + one) * (ndim - 1)
    if not isinstance(name, str) or re.fullmatch(f"{row}(?:_{row})*", name) is None:
        raise FormatError(f"{key or name!s}: {name!r} is not a {ndim}-D offsets name")
    return tuple(tuple(int(x) for x in r.split(".")) for r in name.split("_"))
