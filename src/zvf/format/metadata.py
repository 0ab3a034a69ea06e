"""Constants, field checks and models of ZVF metadata (pure, no I/O).

The models are the small frozen views readers act on; :mod:`zvf.format.parse`
builds them from ``zarr.json`` documents and :mod:`zvf.format.builders` writes
the documents 0.9.2 writes.  The field checks here are shared by both: each
raises a :class:`~zvf.errors.FormatError` naming the key and the field.
numpy is imported lazily: only the dtype and chunk-coordinate helpers need it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import FormatError, InvalidArgumentError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "CLAIM_KEY",
    "GEOMETRY_TYPES",
    "LINKS_CONVENTION_BY_GEOMETRY",
    "MANIFEST_ROW_CHUNK",
    "NUMERIC_DTYPES",
    "OBJECT_ATTRIBUTE_ROW_CHUNK",
    "OBJECT_GEOMETRIES",
    "SEQUENTIAL_GEOMETRIES",
    "ZV_VERSION",
    "ArrayMeta",
    "GroupMeta",
    "LevelMeta",
    "LevelTransform",
    "RootMeta",
]


# --------------------------------------------------------------------------
# constants of the 0.9.2 layout
# --------------------------------------------------------------------------


ZV_VERSION = "0.9.2"

GEOMETRY_TYPES = frozenset(
    {"point_cloud", "line", "polyline", "streamline", "graph", "skeleton", "mesh"}
)
#: Geometries whose objects are vertex sequences (links implicit, in row order).
SEQUENTIAL_GEOMETRIES = frozenset({"line", "polyline", "streamline"})
#: Geometries that have objects (an object index), i.e. all but point clouds.
OBJECT_GEOMETRIES = GEOMETRY_TYPES - {"point_cloud"}
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

#: The object a zvf writer holds while it writes a store (removed once the documents are in).
CLAIM_KEY = ".zvf-writing"

#: Key order of the compact one-line groups zarr-vectors writes itself (see :func:`zvf.format.builders.dumps`).
COMPACT_GROUP_KEYS = ["zarr_format", "node_type", "attributes"]
_COMPACT_GROUP_PREFIX = '{"zarr_format":3,"node_type":"group","attributes":'
MAX_NDIM = 32
MAX_INT = 2**63 - 1


# --------------------------------------------------------------------------
# field checks (all raise FormatError naming key + field)
# --------------------------------------------------------------------------


def fail(key: str, fieldname: str, what: str) -> FormatError:
    return FormatError(f"{key}: {fieldname} {what}")


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_real(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def need_dict(v: Any, key: str, fieldname: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise fail(key, fieldname, f"must be a JSON object, got {type(v).__name__}")
    return v


def need_str(v: Any, key: str, fieldname: str, *, allowed: Iterable[str] | None = None) -> str:
    if not isinstance(v, str):
        raise fail(key, fieldname, f"must be a string, got {type(v).__name__}")
    if allowed is not None and v not in allowed:
        raise fail(key, fieldname, f"has unknown value {v!r} (expected one of {sorted(allowed)})")
    return v


def need_int(v: Any, key: str, fieldname: str, *, lo: int | None = None, hi: int = MAX_INT) -> int:
    if not is_int(v):
        raise fail(key, fieldname, f"must be an integer, got {type(v).__name__}")
    if (lo is not None and v < lo) or v > hi:
        raise fail(key, fieldname, f"is out of range: {v}")
    return int(v)


def need_bool(v: Any, key: str, fieldname: str) -> bool:
    if not isinstance(v, bool):
        raise fail(key, fieldname, f"must be true or false, got {type(v).__name__}")
    return v


def need_list(v: Any, key: str, fieldname: str, *, max_len: int | None = None) -> list[Any]:
    if not isinstance(v, list):
        raise fail(key, fieldname, f"must be a JSON array, got {type(v).__name__}")
    if max_len is not None and len(v) > max_len:
        raise fail(key, fieldname, f"has too many entries ({len(v)})")
    return v


def need_reals(v: Any, key: str, fieldname: str, *, ndim: int | None = None, positive: bool = False,
                ndim_from: str = "the store") -> tuple[Any, ...]:
    items = need_list(v, key, fieldname, max_len=MAX_NDIM)
    if not items:
        raise fail(key, fieldname, "must not be empty")
    if ndim is not None and len(items) != ndim:
        raise fail(key, fieldname, f"has {len(items)} entries but {ndim_from} has {ndim} (ndim mismatch)")
    for x in items:
        if not is_real(x):
            raise fail(key, fieldname, f"must hold finite numbers, got {x!r}")
        if positive and not x > 0:
            raise fail(key, fieldname, f"must hold positive numbers, got {x!r}")
    return tuple(items)


def need_ints(v: Any, key: str, fieldname: str, *, ndim: int | None = None, lo: int | None = None,
               max_len: int = MAX_NDIM, allow_empty: bool = False) -> tuple[int, ...]:
    items = need_list(v, key, fieldname, max_len=max_len)
    if not items and not allow_empty:
        raise fail(key, fieldname, "must not be empty")
    if ndim is not None and len(items) != ndim:
        raise fail(key, fieldname, f"has {len(items)} entries, expected {ndim}")
    for x in items:
        if not is_int(x) or abs(x) > MAX_INT or (lo is not None and x < lo):
            raise fail(key, fieldname, f"must hold integers{'' if lo is None else f' >= {lo}'}, got {x!r}")
    return tuple(items)


def need_strs(v: Any, key: str, fieldname: str, *, allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    items = need_list(v, key, fieldname)
    for x in items:
        need_str(x, key, fieldname, allowed=allowed)
    return tuple(items)


def to_json(v: Any) -> Any:
    """numpy scalars/arrays and tuples -> plain JSON-able Python values."""
    if isinstance(v, (str, bool, int, float)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    tolist = getattr(v, "tolist", None)
    if tolist is not None:
        return to_json(tolist())
    raise InvalidArgumentError(f"value {v!r} of type {type(v).__name__} is not JSON-serializable")


def dtype_name(dtype: Any, what: str) -> str:
    """Canonical numeric dtype name ('float32', ...) of a numpy-compatible dtype."""
    import numpy as np

    try:
        name: str = np.dtype(dtype).name
    except TypeError as exc:
        raise InvalidArgumentError(f"{what}: {dtype!r} is not a dtype") from exc
    if name not in NUMERIC_DTYPES:
        raise InvalidArgumentError(f"{what}: dtype {name!r} is not supported (use one of {sorted(NUMERIC_DTYPES)})")
    return name


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
    attribute_specs: dict[str, Any] | None = None
    axes: tuple[dict[str, Any], ...] | None = None
    transforms: tuple[LevelTransform, ...] = ()
    name: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ndim(self) -> int:
        """Spatial axes of the store (a level's category axis, if any, is not one)."""
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
        return tuple(round(c / b) for c, b in zip(self.chunk_shape, self.bin_shape))

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
            raise fail(key, "zarr_vectors_level.chunk_shape", f"has {len(cs)} entries but the store has {self.ndim}")
        for i, (c, r) in enumerate(zip(cs, self.chunk_shape)):
            q = c / r
            if not math.isfinite(q) or q > 2**31 or round(q) < 1 or abs(q - round(q)) > 1e-9 * max(1.0, q):
                raise fail(key, "zarr_vectors_level.chunk_shape",
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
    chunk_attribute_values: tuple[Any, ...] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

@dataclass(frozen=True)
class ArrayMeta:
    """A Zarr v3 array node (``zarr.json`` with ``node_type: array``)."""

    key: str  # the array's path in the store, e.g. "0/vertices"
    shape: tuple[int, ...]  # the chunk grid's extent, in cells (zarr-vectors arrays hold one item per cell)
    data_type: str  # zarr v3 data type name ("variable_length_bytes" for vlen cells)
    chunk_shape: tuple[int, ...]  # the regular grid's chunk shape: a shard's when sharded
    chunk_key_encoding: dict[str, Any]
    fill_value: Any
    codecs: tuple[dict[str, Any], ...]  # as stored: sharding_indexed wraps the inner codecs
    attributes: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def zv_array(self) -> str | None:
        """The ``zv_array`` role named in the attributes (vertices, links, ...), if any."""
        v = self.attributes.get("zv_array")
        return v if isinstance(v, str) else None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_vlen(self) -> bool:
        return self.data_type in VLEN_DATA_TYPES

    @property
    def separator(self) -> str:
        conf = self.chunk_key_encoding.get("configuration") or {}
        default = "." if self.chunk_key_encoding.get("name") == "v2" else "/"
        sep = conf.get("separator", default)
        return sep if isinstance(sep, str) else default

    @property
    def sharded(self) -> bool:
        return bool(self.codecs) and self.codecs[0].get("name") == "sharding_indexed"

    @cached_property
    def grid_origin(self) -> tuple[int, ...]:
        """``chunk_grid_origin`` (absolute coordinate of cell 0), zeros when absent."""
        origin = self.attributes.get("chunk_grid_origin")
        if origin is None:
            return (0,) * self.ndim
        return need_ints(origin, self.key, "attributes.chunk_grid_origin", ndim=self.ndim)

    @cached_property
    def nonempty_chunk_array(self) -> NDArray[np.int64]:
        """``nonempty_chunks`` as an (n, ndim) int64 array of absolute chunk coordinates."""
        return _parse_nonempty(self.attributes.get("nonempty_chunks", []), self.ndim, self.key)

    @property
    def nonempty_chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(r) for r in self.nonempty_chunk_array.tolist())

    @cached_property
    def dtype(self) -> np.dtype[Any] | None:
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
    attributes: dict[str, Any]
    compact: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


_NONEMPTY_RE_CACHE: dict[int, re.Pattern[str]] = {}


def _parse_nonempty(entries: Any, ndim: int, key: str) -> NDArray[np.int64]:
    """Validate ``nonempty_chunks`` in one regex pass, convert with numpy."""
    import numpy as np

    entries = need_list(entries, key, "attributes.nonempty_chunks")
    if not entries:
        return np.zeros((0, ndim), dtype=np.int64)
    if not all(isinstance(e, str) for e in entries):
        raise fail(key, "attributes.nonempty_chunks", "must hold strings")
    pat = _NONEMPTY_RE_CACHE.get(ndim)
    if pat is None:
        one = r"-?[0-9]{1,18}" + r"(?:\.-?[0-9]{1,18})" * (ndim - 1)
        pat = _NONEMPTY_RE_CACHE[ndim] = re.compile(f"{one}(?:,{one})*")
    joined = ",".join(entries)
    if pat.fullmatch(joined) is None or joined.count(",") != len(entries) - 1:
        raise fail(key, "attributes.nonempty_chunks", f"entries must be {ndim} dot-separated integers")
    flat = np.array(joined.replace(",", ".").split("."), dtype=np.int64)
    return flat.reshape(len(entries), ndim)
